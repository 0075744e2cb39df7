-- Version 6: a pending event behind an older one of its key is held, with
-- no next_attempt_at, so a claim does not walk a key's backlog; it is
-- scheduled when it becomes its key's oldest (store/dispatch.rs). An event
-- waiting for a retry keeps its time. Data only: the schema does not change.
UPDATE events SET next_attempt_at = NULL
WHERE state = 'pending' AND order_key IS NOT NULL AND next_attempt_at IS NOT NULL
  AND attempts = 0 AND EXISTS (
      SELECT 1 FROM events AS o
      WHERE o.state = 'pending' AND o.source = events.source
        AND o.order_key = events.order_key AND o.id < events.id);
