//! `hookbox try SOURCE DESTINATION`: a destination's filter and transform
//! over stored events, printed, nothing sent (`crate::delivery::push::trial`).
//! The events are read on a read-only connection; the transform runs in
//! transform processes of this command's own.

use std::process::ExitCode;

use anyhow::Context as _;

use super::TryArgs;
use crate::config::{Config, DeliverConfig};
use crate::delivery::push::trial::{self, Trial};
use crate::delivery::transform;
use crate::store::queries::{self, Which};

/// Exit 2 for a source or destination the config does not have, 1 when
/// the database cannot be read.
pub fn run(config: &Config, args: TryArgs) -> ExitCode {
    let Some(source) = config.source(&args.source) else {
        eprintln!("hookbox try: no source {:?} in the config", args.source);
        return ExitCode::from(2);
    };
    let Some(destination) = source
        .destinations
        .iter()
        .find(|d| d.name == args.destination)
    else {
        eprintln!(
            "hookbox try: source {:?} has no destination {:?}",
            args.source, args.destination
        );
        return ExitCode::from(2);
    };
    let which = match (args.event, args.last, args.since) {
        (Some(id), _, _) => Which::Event(id),
        (_, _, Some(at)) => Which::Since(at),
        (_, last, _) => Which::Last(last.unwrap_or(10)),
    };
    super::report(
        "try",
        tried(config, &source.name, destination, which, args.json),
    )
}

/// Reads the events, tries them, prints each.
fn tried(
    config: &Config,
    source: &str,
    destination: &DeliverConfig,
    which: Which,
    json: bool,
) -> anyhow::Result<()> {
    let conn = crate::store::open_read_only(&config.server.database)?;
    let events = queries::events_to_try(&conn, source, which)?;
    drop(conn);
    let transforms =
        transform::for_destinations([destination]).context("preparing the transform process")?;
    let trials = super::current_thread_runtime()?.block_on(trial::run(
        source,
        destination,
        transforms.first().and_then(Option::as_ref),
        events,
    ));
    if trials.is_empty() {
        eprintln!("hookbox try: no stored event of {source} to try");
    }
    for t in &trials {
        if json {
            println!("{}", serde_json::to_string(t)?);
        } else {
            print!("{}", render(t));
        }
    }
    Ok(())
}

/// One trial for a person: a line per event, and what would be sent.
fn render(t: &Trial) -> String {
    let mut text = format!(
        "event {} {} ({}): ",
        t.event_id,
        t.delivery_id,
        t.event_type.as_deref().unwrap_or("no type")
    );
    match (t.outcome, &t.request) {
        ("send", Some(r)) => {
            text.push_str("would send\n");
            if let (Some(method), Some(url)) = (r.method, &r.url) {
                text.push_str(&format!("  {method} {url}\n"));
            }
            if let Some(argv) = &r.argv {
                text.push_str(&format!("  run {argv:?}\n"));
            }
            for (name, value) in &r.headers {
                text.push_str(&format!("  {name}: {value}\n"));
            }
            text.push('\n');
            match (&r.body, &r.body_base64) {
                (Some(body), _) => text.push_str(body),
                (None, Some(b64)) => text.push_str(&format!("(not UTF-8; base64) {b64}")),
                (None, None) => {}
            }
            text.push_str("\n\n");
        }
        ("not_matched", _) => text.push_str("not matched by the filter\n"),
        ("skipped", _) => text.push_str("skipped (the transform gave no output)\n"),
        (outcome, _) => text.push_str(&format!(
            "{outcome}: {}\n",
            t.reason.as_deref().unwrap_or("")
        )),
    }
    text
}
