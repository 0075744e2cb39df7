-- Version 5: a key holds its events back while one of them is in flight.
-- Only leased events are in it: those claimed and not yet settled (at most
-- concurrency x 16 per source, the dispatcher's prefetch) and, until the
-- next start, any a crash left; so it stays small.
CREATE INDEX events_leased ON events (source, order_key)
    WHERE state = 'pending' AND lease_until IS NOT NULL;
