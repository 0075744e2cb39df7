-- Version 5: a key holds its events back while one of them is in flight.
-- Only events under a lease (being delivered right now) are in it, so it
-- stays as small as the dispatch concurrency.
CREATE INDEX events_leased ON events (source, order_key)
    WHERE state = 'pending' AND lease_until IS NOT NULL;
