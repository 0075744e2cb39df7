-- Version 16: the `state` CHECKs of `events` and `deliveries` compare with
-- `=` instead of `IN (...)`. SQLite builds a temporary b-tree of an IN
-- list of three or more values each time it checks one: about 3 us of
-- every insert and every change of state, 7-10 % of the writer's time
-- under load. The values allowed are the same.
--
-- Only the constraint's text changes, and every row already satisfies
-- it, so this is the in-place edit SQLite documents for changing a CHECK
-- (https://sqlite.org/lang_altertable.html#otheralter) rather than a copy
-- of every event. src/store/schema.rs bumps `schema_version` after each
-- step, so every connection reads the new text.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql,
                  'CHECK (state IN (''pending'', ''delivered'', ''dead'', ''stored''))',
                  'CHECK (state = ''pending'' OR state = ''delivered''
                                   OR state = ''dead'' OR state = ''stored'')')
WHERE type = 'table' AND name = 'events';
UPDATE sqlite_schema
SET sql = replace(sql,
                  'CHECK (state IN (''pending'', ''delivered'', ''dead''))',
                  'CHECK (state = ''pending'' OR state = ''delivered'' OR state = ''dead'')')
WHERE type = 'table' AND name = 'deliveries';
PRAGMA writable_schema = OFF;
