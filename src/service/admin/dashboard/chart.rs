//! Grouped bar charts as inline SVG, drawn on the server: no script, no
//! build step, and nothing the page's Content-Security-Policy has to
//! allow (colours are presentation attributes, not styles).
//!
//! A chart is a row of buckets (hours or days), each a group of three bars:
//! received, delivered, failed. The y axis starts at zero and ends on a
//! round number at or above the tallest bar, so one event and 100,000 both
//! read sensibly; a bar that is not zero is never drawn thinner than a
//! pixel. Each bucket, empty ones included, carries a `<title>` with its
//! three numbers (shown on hover), each bar one with its own, and the
//! chart as a whole a title and a description (`role="img"`) that say what
//! it shows and its totals.

use maud::{Markup, html};

/// The three series: name and colour (Okabe–Ito, told apart with colour
/// blindness too).
pub const SERIES: [(&str, &str); 3] = [
    ("received", "#0072B2"),
    ("delivered", "#009E73"),
    ("failed", "#D55E00"),
];

/// One bucket: when it starts (unix ms), what it is called on the axis and
/// in its title, and its three counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub start: i64,
    /// Short, for the x axis (`14:00`, `11-28`).
    pub tick: String,
    /// Whole, for the hover title (`2026-11-28 14:00–15:00 UTC`).
    pub name: String,
    pub counts: [i64; 3],
}

/// A chart to draw.
pub struct Chart<'a> {
    /// Unique on the page: the ids of its title and description.
    pub id: &'a str,
    /// What it shows, for the title (`github, per hour, last 24 hours`).
    pub title: &'a str,
    /// The x axis' caption (`hour (UTC)`).
    pub x_caption: &'a str,
    /// The y axis' caption (`per hour`).
    pub y_caption: &'a str,
    pub buckets: &'a [Bucket],
    /// Label every this many buckets, counted back from the last one.
    pub tick_every: usize,
}

// The drawing's coordinate system (the viewBox); the SVG scales to fit.
pub const WIDTH: f64 = 560.0;
pub const HEIGHT: f64 = 210.0;
/// The plot area: left of it the y labels, above it the legend, below it
/// the x labels and caption.
pub const PLOT_LEFT: f64 = 52.0;
pub const PLOT_RIGHT: f64 = WIDTH - 10.0;
pub const PLOT_TOP: f64 = 26.0;
pub const PLOT_BOTTOM: f64 = HEIGHT - 38.0;
/// Share of a bucket's width the bars take; the rest is space between groups.
const GROUP_FILL: f64 = 0.78;

/// The y axis: from 0 to `top`, with a grid line every `step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Axis {
    pub top: i64,
    pub step: i64,
}

/// An axis for values up to `max`: a step of 1, 2, 2.5 or 5 times a power
/// of ten (whole numbers only), about four steps, the top a whole number
/// of steps at or above `max`. Nothing to show still gets an axis (0–1).
pub fn axis(max: i64) -> Axis {
    let max = max.max(1);
    let rough = (max + 3) / 4;
    let mut power = 1i64;
    let step = loop {
        if let Some(step) = [1, 2, 5]
            .iter()
            .map(|m| m * power)
            .chain((power >= 10).then_some(power / 2 * 5))
            .filter(|s| *s >= rough)
            .min()
        {
            break step;
        }
        power = power.saturating_mul(10);
    };
    Axis {
        top: (max + step - 1) / step * step,
        step,
    }
}

/// How tall a bar of `value` is on an axis up to `top`, in a plot `height`
/// tall: in proportion, but never under a pixel when it is not zero.
pub fn bar_height(value: i64, top: i64, height: f64) -> f64 {
    if value <= 0 || top <= 0 {
        return 0.0;
    }
    (value as f64 / top as f64 * height).clamp(1.0, height)
}

