//! What a replay asks of the store, and why one is refused, in the same
//! words for the admin API, the dashboard and `hookbox replay`.
//!
//! Replay works on deliveries, and only at destinations the config has:
//! one removed keeps its rows, and nothing would dispatch them. [`event`]
//! plans the replay of one event: every dead, delivered or skipped delivery of it
//! ([`refusal`] says why not), or the one at a named destination, created
//! when the event never had one there ([`refusal_at`]). [`bulk`] plans a
//! replay by filter, made by [`Bulk::new`], whose checks ([`BulkError`])
//! are the same for every caller. Both turn into [`ReplayFilter`]s that the caller runs
//! in one transaction (the writer's, or the CLI's own connection).

use crate::config::route::Filter;
use crate::config::{Config, DeliverConfig};
use crate::store::ReplayFilter;
use crate::store::models::State;
use crate::store::queries::EventState;

/// Why a replay cannot run, by kind: the API answers 404 for the first
/// two and 409 for the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayError {
    UnknownSource(String),
    /// `source` is `None` when no source was named and none has it.
    UnknownDestination {
        source: Option<String>,
        destination: String,
    },
    /// The source has no destination in the config.
    NoDestination(String),
    /// Nothing of the event can move: a reason code and a message.
    Refused(&'static str, String),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::UnknownSource(s) => write!(f, "there is no source {s:?} in this config"),
            ReplayError::UnknownDestination {
                source: Some(source),
                destination,
            } => write!(
                f,
                "source {source:?} has no destination {destination:?} in this config"
            ),
            ReplayError::UnknownDestination {
                source: None,
                destination,
            } => write!(
                f,
                "no source has a destination {destination:?} in this config"
            ),
            ReplayError::NoDestination(s) => {
                write!(f, "source {s:?} has no destination in this config")
            }
            ReplayError::Refused(_, message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ReplayError {}

/// `source`'s destination `name`, if the config has it.
fn destination<'a>(config: &'a Config, source: &str, name: &str) -> Option<&'a DeliverConfig> {
    config
        .source(source)?
        .destinations
        .iter()
        .find(|d| d.name == name)
}

/// The names of `source`'s configured destinations.
fn destinations(config: &Config, source: &str) -> Vec<String> {
    config
        .source(source)
        .map(|s| s.destinations.iter().map(|d| d.name.clone()).collect())
        .unwrap_or_default()
}

/// What replaying event `id` (whose state is `event`) asks of the store:
/// every dead, delivered or skipped delivery at its source's destinations, or with
/// `at` only the one there (created if missing, with no filter: the
/// operator named the event).
pub fn event(
    config: &Config,
    event: &EventState,
    id: i64,
    at: Option<&str>,
) -> Result<Vec<ReplayFilter>, ReplayError> {
    let source = &event.source;
    let filters = match at {
        Some(d) if destination(config, source, d).is_none() => {
            return Err(ReplayError::UnknownDestination {
                source: Some(source.clone()),
                destination: d.to_owned(),
            });
        }
        Some(d) => {
            if let Some((reason, message)) = refusal_at(event, id, d) {
                return Err(ReplayError::Refused(reason, message));
            }
            vec![ReplayFilter {
                id: Some(id),
                source: Some(source.clone()),
                destination: Some(d.to_owned()),
                create: Some(Filter::default()),
                ..ReplayFilter::default()
            }]
        }
        None => {
            let configured = destinations(config, source);
            if configured.is_empty() {
                return Err(ReplayError::NoDestination(source.clone()));
            }
            if let Some((reason, message)) = refusal(event, id, &configured) {
                return Err(ReplayError::Refused(reason, message));
            }
            configured
                .into_iter()
                .map(|d| ReplayFilter {
                    id: Some(id),
                    source: Some(source.clone()),
                    destination: Some(d),
                    ..ReplayFilter::default()
                })
                .collect()
        }
    };
    Ok(filters)
}

