-- Version 2: catch-up jobs (GitHub redelivery, Stripe backfill).

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

-- Locks that keep a running server and the CLI from running one job at
-- once. A lock whose expires_at has passed is free (its holder died).
CREATE TABLE job_locks (
    name       TEXT PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
