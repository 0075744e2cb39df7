//! Refused requests on `/hooks/*`: the record, the bounded buffer the
//! receive path pushes into, and the bounded table the writer keeps.
//!
//! A refusal must never cost valid traffic anything, even when a flood of
//! forged requests refuses thousands a second. So the receive path only
//! does [`RejectionQueue::push`]: a `try_send` into a bounded channel that
//! drops (and counts, `hookbox_rejections_dropped_total`) when full. The
//! writer thread owns the other end and flushes them in chunks of
//! [`FLUSH_CHUNK`], each its own transaction, when no command waits (at
//! most once per [`FLUSH_EVERY`]; it waits for commands with that timeout),
//! or between groups once they have waited [`super::writer`]'s deferral
//! limit, so ingest always goes first and never gives up a queue slot. Each chunk trims the table to the newest
//! [`KEEP`] rows by id: ids only grow and the newest row is never deleted,
//! so `id <= max - KEEP` is exactly the overflow, found in the primary key.
//!
//! Repeats fold: a refusal with the source, client, status and reason of
//! a row begun less than [`FOLD_WINDOW_MS`] earlier adds one to that
//! row's `repeats` and moves its `last_at` instead of writing a row
//! ([`Folds`]). A flood from a few addresses is then a few rows a second
//! with their counts, not thousands that push every earlier refusal out
//! of the table, and much less for the writer to write.
//!
//! What a record holds is chosen so it can be shown to anyone who may see
//! the dashboard: the header *names* (never a value: signatures and tokens
//! live in values), the body's size and content type (never the body), and
//! non-secret facts behind the reason ([`Detail`]). The receive side builds
//! it (`crate::ingress::receive::refusal`); this module stores and lists it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context;
use prometheus_client::metrics::counter::Counter;
use rusqlite::{Connection, Transaction, params};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Rows the table keeps (DESIGN.md "Admin": the newest 10,000).
pub const KEEP: i64 = 10_000;

/// Records the buffer holds before it drops: more than the table keeps
/// would be trimmed at once anyway.
pub const BUFFER: usize = 10_000;

/// Records per flush transaction: short (about a millisecond), since an
/// insert arriving meanwhile waits for the chunk to commit.
pub const FLUSH_CHUNK: usize = 256;

/// How often an idle writer flushes waiting records.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// How long a row keeps taking the repeats of its refusal, from its
/// first one, in unix ms.
pub const FOLD_WINDOW_MS: i64 = 10_000;

/// Most rows [`Folds`] remembers; past it, rows whose window is over are
/// forgotten, or all of them if none is.
const FOLD_ROWS: usize = 1024;

/// Longest text kept of anything the client chose (the source name in the
/// URL, the content type, each header name).
pub const MAX_TEXT: usize = 100;

/// Most header names kept of one request.
pub const MAX_HEADER_NAMES: usize = 64;

/// Facts behind a reason, for the dashboard's explanation. None of them
/// is secret: counts, ages, limits, and the edge's own finer reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detail {
    /// Secrets the source had configured (a signature matched none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<u32>,
    /// How old the signed timestamp was, in seconds; negative: from the
    /// future.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_secs: Option<i64>,
    /// The source's timestamp tolerance, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance_secs: Option<u64>,
    /// The source's body limit, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u64>,
    /// The `Retry-After` of a 429.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u64>,
    /// `server.body_timeout`, in seconds, for a 408.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_timeout_secs: Option<u64>,
    /// The edge's or the store's finer reason, where the answer's reason
    /// covers several (`not_allowed` / `set_unavailable` behind a 403;
    /// `memory` / `client_bytes` / `client_bodies` / `store` behind a 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

impl Detail {
    fn is_empty(&self) -> bool {
        *self == Detail::default()
    }
}

/// One refused request.
#[derive(Debug, Clone)]
pub struct Rejection {
    /// Unix ms.
    pub at: i64,
    /// The source named in the URL, cut to [`MAX_TEXT`]; it may name no
    /// configured source (a 404).
    pub source: String,
    /// `None` when a trusted proxy's header named no client.
    pub client: Option<IpAddr>,
    pub status: u16,
    /// The reason the answer's body carries.
    pub reason: &'static str,
    /// Lowercase, in the order sent, without repeats.
    pub header_names: Vec<String>,
    /// Bytes read; or, when refused before the body was read, the
    /// `Content-Length` declared.
    pub body_bytes: Option<u64>,
    pub content_type: Option<String>,
    pub detail: Detail,
}

/// The receive path's end of the buffer: cheap to clone, never waits.
#[derive(Clone, Debug)]
pub struct RejectionQueue {
    tx: mpsc::Sender<Rejection>,
    dropped: Counter,
}

