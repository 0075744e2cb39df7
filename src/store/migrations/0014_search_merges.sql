-- Version 14: the search index merges its segments only when the writer
-- asks, in pieces of a few pages (`Indexer::step` in src/store/search.rs).
-- FTS5's automatic merge ran inside the commit of an indexing step, 64
-- leaf pages times the number of levels at a time: 5-28 ms on a loaded
-- two-core machine, which every request behind the step waited for.
-- `crisismerge` stays at its default, a bound should the pieces fall
-- behind.
INSERT INTO events_fts (events_fts, rank) VALUES ('automerge', 0);
