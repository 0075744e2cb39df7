//! `--outage`: the destination goes down, a backlog builds, the destination
//! comes back. What issue 20 promises, measured at the downstream.
//!
//! The bench's GitHub source gets an `order_key` (`/hookbox_bench/key`,
//! `--order-keys` keys, so per-key order matters) and one url destination at
//! the local downstream, with default backoff (base 30 s, cap 1 h),
//! concurrency and `max_attempts`. The downstream answers 503 (without
//! `Retry-After`: a plain failure, not a request to hold off) from the
//! start; `--outage-events` signed events are posted over `--connections`
//! connections; `--outage-secs` after the first post the downstream
//! switches to 204. The run then waits (up to `--recovery-timeout` after
//! the switch) until every event has been answered 2xx and the database
//! holds no pending delivery, stops the server and joins what the
//! downstream saw with the database.
//!
//! Two modes, run side by side by `bench/run.sh`:
//!
//! * `after` (`outage`): the breaker at its default (`breaker_failures`
//!   10), `breaker_probe` `--probe` (5 s in the bench instead of the 30 s
//!   default, to keep the run short: the first probe after the switch
//!   comes sooner, nothing else changes), and `rate` `--rate`.
//! * `before` (`outage_before`): `breaker_failures = 0` and no `rate`, as
//!   hookbox was before either existed: each delivery waits out its own
//!   backoff. No rate is the configuration those versions had, and it is
//!   the kindest to them for the time to deliver (nothing spaces their
//!   attempts); its peak shows the stampede a rate prevents.
//!
//! Figures: attempts the dead service got, the first 2xx after the switch
//! (the successful probe), the time from it to the last event's first 2xx,
//! the highest number of requests in any one second (a sliding 1 s window
//! and whole seconds counted from the switch) against the rate, per-key
//! order among the 2xx arrivals, duplicates, and the deliveries `dead`.
//!
//! Checks (a failed one fails the run): no delivery `dead`; per-key order
//! kept; signatures valid; the server exits 0 after SIGTERM; every event
//! stored. `after` also: every event delivered and no pending delivery
//! left; the backlog delivered within [`BACKLOG_WITHIN`] of the first
//! successful probe; no one-second window above the rate plus
//! [`peak_allowed`]'s tolerance. `before` is reported, not held to those:
//! it is the figure to compare with.

use anyhow::{Context, Result, bail};
use hyper::StatusCode;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::deliver;
use crate::downstream::{Check, Downstream, Seen, whsec};
use crate::load::{Receipt, Receipts};
use crate::payload::{KEY_POINTER, Parity, Signer};
use crate::pull::fill::fill;
use crate::pull::report::{Checks, log_warnings};
use crate::server::{
    Deliver, Protected, SECRET, Server, Tally, attempt_summary, count_events, open_read_only,
    per_destination,
};
use crate::{Args, ordered_json, pairs, round};

/// The target: the whole backlog within this long of the first
/// successful probe.
pub const BACKLOG_WITHIN: Duration = Duration::from_secs(30);

/// Storing the events gets this long before the run gives up.
const STORE_CAP: Duration = Duration::from_secs(120);

/// The window the peak is counted over.
const SECOND: Duration = Duration::from_secs(1);

/// Which side of the comparison a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The breaker and the rate on.
    After,
    /// `breaker_failures = 0`, no rate: as before issue 20.
    Before,
}

impl Mode {
    pub fn scenario(self) -> &'static str {
        match self {
            Mode::After => "outage",
            Mode::Before => "outage_before",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::After => "after",
            Mode::Before => "before",
        }
    }
}

/// A destination's `rate`, as the config takes it and per second.
#[derive(Clone, Debug, PartialEq)]
pub struct Rate {
    pub text: String,
    pub per_sec: f64,
}

/// Parses `--rate` as hookbox's config does: `N/s` or `N/m`, `N` a
/// positive whole number.
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let (n, unit) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected N/s or N/m"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: {n:?} is not a whole number"))?;
    if n == 0 {
        return Err(format!("{s:?}: the rate must be above 0"));
    }
    let per_sec = match unit.trim() {
        "s" => f64::from(n),
        "m" => f64::from(n) / 60.0,
        other => return Err(format!("{s:?}: unit {other:?} is not s or m")),
    };
    Ok(Rate {
        text: format!("{n}/{}", unit.trim()),
        per_sec,
    })
}