/// A replay by filter: deliveries in a state, of a source or of all, at
/// one destination or every configured one, of events received in a range.
/// Made only by [`Bulk::new`], so every one has passed its checks.
#[derive(Debug, Clone)]
pub struct Bulk {
    /// `dead`, `delivered` or `skipped`. `None` (only with a source and a
    /// destination): all three, and the destination also gets each event in
    /// range that its own filter takes and that it never had: how a new
    /// destination gets old events.
    state: Option<State>,
    source: Option<String>,
    /// Without `source`: at each source that has a destination of this name.
    destination: Option<String>,
    /// Events received at or after (unix ms).
    since: Option<i64>,
    /// Events received before (unix ms).
    until: Option<i64>,
}

/// Why arguments make no bulk replay, whatever the config and the store
/// hold. The admin API and `hookbox replay` share these rules and word
/// them in their own terms (a JSON field, a flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkError {
    /// Only dead, delivered and skipped deliveries are put back to pending.
    NotReplayable(State),
    /// Without a state a replay also creates deliveries, so it must name
    /// the source and the destination: an empty request must not
    /// re-deliver the whole inbox.
    NoLane,
}

impl std::fmt::Display for BulkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BulkError::NotReplayable(state) => write!(
                f,
                "only dead, delivered and skipped deliveries can be replayed, not {state} ones"
            ),
            BulkError::NoLane => {
                f.write_str("without a state, name both a source and a destination")
            }
        }
    }
}

impl std::error::Error for BulkError {}

impl Bulk {
    /// A bulk replay of deliveries in `state` (see [`BulkError`] for what
    /// is refused) at `source`'s `destination`, received in
    /// `since..until`.
    pub fn new(
        state: Option<State>,
        source: Option<String>,
        destination: Option<String>,
        since: Option<i64>,
        until: Option<i64>,
    ) -> Result<Bulk, BulkError> {
        match state {
            Some(s @ (State::Pending | State::Stored)) => return Err(BulkError::NotReplayable(s)),
            None if source.is_none() || destination.is_none() => return Err(BulkError::NoLane),
            _ => {}
        }
        Ok(Bulk {
            state,
            source,
            destination,
            since,
            until,
        })
    }
}

/// What `bulk` asks of the store; an empty list when no source has a
/// destination.
pub fn bulk(config: &Config, bulk: &Bulk) -> Result<Vec<ReplayFilter>, ReplayError> {
    let sources: Vec<String> = match (&bulk.source, &bulk.destination) {
        (Some(s), _) if config.source(s).is_none() => {
            return Err(ReplayError::UnknownSource(s.clone()));
        }
        (Some(s), None) if destinations(config, s).is_empty() => {
            return Err(ReplayError::NoDestination(s.clone()));
        }
        (Some(s), _) => vec![s.clone()],
        (None, Some(d)) => {
            let having: Vec<String> = config
                .sources
                .iter()
                .filter(|s| destination(config, &s.name, d).is_some())
                .map(|s| s.name.clone())
                .collect();
            if having.is_empty() {
                return Err(ReplayError::UnknownDestination {
                    source: None,
                    destination: d.clone(),
                });
            }
            having
        }
        (None, None) => config.sources.iter().map(|s| s.name.clone()).collect(),
    };
    let mut filters = Vec::new();
    for source in sources {
        let lanes: Vec<(String, Option<Filter>)> = match &bulk.destination {
            Some(name) => {
                let d = destination(config, &source, name).ok_or_else(|| {
                    ReplayError::UnknownDestination {
                        source: Some(source.clone()),
                        destination: name.clone(),
                    }
                })?;
                let create = bulk.state.is_none().then(|| d.filter.clone());
                vec![(name.clone(), create)]
            }
            None => destinations(config, &source)
                .into_iter()
                .map(|d| (d, None))
                .collect(),
        };
        for (destination, create) in lanes {
            filters.push(ReplayFilter {
                source: Some(source.clone()),
                destination: Some(destination),
                state: bulk.state,
                since: bulk.since,
                until: bulk.until,
                create,
                ..ReplayFilter::default()
            });
        }
    }
    Ok(filters)
}

