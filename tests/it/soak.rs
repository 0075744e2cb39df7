//! `kill -9` of the real binary at random moments under mixed load, many
//! times over, on one database: concurrent clients post to a `github` and
//! a `stripe` source, both deliver to a downstream in this test (which
//! answers 500 to some first attempts, so retries are always in flight),
//! and the GitHub source's catch-up asks a fake GitHub API to redeliver
//! deliveries that failed while hookbox was down (the fake then POSTs
//! them to hookbox, as GitHub does).
//!
//! After the last kill a clean run lets dispatch and catch-up drain, then
//! stops with SIGTERM. The promises checked: every event answered 2xx is
//! stored exactly once; every one of them, and every delivery the fake
//! redelivered, reached the downstream at least once under one stable
//! `webhook-id`; nothing is left pending; `PRAGMA integrity_check` is ok.
//!
//! The kill moments come from a seeded RNG; the seed is printed and
//! `HOOKBOX_SOAK_SEED` replays it. CI runs [`CI_CYCLES`] cycles; the soak
//! is `HOOKBOX_SOAK_CYCLES=200 cargo test --test it soak -- --nocapture`.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use rusqlite::{Connection, OpenFlags};
use tokio::task::JoinHandle;

use crate::catchup::fake::{Attempt, BASE_ID, Fake, HOOK_ID, TOKEN};
use crate::helpers::*;
use crate::load::{Load, Traffic};

/// Kill cycles in CI (the whole test stays well under a minute on two
/// cores); `HOOKBOX_SOAK_CYCLES` sets another number.
const CI_CYCLES: usize = 8;
/// Concurrent clients, each alternating between the two sources.
const CLIENTS: usize = 6;
/// Deliveries GitHub "failed" while hookbox was down, added per cycle.
const MISSED_PER_CYCLE: usize = 2;
/// Each run is killed this long after it became ready (uniform, ms).
const KILL_AFTER_MS: std::ops::Range<u64> = 20..1500;
/// The final clean run fails if it goes this long without delivering
/// anything more (a long soak leaves a backlog of tens of thousands).
const STALL: Duration = Duration::from_secs(30);

const STRIPE_SECRET: &str = "whsec_soak_stripe_secret";

fn cycles() -> usize {
    match std::env::var("HOOKBOX_SOAK_CYCLES") {
        Ok(n) => n.parse().expect("HOOKBOX_SOAK_CYCLES is a number"),
        Err(_) => CI_CYCLES,
    }
}