/// The most requests one second may hold at `rate` before the check
/// fails: the rate, plus 1 % and 2 requests. hookbox spaces attempt
/// *starts* evenly by its own clock; the downstream counts *arrivals*,
/// which trail the starts by a varying delay (the body read from the
/// database, the connection, two cores shared with the load generator),
/// so one start held back a few milliseconds arrives together with the
/// next on-time one, and a window's two edges can each catch one of
/// those. A limiter that let bursts through would overshoot by far more.
pub fn peak_allowed(rate: &Rate) -> u64 {
    (rate.per_sec * 1.01).floor() as u64 + 2
}

/// Runs one outage scenario; returns whether every check passed.
pub async fn run(args: &Args, mode: Mode, binary: &Path, nonce: u64) -> Result<bool> {
    let signer = Arc::new(Signer::new(SECRET.as_bytes(), nonce)?.with_keys(args.order_keys));
    let lanes = deliver::lanes(false, nonce);
    let [lane] = lanes.as_slice() else {
        bail!("expected one lane without routes");
    };
    let mut downstream =
        Downstream::start(vec![(lane.path.clone(), Check::Signed(lane.key.clone()))])?;
    // Down before the server starts: every attempt fails.
    downstream.set_status(StatusCode::SERVICE_UNAVAILABLE);
    let rate = match mode {
        Mode::After => args.rate.clone(),
        Mode::Before => None,
    };
    let config = Deliver::Protected(Protected {
        url: format!("http://{}{}", downstream.addr, lane.path),
        signing_secret: whsec(&lane.key),
        order_key: KEY_POINTER.to_owned(),
        rate: rate.as_ref().map(|r| r.text.clone()),
        breaker_failures: (mode == Mode::Before).then_some(0),
        breaker_probe: (mode == Mode::After).then(|| args.probe.clone()),
    });
    let (mut server, _) = Server::start(binary, &args.durability, !args.no_search, &config).await?;
    if args.keep {
        eprintln!("keeping {}", server.keep_dir().display());
    }

    let outage = Duration::from_secs_f64(args.outage_secs);
    let down_since = Instant::now();
    let stored = fill(
        server.public,
        Arc::clone(&signer),
        args.outage_events,
        args.connections,
        STORE_CAP,
    )
    .await
    .context("storing the events while the destination is down")?;
    let ingest = stored.wall;
    tokio::time::sleep_until((down_since + outage).into()).await;
    downstream.set_status(StatusCode::NO_CONTENT);
    let switched = Instant::now();

    // The drain wait of the delivery scenarios: every id seen 2xx, then no
    // pending row. The receipt times are not used here.
    let receipts = Receipts::default();
    for id in &stored.ids {
        receipts.record(
            id.clone(),
            Receipt {
                at: switched,
                parity: Parity::Even,
            },
        );
    }
    let drain = deliver::wait_for_drain(
        &downstream,
        &lanes,
        &receipts,
        &server.database,
        switched + Duration::from_secs_f64(args.recovery_timeout),
    )
    .await;
    let wait_ended = drain.ended;

    let exit = server
        .stop(Duration::from_secs_f64(args.stop_timeout))
        .await?;
    // Whatever arrived during the shutdown counts as well.
    downstream.stop();
    let events = read_events(&server.database)?;
    let rows = count_events(&server.database)?;
    let (deliveries, _) = per_destination(&server.database)?;
    let deliveries: Tally = deliveries.into_iter().map(|(_, s, n)| (s, n)).collect();
    let (attempts, attempt_errors) = attempt_summary(&server.database)?;
    let warnings = log_warnings(&server.log_text());

    let figures = downstream.with_seen(0, |seen| {
        Figures::compute(seen, &events, &stored.ids, switched, wait_ended)
    });
    let (bad_signatures, stray) = (
        downstream.with_seen(0, |s| s.bad_signature + s.body_errors + s.no_id),
        downstream.stray(),
    );
    let pending = deliver::count(&deliveries, "pending");
    let dead = deliver::count(&deliveries, "dead");
    let recovery_timeout = args.recovery_timeout;
    let delivered_all = figures.missing == 0 && drain.database_done.is_some();

    let secs = |d: Option<Duration>| d.map(|d| round(d.as_secs_f64(), 2));
    let peak_limit = rate.as_ref().map(peak_allowed);
    let (first_ok, backlog, recovered) = (
        secs(figures.first_ok),
        secs(figures.backlog),
        secs(figures.all_delivered),
    );
    let show = |v: Option<f64>| {
        v.map_or_else(
            || format!("not within {recovery_timeout} s"),
            |v| format!("{v} s"),
        )
    };
    println!(
        "{}: {} events, {} keys, down {} s, rate {}, breaker_failures {}, probe {} | stored in {:.2} s | attempts while down {} | first 2xx {} after the switch, all {} after it ({} after the first 2xx), delivered {} of {} by then | peak {} /s sliding, {} /s aligned (recovery: {} / {}){} | order broken {} ({} keys) | duplicates {} | dead {} pending {} | exit {:?} in {} ms",
        mode.scenario(),
        stored.ids.len(),
        args.order_keys,
        args.outage_secs,
        rate.as_ref().map_or("none", |r| r.text.as_str()),
        if mode == Mode::Before {
            "0"
        } else {
            "10 (default)"
        },
        if mode == Mode::After {
            args.probe.as_str()
        } else {
            "-"
        },
        ingest.as_secs_f64(),
        figures.while_down,
        show(first_ok),
        show(recovered),
        show(backlog),
        figures.delivered_by_cap,
        stored.ids.len(),
        figures.peak_sliding,
        figures.peak_aligned,
        figures.recovery_peak_sliding,
        figures.recovery_peak_aligned,
        peak_limit.map_or(String::new(), |p| format!(" (at most {p} allowed)")),
        figures.order_violations,
        figures.keys_out_of_order,
        figures.duplicates,
        dead,
        pending,
        exit.status.code(),
        exit.shutdown.as_millis(),
    );
    println!(
        "  database: deliveries {} | attempts {} | failures {} | server WARN/ERROR lines {warnings}",
        pairs(&deliveries),
        pairs(&attempts),
        pairs(&attempt_errors)
    );
    if ingest > outage {
        println!(
            "  note: storing the events took {:.1} s, longer than the {} s outage",
            ingest.as_secs_f64(),
            args.outage_secs
        );
    }

    let fields: Vec<(&str, Value)> = vec![
        ("scenario", json!(mode.scenario())),
        ("kind", json!("outage")),
        ("outage", json!(mode.name())),
        ("durability", json!(args.durability)),
        ("events", json!(stored.ids.len())),
        ("order_keys", json!(args.order_keys)),
        ("connections", json!(args.connections)),
        ("outage_secs", json!(args.outage_secs)),
        ("rate", json!(rate.as_ref().map(|r| r.text.clone()))),
        ("rate_per_sec", json!(rate.as_ref().map(|r| r.per_sec))),
        ("peak_allowed", json!(peak_limit)),
        (
            "breaker_failures",
            json!(if mode == Mode::Before { 0 } else { 10 }),
        ),
        (
            "breaker_probe",
            json!((mode == Mode::After).then(|| args.probe.clone())),
        ),
        ("recovery_timeout", json!(recovery_timeout)),
        ("ingest_secs", json!(round(ingest.as_secs_f64(), 3))),
        ("attempts_while_down", json!(figures.while_down)),
        ("first_ok_secs", json!(first_ok)),
        ("backlog_secs", json!(backlog)),
        ("recovered_secs", json!(recovered)),
        ("delivered_by_cap", json!(figures.delivered_by_cap)),
        ("backlog_per_sec", json!(figures.backlog_per_sec())),
        ("peak_sliding", json!(figures.peak_sliding)),
        ("peak_aligned", json!(figures.peak_aligned)),
        (
            "recovery_peak_sliding",
            json!(figures.recovery_peak_sliding),
        ),
        (
            "recovery_peak_aligned",
            json!(figures.recovery_peak_aligned),
        ),
        ("requests", json!(figures.requests)),
        ("order_violations", json!(figures.order_violations)),
        ("keys_out_of_order", json!(figures.keys_out_of_order)),
        ("duplicates", json!(figures.duplicates)),
        ("missing", json!(figures.missing)),
        ("dead", json!(dead)),
        ("pending", json!(pending)),
        ("rows", json!(rows)),
        ("bad_signatures", json!(bad_signatures)),
        ("stray", json!(stray)),
        ("server_log_warnings", json!(warnings)),
        ("exit_code", json!(exit.status.code())),
    ];
    let fields: Vec<(String, Value)> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    println!("{}", ordered_json(&fields));

    let posted = stored.ids.len() as u64;
    let mut checks = Checks::default();
    checks.expect(dead == 0, || {
        format!(
            "{dead} deliveries are dead after an outage of {} s",
            args.outage_secs
        )
    });
    checks.expect(rows == posted, || {
        format!("the database holds {rows} events, {posted} were stored")
    });
    checks.expect(figures.missing <= pending, || {
        format!(
            "{} events were never delivered and only {pending} deliveries are pending: lost",
            figures.missing
        )
    });
    checks.expect(figures.order_violations == 0, || {
        format!(
            "{} events of {} keys arrived (2xx) before an older event of their key",
            figures.order_violations, figures.keys_out_of_order
        )
    });
    checks.expect(bad_signatures == 0 && stray == 0, || {
        format!("{bad_signatures} requests failed the signature check, {stray} went elsewhere")
    });
    checks.expect(exit.status.code() == Some(0), || {
        format!(
            "the server exited with {:?} after SIGTERM (expected 0)",
            exit.status.code()
        )
    });
    if mode == Mode::After {
        checks.expect(delivered_all && pending == 0, || {
            format!(
                "{} of {posted} events not delivered within {recovery_timeout} s of the switch; {pending} deliveries pending",
                figures.missing
            )
        });
        if let Some(backlog) = figures.backlog {
            checks.expect(backlog <= BACKLOG_WITHIN, || {
                format!(
                    "the backlog took {:.2} s after the first successful probe (at most {} s)",
                    backlog.as_secs_f64(),
                    BACKLOG_WITHIN.as_secs()
                )
            });
        }
        if let (Some(rate), Some(limit)) = (&rate, peak_limit) {
            checks.expect(figures.peak_sliding <= limit, || {
                format!(
                    "{} requests reached the downstream within one second; rate {} allows {limit}",
                    figures.peak_sliding, rate.text
                )
            });
        }
    }
    if !checks.is_ok() {
        eprintln!("server log (tail):\n{}", server.log_tail(40));
    }
    Ok(checks.finish())
}

