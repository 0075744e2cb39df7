-- Version 8: leases move out of `events` into rows of their own, and each
-- claim gets a token. Leasing by updating an event rewrote its whole row,
-- body and all; a lease row is small. Only the claim holding a lease's
-- token may settle its event, so a result that arrives after the event was
-- claimed again changes nothing (store/dispatch.rs).
CREATE TABLE leases (
    token       INTEGER PRIMARY KEY AUTOINCREMENT,  -- the claim's own; never reused
    event_id    INTEGER NOT NULL UNIQUE REFERENCES events (id) ON DELETE CASCADE,
    source      TEXT    NOT NULL,   -- the event's, for the in-flight check of a key
    order_key   TEXT,
    attempt     INTEGER NOT NULL,   -- the attempt the claim makes, 1-based
    lease_until INTEGER NOT NULL
);
-- One leased event of a key holds its key's others back.
CREATE INDEX leases_key ON leases (source, order_key) WHERE order_key IS NOT NULL;
-- The lease columns of `events` are no longer written. A lease left in
-- them is from a run that died mid-dispatch, and its attempt is counted
-- already: the start clears it, as it always did.
DROP INDEX IF EXISTS events_leased;
UPDATE events SET lease_until = NULL WHERE lease_until IS NOT NULL;
