//! Full-text search of event bodies: how a user's query becomes an FTS5
//! expression, the deadline every search runs under, and what of a body
//! is indexed. The index itself lives in a database file of its own
//! ([`file`](mod@file), `<database>.search`), kept up by a thread of its own
//! ([`indexer`]), off the writer, its WAL and its fsyncs.
//!
//! The table is contentless: it holds the words of each body and their
//! positions, keyed by the event's id, and never a second copy of the
//! body. It may lag behind the events (a search says how far it got,
//! [`coverage`]) and may still hold words of events retention deleted
//! until the indexer sweeps them; a search joins each match to its event
//! and keeps only those that still have a body, so neither shows.
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

pub mod file;
pub mod indexer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

/// The most of one body that is indexed: words far down a payload are
/// rarely searched for, and a 25 MiB body tokenized whole would hold the
/// indexer's batch for a noticeable time. The cut falls between two words.
pub const MAX_INDEXED_BYTES: usize = 256 * 1024;

/// The longest query, in characters, and the most terms in it.
pub const MAX_QUERY_CHARS: usize = 500;
pub const MAX_TERMS: usize = 16;

/// The fewest letters or digits a prefix search (`inv*`) may have before
/// its `*`; of a dotted name (`invoice.pai*`), its last word's.
pub const MIN_PREFIX_CHARS: usize = 3;

/// How many SQLite virtual machine steps pass between two looks at the
/// deadline: some tens of microseconds of work.
const DEADLINE_STEPS: std::ffi::c_int = 1000;

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

/// Where the database counts what retention and purges removed.
const REMOVED: &str = "events_removed";

/// Notes in the database, inside the transaction that deleted events or
/// dropped bodies (`n` of them), that the index has words to forget: the
/// indexer sweeps when the count moves. One row per batch, so retention
/// costs the writer nothing per event for search.
pub fn removed(conn: &Connection, n: usize) -> anyhow::Result<()> {
    if n == 0 {
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO meta (key, value) VALUES (?1, '1')
         ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
    )?
    .execute([REMOVED])
    .context("counting removed events for the search index")?;
    Ok(())
}

/// The count [`removed`] keeps.
pub(crate) fn removals(conn: &Connection) -> anyhow::Result<i64> {
    Ok(conn
        .prepare_cached("SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?1")?
        .query_row([REMOVED], |r| r.get(0))
        .optional()
        .context("reading the count of removed events")?
        .unwrap_or(0))
}

/// How far the index had got when a search ran: every event up to
/// `indexed_through` was searched, the `not_yet_indexed` after it were
/// not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Coverage {
    pub indexed_through: i64,
    pub not_yet_indexed: i64,
}

/// The [`Coverage`] seen by `conn`, which has the index attached.
pub fn coverage(conn: &Connection) -> anyhow::Result<Coverage> {
    let indexed_through: i64 = conn
        .prepare_cached(&format!(
            "SELECT coalesce((SELECT value FROM {}.state WHERE key = '{}'), 0)",
            file::SCHEMA,
            file::MARK
        ))?
        .query_row([], |r| r.get(0))
        .context("reading how far the search index got")?;
    let not_yet_indexed: i64 = conn
        .prepare_cached("SELECT count(*) FROM events WHERE id > ?1")?
        .query_row([indexed_through], |r| r.get(0))
        .context("counting the events not yet indexed")?;
    Ok(Coverage {
        indexed_through,
        not_yet_indexed,
    })
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

#[cfg(test)]
pub(crate) mod fixture;

#[cfg(test)]
mod tests {
    use super::fixture::Fixture;
    use super::*;

    fn db() -> Fixture {
        Fixture::new()
    }

    /// A clause keeping the rows whose `id_column` is an event whose body
    /// matches the expression bound to `param`.
    fn matching(id_column: &str, param: &str) -> String {
        format!(
            "{id_column} IN (SELECT rowid FROM search.events_fts WHERE events_fts MATCH {param})"
        )
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
            "SELECT id FROM events WHERE {} AND body IS NOT NULL ORDER BY id",
            matching("id", "?")
        ))
        .unwrap()
        .query_map([q.expression()], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    fn fts_rows(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM search.events_fts_docsize", [], |r| {
            r.get(0)
        })
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
        conn.index_all();
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
        conn.index_all();
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
    fn many_words(conn: &mut Fixture, events: usize, words: usize) {
        let tx = conn.transaction().unwrap();
        for i in 0..events {
            let body: Vec<String> = (0..words).map(|w| format!("zzz{i}x{w}")).collect();
            add(&tx, body.join(" ").as_bytes());
        }
        tx.commit().unwrap();
        conn.index_all();
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
        conn.index_all();
        assert!(search(&conn, "binary").is_empty());
        assert_eq!(search(&conn, "early"), [long_id]);
        assert!(search(&conn, "late").is_empty());
        assert_eq!(fts_rows(&conn), 1, "the binary body {binary} is not in it");
    }
}
