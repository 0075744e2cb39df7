-- hookbox schema version 1, kept as it was so tests can prove that an
-- upgrade from it reaches what schema.sql creates. Never edit this file.

-- One row per event, keyed by where it came from and the provider's id.
CREATE TABLE events (
    id              INTEGER PRIMARY KEY,   -- also the arrival order
    source          TEXT    NOT NULL,
    delivery_id     TEXT    NOT NULL,
    event_type      TEXT,
    order_key       TEXT,                  -- events sharing a key go one at a time
    received_at     INTEGER NOT NULL,
    origin          TEXT    NOT NULL DEFAULT 'push'
                            CHECK (origin IN ('push', 'fetched')),
    content_type    TEXT,
    headers         TEXT    NOT NULL DEFAULT '{}',  -- JSON; provider headers, never secrets
    body            BLOB,                  -- the exact bytes received; NULL once retention drops it
    state           TEXT    NOT NULL
                            CHECK (state IN ('pending', 'delivered', 'dead', 'stored')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    lease_until     INTEGER,
    last_error      TEXT,
    delivered_at    INTEGER,
    UNIQUE (source, delivery_id)
);

-- What is due, per source: only pending rows are in it, so it stays small.
CREATE INDEX events_due ON events (source, next_attempt_at) WHERE state = 'pending';
-- Per-key ordering: the oldest pending event of a key goes first.
CREATE INDEX events_order ON events (source, order_key, id)
    WHERE state = 'pending' AND order_key IS NOT NULL;
-- Listing a source's inbox newest first.
CREATE INDEX events_source ON events (source, id);

-- One row per dispatch attempt.
CREATE TABLE attempts (
    id          INTEGER PRIMARY KEY,
    event_id    INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,   -- delivered, retry, dead
    status_code INTEGER,
    error       TEXT                -- bounded excerpt
);
CREATE INDEX attempts_event ON attempts (event_id);

-- Small key/value facts about the database itself (heartbeat, ids).
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