/// Why event `id` cannot be replayed at any of `configured` (its source's
/// destinations), as a reason code and a message; `None` if at least one
/// of its deliveries there is dead, delivered or skipped and the body is
/// kept.
/// Deliveries at destinations no longer in the config are never put back:
/// nothing would dispatch them.
pub fn refusal(
    event: &EventState,
    id: i64,
    configured: &[String],
) -> Option<(&'static str, String)> {
    let here = |state: State| {
        event
            .deliveries
            .iter()
            .any(|(d, s)| *s == state && configured.contains(d))
    };
    if here(State::Dead) || here(State::Delivered) || here(State::Skipped) {
        return (!event.has_body).then(|| body_dropped(id));
    }
    if here(State::Pending) {
        return Some((
            "already_pending",
            format!(
                "event {id} is pending at every destination it has; only dead, delivered and \
                 skipped deliveries can be replayed"
            ),
        ));
    }
    let why = if event.deliveries.is_empty() {
        format!(
            "event {id} is {}; it has no delivery to replay",
            event.state
        )
    } else {
        format!("event {id} has deliveries only at destinations no longer in the config")
    };
    Some((
        "not_replayable",
        format!("{why} (name a destination to deliver it there)"),
    ))
}

/// Why event `id` cannot be replayed at `destination`; `None` if it can:
/// its delivery there is dead, delivered or skipped (put back to pending), or it has
/// none there (created).
pub fn refusal_at(
    event: &EventState,
    id: i64,
    destination: &str,
) -> Option<(&'static str, String)> {
    if event.delivery(destination) == Some(State::Pending) {
        return Some((
            "already_pending",
            format!("event {id} is already pending at destination {destination:?}"),
        ));
    }
    (!event.has_body).then(|| body_dropped(id))
}

