-- Version 21: an event's state, once derived from its deliveries, is kept
-- in a small row of its own. Written into `events`, every settled
-- delivery rewrote the row that holds the body (2 KB for a typical
-- provider's event, a page of its own), and that page went through the
-- WAL and the checkpoint again: in a paused drain, 30 % of each url
-- delivery's CPU. An event's state is `event_outcomes.state` where it
-- has a row there, else the `state` ingest gave it (`pending` or
-- `stored`); `delivered_at` likewise. The states older versions derived
-- move over once, a read of every event row; their `events` columns are
-- left as they were (rewriting each row would make the upgrade as slow
-- as a copy of the database) and are no longer read for them.
CREATE TABLE event_outcomes (
    event_id     INTEGER PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    source       TEXT    NOT NULL,   -- the event's, for counting dead letters per source
    state        TEXT    NOT NULL
                         CHECK (state = 'pending' OR state = 'delivered' OR state = 'dead'
                                OR state = 'stored' OR state = 'skipped'),
    delivered_at INTEGER
);
-- Counting dead letters per source (metrics, stats), as `events_dead` did.
CREATE INDEX event_outcomes_dead ON event_outcomes (source) WHERE state = 'dead';
INSERT INTO event_outcomes (event_id, source, state, delivered_at)
    SELECT id, source, state, delivered_at FROM events
    WHERE state = 'delivered' OR state = 'dead' OR state = 'skipped';
DROP INDEX events_dead;