/// `(row id, delivery id, order key)` of every event, in arrival order.
type Events = Vec<(i64, String, Option<String>)>;

fn read_events(database: &Path) -> Result<Events> {
    let conn = open_read_only(database)?;
    let mut stmt = conn
        .prepare("SELECT id, delivery_id, order_key FROM events ORDER BY id")
        .context("preparing the events query")?;
    stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .context("reading the events")?
        .map(|r| r.context("reading an event"))
        .collect()
}

/// What the downstream saw, joined with the database's events.
#[derive(Debug, Default, PartialEq)]
pub struct Figures {
    /// Every request with a delivery id.
    pub requests: u64,
    /// Requests answered 503: attempts that reached the dead service.
    pub while_down: u64,
    /// From the switch to the first 2xx (the probe that succeeded).
    pub first_ok: Option<Duration>,
    /// From the first 2xx to the last event's first 2xx, once every
    /// stored event had one.
    pub backlog: Option<Duration>,
    /// From the switch to the last event's first 2xx, likewise.
    pub all_delivered: Option<Duration>,
    /// Stored events first answered 2xx before the wait ended.
    pub delivered_by_cap: u64,
    /// Stored events never answered 2xx, even during the shutdown.
    pub missing: u64,
    /// 2xx answers beyond the first per event (at least once allows them).
    pub duplicates: u64,
    /// The most requests in any one second: any window, and whole seconds
    /// counted from the switch; over the whole run and from the switch on.
    pub peak_sliding: u64,
    pub peak_aligned: u64,
    pub recovery_peak_sliding: u64,
    pub recovery_peak_aligned: u64,
    /// Events whose first 2xx came after that of a newer event (a higher
    /// row id) of their key, and the keys they belong to.
    pub order_violations: u64,
    pub keys_out_of_order: u64,
}

