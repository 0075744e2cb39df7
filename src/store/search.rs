//! Full-text search of event bodies: the FTS5 table `events_fts`, how a
//! user's query becomes an FTS5 expression, and the indexing step the
//! writer runs.
//!
//! The table is contentless (see `migrations/0011_search.sql`): it holds
//! the words of each body and their positions, keyed by the event's id,
//! and never a second copy of the body. Triggers remove an event's words
//! when the event or its body goes (retention, purge), so this module only
//! adds.
//!
//! Indexing is off the receive path: once no command has come for a
//! moment, the writer indexes the events past the high-water mark
//! `meta.search_indexed_through` in transactions of their own and moves
//! the mark ([`Indexer::step`]). The mark and the words it covers commit
//! together, so after a crash indexing resumes where it stopped, and an
//! event is indexed once. During a burst of ingest nothing is indexed
//! unless tens of thousands of events wait (`super::writer`); after it,
//! the index catches up (as an upgraded database, or one where search was
//! just turned on, gets its old events).
//!
//! FTS5 keeps the index as segments that it merges as they pile up. It no
//! longer merges by itself (`automerge` is 0 since schema 14): each step
//! follows its indexing with merge work of its own, in pieces of
//! [`MERGE_PAGES`] for about as long as the indexing took, and idle steps
//! merge until nothing is left. FTS5's own merges, run in the commit that
//! flushed the words, came 64 leaf pages times the number of levels at a
//! time, 5-28 ms on a loaded two-core machine.
//! A body that is not UTF-8 is not indexed; of a longer one, the first
//! [`MAX_INDEXED_BYTES`] are.
//!
//! Queries: [`SearchQuery::parse`] turns what a person types into an
//! expression FTS5 always accepts: every whitespace-separated term is a
//! quoted string (operators, parentheses, column filters and quotes lose
//! their meaning), a trailing `*` is kept as a prefix search, and the
//! terms must all match. A term is tokenized by FTS5 as the body was, so
//! `invoice.paid` is the phrase "invoice paid": it finds the dotted name
//! and not a body holding the two words apart.
//!
//! A query's cost is bounded twice. A prefix needs [`MIN_PREFIX_CHARS`]
//! letters or digits: FTS5 answers `a*` by merging the lists of every word
//! starting with `a` before the first match comes out, and 16 such
//! prefixes on 100,000 events took 4 s. What is left is cut by
//! [`with_deadline`]: a prefix shared by many distinct words (ids with a
//! common start) costs as much, and so does a common word combined with
//! a filter nothing matches. Queries run on connections of their own
//! (`super::Store::search`), so whatever they cost is not waited for by
//! the deliveries, pulls and scrapes that read through the other pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

/// The most of one body that is indexed. Tokenizing runs on the writer
/// thread: a 25 MiB body indexed whole would hold every insert behind it
/// for a noticeable time, for words far down a payload that people rarely
/// search for. The cut falls between two words.
pub const MAX_INDEXED_BYTES: usize = 256 * 1024;

/// Most events one step indexes, most bytes of bodies it reads, and the
/// time after which it stops reading: they bound how long a step holds
/// the writer (a step runs between two groups of inserts, so this is
/// added to the wait of the group after it). The time matters most: a
/// step of 1,024 rows or 1 MiB took 30-35 ms on a loaded two-core
/// machine, and a step that starts in a lull of a burst (the writer idle
/// while every request waits for an fsync) holds the burst's next group
/// for all of it. One body larger than the bounds is read in a step of
/// its own.
pub const STEP_ROWS: usize = 1024;
const STEP_BYTES: usize = 1024 * 1024;
const STEP_TIME: Duration = Duration::from_millis(2);

/// Leaf pages of merge work per FTS5 `merge` command: a fraction of a
/// millisecond, so a step overruns its merge time by at most that.
const MERGE_PAGES: i64 = 16;

/// The longest query, in characters, and the most terms in it.
pub const MAX_QUERY_CHARS: usize = 500;
pub const MAX_TERMS: usize = 16;

/// The fewest letters or digits a prefix search (`inv*`) may have before
/// its `*`; of a dotted name (`invoice.pai*`), its last word's.
pub const MIN_PREFIX_CHARS: usize = 3;

/// How many SQLite virtual machine steps pass between two looks at the
/// deadline: some tens of microseconds of work.
const DEADLINE_STEPS: std::ffi::c_int = 1000;

