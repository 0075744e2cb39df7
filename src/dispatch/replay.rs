//! Whether an event may be replayed, and why not, in the same words for
//! the admin API, the dashboard and `hookbox replay ID`.

use crate::store::queries::EventState;

/// Why event `id` cannot be replayed, as a reason code and a message;
/// `None` if it can (its source's destination aside).
pub fn refusal(event: &EventState, id: i64) -> Option<(&'static str, String)> {
    let reason = match event.state.as_str() {
        "dead" | "delivered" if event.has_body => return None,
        "dead" | "delivered" => {
            return Some((
                "body_dropped",
                format!(
                    "event {id} no longer has its body (retention.body_days dropped it), \
                     so it cannot be delivered again"
                ),
            ));
        }
        "pending" => "already_pending",
        _ => "not_replayable",
    };
    Some((
        reason,
        format!(
            "event {id} is {}; only dead and delivered events can be replayed",
            event.state
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(state: &str, has_body: bool) -> EventState {
        EventState {
            source: "s".into(),
            state: state.into(),
            has_body,
        }
    }

    #[test]
    fn only_dead_and_delivered_events_with_their_body_are_replayed() {
        assert_eq!(refusal(&event("dead", true), 1), None);
        assert_eq!(refusal(&event("delivered", true), 1), None);
        let reason = |state, body| refusal(&event(state, body), 7).map(|(r, _)| r);
        assert_eq!(reason("delivered", false), Some("body_dropped"));
        assert_eq!(reason("dead", false), Some("body_dropped"));
        assert_eq!(reason("pending", true), Some("already_pending"));
        assert_eq!(reason("stored", true), Some("not_replayable"));
    }
}