impl RejectionQueue {
    /// A queue of `capacity` records and the writer's end of it.
    pub fn new(capacity: usize, dropped: Counter) -> (Self, mpsc::Receiver<Rejection>) {
        let (tx, rx) = mpsc::channel(capacity);
        (RejectionQueue { tx, dropped }, rx)
    }

    /// Buffers `rejection`, or drops and counts it when the buffer is
    /// full (or the writer has stopped).
    pub fn push(&self, rejection: Rejection) {
        if self.tx.try_send(rejection).is_err() {
            self.dropped.inc();
        }
    }

    /// Counts records lost after leaving the buffer (a flush that failed).
    pub(super) fn lost(&self, n: usize) {
        self.dropped.inc_by(n as u64);
    }
}

/// What makes two refusals the same for folding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FoldKey {
    source: String,
    client: Option<IpAddr>,
    status: u16,
    reason: &'static str,
}

impl FoldKey {
    fn of(r: &Rejection) -> FoldKey {
        FoldKey {
            source: r.source.clone(),
            client: r.client,
            status: r.status,
            reason: r.reason,
        }
    }
}

/// The rows later refusals may fold into, remembered by the writer (the
/// only connection that adds rows). A restart forgets them: the first
/// refusal after it begins a row of its own.
#[derive(Debug, Default)]
pub struct Folds {
    /// Each key's newest row: its id and its first refusal's time.
    rows: HashMap<FoldKey, (i64, i64)>,
    /// The newest id written: a row more than `keep` older is trimmed.
    newest: i64,
}

impl Folds {
    /// The row a refusal of `key` at `at` folds into: one whose window is
    /// open and which stays among the newest `keep` rows after this chunk
    /// (`keep` less the chunk's rows, so that the chunk's own trim cannot
    /// take a row it just added to).
    fn row_for(&self, key: &FoldKey, at: i64, keep: i64) -> Option<i64> {
        let &(id, since) = self.rows.get(key)?;
        let open = (since..since + FOLD_WINDOW_MS).contains(&at);
        (open && id > self.newest - keep).then_some(id)
    }

    fn began(&mut self, key: FoldKey, id: i64, at: i64) {
        if self.rows.len() >= FOLD_ROWS {
            self.rows
                .retain(|_, &mut (_, since)| at - since < FOLD_WINDOW_MS);
            if self.rows.len() >= FOLD_ROWS {
                self.rows.clear();
            }
        }
        self.rows.insert(key, (id, at));
        self.newest = id;
    }
}

/// Writes `rows`, each as a row of its own or folded into an earlier one
/// ([`Folds`]), then trims the table to the newest `keep`.
pub(super) fn insert(
    tx: &Transaction,
    rows: &[Rejection],
    keep: i64,
    folds: &mut Folds,
) -> anyhow::Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO rejections
           (at, source, client, status, reason, header_names, body_bytes, content_type, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    // Repeats per row, with the last one's time: one update each.
    let mut repeats: HashMap<i64, (i64, i64)> = HashMap::new();
    let survives = keep - i64::try_from(rows.len()).unwrap_or(i64::MAX);
    for r in rows {
        let key = FoldKey::of(r);
        if let Some(id) = folds.row_for(&key, r.at, survives) {
            let (n, last) = repeats.entry(id).or_insert((0, r.at));
            *n += 1;
            *last = (*last).max(r.at);
            continue;
        }
        let names = serde_json::to_string(&r.header_names).context("encoding header names")?;
        let detail = if r.detail.is_empty() {
            None
        } else {
            Some(serde_json::to_string(&r.detail).context("encoding a rejection's detail")?)
        };
        stmt.execute(params![
            r.at,
            r.source,
            r.client.map(|c| c.to_string()),
            r.status,
            r.reason,
            names,
            r.body_bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX)),
            r.content_type,
            detail,
        ])
        .context("recording a rejection")?;
        folds.began(key, tx.last_insert_rowid(), r.at);
    }
    let mut fold = tx.prepare_cached(
        "UPDATE rejections SET repeats = repeats + ?2, last_at = max(coalesce(last_at, at), ?3)
         WHERE id = ?1",
    )?;
    for (id, (n, last)) in repeats {
        fold.execute(params![id, n, last])
            .context("folding repeated rejections")?;
    }
    tx.prepare_cached("DELETE FROM rejections WHERE id <= (SELECT max(id) FROM rejections) - ?1")?
        .execute([keep])
        .context("trimming the rejections")?;
    Ok(())
}

/// Which rejections to list.
#[derive(Debug, Clone, Default)]
pub struct RejectionFilter {
    pub source: Option<String>,
    pub limit: usize,
    /// Only rows older than this id (the previous page's `next_before`).
    pub before: Option<i64>,
}

