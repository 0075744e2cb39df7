-- hookbox schema. Applied to a new database at start-up; the version it
-- describes is src/store/schema.rs SCHEMA_VERSION, kept in PRAGMA user_version.
-- Times are unix milliseconds.

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
                            CHECK (state = 'pending' OR state = 'delivered'
                                   OR state = 'dead' OR state = 'stored'
                                   OR state = 'skipped'),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    lease_until     INTEGER,
    last_error      TEXT,
    delivered_at    INTEGER,
    UNIQUE (source, delivery_id)
);
-- state: as ingest stored it (`pending`, `stored`); once derived from the
-- event's deliveries, `event_outcomes` holds it (version 21). attempts,
-- next_attempt_at, last_error: no longer written since version 9 (dispatch
-- is per destination, in `deliveries`); lease_until since version 8.
-- The state CHECKs spell out `=` because an `IN` list of three or more
-- values costs a temporary b-tree per check (version 16); `skipped` since
-- version 19.

-- Listing a source's inbox newest first.
CREATE INDEX events_source ON events (source, id);

-- One row per (event, destination that takes it), since version 9: the
-- state of dispatch. An event's own state is derived from its rows
-- (store/outcomes.rs); an event without any is `stored`.
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY,
    event_id        INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    source          TEXT    NOT NULL,   -- the event's
    destination     TEXT    NOT NULL,   -- its name in the source's config
    order_key       TEXT,               -- the event's
    state           TEXT    NOT NULL
                            CHECK (state = 'pending' OR state = 'delivered' OR state = 'dead'
                                   OR state = 'skipped'),
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

-- Claimed deliveries not yet settled, one row each. Not columns of
-- `deliveries`: a claim only inserts rows here. `attempts` counts an
-- attempt when it settles; until then it is counted here.
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
-- One leased delivery of a key holds its key's others in the lane back.
CREATE INDEX leases_key ON leases (source, destination, order_key) WHERE order_key IS NOT NULL;
-- The leases of a lane that ran out, and when the next one does.
CREATE INDEX leases_lane ON leases (source, destination, lease_until);

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
, destination TEXT NOT NULL DEFAULT 'default');   -- since version 9 (ALTER TABLE wrote it so)
CREATE INDEX attempts_event ON attempts (event_id);

-- Small key/value facts about the database itself (heartbeat, ids).
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
-- Catch-up jobs (GitHub redelivery, Stripe backfill; since version 2).

-- The last run of a job that read its whole window: the next run starts
-- there (minus an overlap), and start-up runs a job whose mark is older
-- than its interval.
CREATE TABLE catchup_state (
    source          TEXT    NOT NULL,
    job             TEXT    NOT NULL,   -- github_redelivery | stripe_backfill
    last_success_at INTEGER NOT NULL,   -- unix ms: when that run started
    PRIMARY KEY (source, job)
) WITHOUT ROWID;

-- Every run, finished or not.
CREATE TABLE catchup_runs (
    id          INTEGER PRIMARY KEY,
    source      TEXT    NOT NULL,
    job         TEXT    NOT NULL,
    dry_run     INTEGER NOT NULL DEFAULT 0,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    pages       INTEGER NOT NULL DEFAULT 0,
    seen        INTEGER NOT NULL DEFAULT 0,   -- GUIDs or events looked at
    asked       INTEGER NOT NULL DEFAULT 0,   -- redeliveries asked for / events inserted
    failed      INTEGER NOT NULL DEFAULT 0,
    complete    INTEGER NOT NULL DEFAULT 0,   -- the whole window was read
    error       TEXT
);
CREATE INDEX catchup_runs_source ON catchup_runs (source, id);

-- Each redelivery hookbox asked GitHub for.
CREATE TABLE redelivery_requests (
    id           INTEGER PRIMARY KEY,
    run_id       INTEGER NOT NULL REFERENCES catchup_runs (id) ON DELETE CASCADE,
    source       TEXT    NOT NULL,
    guid         TEXT    NOT NULL,       -- X-GitHub-Delivery
    attempt_id   INTEGER NOT NULL,       -- the delivery attempt asked to redeliver (64-bit)
    requested_at INTEGER NOT NULL,
    status_code  INTEGER,
    outcome      TEXT    NOT NULL,       -- asked | permanent | failed
    error        TEXT
);
CREATE INDEX redelivery_requests_guid ON redelivery_requests (source, guid);
CREATE INDEX redelivery_requests_run ON redelivery_requests (run_id);

