-- Version 7: the catch-up log (runs and the redeliveries they asked for)
-- is pruned with retention. What was pruned is counted here, so the
-- metrics that count runs and requests never go back.
CREATE TABLE catchup_pruned (
    kind   TEXT    NOT NULL,   -- runs | redeliveries
    source TEXT    NOT NULL,
    label  TEXT    NOT NULL,   -- the job (runs) or the outcome (redeliveries)
    n      INTEGER NOT NULL,
    PRIMARY KEY (kind, source, label)
) WITHOUT ROWID;

-- Deleting a run deletes its requests (ON DELETE CASCADE), found by run.
CREATE INDEX redelivery_requests_run ON redelivery_requests (run_id);