/// A count as an axis label: `950`, `1.2k`, `25k`, `100k`, `2.5M`.
pub fn compact(n: i64) -> String {
    let scaled = |n: i64, unit: i64, suffix: &str| {
        let tenths = (n * 10 + unit / 2) / unit;
        if tenths % 10 == 0 || tenths >= 100 {
            format!("{}{suffix}", (tenths + 5) / 10)
        } else {
            format!("{}.{}{suffix}", tenths / 10, tenths % 10)
        }
    };
    match n {
        n if n.abs() < 1_000 => n.to_string(),
        n if n.abs() < 1_000_000 => scaled(n, 1_000, "k"),
        n => scaled(n, 1_000_000, "M"),
    }
}

/// Where bucket `i` of `n` starts, and how wide its bars are.
fn group(i: usize, n: usize) -> (f64, f64) {
    let width = (PLOT_RIGHT - PLOT_LEFT) / n.max(1) as f64;
    let x = PLOT_LEFT + width * i as f64;
    (x, width)
}

/// One bar: its series, x, y, width and height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    pub series: usize,
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// The bars of bucket `i` of `n` on `axis` (none for a zero count).
pub fn bars(counts: &[i64; 3], i: usize, n: usize, axis: Axis) -> Vec<Bar> {
    let (x, width) = group(i, n);
    let bar_width = width * GROUP_FILL / 3.0;
    let left = x + width * (1.0 - GROUP_FILL) / 2.0;
    let plot = PLOT_BOTTOM - PLOT_TOP;
    counts
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0)
        .map(|(series, v)| {
            let height = bar_height(*v, axis.top, plot);
            Bar {
                series,
                x: left + bar_width * series as f64,
                y: PLOT_BOTTOM - height,
                width: bar_width,
                height,
            }
        })
        .collect()
}