fn body_dropped(id: i64) -> (&'static str, String) {
    (
        "body_dropped",
        format!(
            "event {id} no longer has its body (retention.body_days dropped it), \
             so it cannot be delivered again"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(deliveries: &[(&str, State)], has_body: bool) -> EventState {
        EventState {
            source: "s".into(),
            state: State::Dead,
            has_body,
            deliveries: deliveries
                .iter()
                .map(|(d, s)| ((*d).to_owned(), *s))
                .collect(),
        }
    }

    fn configured() -> Vec<String> {
        vec!["ci".into(), "chat".into()]
    }

    #[test]
    fn an_event_replays_when_a_configured_delivery_is_dead_or_delivered() {
        let reason =
            |d: &[(&str, State)], body| refusal(&event(d, body), 7, &configured()).map(|(r, _)| r);
        assert_eq!(reason(&[("ci", State::Dead)], true), None);
        assert_eq!(reason(&[("ci", State::Delivered)], true), None);
        // Pending elsewhere does not hide a dead delivery.
        assert_eq!(
            reason(&[("chat", State::Dead), ("ci", State::Pending)], true),
            None
        );
        assert_eq!(reason(&[("ci", State::Dead)], false), Some("body_dropped"));
        assert_eq!(
            reason(&[("ci", State::Pending)], true),
            Some("already_pending")
        );
        assert_eq!(reason(&[], true), Some("not_replayable"));
        // A destination gone from the config is not dispatched: not replayed.
        assert_eq!(
            reason(&[("old", State::Dead)], true),
            Some("not_replayable")
        );
    }

    fn config() -> Config {
        crate::config::from_toml(
            r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["s"]
[[sources.deliver]]
name = "ci"
command = ["/bin/true"]
[[sources.deliver]]
name = "deploy"
command = ["/bin/true"]
events = ["release"]
[[sources]]
name = "inbox"
kind = "github"
secrets = ["s"]
"#,
            "test".into(),
            &crate::ingress::receive::registry::PROVIDERS,
        )
        .unwrap()
    }

    /// `(source, destination, state, creates, creates every event)` of each filter.
    fn shape(filters: &[ReplayFilter]) -> Vec<(String, String, Option<State>, bool, bool)> {
        filters
            .iter()
            .map(|f| {
                (
                    f.source.clone().unwrap(),
                    f.destination.clone().unwrap(),
                    f.state,
                    f.create.is_some(),
                    f.create.as_ref().is_some_and(Filter::is_empty),
                )
            })
            .collect()
    }

    #[test]
    fn one_event_replays_at_each_configured_destination_or_the_one_named() {
        let config = config();
        let mut e = event(&[("ci", State::Dead)], true);
        e.source = "github".into();
        let all = super::event(&config, &e, 7, None).unwrap();
        assert_eq!(
            shape(&all),
            [
                ("github".into(), "ci".into(), None, false, false),
                ("github".into(), "deploy".into(), None, false, false)
            ]
        );
        assert!(all.iter().all(|f| f.id == Some(7)));
        // Named: created without a filter when missing.
        let named = super::event(&config, &e, 7, Some("deploy")).unwrap();
        assert_eq!(
            shape(&named),
            [("github".into(), "deploy".into(), None, true, true)]
        );
        assert_eq!(
            super::event(&config, &e, 7, Some("nope")).unwrap_err(),
            ReplayError::UnknownDestination {
                source: Some("github".into()),
                destination: "nope".into()
            }
        );
        e.source = "inbox".into();
        assert_eq!(
            super::event(&config, &e, 7, None).unwrap_err(),
            ReplayError::NoDestination("inbox".into())
        );
    }

    #[test]
    fn a_bulk_replay_without_a_state_gives_the_destination_what_its_filter_takes() {
        let config = config();
        let at = |state: Option<State>, source: Option<&str>, destination: Option<&str>| {
            let checked = Bulk::new(
                state,
                source.map(Into::into),
                destination.map(Into::into),
                Some(5),
                None,
            )
            .unwrap();
            bulk(&config, &checked)
        };
        let new = at(None, Some("github"), Some("deploy")).unwrap();
        assert_eq!(
            shape(&new),
            [("github".into(), "deploy".into(), None, true, false)]
        );
        assert_eq!(new[0].since, Some(5));
        let dead = at(Some(State::Dead), Some("github"), Some("deploy")).unwrap();
        assert_eq!(
            shape(&dead),
            [(
                "github".into(),
                "deploy".into(),
                Some(State::Dead),
                false,
                false
            )]
        );
        // Every source: only those with destinations, each destination.
        assert_eq!(at(Some(State::Dead), None, None).unwrap().len(), 2);
        // A destination without a source: each source that has it.
        assert_eq!(
            shape(&at(Some(State::Dead), None, Some("ci")).unwrap())[0].1,
            "ci"
        );
        assert!(matches!(
            at(Some(State::Dead), None, Some("nope")),
            Err(ReplayError::UnknownDestination { source: None, .. })
        ));
        assert!(matches!(
            at(Some(State::Dead), Some("nope"), None),
            Err(ReplayError::UnknownSource(_))
        ));
        assert!(matches!(
            at(Some(State::Dead), Some("inbox"), None),
            Err(ReplayError::NoDestination(_))
        ));
        assert!(matches!(
            at(None, Some("inbox"), Some("ci")),
            Err(ReplayError::UnknownDestination {
                source: Some(_),
                ..
            })
        ));
    }

    #[test]
    fn a_bulk_replay_is_of_dead_or_delivered_deliveries_or_names_its_lane() {
        let new = |state, source: Option<&str>, destination: Option<&str>| {
            Bulk::new(
                state,
                source.map(Into::into),
                destination.map(Into::into),
                None,
                None,
            )
            .map(|_| ())
        };
        assert_eq!(new(Some(State::Dead), None, None), Ok(()));
        assert_eq!(new(Some(State::Delivered), Some("s"), None), Ok(()));
        assert_eq!(new(None, Some("s"), Some("ci")), Ok(()));
        for state in [State::Pending, State::Stored] {
            assert_eq!(
                new(Some(state), Some("s"), Some("ci")),
                Err(BulkError::NotReplayable(state))
            );
        }
        assert_eq!(new(None, None, None), Err(BulkError::NoLane));
        assert_eq!(new(None, Some("s"), None), Err(BulkError::NoLane));
        assert_eq!(new(None, None, Some("ci")), Err(BulkError::NoLane));
    }

    #[test]
    fn a_named_destination_replays_unless_its_delivery_is_pending() {
        let e = event(&[("chat", State::Dead), ("ci", State::Pending)], true);
        assert_eq!(refusal_at(&e, 7, "chat"), None);
        assert_eq!(refusal_at(&e, 7, "never").map(|(r, _)| r), None);
        let (reason, message) = refusal_at(&e, 7, "ci").unwrap();
        assert_eq!(reason, "already_pending");
        assert!(message.contains("\"ci\""), "{message}");
        let emptied = event(&[("chat", State::Delivered)], false);
        assert_eq!(
            refusal_at(&emptied, 7, "never").map(|(r, _)| r),
            Some("body_dropped")
        );
    }
}
