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

-- An upgraded inbox shows the history it holds: the last 30 days of
-- events and attempts (retention may already have taken older ones).
INSERT INTO hourly_counts (source, hour, received)
SELECT source, received_at - received_at % 3600000, count(*)
FROM events
WHERE received_at >= (CAST(strftime('%s', 'now') AS INTEGER) - 30 * 86400) * 1000
GROUP BY 1, 2;

INSERT INTO hourly_counts (source, hour, delivered, failed)
SELECT e.source, (a.started_at + a.duration_ms) - (a.started_at + a.duration_ms) % 3600000,
       sum(a.outcome = 'delivered'), sum(a.outcome != 'delivered')
FROM attempts AS a JOIN events AS e ON e.id = a.event_id
WHERE a.started_at + a.duration_ms >= (CAST(strftime('%s', 'now') AS INTEGER) - 30 * 86400) * 1000
GROUP BY 1, 2
ON CONFLICT (source, hour) DO UPDATE SET
    delivered = excluded.delivered, failed = excluded.failed;
