-- Version 9: routes. A source may have several destinations, so the state
-- of dispatch moves from the event to one row per (event, destination).
-- Everything a database of version 8 holds goes to the destination
-- `default`, the name a single `[sources.deliver]` table has: delivered
-- stays delivered, dead stays dead, pending stays pending with its
-- attempts and schedule (held rows stay held), stored stays stored.
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY,
    event_id        INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    source          TEXT    NOT NULL,   -- the event's
    destination     TEXT    NOT NULL,   -- its name in the source's config
    order_key       TEXT,               -- the event's
    state           TEXT    NOT NULL
                            CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,   -- finished ones; the running one is in `leases`
    next_attempt_at INTEGER,            -- NULL while held behind its key (store/dispatch.rs)
    last_error      TEXT,
    delivered_at    INTEGER,
    UNIQUE (event_id, destination)
);
-- What is due, per lane: only pending rows are in it, so it stays small.
CREATE INDEX deliveries_due ON deliveries (source, destination, next_attempt_at)
    WHERE state = 'pending';
-- Per-key ordering, per lane: the oldest pending delivery of a key goes first.
CREATE INDEX deliveries_order ON deliveries (source, destination, order_key, event_id)
    WHERE state = 'pending' AND order_key IS NOT NULL;
-- Counting dead letters per lane (metrics, stats).
CREATE INDEX deliveries_dead ON deliveries (source, destination) WHERE state = 'dead';
INSERT INTO deliveries (event_id, source, destination, order_key, state, attempts,
                        next_attempt_at, last_error, delivered_at)
    SELECT id, source, 'default', order_key, state, attempts, next_attempt_at, last_error,
           delivered_at
    FROM events WHERE state IN ('pending', 'delivered', 'dead') ORDER BY id;
-- A lease left by a run that died mid-attempt: that attempt counts, as the
-- start of version 8 would have counted it.
UPDATE deliveries SET attempts = l.attempt FROM leases AS l
    WHERE l.event_id = deliveries.event_id AND deliveries.state = 'pending';
DROP TABLE leases;
CREATE TABLE leases (
    token       INTEGER PRIMARY KEY AUTOINCREMENT,  -- the claim's own; never reused
    delivery    INTEGER NOT NULL UNIQUE REFERENCES deliveries (id) ON DELETE CASCADE,
    source      TEXT    NOT NULL,   -- the delivery's lane, for the in-flight check of a key
    destination TEXT    NOT NULL,
    order_key   TEXT,
    attempt     INTEGER NOT NULL,   -- the attempt the claim makes, 1-based
    lease_until INTEGER NOT NULL
);
-- One leased delivery of a key holds its key's others in the lane back.
CREATE INDEX leases_key ON leases (source, destination, order_key) WHERE order_key IS NOT NULL;
-- The dispatch columns of `events` are no longer written (rewriting every
-- row, bodies and all, to clear them would make the upgrade as slow as a
-- copy of the database); their indexes go.
DROP INDEX events_due;
DROP INDEX events_order;
-- Each attempt names its destination.
ALTER TABLE attempts ADD COLUMN destination TEXT NOT NULL DEFAULT 'default';
