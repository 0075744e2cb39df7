//! `hookbox events`: the inbox listed on a read-only connection, so it
//! works whether or not a server runs and never takes the write lock.
//! The query is the store's; turning rows into a table or JSON lines is
//! this module's.

use std::process::ExitCode;

use crate::config::Config;
use crate::store::listing::{self, ListFilter};
use crate::store::models::State;
use crate::store::search::SearchQuery;

/// `hookbox events`' flags.
pub struct Request {
    pub source: Option<String>,
    pub destination: Option<String>,
    pub state: Option<State>,
    pub event_type: Option<String>,
    pub q: Option<String>,
    pub limit: usize,
    pub json: bool,
}

/// Exit 2 for flags that cannot go together, 1 when the database cannot
/// be read.
pub fn run(config: &Config, request: Request) -> ExitCode {
    let Request {
        source,
        destination,
        state,
        event_type,
        q,
        limit,
        json,
    } = request;
    if destination.is_some() && state == Some(State::Stored) {
        eprintln!(
            "hookbox events: a delivery is never stored (that is an event without any); \
             leave out --destination to list stored events"
        );
        return ExitCode::from(2);
    }
    let q = match q.map(|q| search_query(config, &q)).transpose() {
        Ok(q) => q,
        Err(reason) => {
            eprintln!("hookbox events: --{reason}");
            return ExitCode::from(2);
        }
    };
    let filter = ListFilter {
        source,
        destination,
        state,
        event_type,
        q,
        limit,
    };
    super::report("events", events(config, &filter, json))
}

/// `--q` as the listing takes it, or why not.
fn search_query(config: &Config, q: &str) -> Result<SearchQuery, String> {
    if !config.search.enabled {
        return Err("q: search is off in this config ([search] enabled = false)".to_owned());
    }
    SearchQuery::parse(q).map_err(|e| e.to_string())
}

fn events(config: &Config, filter: &ListFilter, json: bool) -> anyhow::Result<()> {
    let conn = crate::store::open_read_only(&config.server.database)?;
    let rows = listing::list(&conn, filter)?;
    if json {
        print!("{}", listing::render_json_lines(&rows)?);
    } else {
        print!("{}", listing::render_table(&rows));
    }
    Ok(())
}
