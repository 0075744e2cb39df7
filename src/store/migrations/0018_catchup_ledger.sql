-- Version 18: the completeness ledger. Each catch-up pass that was not a
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
