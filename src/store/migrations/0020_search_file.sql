-- Version 20: the search index moves out of the database into a file of
-- its own, `<database>.search`, kept up by an indexer thread of its own
-- (src/store/search/indexer.rs): its words no longer go through the
-- writer, the WAL and the fsyncs that events wait for. The index built
-- here by versions 11-19 goes, with the triggers that kept it and the
-- mark; the server rebuilds the new file from the bodies, as it does
-- whenever that file is missing. The freed pages stay in the file for
-- new rows (`VACUUM` gives them back to the disk).
DROP TRIGGER events_fts_delete;
DROP TRIGGER events_fts_drop_body;
DROP TABLE events_fts;
DELETE FROM meta WHERE key = 'search_indexed_through';