/// A rejection as the API and the dashboard show it.
#[derive(Debug, Clone, Serialize)]
pub struct RejectionRow {
    pub id: i64,
    /// Unix ms.
    pub at: i64,
    pub source: String,
    pub client: Option<String>,
    pub status: u16,
    pub reason: String,
    pub header_names: Vec<String>,
    pub body_bytes: Option<i64>,
    pub content_type: Option<String>,
    pub detail: Detail,
    /// Later refusals folded into this row: the same source, client,
    /// status and reason within [`FOLD_WINDOW_MS`] of `at`.
    pub repeats: i64,
    /// Unix ms of the last of them; `None` without repeats.
    pub last_at: Option<i64>,
}

/// One page, newest first; pass `next_before` back as `before`.
#[derive(Debug, Clone, Serialize)]
pub struct RejectionPage {
    pub rejections: Vec<RejectionRow>,
    pub next_before: Option<i64>,
}

/// The newest `filter.limit` rejections matching `filter`, walking the
/// primary key (or `(source, id)`) backwards.
pub fn list(conn: &Connection, filter: &RejectionFilter) -> anyhow::Result<RejectionPage> {
    let mut rows = conn
        .prepare_cached(
            "SELECT id, at, source, client, status, reason, header_names, body_bytes,
                    content_type, detail, repeats, last_at
             FROM rejections
             WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR id < ?2)
             ORDER BY id DESC LIMIT ?3",
        )?
        .query_map(
            params![filter.source, filter.before, filter.limit as i64 + 1],
            |r| {
                let names: String = r.get(6)?;
                let detail: Option<String> = r.get(9)?;
                Ok(RejectionRow {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    source: r.get(2)?,
                    client: r.get(3)?,
                    status: r.get(4)?,
                    reason: r.get(5)?,
                    // Written by `insert` only; a row that does not parse
                    // shows without the part that does not.
                    header_names: serde_json::from_str(&names).unwrap_or_default(),
                    body_bytes: r.get(7)?,
                    content_type: r.get(8)?,
                    detail: detail
                        .and_then(|d| serde_json::from_str(&d).ok())
                        .unwrap_or_default(),
                    repeats: r.get(10)?,
                    last_at: r.get(11)?,
                })
            },
        )?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("listing rejections")?;
    let next_before = if rows.len() > filter.limit {
        rows.truncate(filter.limit);
        rows.last().map(|r| r.id)
    } else {
        None
    };
    Ok(RejectionPage {
        rejections: rows,
        next_before,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::db;

    /// Refusal `n`, at `n` ms, from a client of its own (so it folds
    /// into no other).
    fn rejection(n: i64, source: &str) -> Rejection {
        Rejection {
            at: n,
            source: source.to_owned(),
            client: Some(IpAddr::from(std::net::Ipv6Addr::from(n as u128))),
            status: 401,
            reason: "invalid_signature",
            header_names: vec!["content-type".into(), "x-hub-signature-256".into()],
            body_bytes: Some(12),
            content_type: Some("application/json".into()),
            detail: Detail {
                secrets: Some(2),
                ..Detail::default()
            },
        }
    }

    fn flush(conn: &mut Connection, rows: &[Rejection], keep: i64) {
        flush_folding(conn, rows, keep, &mut Folds::default());
    }

    fn flush_folding(conn: &mut Connection, rows: &[Rejection], keep: i64, folds: &mut Folds) {
        let tx = conn.transaction().unwrap();
        insert(&tx, rows, keep, folds).unwrap();
        tx.commit().unwrap();
    }

    /// `(at, client, repeats, last_at)` of every row, oldest first.
    fn folded(conn: &Connection) -> Vec<(i64, String, i64, Option<i64>)> {
        conn.prepare("SELECT at, client, repeats, last_at FROM rejections ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn repeats_fold_into_the_row_of_their_first_within_its_window() {
        let mut conn = db();
        let mut folds = Folds::default();
        let from = |at: i64, client: [u8; 4]| Rejection {
            at,
            client: Some(IpAddr::from(client)),
            ..rejection(0, "github")
        };
        let (a, b) = ([192, 0, 2, 1], [192, 0, 2, 2]);
        // Across chunks (flushes) too: the writer remembers the rows.
        flush_folding(
            &mut conn,
            &[from(1_000, a), from(1_001, a), from(1_002, b)],
            KEEP,
            &mut folds,
        );
        flush_folding(
            &mut conn,
            &[from(5_000, a), from(10_999, a)],
            KEEP,
            &mut folds,
        );
        // Past a's window: a row of its own; another status or reason too.
        let mut other_reason = from(11_002, b);
        other_reason.reason = "timestamp_out_of_tolerance";
        flush_folding(
            &mut conn,
            &[from(11_000, a), from(11_001, b), other_reason],
            KEEP,
            &mut folds,
        );
        assert_eq!(
            folded(&conn),
            [
                (1_000, "192.0.2.1".into(), 3, Some(10_999)),
                (1_002, "192.0.2.2".into(), 1, Some(11_001)),
                (11_000, "192.0.2.1".into(), 0, None),
                (11_002, "192.0.2.2".into(), 0, None),
            ]
        );
        // Every refusal is in a row or a row's count.
        let total: i64 = conn
            .query_row("SELECT sum(1 + repeats) FROM rejections", [], |r| r.get(0))
            .unwrap();
        assert_eq!(total, 8);
        let listed = list(
            &conn,
            &RejectionFilter {
                limit: 10,
                ..RejectionFilter::default()
            },
        )
        .unwrap();
        assert_eq!(listed.rejections[3].repeats, 3);
        assert_eq!(listed.rejections[3].last_at, Some(10_999));
    }

    #[test]
    fn a_repeat_never_folds_into_a_row_its_own_chunk_trims() {
        let mut conn = db();
        let mut folds = Folds::default();
        let mut first = rejection(1, "github");
        first.client = Some(IpAddr::from([192, 0, 2, 9]));
        flush_folding(&mut conn, std::slice::from_ref(&first), 4, &mut folds);
        let others: Vec<_> = (2..4).map(|n| rejection(n, "github")).collect();
        flush_folding(&mut conn, &others, 4, &mut folds);
        // Row 1 is still kept, but the two new rows of this chunk trim
        // it: the repeat must take a row of its own, or its count would
        // go with row 1.
        let mut again = first.clone();
        again.at = 4;
        let chunk = [again, rejection(5, "github"), rejection(6, "github")];
        flush_folding(&mut conn, &chunk, 4, &mut folds);
        let rows = folded(&conn);
        assert_eq!(rows.len(), 4);
        assert!(rows.contains(&(4, "192.0.2.9".into(), 0, None)), "{rows:?}");
    }

    #[test]
    fn a_row_the_bound_trimmed_takes_no_more_repeats() {
        let mut conn = db();
        let mut folds = Folds::default();
        let mut first = rejection(1, "github");
        first.client = Some(IpAddr::from([192, 0, 2, 9]));
        flush_folding(&mut conn, std::slice::from_ref(&first), 3, &mut folds);
        let others: Vec<_> = (2..5).map(|n| rejection(n, "github")).collect();
        flush_folding(&mut conn, &others, 3, &mut folds);
        // The first row is gone; its repeat begins a row of its own.
        let mut again = first.clone();
        again.at = 5;
        flush_folding(&mut conn, &[again], 3, &mut folds);
        let rows = folded(&conn);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2], (5, "192.0.2.9".into(), 0, None));
    }

    #[test]
    fn the_table_keeps_the_newest_rows_up_to_its_bound() {
        let mut conn = db();
        for chunk in 0..7 {
            let rows: Vec<_> = (0..40).map(|i| rejection(chunk * 40 + i, "s")).collect();
            flush(&mut conn, &rows, 100);
        }
        let (n, oldest, newest): (i64, i64, i64) = conn
            .query_row(
                "SELECT count(*), min(at), max(at) FROM rejections",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((n, oldest, newest), (100, 180, 279));
        // The trim finds its rows by the primary key, not by a scan.
        let plan: String = conn
            .query_row(
                "EXPLAIN QUERY PLAN DELETE FROM rejections
                 WHERE id <= (SELECT max(id) FROM rejections) - 100",
                [],
                |r| r.get(3),
            )
            .unwrap();
        assert!(plan.contains("INTEGER PRIMARY KEY"), "{plan}");
    }

    #[test]
    fn pages_go_newest_first_and_filter_by_source() {
        let mut conn = db();
        let rows: Vec<_> = (0..5)
            .map(|i| rejection(i, if i % 2 == 0 { "a" } else { "b" }))
            .collect();
        flush(&mut conn, &rows, KEEP);
        let page = |source: Option<&str>, before| {
            list(
                &conn,
                &RejectionFilter {
                    source: source.map(str::to_owned),
                    limit: 2,
                    before,
                },
            )
            .unwrap()
        };
        let first = page(None, None);
        let at: Vec<i64> = first.rejections.iter().map(|r| r.at).collect();
        assert_eq!(at, [4, 3]);
        let second = page(None, first.next_before);
        assert_eq!(
            second.rejections.iter().map(|r| r.at).collect::<Vec<_>>(),
            [2, 1]
        );
        let last = page(None, second.next_before);
        assert_eq!(last.rejections.len(), 1);
        assert_eq!(last.next_before, None);
        let a = page(Some("a"), None);
        assert!(a.rejections.iter().all(|r| r.source == "a"));
        assert_eq!(a.rejections[0].detail.secrets, Some(2));
        assert_eq!(a.rejections[0].header_names[1], "x-hub-signature-256");
    }
}