/// Where the high-water mark lives in `meta`.
const MARK: &str = "search_indexed_through";

/// Why a query was refused: each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error(
        "q: has no word to search for (search matches words and word prefixes like `invoice*`)"
    )]
    NoWord,
    #[error("q: longer than {MAX_QUERY_CHARS} characters")]
    TooLong,
    #[error("q: more than {MAX_TERMS} words")]
    TooManyTerms,
    #[error(
        "q: `{0}` is too short a prefix: a prefix search needs at least {MIN_PREFIX_CHARS} \
         letters or digits before the `*` (`inv*`, `invoice.pai*`)"
    )]
    ShortPrefix(String),
}

/// Why a search that was a valid query found nothing to answer with.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error(
        "q: the search ran longer than {} and was stopped; narrow it with more \
         words, longer prefixes or other filters (source, since, until)",
        humantime::format_duration(*.0)
    )]
    TimedOut(Duration),
    #[error(
        "q: every search connection stayed busy for {}; try again in a moment",
        humantime::format_duration(*.0)
    )]
    Busy(Duration),
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

/// A query made safe for `MATCH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    expression: String,
}

impl SearchQuery {
    /// Words and `prefix*`, all of which must match. Terms without a
    /// letter or digit (`-`, `*`, `()`) are left out: the tokenizer would
    /// make nothing of them; a query with nothing else is refused.
    pub fn parse(raw: &str) -> Result<SearchQuery, QueryError> {
        if raw.chars().count() > MAX_QUERY_CHARS {
            return Err(QueryError::TooLong);
        }
        let mut terms = Vec::new();
        for term in raw.split_whitespace() {
            let word = term.trim_end_matches('*');
            if !word.chars().any(char::is_alphanumeric) {
                continue;
            }
            let prefix = word.len() < term.len();
            if prefix && last_word_chars(word) < MIN_PREFIX_CHARS {
                return Err(QueryError::ShortPrefix(term.to_owned()));
            }
            // Inside an FTS5 string a quote is written twice; nothing
            // else in it is syntax.
            let quoted = format!("\"{}\"", word.replace('"', "\"\""));
            terms.push(if prefix { quoted + "*" } else { quoted });
        }
        if terms.is_empty() {
            return Err(QueryError::NoWord);
        }
        if terms.len() > MAX_TERMS {
            return Err(QueryError::TooManyTerms);
        }
        Ok(SearchQuery {
            expression: terms.join(" "),
        })
    }

    /// The FTS5 expression, to bind to `events_fts MATCH ?`.
    pub fn expression(&self) -> &str {
        &self.expression
    }
}

/// The length in characters of the last word of `text` as the tokenizer
/// splits it (letters and digits; anything else separates): the part a
/// trailing `*` makes a prefix of.
fn last_word_chars(text: &str) -> usize {
    text.split(|c: char| !c.is_alphanumeric())
        .rfind(|w| !w.is_empty())
        .map_or(0, |w| w.chars().count())
}

/// Runs `query` on `conn` and stops it once `limit` has passed: SQLite's
/// progress handler looks at the clock every [`DEADLINE_STEPS`] steps and
/// interrupts the statement, FTS5's reading of its index included. The
/// handler is removed again before this returns, whatever the outcome,
/// so a pooled connection goes back without it.
pub fn with_deadline<T>(
    conn: &Connection,
    limit: Duration,
    query: impl FnOnce(&Connection) -> anyhow::Result<T>,
) -> Result<T, SearchError> {
    let deadline = Instant::now() + limit;
    let stopped = Arc::new(AtomicBool::new(false));
    let flag = stopped.clone();
    conn.progress_handler(
        DEADLINE_STEPS,
        Some(move || {
            let late = Instant::now() >= deadline;
            if late {
                flag.store(true, Ordering::Relaxed);
            }
            late
        }),
    )
    .context("setting a search's deadline")?;
    let outcome = query(conn);
    conn.progress_handler(0, None::<fn() -> bool>)
        .context("removing a search's deadline")?;
    match outcome {
        // However the interruption surfaced (FTS5 may word it its own way).
        Err(_) if stopped.load(Ordering::Relaxed) => Err(SearchError::TimedOut(limit)),
        Err(e) => Err(SearchError::Failed(e)),
        Ok(found) => Ok(found),
    }
}

