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
);
CREATE INDEX rejections_source ON rejections (source, id);
