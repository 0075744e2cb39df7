-- Version 3: the providers' published IP sets, cached so a restart
-- without network still knows them.

-- The last list fetched of each named set (`allow_ips = ["github"]`).
CREATE TABLE ip_sets (
    name       TEXT    PRIMARY KEY,   -- github | stripe
    ranges     TEXT    NOT NULL,      -- JSON array of CIDRs
    fetched_at INTEGER NOT NULL       -- unix ms
) WITHOUT ROWID;