/// The text of `body` that is indexed: `None` unless it is UTF-8; at most
/// [`MAX_INDEXED_BYTES`], cut before the word the limit falls in.
pub fn indexable(body: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(body).ok()?;
    if text.len() <= MAX_INDEXED_BYTES {
        return Some(text);
    }
    let mut end = MAX_INDEXED_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].trim_end_matches(char::is_alphanumeric))
}

/// The writer's side of the index: where it stands, and whether there
/// may be events past it.
#[derive(Debug)]
pub struct Indexer {
    /// Every event up to this id has been looked at.
    mark: i64,
    behind: bool,
    /// Whether the index's segments may want merging.
    merging: bool,
    /// Since when steps fail, so the log says it once per streak.
    failing: bool,
}

impl Indexer {
    /// The indexer for the writer's connection, or `None` with search off,
    /// in which case an index left by an earlier run is emptied: a
    /// self-hoster who turned search off does not want the words of bodies
    /// kept. Turned on again, it indexes everything from the start.
    pub fn open(conn: &Connection, enabled: bool) -> anyhow::Result<Option<Indexer>> {
        let mark: Option<i64> = conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [MARK], |r| {
                r.get::<_, String>(0)
            })
            .optional()
            .context("reading the search index's mark")?
            .map(|v| v.parse())
            .transpose()
            .context("reading the search index's mark")?;
        if !enabled {
            if mark.is_some() {
                conn.execute_batch(&format!(
                    "BEGIN IMMEDIATE;
                     INSERT INTO events_fts (events_fts) VALUES ('delete-all');
                     DELETE FROM meta WHERE key = '{MARK}';
                     COMMIT;"
                ))
                .context("emptying the search index (search is off)")?;
                tracing::info!("search is off: emptied the search index");
            }
            return Ok(None);
        }
        Ok(Some(Indexer {
            mark: mark.unwrap_or(0),
            behind: true,
            merging: true,
            failing: false,
        }))
    }

    /// Whether there may be work: events waiting to be indexed, or
    /// segments to merge.
    pub fn behind(&self) -> bool {
        self.behind || self.merging
    }

    /// How many events wait to be indexed (ids past the mark: an upper
    /// bound, as some may have been deleted).
    pub fn waiting(&self, conn: &Connection) -> anyhow::Result<i64> {
        let newest: i64 = conn
            .prepare_cached("SELECT coalesce(max(id), 0) FROM events")?
            .query_row([], |r| r.get(0))
            .context("reading the newest event's id")?;
        Ok(newest - self.mark)
    }

    /// A group committed: it may have added events.
    pub fn touched(&mut self) {
        self.behind = true;
    }

    /// Indexes the next events past the mark, up to `rows` of them (at
    /// most [`STEP_ROWS`]), [`STEP_BYTES`] of text or [`STEP_TIME`], then
    /// merges segments for about as long (for [`STEP_TIME`] when there
    /// was nothing to index), in one transaction with the new mark.
    /// Returns how many events it looked at; none means it has caught up
    /// with the events, though merging may go on ([`Indexer::behind`]).
    /// A failure rolls the step back; it is tried again after the next
    /// group.
    pub fn step(&mut self, conn: &mut Connection, rows: usize) -> anyhow::Result<usize> {
        let outcome = self.try_step(conn, rows.clamp(1, STEP_ROWS));
        match &outcome {
            Ok(_) if self.failing => {
                self.failing = false;
                tracing::info!("search indexing works again");
            }
            Ok(_) => {}
            Err(e) => {
                self.behind = false;
                self.merging = false;
                if !self.failing {
                    self.failing = true;
                    tracing::warn!(error = %format!("{e:#}"), "search indexing failed; it is retried after the next write");
                }
            }
        }
        outcome
    }

    fn try_step(&mut self, conn: &mut Connection, rows: usize) -> anyhow::Result<usize> {
        // Looked up outside a transaction: after most groups of claims and
        // outcomes there is nothing to index, and this costs one seek.
        let waiting: bool = conn
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM events WHERE id > ?1)")?
            .query_row([self.mark], |r| r.get(0))
            .context("looking for events to index")?;
        if !waiting {
            self.behind = false;
            if !self.merging {
                return Ok(0);
            }
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .context("beginning a search index step")?;
        let started = Instant::now();
        let (seen, mark) = if waiting {
            index_after(&tx, self.mark, rows)?
        } else {
            (0, self.mark)
        };
        if seen > 0 {
            tx.prepare_cached(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![MARK, mark.to_string()])
            .context("moving the search index's mark")?;
        }
        // As long as the indexing took keeps the segments level with what
        // the steps add: FTS5's own merges took about a third of it.
        let merge_for = if seen > 0 {
            started.elapsed()
        } else {
            STEP_TIME
        };
        let merging = merge(&tx, merge_for)?;
        tx.commit().context("committing a search index step")?;
        self.mark = mark;
        self.merging = merging;
        Ok(seen)
    }
}

