-- Version 19: `skipped`, a final state of a delivery whose destination's
-- transform gave no output (nothing was sent), and of an event all of
-- whose deliveries are skipped. The state CHECKs of `events` and
-- `deliveries` gain the value; every row already satisfies the new text,
-- so this is the in-place edit of 16 (see 0016_state_checks.sql), not a
-- copy of every event.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql,
                  'OR state = ''dead'' OR state = ''stored'')',
                  'OR state = ''dead'' OR state = ''stored''
                                   OR state = ''skipped'')')
WHERE type = 'table' AND name = 'events';
UPDATE sqlite_schema
SET sql = replace(sql,
                  'CHECK (state = ''pending'' OR state = ''delivered'' OR state = ''dead'')',
                  'CHECK (state = ''pending'' OR state = ''delivered'' OR state = ''dead''
                                   OR state = ''skipped'')')
WHERE type = 'table' AND name = 'deliveries';
PRAGMA writable_schema = OFF;