fn seed() -> u64 {
    match std::env::var("HOOKBOX_SOAK_SEED") {
        Ok(s) => s.parse().expect("HOOKBOX_SOAK_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

fn sources(downstream: &str, fake: &str) -> String {
    let deliver = format!(
        "[sources.deliver]\nurl = \"{downstream}\"\nsigning_secret = \"{SIGNING_SECRET}\"\n\
         timeout = \"2s\"\nmax_attempts = 1000\nbackoff_base = \"50ms\"\nbackoff_cap = \"300ms\"\n\
         concurrency = 16\n"
    );
    format!(
        "[[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n{deliver}\n\
         [sources.github_redelivery]\nrepo = \"acme/shop\"\nhook_id = {HOOK_ID}\ntoken = \"{TOKEN}\"\n\
         api_url = \"{fake}\"\npace = \"5ms\"\ninterval = \"1s\"\n\n\
         [[sources]]\nname = \"stripe\"\nkind = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n{deliver}"
    )
}

/// `(source, delivery id)`.
type Key = (String, String);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_kill_9_at_random_moments_under_ingest_dispatch_and_catch_up_loses_nothing() {
    let started = Instant::now();
    let cycles = cycles();
    let seed = seed();
    eprintln!(
        "soak: {cycles} cycles, seed {seed} (HOOKBOX_SOAK_SEED={seed} replays the kill moments)"
    );
    let mut rng = fastrand::Rng::with_seed(seed);

    let down = Sink::start().await;
    let fake = Fake::start(Vec::new()).await;
    fake.set_per_page(100);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let sources = sources(&down.url(), &fake.url());

    let mut acked: HashSet<Key> = HashSet::new();
    let mut missed: Vec<String> = Vec::new();
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    for cycle in 0..cycles {
        // What GitHub failed to deliver while hookbox was down.
        for k in 0..MISSED_PER_CYCLE {
            let guid = format!("missed-{cycle}-{k}");
            let id = BASE_ID / 2 + missed.len() as i64;
            fake.add(Attempt::new(id, &guid, now_secs() - rng.i64(0..3), false));
            missed.push(guid);
        }
        let mut server = spawn(dir.path(), &db, &sources, cycle, &fake).await;
        let load = Load::start(server.addr, &format!("c{cycle}"), CLIENTS, EVENTS);
        let after = Duration::from_millis(rng.u64(KILL_AFTER_MS));
        tokio::time::sleep(after).await;
        let status = server.kill9();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "{status:?}"
        );
        let report = load.stop().await;
        eprintln!(
            "cycle {cycle}: killed {after:?} after ready; {} acknowledged, {} client errors; {:?} in",
            report.acked.len(),
            report.errors,
            started.elapsed()
        );
        for (status, n) in report.statuses {
            *statuses.entry(status).or_default() += n;
        }
        acked.extend(report.acked.into_iter().map(|a| a.key));
        drop(server);
    }
    let unexpected: Vec<_> = statuses
        .keys()
        .filter(|s| !matches!(s, 202 | 503))
        .collect();
    assert!(
        unexpected.is_empty(),
        "distinct ids are answered 202 (or 503 when saturated): {statuses:?}"
    );

    // The clean run: everything acknowledged gets delivered, and catch-up
    // brings in every delivery GitHub still lists as failed.
    let mut server = spawn(dir.path(), &db, &sources, cycles, &fake).await;
    let drain = Instant::now();
    let mut progress = (i64::MAX, Instant::now());
    let mut wanted: HashSet<Key> = acked.clone();
    wanted.extend(missed.iter().map(|g| ("github".to_owned(), g.clone())));
    loop {
        let missing = down.not_delivered(&wanted);
        let pending = count(
            &db,
            &format!("SELECT count(*) FROM events WHERE {STATE} <> 'delivered'"),
        );
        if missing.is_empty() && pending == 0 {
            break;
        }
        if progress.1.elapsed() >= STALL {
            diagnose(&db, &fake, &missing);
        }
        if pending < progress.0 {
            progress = (pending, Instant::now());
        }
        assert!(
            progress.1.elapsed() < STALL,
            "no progress for {STALL:?} after {:?} of a clean run: {pending} events not delivered; \
             {} wanted keys never reached the downstream, e.g. {:?}; seed {seed}",
            drain.elapsed(),
            missing.len(),
            missing.iter().take(10).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "soak: the clean run delivered the backlog in {:?}",
        drain.elapsed()
    );
    let status = server.terminate(Duration::from_secs(20)).await;
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM after the drain: {status:?}"
    );
    drop(server);

    let conn = Connection::open(&db).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let stored: HashMap<Key, (i64, String)> = conn
        .prepare("SELECT source, delivery_id, count(*), min(origin) FROM events GROUP BY source, delivery_id")
        .unwrap()
        .query_map([], |r| Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?))))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let lost: Vec<&Key> = acked.iter().filter(|k| !stored.contains_key(*k)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged events are not stored, e.g. {:?}; seed {seed}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    let twice: Vec<_> = stored.iter().filter(|(_, (n, _))| *n != 1).collect();
    assert!(twice.is_empty(), "stored more than once: {twice:?}");
    for guid in &missed {
        let key = ("github".to_owned(), guid.clone());
        assert_eq!(
            stored.get(&key).map(|(n, origin)| (*n, origin.as_str())),
            Some((1, "push")),
            "{guid}, which GitHub lists as failed, came in once through a redelivery"
        );
    }
    down.assert_stable_webhook_ids();
    let not_acked = stored.len() - acked.len() - missed.len();
    eprintln!(
        "soak: {cycles} kill -9 cycles, {} events acknowledged to clients + {} redelivered by catch-up, \
         {not_acked} stored but cut off before their answer; lost 0, duplicated 0; \
         {} downstream requests ({} failed on purpose); {} redeliveries asked; \
         {:?}",
        acked.len(),
        missed.len(),
        down.requests(),
        down.refused(),
        fake.posts().len(),
        started.elapsed()
    );
}

/// Starts hookbox, the fake GitHub redelivering to it from the start (its
/// start-up catch-up pass may ask at once).
async fn spawn(dir: &Path, db: &Path, sources: &str, run: usize, fake: &Fake) -> ChildServer {
    ChildServer::spawn_ready_with(dir, db, sources, "", run, &[], |addr| {
        fake.redeliver_to(format!("http://{addr}/hooks/github"), GITHUB_SECRET)
    })
    .await
}