impl Figures {
    /// `ids` are the stored events, `switched` when the downstream came
    /// back, `ended` when the wait for the backlog ended.
    pub fn compute(
        seen: &Seen,
        events: &Events,
        ids: &HashSet<String>,
        switched: Instant,
        ended: Instant,
    ) -> Figures {
        let mut f = Figures {
            requests: seen.arrivals.len() as u64,
            while_down: seen
                .arrivals
                .iter()
                .filter(|a| a.status == StatusCode::SERVICE_UNAVAILABLE.as_u16())
                .count() as u64,
            ..Figures::default()
        };
        let ok = seen
            .arrivals
            .iter()
            .filter(|a| (200..300).contains(&a.status))
            .count() as u64;
        f.duplicates = ok.saturating_sub(seen.first.len() as u64);
        let firsts: Vec<Instant> = ids
            .iter()
            .filter_map(|id| seen.first.get(id))
            .copied()
            .collect();
        f.missing = ids.len() as u64 - firsts.len() as u64;
        f.delivered_by_cap = firsts.iter().filter(|&&at| at <= ended).count() as u64;
        let first_ok = seen.first.values().min().copied();
        f.first_ok = first_ok.map(|t| t.saturating_duration_since(switched));
        if f.missing == 0
            && let (Some(first), Some(&last)) = (first_ok, firsts.iter().max())
        {
            f.backlog = Some(last.saturating_duration_since(first));
            f.all_delivered = Some(last.saturating_duration_since(switched));
        }

        let mut all: Vec<Instant> = seen.arrivals.iter().map(|a| a.at).collect();
        all.sort_unstable();
        f.peak_sliding = peak_sliding(&all);
        f.peak_aligned = peak_aligned(&all, switched);
        let recovery: Vec<Instant> = all.iter().copied().filter(|&t| t >= switched).collect();
        f.recovery_peak_sliding = peak_sliding(&recovery);
        f.recovery_peak_aligned = peak_aligned(&recovery, switched);

        (f.order_violations, f.keys_out_of_order) = order_broken(seen, events);
        f
    }

