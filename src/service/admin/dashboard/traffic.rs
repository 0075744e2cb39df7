//! The overview's traffic charts: per source, received / delivered /
//! failed per hour over the last 24 hours and per day over the last 30
//! days (UTC), from the hourly counters the writer keeps
//! ([`crate::store::counters`]), never from the events themselves. One
//! read of at most a few hundred rows per source; hours without a row are
//! drawn as zero. The drawing is [`super::chart`].

use maud::{Markup, html};

use super::chart::{self, Bucket, Chart};
use crate::store::counters::{self, HOUR_MS, HourCounts};

const DAY_MS: i64 = 24 * HOUR_MS;
const HOURS: i64 = 24;
const DAYS: i64 = 30;

/// One source's buckets, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SourceTraffic {
    pub source: String,
    /// The last 24 hours, the current one last.
    pub hours: Vec<Bucket>,
    /// The last 30 days, today last.
    pub days: Vec<Bucket>,
}

/// The start of the oldest hour the charts at `now` show.
pub(super) fn since(now: i64) -> i64 {
    day_of(now) - (DAYS - 1) * DAY_MS
}

fn day_of(at: i64) -> i64 {
    at - at.rem_euclid(DAY_MS)
}

/// `2026-11-28T14:00:00Z` → (`2026-11-28`, `14`).
fn date_and_hour(ms: i64) -> (String, String) {
    let text = crate::support::clock::format_ms(ms);
    (text[..10].to_owned(), text[11..13].to_owned())
}

fn hour_bucket(start: i64) -> Bucket {
    let (date, hour) = date_and_hour(start);
    let (_, next) = date_and_hour(start + HOUR_MS);
    Bucket {
        start,
        tick: format!("{hour}:00"),
        name: format!("{date} {hour}:00–{next}:00 UTC"),
        counts: [0; 3],
    }
}

fn day_bucket(start: i64) -> Bucket {
    let (date, _) = date_and_hour(start);
    Bucket {
        start,
        tick: date[5..].to_owned(),
        name: format!("{date} (UTC)"),
        counts: [0; 3],
    }
}

/// Buckets `rows` (from [`counters::since`]) per source: each of
/// `sources` in order, then any other source the rows name.
pub(super) fn bucket(now: i64, rows: &[HourCounts], sources: &[String]) -> Vec<SourceTraffic> {
    let last_hour = counters::hour_of(now);
    let first_hour = last_hour - (HOURS - 1) * HOUR_MS;
    let first_day = since(now);
    let mut names: Vec<&str> = sources.iter().map(String::as_str).collect();
    for r in rows {
        if !names.contains(&r.source.as_str()) {
            names.push(&r.source);
        }
    }
    names
        .into_iter()
        .map(|source| {
            let mut hours: Vec<Bucket> = (0..HOURS)
                .map(|i| hour_bucket(first_hour + i * HOUR_MS))
                .collect();
            let mut days: Vec<Bucket> = (0..DAYS)
                .map(|i| day_bucket(first_day + i * DAY_MS))
                .collect();
            for r in rows.iter().filter(|r| r.source == source) {
                let counts = [r.received, r.delivered, r.failed];
                let add = |b: &mut Bucket| {
                    for (total, n) in b.counts.iter_mut().zip(counts) {
                        *total += n;
                    }
                };
                if (first_hour..=last_hour).contains(&r.hour) {
                    add(&mut hours[((r.hour - first_hour) / HOUR_MS) as usize]);
                }
                if r.hour >= first_day && r.hour < first_day + DAYS * DAY_MS {
                    add(&mut days[((r.hour - first_day) / DAY_MS) as usize]);
                }
            }
            SourceTraffic {
                source: source.to_owned(),
                hours,
                days,
            }
        })
        .collect()
}

