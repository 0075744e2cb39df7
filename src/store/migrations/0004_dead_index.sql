-- Version 4: count dead letters without reading the whole table.
-- The metrics scrape and the stats page count dead events per source on
-- every call; dead rows are few, so this index stays small.
CREATE INDEX events_dead ON events (source) WHERE state = 'dead';