/// What the database and the fake GitHub know of keys that never arrived.
fn diagnose(db: &Path, fake: &Fake, missing: &[Key]) {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    for (source, delivery) in missing.iter().take(5) {
        let row: Option<(i64, String, String, i64)> = conn
            .query_row(
                &format!("SELECT id, {STATE}, origin, attempts FROM events WHERE source = ?1 AND delivery_id = ?2"),
                [source, delivery],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .ok();
        let asked: Vec<String> = conn
            .prepare("SELECT * FROM redelivery_requests WHERE guid = ?1")
            .and_then(|mut st| {
                let n = st.column_count();
                st.query_map([delivery], |r| {
                    Ok((0..n)
                        .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                        .collect::<Vec<_>>()
                        .join(","))
                })?
                .collect()
            })
            .unwrap_or_else(|e| vec![e.to_string()]);
        let attempts: Vec<_> = fake
            .inner
            .lock()
            .unwrap()
            .attempts
            .iter()
            .filter(|a| a.guid == *delivery)
            .map(|a| (a.id, a.at, a.status.clone()))
            .collect();
        eprintln!("{source}/{delivery}: row {row:?}; fake attempts {attempts:?}; asked {asked:?}");
    }
}

fn count(db: &Path, sql: &str) -> i64 {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

// ---------------------------------------------------------- downstream ---

/// The user's endpoint: counts requests per `webhook-id` and remembers
/// which `(source, delivery id)` each id was for and whether one was
/// answered 2xx. Small state, so a long soak does not grow it much.
struct Sink {
    addr: SocketAddr,
    seen: Arc<Mutex<SinkState>>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct SinkState {
    /// webhook-id → key, requests, answered 2xx.
    ids: HashMap<String, (Key, usize, bool)>,
    /// Keys answered 2xx.
    delivered: HashSet<Key>,
    /// Keys seen under more than one webhook-id.
    unstable: Vec<String>,
    keys: HashMap<Key, String>,
    requests: usize,
    refused: usize,
}

/// Deterministic per key: a quarter of the events fail their first
/// attempt with a 500, a tenth of attempts are held a moment (so kills
/// catch deliveries in flight).
fn fails_first(delivery: &str) -> bool {
    delivery.bytes().map(usize::from).sum::<usize>() % 4 == 0
}

fn held(delivery: &str) -> bool {
    delivery.bytes().map(usize::from).sum::<usize>() % 10 == 1
}

async fn sink(State(seen): State<Arc<Mutex<SinkState>>>, headers: HeaderMap) -> StatusCode {
    let get = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let (id, key) = (
        get("webhook-id"),
        (get("x-hookbox-source"), get("x-hookbox-delivery-id")),
    );
    let status = {
        let mut s = seen.lock().unwrap();
        s.requests += 1;
        if let Some(other) = s.keys.get(&key)
            && *other != id
        {
            let text = format!("{key:?}: {other} and {id}");
            s.unstable.push(text);
        }
        s.keys.insert(key.clone(), id.clone());
        let entry = s.ids.entry(id).or_insert((key.clone(), 0, false));
        entry.1 += 1;
        let nth = entry.1;
        let status = if nth == 1 && fails_first(&key.1) {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::NO_CONTENT
        };
        if status.is_success() {
            entry.2 = true;
            s.delivered.insert(key.clone());
        } else {
            s.refused += 1;
        }
        status
    };
    if held(&key.1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    status
}

impl Sink {
    async fn start() -> Sink {
        let seen = Arc::new(Mutex::new(SinkState::default()));
        let router = Router::new().fallback(sink).with_state(seen.clone());
        let (addr, task) = serve_loopback(|_| router).await;
        Sink { addr, seen, task }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// The keys of `wanted` never answered 2xx here.
    fn not_delivered(&self, wanted: &HashSet<Key>) -> Vec<Key> {
        let s = self.seen.lock().unwrap();
        wanted
            .iter()
            .filter(|k| !s.delivered.contains(*k))
            .cloned()
            .collect()
    }

    /// Every event came under one `webhook-id`, whatever the restarts,
    /// and it is the one hookbox derives from its source and delivery id.
    fn assert_stable_webhook_ids(&self) {
        let s = self.seen.lock().unwrap();
        assert!(s.unstable.is_empty(), "{:?}", s.unstable);
        for (id, ((source, delivery), _, _)) in &s.ids {
            assert_eq!(
                *id,
                hookbox::delivery::push::sign::message_id(source, delivery),
                "{source}/{delivery}"
            );
        }
    }

    fn requests(&self) -> usize {
        self.seen.lock().unwrap().requests
    }

    fn refused(&self) -> usize {
        self.seen.lock().unwrap().refused
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------- load ---

/// Distinct events, alternating between the sources.
const EVENTS: Traffic<Key> = Traffic {
    request: event,
    read_row: false,
};

/// The `n`-th request of the client `prefix`: a Stripe event, then a
/// GitHub delivery, and so on.
fn event(
    client: &reqwest::Client,
    addr: SocketAddr,
    prefix: &str,
    n: usize,
) -> (Key, reqwest::RequestBuilder) {
    let n = n + 1;
    if n.is_multiple_of(2) {
        let delivery = format!("{prefix}-{n}");
        let body = format!(
            r#"{{"delivery":"{delivery}","pad":"{}"}}"#,
            "x".repeat(n % 700)
        );
        let url = format!("http://{addr}/hooks/github");
        let request = github_request(client, &url, &delivery, body.as_bytes());
        (("github".to_owned(), delivery), request)
    } else {
        let id = format!("evt_{prefix}_{n}");
        let body = format!(
            r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"object":{{"id":"in_{n}"}}}}}}"#
        );
        let t = now_secs();
        let mut signed = format!("{t}.").into_bytes();
        signed.extend_from_slice(body.as_bytes());
        let sig = hex::encode(hmac_sha256(STRIPE_SECRET.as_bytes(), &signed));
        let request = client
            .post(format!("http://{addr}/hooks/stripe"))
            .header("content-type", "application/json")
            .header("stripe-signature", format!("t={t},v1={sig}"))
            .body(body);
        (("stripe".to_owned(), id), request)
    }
}