-- The completeness ledger (since version 18). Each catch-up pass that was not a
-- dry run records what it saw of its window and what it could not
-- recover, and why; pruned with its run.
CREATE TABLE catchup_ledger (
    run_id         INTEGER PRIMARY KEY REFERENCES catchup_runs (id) ON DELETE CASCADE,
    source         TEXT    NOT NULL,
    job            TEXT    NOT NULL,
    window_start   INTEGER,            -- unix ms: the oldest time the pass read back to
    window_end     INTEGER NOT NULL,   -- unix ms: when the pass started
    uncovered_from INTEGER,            -- unix ms: where it should have started, when older than the provider keeps
    listed         INTEGER NOT NULL,   -- events the provider listed in the window
    held           INTEGER NOT NULL,   -- of those, in the inbox (or delivered, as the provider says)
    recovered      INTEGER NOT NULL,   -- asked for again, or inserted
    pending        INTEGER NOT NULL,   -- left to the provider: still retrying, or asked for before
    missing        INTEGER NOT NULL,   -- the sum of the reasons below
    outside_window INTEGER NOT NULL,   -- 1 when part of the window is older than the provider keeps
    refused        INTEGER NOT NULL,   -- the provider will not send them again (refused in this pass)
    refused_before INTEGER NOT NULL DEFAULT 0,   -- refused in an earlier pass, listed again
    rate_limited   INTEGER NOT NULL,   -- left for the next pass by a rate limit
    provider_error INTEGER NOT NULL    -- the provider failed, or listed something unreadable
);
CREATE INDEX catchup_ledger_source ON catchup_ledger (source, window_end);

-- What retention pruned of the catch-up log, counted so the metrics that
-- count runs and requests never go back (since version 7).
CREATE TABLE catchup_pruned (
    kind   TEXT    NOT NULL,   -- runs | redeliveries
    source TEXT    NOT NULL,
    label  TEXT    NOT NULL,   -- the job (runs) or the outcome (redeliveries)
    n      INTEGER NOT NULL,
    PRIMARY KEY (kind, source, label)
) WITHOUT ROWID;

-- Locks that keep a running server and the CLI from running one job at
-- once. A lock whose expires_at has passed is free (its holder died).
CREATE TABLE job_locks (
    name       TEXT PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;

-- The last list fetched of each named set (`allow_ips = ["github"]`;
-- since version 3), so a restart without network still knows them.
CREATE TABLE ip_sets (
    name       TEXT    PRIMARY KEY,   -- github | stripe
    ranges     TEXT    NOT NULL,      -- JSON array of CIDRs
    fetched_at INTEGER NOT NULL       -- unix ms
) WITHOUT ROWID;

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

-- Version 12: requests /hooks/* refused, for "what did hookbox refuse, and
-- why?". Bounded: the writer keeps the newest 10,000 rows, deleting by id
-- (ids only grow, and the newest row is never deleted). Never a body, a
-- secret or a header value: only the header names.
CREATE TABLE rejections (
    id           INTEGER PRIMARY KEY,
    at           INTEGER NOT NULL,    -- unix ms
    source       TEXT    NOT NULL,    -- as named in the URL, even unknown
    client       TEXT,                -- as the edge resolved it; NULL: unknown
    status       INTEGER NOT NULL,
    reason       TEXT    NOT NULL,    -- the answer's {"error": ...}
    header_names TEXT    NOT NULL,    -- JSON array, lowercase
    body_bytes   INTEGER,             -- read, or declared when not read
    content_type TEXT,
    detail       TEXT                 -- JSON object: facts behind the reason
, repeats INTEGER NOT NULL DEFAULT 0, last_at INTEGER);   -- since version 15 (ALTER TABLE wrote it so)
CREATE INDEX rejections_source ON rejections (source, id);
-- Version 13: hourly traffic counters per source, which the dashboard's
-- charts read instead of scanning events. The writer adds to them in the
-- transaction of what they count (`src/store/counters.rs` says what each
-- counts); retention trims hours older than 32 days.
CREATE TABLE hourly_counts (
    source    TEXT    NOT NULL,
    hour      INTEGER NOT NULL,             -- start of the hour, unix ms (UTC)
    received  INTEGER NOT NULL DEFAULT 0,   -- new events stored, by received_at
    delivered INTEGER NOT NULL DEFAULT 0,   -- attempts that delivered, by when they ended
    failed    INTEGER NOT NULL DEFAULT 0,   -- attempts that did not, by when they ended
    PRIMARY KEY (source, hour)
) WITHOUT ROWID;

-- Version 21: an event's state once derived from its deliveries, kept out
-- of the row that holds its body (src/store/outcomes.rs). An event's state
-- is this row's where it has one, else the `state` ingest gave it.
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