/// Merges the index's segments, one [`MERGE_PAGES`] piece after another,
/// until FTS5 has no merge left to do or `time` has passed (after at
/// least one piece); returns whether work may remain. A piece merges
/// only on a level holding `usermerge` (4) segments or more, so an index
/// that has caught up is left alone.
fn merge(conn: &Connection, time: Duration) -> anyhow::Result<bool> {
    let mut piece =
        conn.prepare_cached("INSERT INTO events_fts (events_fts, rank) VALUES ('merge', ?1)")?;
    let started = Instant::now();
    loop {
        let before = conn.total_changes();
        piece
            .execute([MERGE_PAGES])
            .context("merging the search index")?;
        // FTS5's documented signal: a piece that did nothing changes
        // fewer than two rows.
        if conn.total_changes() - before < 2 {
            return Ok(false);
        }
        if started.elapsed() >= time {
            return Ok(true);
        }
    }
}

/// Indexes events after `after` in id order within the step's bounds;
/// returns how many it looked at and the last one's id.
fn index_after(conn: &Connection, after: i64, rows: usize) -> anyhow::Result<(usize, i64)> {
    let mut select =
        conn.prepare_cached("SELECT id, body FROM events WHERE id > ?1 ORDER BY id LIMIT ?2")?;
    let mut insert = conn.prepare_cached("INSERT INTO events_fts (rowid, body) VALUES (?1, ?2)")?;
    let started = Instant::now();
    let limit = i64::try_from(rows).unwrap_or(i64::MAX);
    let mut rows = select.query(params![after, limit])?;
    let (mut seen, mut mark, mut bytes) = (0, after, 0);
    while let Some(row) = rows.next().context("reading events to index")? {
        let id: i64 = row.get(0)?;
        let body = row.get_ref(1)?.as_blob_or_null()?;
        if let Some(text) = body.and_then(indexable) {
            insert
                .execute(params![id, text])
                .context("indexing an event")?;
        }
        bytes += body.map_or(0, <[u8]>::len);
        seen += 1;
        mark = id;
        if bytes >= STEP_BYTES || started.elapsed() >= STEP_TIME {
            break;
        }
    }
    Ok((seen, mark))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::db_with_foreign_keys as db;

    /// A clause keeping the rows whose `id_column` is an event whose body
    /// matches the expression bound to `param`.
    fn matching(id_column: &str, param: &str) -> String {
        format!("{id_column} IN (SELECT rowid FROM events_fts WHERE events_fts MATCH {param})")
    }

    fn add(conn: &Connection, body: &[u8]) -> i64 {
        conn.execute(
            "INSERT INTO events (source, delivery_id, received_at, body, state)
             VALUES ('s', hex(randomblob(8)), 1, ?1, 'stored')",
            [body],
        )
        .unwrap();
        conn.last_insert_rowid()
    }

    fn search(conn: &Connection, q: &str) -> Vec<i64> {
        let q = SearchQuery::parse(q).unwrap();
        conn.prepare(&format!(
            "SELECT id FROM events WHERE {} ORDER BY id",
            matching("id", "?")
        ))
        .unwrap()
        .query_map([q.expression()], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    fn index_all(conn: &mut Connection) -> Indexer {
        let mut ix = Indexer::open(conn, true).unwrap().unwrap();
        while ix.behind() {
            ix.step(conn, STEP_ROWS).unwrap();
        }
        ix
    }

    /// How many segments the index is made of: each has at least one row
    /// in FTS5's `_idx` table.
    fn segments(conn: &Connection) -> i64 {
        conn.query_row(
            "SELECT count(DISTINCT segid) FROM events_fts_idx",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    fn fts_rows(conn: &Connection) -> i64 {
        // The contentless-delete table keeps one `_docsize` row per
        // indexed event: the count of what is in the index.
        conn.query_row("SELECT count(*) FROM events_fts_docsize", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn words_prefixes_and_dotted_names_are_found() {
        let mut conn = db();
        let paid = add(
            &conn,
            br#"{"type":"invoice.paid","customer_email":"alice@example.com","name":"Zo\u00eb"}"#,
        );
        let apart = add(&conn, b"the invoice was paid by Zo\xc3\xabe");
        let other = add(&conn, br#"{"type":"charge.failed"}"#);
        index_all(&mut conn);
        assert_eq!(search(&conn, "invoice"), [paid, apart]);
        assert_eq!(search(&conn, "invoice.paid"), [paid]);
        assert_eq!(search(&conn, "INVOICE paid"), [paid, apart]);
        assert_eq!(search(&conn, "alice@example.com"), [paid]);
        assert_eq!(search(&conn, "customer_email"), [paid]);
        assert_eq!(search(&conn, "inv*"), [paid, apart]);
        assert_eq!(search(&conn, "invoice.pai*"), [paid]);
        assert_eq!(search(&conn, "zoee"), [apart]);
        assert_eq!(search(&conn, "char* failed"), [other]);
        assert!(search(&conn, "refund").is_empty());
        assert!(search(&conn, "invoice failed").is_empty());
    }

    #[test]
    fn whatever_a_person_types_is_a_valid_expression_or_refused_with_a_reason() {
        let mut conn = db();
        let id = add(&conn, br#"{"a":"NEAR or AND not \"quoted\" x:y"}"#);
        index_all(&mut conn);
        for q in [
            "\"",
            "\"\"",
            "a\"b",
            "(",
            ")",
            "a OR b",
            "NOT",
            "AND",
            "OR",
            "NEAR(a b)",
            "a AND",
            "body:x",
            "x:y",
            "{a b}",
            "^a",
            "a + b",
            "-a",
            "'",
            "a*b",
            "**a**",
            "\\",
            "%",
            "_",
            "\u{0}",
            "\u{301}",
            "\u{345}x",
            "😀",
            "a\u{301}",
            "\u{ffff}",
            "NEAR/2",
        ] {
            match SearchQuery::parse(q) {
                Ok(parsed) => {
                    conn.prepare(&format!(
                        "SELECT count(*) FROM events WHERE {}",
                        matching("id", "?")
                    ))
                    .unwrap()
                    .query_row([parsed.expression()], |r| r.get::<_, i64>(0))
                    .unwrap_or_else(|e| panic!("{q:?} as {parsed:?}: {e}"));
                }
                Err(QueryError::NoWord | QueryError::ShortPrefix(_)) => {}
                Err(e) => panic!("{q:?}: {e}"),
            }
        }
        // Operators are words.
        assert_eq!(search(&conn, "near OR and not"), [id]);
        assert_eq!(search(&conn, "\"quoted\""), [id]);
        assert_eq!(search(&conn, "x:y"), [id]);
        assert_eq!(SearchQuery::parse(" * - () "), Err(QueryError::NoWord));
        assert_eq!(
            SearchQuery::parse(&"a ".repeat(MAX_TERMS + 1)),
            Err(QueryError::TooManyTerms)
        );
        assert_eq!(
            SearchQuery::parse(&"a".repeat(MAX_QUERY_CHARS + 1)),
            Err(QueryError::TooLong)
        );
        assert_eq!(
            SearchQuery::parse("say \"hi\" pre*").unwrap().expression(),
            r#""say" """hi""" "pre"*"#
        );
    }

    #[test]
    fn a_prefix_needs_three_letters_or_digits_in_its_last_word() {
        for short in [
            "a*",
            "ab*",
            "x y*",
            "invoice.pa*",
            "a**",
            "é*",
            "ab.*",
            "1*",
            "zz*b*",
        ] {
            let Err(QueryError::ShortPrefix(term)) = SearchQuery::parse(short) else {
                panic!("{short:?} was taken");
            };
            assert!(short.ends_with(&term), "{short:?} blamed {term:?}");
            let said = QueryError::ShortPrefix(term).to_string();
            assert!(
                said.starts_with("q:") && said.contains("at least 3"),
                "{said}"
            );
        }
        for fine in [
            "abc*",
            "invoice.pai*",
            "ééé*",
            "123*",
            "abc.*",
            "a b c",
            "a*b.cde*",
        ] {
            assert!(SearchQuery::parse(fine).is_ok(), "{fine:?}");
        }
        // A word searched whole may be of any length: it is one list.
        assert_eq!(SearchQuery::parse("a").unwrap().expression(), "\"a\"");
    }

    /// Events whose bodies hold `words` distinct words each starting with
    /// `zzz`: a prefix `zzz*` has all of them to merge.
    fn many_words(conn: &mut Connection, events: usize, words: usize) {
        let tx = conn.transaction().unwrap();
        for i in 0..events {
            let body: Vec<String> = (0..words).map(|w| format!("zzz{i}x{w}")).collect();
            add(&tx, body.join(" ").as_bytes());
        }
        tx.commit().unwrap();
        index_all(conn);
    }

    fn count(conn: &Connection, q: &str) -> anyhow::Result<i64> {
        let q = SearchQuery::parse(q).unwrap();
        Ok(conn
            .prepare(&format!(
                "SELECT count(*) FROM events WHERE {}",
                matching("id", "?")
            ))?
            .query_row([q.expression()], |r| r.get(0))?)
    }

    #[test]
    fn a_search_past_its_deadline_is_stopped_and_the_connection_keeps_no_deadline() {
        let mut conn = db();
        many_words(&mut conn, 2000, 50);
        let slow = &"zzz* ".repeat(MAX_TERMS);
        let started = Instant::now();
        let whole = count(&conn, slow).unwrap();
        let natural = started.elapsed();
        assert_eq!(whole, 2000);
        let limit = natural / 10;
        let started = Instant::now();
        let cut = with_deadline(&conn, limit, |c| count(c, slow));
        assert!(
            matches!(cut, Err(SearchError::TimedOut(d)) if d == limit),
            "{cut:?}"
        );
        assert!(
            started.elapsed() < natural / 2,
            "stopped after {:?} of {natural:?}",
            started.elapsed()
        );
        assert!(
            cut.unwrap_err()
                .to_string()
                .starts_with("q: the search ran longer than")
        );
        // The handler went with the search: the same query, unbounded,
        // runs to its end on the same connection.
        assert_eq!(count(&conn, slow).unwrap(), 2000);
        // Within the deadline the answer is the query's, errors included.
        assert_eq!(
            with_deadline(&conn, natural * 20, |c| count(c, "zzz1x1")).unwrap(),
            1
        );
        let failed = with_deadline(&conn, natural * 20, |_| -> anyhow::Result<()> {
            anyhow::bail!("its own error")
        });
        assert!(matches!(failed, Err(SearchError::Failed(e)) if e.to_string() == "its own error"));
    }

    #[test]
    fn binary_bodies_are_skipped_and_long_ones_cut_between_words() {
        let mut conn = db();
        let binary = add(&conn, b"\xff\xfe word binary");
        let mut long = "early ".repeat(MAX_INDEXED_BYTES / 6 + 1);
        long.push_str("late");
        let long_id = add(&conn, long.as_bytes());
        let cut = indexable(long.as_bytes()).unwrap();
        assert!(
            cut.len() <= MAX_INDEXED_BYTES && cut.ends_with(' '),
            "{}",
            cut.len()
        );
        // A multi-byte character straddling the limit is not split.
        let wide = "é".repeat(MAX_INDEXED_BYTES);
        assert_eq!(indexable(wide.as_bytes()), Some(""));
        index_all(&mut conn);
        assert!(search(&conn, "binary").is_empty());
        assert_eq!(search(&conn, "early"), [long_id]);
        assert!(search(&conn, "late").is_empty());
        assert_eq!(fts_rows(&conn), 1, "the binary body {binary} is not in it");
    }

    #[test]
    fn deleted_events_and_dropped_bodies_leave_the_index() {
        let mut conn = db();
        let gone = add(&conn, b"alpha one");
        let dropped = add(&conn, b"alpha two");
        let kept = add(&conn, b"alpha three");
        let mut ix = index_all(&mut conn);
        conn.execute("DELETE FROM events WHERE id = ?1", [gone])
            .unwrap();
        conn.execute("UPDATE events SET body = NULL WHERE id = ?1", [dropped])
            .unwrap();
        assert_eq!(search(&conn, "alpha"), [kept]);
        assert!(search(&conn, "one").is_empty());
        assert_eq!(fts_rows(&conn), 1);
        // A row deleted before it was indexed is never indexed, and its
        // delete leaves nothing behind.
        let early = add(&conn, b"alpha four");
        conn.execute("DELETE FROM events WHERE id = ?1", [early])
            .unwrap();
        ix.touched();
        while ix.step(&mut conn, STEP_ROWS).unwrap() > 0 {}
        assert_eq!(search(&conn, "alpha"), [kept]);
        assert_eq!(fts_rows(&conn), 1);
    }

    #[test]
    fn the_mark_survives_and_turning_search_off_empties_the_index() {
        let mut conn = db();
        let first = add(&conn, b"kept word");
        index_all(&mut conn);
        let second = add(&conn, b"kept again");
        // A new indexer (a restart) starts from the mark: the first event
        // is not indexed twice.
        let mut ix = Indexer::open(&conn, true).unwrap().unwrap();
        assert_eq!(ix.step(&mut conn, STEP_ROWS).unwrap(), 1);
        assert_eq!(ix.step(&mut conn, STEP_ROWS).unwrap(), 0);
        assert_eq!(search(&conn, "kept"), [first, second]);
        assert!(Indexer::open(&conn, false).unwrap().is_none());
        assert!(search(&conn, "kept").is_empty());
        assert_eq!(fts_rows(&conn), 0);
        // On again: everything from the start.
        index_all(&mut conn);
        assert_eq!(search(&conn, "kept"), [first, second]);
    }

    #[test]
    fn a_step_after_a_group_indexes_only_what_it_was_given() {
        let mut conn = db();
        let ids: Vec<i64> = (0..10)
            .map(|i| add(&conn, format!("word{i} shared").as_bytes()))
            .collect();
        let mut ix = Indexer::open(&conn, true).unwrap().unwrap();
        // At most what it was given: fewer when its time ran out first
        // (a slow machine), never none while events wait.
        let first = ix.step(&mut conn, 3).unwrap();
        assert!((1..=3).contains(&first), "{first}");
        assert_eq!(search(&conn, "shared"), ids[..first]);
        let second = ix.step(&mut conn, 0).unwrap();
        assert_eq!(second, 1);
        assert_eq!(search(&conn, "shared"), ids[..first + 1]);
        while ix.step(&mut conn, 4).unwrap() > 0 {}
        assert_eq!(search(&conn, "shared"), ids);
    }

    #[test]
    fn fts5_never_merges_by_itself() {
        // On a new database and on one upgraded from version 13: the
        // merges are the writer's, in pieces.
        let new = db();
        let mut old = Connection::open_in_memory().unwrap();
        old.execute_batch(include_str!("migrations/0001_schema_v1.sql"))
            .unwrap();
        old.pragma_update(None, "user_version", 1).unwrap();
        crate::store::schema::apply(&mut old).unwrap();
        for conn in [&new, &old] {
            let automerge: i64 = conn
                .query_row(
                    "SELECT v FROM events_fts_config WHERE k = 'automerge'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(automerge, 0);
        }
    }

    #[test]
    fn steps_merge_the_segments_they_add() {
        // Each one-event step flushes a segment of its own. Without merge
        // work of the steps, 60 of them leave 15 segments (FTS5's crisis
        // merge folds 16 on a level into one): the control shows it.
        const STEPS: usize = 60;
        let control = db();
        for i in 0..STEPS {
            let id = add(&control, format!("word{i} shared").as_bytes());
            control
                .execute(
                    "INSERT INTO events_fts (rowid, body) VALUES (?1, ?2)",
                    params![id, format!("word{i} shared")],
                )
                .unwrap();
        }
        assert_eq!(segments(&control), 15);

        // With them, no level keeps four segments (FTS5's `usermerge`),
        // and 60 events fit on three levels: at most 9.
        let mut conn = db();
        let mut ix = Indexer::open(&conn, true).unwrap().unwrap();
        for i in 0..STEPS {
            add(&conn, format!("word{i} shared").as_bytes());
            ix.touched();
            assert_eq!(ix.step(&mut conn, 1).unwrap(), 1);
        }
        while ix.behind() {
            ix.step(&mut conn, STEP_ROWS).unwrap();
        }
        let after = segments(&conn);
        assert!((1..=9).contains(&after), "{after} segments");
        assert_eq!(search(&conn, "shared").len(), STEPS);
        assert_eq!(search(&conn, "word59").len(), 1);
    }
}