    /// Events per second from the first 2xx to the last.
    pub fn backlog_per_sec(&self) -> Option<f64> {
        let secs = self.backlog?.as_secs_f64();
        let n = self.delivered_by_cap;
        (secs > 0.0).then(|| round(n as f64 / secs, 0))
    }
}

/// The most of the sorted `times` inside any window of [`SECOND`]
/// (`[t, t + 1 s)`).
fn peak_sliding(times: &[Instant]) -> u64 {
    let mut best = 0;
    let mut from = 0;
    for (to, &t) in times.iter().enumerate() {
        while t.duration_since(times[from]) >= SECOND {
            from += 1;
        }
        best = best.max(to + 1 - from);
    }
    best as u64
}

/// The most of `times` in one whole second counted from `origin` (seconds
/// before it count backwards: `[-1 s, 0)` is one).
fn peak_aligned(times: &[Instant], origin: Instant) -> u64 {
    let mut bins: HashMap<i64, u64> = HashMap::new();
    for &t in times {
        let bin = match t.checked_duration_since(origin) {
            Some(d) => d.as_secs() as i64,
            None => -(origin.duration_since(t).as_secs_f64().ceil() as i64).max(1),
        };
        *bins.entry(bin).or_default() += 1;
    }
    bins.into_values().max().unwrap_or(0)
}

