//! What `hookbox check` says about destinations that left the config but
//! not the database: their deliveries are kept (an operator may put the
//! destination back, or replay elsewhere) and never dispatched, which is
//! worth a warning but not a refusal.
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
        .filter_map(|lane| {
            let total = lane.pending + lane.delivered + lane.dead;
            let held = match total {
                1 => format!("1 delivery ({} pending); it is kept", lane.pending),
                n => format!("{n} deliveries ({} pending); they are kept", lane.pending),
            };
            let (source, destination) = (&lane.source, &lane.destination);
            let at = config.sources.iter().position(|s| s.name == *source);
            match at {
                Some(i)
                    if config.sources[i]
                        .destinations
                        .iter()
                        .any(|d| d.name == *destination) =>
                {
                    None
                }
                Some(i) => Some(format!(
                    "sources[{i}] ({source:?}): destination {destination:?} is not in the config \
                     but holds {held} and not dispatched"
                )),
                None => Some(format!(
                    "source {source:?} is not in the config but its destination {destination:?} \
                     holds {held} and not dispatched"
                )),
            }
        })
        .collect()
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
        }
    }

    #[test]
    fn destinations_gone_from_the_config_are_named_with_their_counts() {
        let config = crate::config::from_toml(
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
        )
        .unwrap();
        let warnings = warnings(
            &config,
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
}
