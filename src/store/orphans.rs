//! Destinations that left the config but not the database: their
//! deliveries are kept (an operator may put the destination back, or
//! replay elsewhere) and never dispatched, which is worth a warning but not
//! a refusal: from `hookbox check` ([`warnings`]) and from `serve` at
//! start-up, for those whose deliveries wait ([`waiting`]).
//!
//! It compares the database with the config, so it lives on the store's
//! side: config depends on no other module.

use super::queries::LaneCount;
use crate::config::Config;

/// One line per (source, destination) that holds deliveries in `lanes`
/// (what the database holds) but is not in `config`.
pub fn warnings(config: &Config, lanes: &[LaneCount]) -> Vec<String> {
    lanes
        .iter()
        .filter(|lane| !configured(config, &lane.source, &lane.destination))
        .map(|lane| {
            let total = lane.pending + lane.delivered + lane.dead + lane.skipped;
            let held = match total {
                1 => format!("1 delivery ({} pending); it is kept", lane.pending),
                n => format!("{n} deliveries ({} pending); they are kept", lane.pending),
            };
            let (source, destination) = (&lane.source, &lane.destination);
            match config.sources.iter().position(|s| s.name == *source) {
                Some(i) => format!(
                    "sources[{i}] ({source:?}): destination {destination:?} is not in the config \
                     but holds {held} and not dispatched"
                ),
                None => format!(
                    "source {source:?} is not in the config but its destination {destination:?} \
                     holds {held} and not dispatched"
                ),
            }
        })
        .collect()
}

/// The lanes of `pending` (`(source, destination, count)`, as
/// `queries::pending_per_lane` reads them) that `config` no longer has.
pub fn waiting<'a>(
    config: &Config,
    pending: &'a [(String, String, i64)],
) -> Vec<&'a (String, String, i64)> {
    pending
        .iter()
        .filter(|(source, destination, _)| !configured(config, source, destination))
        .collect()
}

fn configured(config: &Config, source: &str, destination: &str) -> bool {
    config
        .source(source)
        .is_some_and(|s| s.destinations.iter().any(|d| d.name == destination))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(source: &str, destination: &str, pending: i64, delivered: i64) -> LaneCount {
        LaneCount {
            source: source.into(),
            destination: destination.into(),
            pending,
            delivered,
            dead: 0,
            skipped: 0,
        }
    }

    fn config() -> Config {
        crate::config::from_toml(
            r#"
[[sources]]
name = "stripe"
kind = "stripe"
secrets = ["whsec_x"]
[[sources]]
name = "github"
kind = "github"
secrets = ["s"]
[[sources.deliver]]
name = "ci"
command = ["/bin/true"]
"#,
            "test".into(),
            &crate::ingress::receive::registry::PROVIDERS,
        )
        .unwrap()
    }

    #[test]
    fn destinations_gone_from_the_config_are_named_with_their_counts() {
        let warnings = warnings(
            &config(),
            &[
                lane("github", "ci", 5, 5),
                lane("github", "old", 3, 9),
                lane("github", "once", 0, 1),
                lane("gone", "default", 0, 2),
            ],
        );
        assert_eq!(
            warnings,
            [
                r#"sources[1] ("github"): destination "old" is not in the config but holds 12 deliveries (3 pending); they are kept and not dispatched"#,
                r#"sources[1] ("github"): destination "once" is not in the config but holds 1 delivery (0 pending); it is kept and not dispatched"#,
                r#"source "gone" is not in the config but its destination "default" holds 2 deliveries (0 pending); they are kept and not dispatched"#,
            ]
        );
    }

    #[test]
    fn only_lanes_gone_from_the_config_are_waiting() {
        let pending = [
            ("github".to_owned(), "ci".to_owned(), 5),
            ("github".to_owned(), "old".to_owned(), 3),
            ("gone".to_owned(), "default".to_owned(), 2),
        ];
        assert_eq!(waiting(&config(), &pending), [&pending[1], &pending[2]]);
    }
}
