-- Version 15: refusals that repeat fold into one row. A flood of forged
-- requests from a few addresses wrote a row per request (9,400 a second in
-- bench/'s forged flood), pushed every earlier row out of the 10,000 in
-- about a second, and the writes cost valid traffic a fifth of its p99.
-- A refusal with the source, client, status and reason of a row begun
-- less than 10 s earlier now adds to that row's `repeats` and moves its
-- `last_at` (src/store/rejections.rs).
ALTER TABLE rejections ADD COLUMN repeats INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rejections ADD COLUMN last_at INTEGER;