/// Among first 2xx arrivals, in time order: per order key, events that
/// came after a newer event of their key (a higher row id: the server's
/// arrival order), and how many keys had any.
fn order_broken(seen: &Seen, events: &Events) -> (u64, u64) {
    let mut delivered: Vec<(Instant, &str, i64)> = events
        .iter()
        .filter_map(|(row, id, key)| Some((*seen.first.get(id)?, key.as_deref()?, *row)))
        .collect();
    delivered.sort_unstable();
    let mut newest: HashMap<&str, i64> = HashMap::new();
    let mut broken: HashSet<&str> = HashSet::new();
    let mut violations = 0;
    for (_, key, row) in delivered {
        let last = newest.entry(key).or_insert(row);
        if row < *last {
            violations += 1;
            broken.insert(key);
        } else {
            *last = row;
        }
    }
    (violations, broken.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downstream::Arrival;

    #[test]
    fn rates_parse_per_second_and_per_minute_and_refuse_the_rest() {
        let r = parse_rate("500/s").unwrap();
        assert_eq!((r.text.as_str(), r.per_sec), ("500/s", 500.0));
        assert_eq!(parse_rate("600/m").unwrap().per_sec, 10.0);
        for bad in ["500", "0/s", "-1/s", "5.5/s", "500/h", "/s", "x/s"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(peak_allowed(&parse_rate("500/s").unwrap()), 507);
        assert_eq!(peak_allowed(&parse_rate("50/s").unwrap()), 52);
    }

    #[test]
    fn peaks_count_any_window_and_whole_seconds_from_the_switch() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // Three in [900, 1100) straddle the whole second at 1000.
        let times = [ms(0), ms(900), ms(950), ms(1050), ms(2500)];
        assert_eq!(peak_sliding(&times), 3);
        assert_eq!(peak_aligned(&times, t0), 3);
        // From 925: 0 and 900 in [-1 s, 0), 950 and 1050 in [0, 1 s).
        assert_eq!(peak_aligned(&times, ms(925)), 2);
        // A window is half open: 1 s apart is two windows.
        assert_eq!(peak_sliding(&[ms(0), ms(1000)]), 1);
        assert_eq!(peak_sliding(&[]), 0);
        // Before the origin, seconds count backwards.
        assert_eq!(peak_aligned(&[ms(0), ms(100), ms(600)], ms(500)), 2);
    }

    fn seen(arrivals: &[(&str, u64, u16)], t0: Instant) -> Seen {
        let mut seen = Seen::default();
        for &(id, at, status) in arrivals {
            let at = t0 + Duration::from_millis(at);
            if (200..300).contains(&status) {
                seen.first.entry(id.to_owned()).or_insert(at);
            }
            seen.arrivals.push(Arrival {
                at,
                delivery_id: id.to_owned(),
                status,
            });
        }
        seen
    }

    #[test]
    fn the_figures_join_arrivals_with_the_events_and_find_order_broken() {
        let t0 = Instant::now();
        let events: Events = [
            (1, "a1", "k0"),
            (2, "b1", "k1"),
            (3, "a2", "k0"),
            (4, "a3", "k0"),
        ]
        .into_iter()
        .map(|(row, id, key)| (row, id.to_owned(), Some(key.to_owned())))
        .collect();
        let ids: HashSet<String> = events.iter().map(|(_, id, _)| id.clone()).collect();
        // Down until 1000: a1 and b1 refused. Then a1 (the probe), a3
        // before a2 (k0 broken once), b1, and a1 again (a duplicate).
        let s = seen(
            &[
                ("a1", 10, 503),
                ("b1", 20, 503),
                ("a1", 1500, 204),
                ("a3", 1600, 204),
                ("a2", 1700, 204),
                ("b1", 1800, 204),
                ("a1", 1900, 204),
            ],
            t0,
        );
        let switched = t0 + Duration::from_millis(1000);
        let f = Figures::compute(&s, &events, &ids, switched, t0 + Duration::from_secs(5));
        assert_eq!(
            (f.requests, f.while_down, f.duplicates, f.missing),
            (7, 2, 1, 0)
        );
        assert_eq!(f.first_ok, Some(Duration::from_millis(500)));
        assert_eq!(f.backlog, Some(Duration::from_millis(300)));
        assert_eq!(f.all_delivered, Some(Duration::from_millis(800)));
        assert_eq!(f.delivered_by_cap, 4);
        assert_eq!((f.order_violations, f.keys_out_of_order), (1, 1));
        assert_eq!((f.peak_sliding, f.recovery_peak_sliding), (5, 5));

        // One event never delivered: no backlog time; the rest as before.
        let mut more = ids.clone();
        more.insert("c1".to_owned());
        let f = Figures::compute(
            &s,
            &events,
            &more,
            switched,
            t0 + Duration::from_millis(1650),
        );
        assert_eq!(f.missing, 1);
        assert_eq!((f.backlog, f.all_delivered), (None, None));
        assert_eq!(f.delivered_by_cap, 2);
    }

    #[test]
    fn in_order_arrivals_break_nothing() {
        let t0 = Instant::now();
        let events: Events = (1..=6)
            .map(|row| (row, format!("e{row}"), Some(format!("k{}", row % 2))))
            .collect();
        let arrivals: Vec<(String, u64, u16)> = (1..=6)
            .map(|row| (format!("e{row}"), 100 * row as u64, 204))
            .collect();
        let arrivals: Vec<(&str, u64, u16)> = arrivals
            .iter()
            .map(|(id, at, s)| (id.as_str(), *at, *s))
            .collect();
        let s = seen(&arrivals, t0);
        assert_eq!(order_broken(&s, &events), (0, 0));
    }
}
