-- Version 17: a lease carries a secret of 16 random bytes, which a pull
-- consumer must show to settle, extend or release it (the row's token is
-- a counter: guessable), and a lane's leases are indexed by when they run
-- out, which the claim reads to turn each lease that ran out into a
-- failed attempt.
--
-- `secret` is NOT NULL, which ALTER TABLE ADD COLUMN cannot add without a
-- default, so the table is rebuilt with the text `schema.sql` has. Leases
-- are few (what was in flight when hookbox stopped) and each keeps its
-- token, attempt and lane; the start-up that runs this step marks them
-- all as cut off by the stop anyway.
CREATE TEMP TABLE leases_before_17 AS SELECT * FROM leases;
DROP TABLE leases;
CREATE TABLE leases (
    token       INTEGER PRIMARY KEY AUTOINCREMENT,  -- the claim's own; never reused
    delivery    INTEGER NOT NULL UNIQUE REFERENCES deliveries (id) ON DELETE CASCADE,
    source      TEXT    NOT NULL,   -- the delivery's lane, for the in-flight check of a key
    destination TEXT    NOT NULL,
    order_key   TEXT,
    attempt     INTEGER NOT NULL,   -- the attempt the claim makes, 1-based
    lease_until INTEGER NOT NULL,   -- 0: the process that held it stopped
    secret      BLOB    NOT NULL    -- 16 random bytes: a pull consumer's proof of its claim
);
INSERT INTO leases (token, delivery, source, destination, order_key, attempt, lease_until, secret)
    SELECT token, delivery, source, destination, order_key, attempt, lease_until, randomblob(16)
    FROM leases_before_17;
DROP TABLE leases_before_17;
CREATE INDEX leases_key ON leases (source, destination, order_key) WHERE order_key IS NOT NULL;
CREATE INDEX leases_lane ON leases (source, destination, lease_until);