/// The overview's "Traffic" section.
pub(super) fn section(traffic: &[SourceTraffic], configured: &[String]) -> Markup {
    html! {
        h2 { "Traffic" }
        p {
            "Per source, in UTC. " b { "received" } ": new events stored (duplicates not counted). "
            b { "delivered" } ": attempts a destination accepted (2xx, exit 0, a pull ack; each destination counts). "
            b { "failed" } ": attempts that did not deliver (every retry counts, so an outage shows while it lasts). "
            "Hover a bar or an hour for its numbers."
        }
        @if traffic.is_empty() { p { "No source yet." } }
        @for (i, t) in traffic.iter().enumerate() {
            section.traffic {
                h3 {
                    (t.source)
                    @if !configured.contains(&t.source) { " (not in the config)" }
                    @if t.days.iter().all(|d| d.counts == [0; 3]) {
                        span.quiet { " — no traffic in the last 30 days" }
                    }
                }
                div.charts {
                    (chart::render(&Chart {
                        id: &format!("chart-{i}-hours"),
                        title: &format!("{}: received, delivered and failed per hour, last 24 hours", t.source),
                        x_caption: "hour (UTC)",
                        y_caption: "per hour",
                        buckets: &t.hours,
                        tick_every: 3,
                    }))
                    (chart::render(&Chart {
                        id: &format!("chart-{i}-days"),
                        title: &format!("{}: received, delivered and failed per day, last 30 days", t.source),
                        x_caption: "day (UTC)",
                        y_caption: "per day",
                        buckets: &t.days,
                        tick_every: 5,
                    }))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-28T14:30:00Z.
    const NOW: i64 = 1_795_876_200_000;

    fn row(source: &str, hour: i64, n: [i64; 3]) -> HourCounts {
        HourCounts {
            source: source.to_owned(),
            hour,
            received: n[0],
            delivered: n[1],
            failed: n[2],
        }
    }

    #[test]
    fn hours_and_days_are_whole_utc_buckets_ending_now_with_empty_ones_zero() {
        assert_eq!(
            crate::support::clock::format_ms(NOW),
            "2026-11-28T14:30:00Z"
        );
        let this_hour = counters::hour_of(NOW);
        let rows = [
            row("a", this_hour, [3, 2, 1]),
            row("a", this_hour - HOUR_MS, [1, 0, 0]),
            // 25 hours ago: in the days, not the hours.
            row("a", this_hour - 25 * HOUR_MS, [10, 0, 0]),
            // 30 days ago: before the first day shown.
            row("a", day_of(NOW) - 30 * DAY_MS, [99, 0, 0]),
            row("gone", this_hour, [7, 0, 0]),
        ];
        let t = bucket(NOW, &rows, &["a".to_owned(), "quiet".to_owned()]);
        let names: Vec<&str> = t.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(names, ["a", "quiet", "gone"]);
        let a = &t[0];
        assert_eq!(a.hours.len(), 24);
        assert_eq!(a.days.len(), 30);
        assert_eq!(a.hours[23].counts, [3, 2, 1]);
        assert_eq!(a.hours[22].counts, [1, 0, 0]);
        assert!(a.hours[..22].iter().all(|b| b.counts == [0; 3]));
        assert_eq!(a.hours[23].tick, "14:00");
        assert_eq!(a.hours[23].name, "2026-11-28 14:00–15:00 UTC");
        assert_eq!(a.hours[0].name, "2026-11-27 15:00–16:00 UTC");
        // Today holds this hour and the one before; yesterday the 25 h old one.
        assert_eq!(a.days[29].counts, [4, 2, 1]);
        assert_eq!(a.days[29].name, "2026-11-28 (UTC)");
        assert_eq!(a.days[28].counts, [10, 0, 0]);
        assert_eq!(a.days[0].tick, "10-30");
        assert_eq!(a.days.iter().map(|d| d.counts[0]).sum::<i64>(), 14);
        assert!(
            t[1].hours
                .iter()
                .chain(&t[1].days)
                .all(|b| b.counts == [0; 3])
        );
        assert_eq!(t[2].hours[23].counts, [7, 0, 0]);
        assert_eq!(since(NOW), day_of(NOW) - 29 * DAY_MS);
    }

    #[test]
    fn the_section_draws_two_charts_per_source_and_escapes_names() {
        let t = bucket(NOW, &[], &["<b>".to_owned()]);
        let html = section(&t, &[]).into_string();
        assert_eq!(html.matches("<svg").count(), 2);
        assert!(!html.contains("<b>:") && html.contains("&lt;b&gt; (not in the config)"));
    }
}
