-- Version 11: full-text search of event bodies (`q=` on /api/events).
-- Contentless (`content=''`): the index keeps the words and their
-- positions, never a second copy of the body, which stays in `events`
-- only; `contentless_delete=1` (SQLite 3.43+) lets a row be removed by
-- rowid alone. The rowid is the event's id. unicode61 splits on anything
-- that is not a letter or a digit, so `invoice.paid`, `alice@example.com`
-- and the JSON key `customer_email` are each indexed as their words, and
-- a query for the whole name is the phrase of those words
-- (src/store/search.rs); diacritics are folded (`zoe` finds `Zoë`).
-- Rows are added by the writer after their group commits, from the
-- high-water mark `meta.search_indexed_through` (so an upgraded
-- database is indexed by the server, not in this migration, and a
-- non-UTF-8 body is never indexed); they leave with their event or its
-- body, by the triggers below, whatever deletes them.
CREATE VIRTUAL TABLE events_fts USING fts5 (
    body,
    content = '',
    contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER events_fts_delete AFTER DELETE ON events BEGIN
    DELETE FROM events_fts WHERE rowid = old.id;
END;
CREATE TRIGGER events_fts_drop_body AFTER UPDATE OF body ON events
    WHEN new.body IS NULL AND old.body IS NOT NULL BEGIN
    DELETE FROM events_fts WHERE rowid = old.id;
END;