/// `"3 received, 0 delivered, 1 failed"`.
fn numbers(counts: &[i64; 3]) -> String {
    SERIES
        .iter()
        .zip(counts)
        .map(|((name, _), n)| format!("{n} {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Two decimals at most: short attributes, and no `1e-7`.
fn px(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The chart as an `<svg>` element.
pub fn render(chart: &Chart) -> Markup {
    let n = chart.buckets.len();
    let max = chart
        .buckets
        .iter()
        .flat_map(|b| b.counts)
        .max()
        .unwrap_or(0);
    let axis = axis(max);
    let mut totals = [0i64; 3];
    for b in chart.buckets {
        for (t, c) in totals.iter_mut().zip(b.counts) {
            *t += c;
        }
    }
    let plot = PLOT_BOTTOM - PLOT_TOP;
    let grid: Vec<i64> = (0..=axis.top / axis.step).map(|k| k * axis.step).collect();
    let title_id = format!("{}-title", chart.id);
    let desc_id = format!("{}-desc", chart.id);
    let span = match (chart.buckets.first(), chart.buckets.last()) {
        (Some(first), Some(last)) => format!("from {} to {}", first.name, last.name),
        _ => "no time".to_owned(),
    };
    html! {
        svg.chart xmlns="http://www.w3.org/2000/svg" role="img"
            viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } width=(WIDTH) height=(HEIGHT)
            aria-labelledby={ (title_id) " " (desc_id) } data-chart=(chart.id) {
            title id=(title_id) { (chart.title) }
            desc id=(desc_id) { "Totals " (span) ": " (numbers(&totals)) "." }
            // Legend, above the plot on the right.
            @for (k, (name, colour)) in SERIES.iter().enumerate() {
                @let x = PLOT_RIGHT - 230.0 + 78.0 * k as f64;
                rect x=(px(x)) y="8" width="10" height="10" fill=(colour) {}
                text x=(px(x + 14.0)) y="17" font-size="11" fill="#1d2330" { (name) }
            }
            // Grid and y labels.
            @for v in &grid {
                @let y = PLOT_BOTTOM - bar_height(*v, axis.top, plot);
                line x1=(px(PLOT_LEFT)) x2=(px(PLOT_RIGHT)) y1=(px(y)) y2=(px(y))
                    stroke=(if *v == 0 { "#5b6474" } else { "#e2e5ea" }) stroke-width="1" {}
                text x=(px(PLOT_LEFT - 6.0)) y=(px(y + 4.0)) font-size="11" text-anchor="end"
                    fill="#1d2330" { (compact(*v)) }
            }
            text x="12" y=(px((PLOT_TOP + PLOT_BOTTOM) / 2.0)) font-size="11" text-anchor="middle"
                fill="#5b6474" transform={ "rotate(-90 12 " (px((PLOT_TOP + PLOT_BOTTOM) / 2.0)) ")" } {
                (chart.y_caption)
            }
            // Buckets: a hover area with the three numbers, then the bars.
            @for (i, b) in chart.buckets.iter().enumerate() {
                @let (x, width) = group(i, n);
                g.bucket data-start=(b.start) {
                    rect x=(px(x)) y=(px(PLOT_TOP)) width=(px(width)) height=(px(plot)) fill="transparent" {
                        title { (b.name) ": " (numbers(&b.counts)) }
                    }
                    @for bar in bars(&b.counts, i, n, axis) {
                        @let (name, colour) = SERIES[bar.series];
                        rect class={ "bar " (name) } x=(px(bar.x)) y=(px(bar.y)) width=(px(bar.width))
                            height=(px(bar.height)) fill=(colour) data-value=(b.counts[bar.series]) {
                            title { (b.name) ": " (b.counts[bar.series]) " " (name) }
                        }
                    }
                }
                @if chart.tick_every > 0 && (n - 1 - i).is_multiple_of(chart.tick_every) {
                    text x=(px(x + width / 2.0)) y=(px(PLOT_BOTTOM + 14.0)) font-size="11"
                        text-anchor="middle" fill="#1d2330" { (b.tick) }
                }
            }
            text x=(px((PLOT_LEFT + PLOT_RIGHT) / 2.0)) y=(px(HEIGHT - 6.0)) font-size="11"
                text-anchor="middle" fill="#5b6474" { (chart.x_caption) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axis_ends_on_a_round_number_at_or_above_the_tallest_bar() {
        let cases = [
            (0, 1, 1),
            (1, 1, 1),
            (3, 3, 1),
            (4, 4, 1),
            (5, 6, 2),
            (7, 8, 2),
            (9, 10, 5),
            (37, 40, 10),
            (99, 100, 25),
            (1_000, 1_000, 250),
            (1_234, 1_500, 500),
            (100_000, 100_000, 25_000),
            (100_001, 150_000, 50_000),
        ];
        for (max, top, step) in cases {
            assert_eq!(axis(max), Axis { top, step }, "max {max}");
            let a = axis(max);
            assert!(a.top >= max && a.top % a.step == 0);
            let steps = a.top / a.step;
            assert!((1..=5).contains(&steps), "max {max}: {steps} steps");
        }
    }

    #[test]
    fn bars_are_in_proportion_inside_the_plot_and_at_least_a_pixel() {
        let plot = PLOT_BOTTOM - PLOT_TOP;
        assert_eq!(bar_height(0, 1, plot), 0.0);
        assert_eq!(bar_height(1, 1, plot), plot);
        assert_eq!(bar_height(50_000, 100_000, plot), plot / 2.0);
        assert_eq!(bar_height(1, 100_000, plot), 1.0, "one event still shows");

        let a = axis(100_000);
        let n = 24;
        for i in 0..n {
            for bar in bars(&[100_000, 1, 0], i, n, a) {
                assert!(bar.x >= PLOT_LEFT && bar.x + bar.width <= PLOT_RIGHT + 1e-9);
                assert!(bar.y >= PLOT_TOP - 1e-9 && bar.y + bar.height <= PLOT_BOTTOM + 1e-9);
            }
        }
        let drawn = bars(&[100_000, 1, 0], 23, n, a);
        assert_eq!(drawn.len(), 2, "no bar for zero");
        assert_eq!(drawn[0].y, PLOT_TOP);
        assert_eq!(drawn[1].height, 1.0);
        // Bars of one bucket sit side by side, left of the next bucket's.
        assert!(drawn[0].x + drawn[0].width <= drawn[1].x + 1e-9);
        let next = bars(&[1, 1, 1], 1, n, a);
        let first = bars(&[1, 1, 1], 0, n, a);
        assert!(first[2].x + first[2].width < next[0].x);
    }

    #[test]
    fn counts_read_short_on_the_axis() {
        let cases = [
            (0, "0"),
            (1, "1"),
            (950, "950"),
            (1_000, "1k"),
            (1_250, "1.3k"),
            (25_000, "25k"),
            (99_999, "100k"),
            (100_000, "100k"),
            (2_500_000, "2.5M"),
        ];
        for (n, text) in cases {
            assert_eq!(compact(n), text, "{n}");
        }
    }

    fn buckets(counts: &[[i64; 3]]) -> Vec<Bucket> {
        counts
            .iter()
            .enumerate()
            .map(|(i, c)| Bucket {
                start: i as i64,
                tick: format!("t{i}"),
                name: format!("bucket {i}"),
                counts: *c,
            })
            .collect()
    }

    fn draw(b: &[Bucket]) -> String {
        render(&Chart {
            id: "c1",
            title: "src <&> per hour",
            x_caption: "hour (UTC)",
            y_caption: "per hour",
            buckets: b,
            tick_every: 2,
        })
        .into_string()
    }

    #[test]
    fn every_bucket_has_its_numbers_on_hover_even_when_empty() {
        let svg = draw(&buckets(&[[0, 0, 0], [3, 2, 1], [0, 0, 0]]));
        assert!(svg.contains("<title>bucket 0: 0 received, 0 delivered, 0 failed</title>"));
        assert!(svg.contains("<title>bucket 1: 3 received, 2 delivered, 1 failed</title>"));
        assert!(svg.contains("<title>bucket 1: 3 received</title>"));
        assert!(svg.contains("<title>bucket 1: 1 failed</title>"));
        assert_eq!(svg.matches("class=\"bar ").count(), 3);
        assert_eq!(svg.matches("<g class=\"bucket\"").count(), 3);
        // Labels counted back from the last bucket.
        assert!(svg.contains(">t2</text>") && svg.contains(">t0</text>"));
        assert!(!svg.contains(">t1</text>"));
        // The title is escaped, and names the chart for assistive technology.
        assert!(svg.contains("<title id=\"c1-title\">src &lt;&amp;&gt; per hour</title>"));
        assert!(svg.contains("aria-labelledby=\"c1-title c1-desc\""));
        assert!(
            svg.contains("Totals from bucket 0 to bucket 2: 3 received, 2 delivered, 1 failed.")
        );
        for (name, _) in SERIES {
            assert!(svg.contains(&format!(">{name}</text>")), "legend: {name}");
        }
    }

    #[test]
    fn nothing_at_all_still_draws_an_axis_from_zero_to_one() {
        let svg = draw(&buckets(&[[0, 0, 0]; 24]));
        assert!(!svg.contains("class=\"bar "));
        assert!(svg.contains(">0</text>") && svg.contains(">1</text>"));
        assert_eq!(svg.matches("<g class=\"bucket\"").count(), 24);
    }

    #[test]
    fn a_hundred_thousand_events_label_the_axis_in_thousands() {
        let mut counts = [[1, 0, 0]; 24];
        counts[5] = [100_000, 99_000, 7];
        let svg = draw(&buckets(&counts));
        for label in ["0", "25k", "50k", "75k", "100k"] {
            assert!(svg.contains(&format!(">{label}</text>")), "{label}");
        }
        assert!(svg.contains("data-value=\"100000\""));
        assert_eq!(svg.matches("class=\"bar received\"").count(), 24);
    }
}
