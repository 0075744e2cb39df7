-- Version 10: a destination's pause, kept across restarts. A pause made
-- by hand (`hookbox destination pause`, before planned maintenance) must
-- not end because the server restarted; a circuit breaker's pause goes on
-- probing where it left off instead of sending the backlog at a service
-- that is still down. No row: the destination is open.
CREATE TABLE destination_pauses (
    source        TEXT    NOT NULL,
    destination   TEXT    NOT NULL,
    cause         TEXT    NOT NULL CHECK (cause IN ('manual', 'breaker')),
    since         INTEGER NOT NULL,   -- unix ms
    next_probe_at INTEGER,            -- unix ms; breaker pauses only
    PRIMARY KEY (source, destination, cause)
) WITHOUT ROWID;
