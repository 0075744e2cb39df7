//! The table of destination kinds: the key that names each in a
//! `[[sources.deliver]]` table, and the function that checks it. A
//! destination sets exactly one of them; the rest of its table (name,
//! filter, retries, breaker, rate) is the same for every kind and checked
//! by `deliver.rs`.
//!
//! A new kind is its file (its raw table with `validate`, its validated
//! config: `super::broker::nats` is one), its field in `RawDeliver`, its
//! variant of [`Destination`], and one line here; the runtime side is one
//! file in `crate::delivery::push::broker` and its arm of
//! `crate::delivery::push::destination`.

use super::deliver::{self, Destination, RawDeliver};

/// One kind of destination.
pub(super) struct DestinationKind {
    /// Its key in a destination table.
    pub name: &'static str,
    /// Whether `raw` sets this kind's key.
    set: fn(&RawDeliver) -> bool,
    /// Checks it; `at` is the destination's key (`sources[0] ("github").deliver`).
    validate: fn(&RawDeliver, &str, &mut Vec<String>) -> Option<Destination>,
    /// Why a `signing_secret` is refused with this kind; `None`: it takes one.
    unsigned: Option<&'static str>,
}

/// A broker kind: its raw table's field `$field`, checked by the table's
/// own `validate` at `...deliver.$field`, becomes `Destination::$variant`.
macro_rules! broker {
    ($field:ident, $variant:ident) => {
        DestinationKind {
            name: stringify!($field),
            set: |raw| raw.$field.is_some(),
            validate: |raw, at, problems| {
                let table = raw.$field.as_ref()?;
                let at = format!("{at}.{}", stringify!($field));
                table.validate(&at, problems).map(Destination::$variant)
            },
            unsigned: Some("a broker is not sent signed requests"),
        }
    };
}

/// Every kind, in the order messages name them.
pub(super) const KINDS: &[DestinationKind] = &[
    DestinationKind {
        name: "url",
        set: |raw| raw.url.is_some(),
        validate: deliver::url_kind,
        unsigned: None,
    },
    DestinationKind {
        name: "command",
        set: |raw| raw.command.is_some(),
        validate: deliver::command_kind,
        unsigned: Some("a command is not sent signed requests"),
    },
    DestinationKind {
        name: "pull",
        set: |raw| raw.pull.is_some(),
        validate: deliver::pull_kind,
        unsigned: Some("a consumer takes events from hookbox"),
    },
    broker!(nats, Nats),
    broker!(redis, Redis),
    broker!(amqp, Amqp),
    broker!(mqtt, Mqtt),
];

/// The destination `raw` describes: exactly one kind's key must be set.
pub(super) fn validate(
    raw: &RawDeliver,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Destination> {
    let set: Vec<&DestinationKind> = KINDS.iter().filter(|k| (k.set)(raw)).collect();
    let kind = match set.as_slice() {
        [kind] => kind,
        [] => {
            problems.push(format!("{at}: set {}", names(" or ")));
            return None;
        }
        _ => {
            problems.push(format!("{at}: set only one of {}", names(" and ")));
            return None;
        }
    };
    if let Some(why) = kind.unsigned
        && raw.signing_secret.is_some()
    {
        problems.push(format!(
            "{at}.signing_secret: only for url destinations ({why})"
        ));
    }
    (kind.validate)(raw, at, problems)
}

/// `url, command, ... or mqtt`.
fn names(last: &str) -> String {
    let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
    match names.split_last() {
        Some((tail, init)) => format!("{}{last}{tail}", init.join(", ")),
        None => String::new(),
    }
}

impl Destination {
    /// The kind's key: `url`, `command`, `pull`, `nats`, ...
    pub fn kind(&self) -> &'static str {
        match self {
            Destination::Url { .. } => "url",
            Destination::Command { .. } => "command",
            Destination::Pull { .. } => "pull",
            Destination::Nats(_) => "nats",
            Destination::Redis(_) => "redis",
            Destination::Amqp(_) => "amqp",
            Destination::Mqtt(_) => "mqtt",
        }
    }

    /// Where it goes, safe to show (the dashboard, `/api/stats`): a URL's
    /// scheme, host and port, `/…` for its path and query (they may carry
    /// a token, the user part a password), a command's program, a broker's scheme, host and
    /// port with its subject, stream, exchange and key, or topic.
    pub fn target(&self) -> String {
        match self {
            Destination::Url { url, .. } => url.shown().to_owned(),
            Destination::Command { argv, .. } => argv.first().cloned().unwrap_or_default(),
            Destination::Pull { .. } => "the pull API".to_owned(),
            Destination::Nats(c) => format!("{} subject {}", c.url.shown(), c.subject.as_str()),
            Destination::Redis(c) => format!("{} stream {}", c.url.shown(), c.stream.as_str()),
            Destination::Amqp(c) => format!(
                "{} exchange {:?} routing key {}",
                c.url.shown(),
                c.exchange,
                c.routing_key.as_str()
            ),
            Destination::Mqtt(c) => format!("{} topic {}", c.url.shown(), c.topic.as_str()),
        }
    }
}
