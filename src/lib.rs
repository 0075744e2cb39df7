//! hookbox: a self-hosted webhook inbox on one SQLite file.
//!
//! Twelve parts, each a top-level module, and none imports one above it
//! (`tests/it/architecture.rs` checks it): [`config`], [`signature`] and
//! [`support`] at the bottom, then [`telemetry`], [`store`], [`edge`],
//! [`delivery`], [`alerts`], [`ingress`], [`catchup`], [`service`] and
//! [`cli`] at the top.
//!
//! # One request, followed through
//!
//! A provider POSTs to `/hooks/{source}` on the public listener.
//!
//! 1. [`ingress`] accepts it (`ingress::server`, with `ingress::tls` on the
//!    public listener when configured, and sockets from
//!    `ingress::activation` under systemd); [`service`] wires every part
//!    together and owns start-up and the order of shutdown.
//! 2. [`edge`] decides from the headers alone who the client is, whether it
//!    may post to this source, whether it has been failing verification,
//!    and how much body it may hold.
//! 3. `ingress::receive` reads the body and hands it to the source's
//!    verifier, one file per provider kind (`receive::github`,
//!    `receive::stripe`, ...), which checks the signature on the raw bytes
//!    and yields the delivery id, event type and ordering key, or a
//!    handshake answer that is never stored. Each such file implements
//!    `receive::provider::Provider` (its facts for validation, kept
//!    headers, verify, identify, handshakes) and is one line of
//!    `receive::registry`, the table of kinds config validation is handed.
//!    [`config::route`] picks the destinations whose filters take it.
//! 4. [`store`] owns the database. A resend of a recently stored key is
//!    answered at once (`store::ingest`); anything else becomes a write
//!    for the writer thread (`store::writer`), the only connection that
//!    writes. Every write is a `store::write::Write` that its feature
//!    defines beside its SQL (`store::ingest`, `store::deliveries`,
//!    `store::catchup`, ...), so the writer knows none of them; the CLI
//!    sends the same writes to a writer of its own (`store::open_for_cli`).
//!    The writer commits whatever is queued as one group: the event and one
//!    delivery row per destination, and the hour's traffic counters. The
//!    syncer thread fsyncs the WAL and only then answers the group, so a
//!    `2xx` means the event is on disk; the checkpointer copies the WAL
//!    into the database file off that path. When the writer has nothing to
//!    do (`store::writer::idle`) it indexes new bodies for search
//!    (`store::search`), in steps of at most 2 ms, and records the requests
//!    `/hooks/*` refused (`store::rejections`), which the receive path only
//!    dropped into a bounded buffer.
//!
//! # After the answer
//!
//! * [`delivery`] is the core every destination kind stands on: one
//!   attempt contract (`delivery::Destination`), the settle rule
//!   (`delivery::settle`: retry with backoff, or dead), the circuit
//!   breaker, the pause board, and replay planning. `delivery::push`
//!   claims due deliveries through the writer, one lane per destination,
//!   runs each attempt (an HTTP POST signed the Standard Webhooks way, a
//!   command with placeholders, never a shell, or a publish to a broker:
//!   NATS, Redis, RabbitMQ, MQTT) and sends its outcome back
//!   to the writer; backoff, `rate`, the circuit breaker and pauses decide
//!   when a lane may go on. A destination's jq `transform` runs before its
//!   attempt, in transform processes of hookbox's own
//!   (`delivery::transform`), so that no program can take the server
//!   down; `delivery::push::trial` runs filter and transform over stored
//!   events for `hookbox try`. `delivery::pull` hands the deliveries of pull
//!   destinations to consumers instead, and `cli::listen` is such a
//!   consumer (`hookbox listen`).
//! * [`catchup`] asks providers for what they will not resend by
//!   themselves: GitHub, GitLab and Paddle are asked to send again, Stripe
//!   and Square events are fetched; each pass is written to the
//!   completeness ledger (`store::ledger`).
//! * [`alerts`] watches for dead deliveries, refusals, backlog, storage and
//!   certificate trouble and tells a person; `service::maintenance` runs
//!   retention and backup snapshots on their intervals.
//! * `service::admin` serves the admin listener: the JSON API, the pull
//!   API, `/metrics` (`telemetry::metrics`), `service::health` and the
//!   dashboard.
//!
//! # Around them
//!
//! [`config`] turns TOML into a validated `Config` with resolved secrets;
//! it is a leaf (it uses no other module here; the provider kinds are
//! handed to it by whoever loads it), so it also holds what
//! validation must parse exactly as the runtime reads it: destination
//! filters (`config::route`), command argv (`config::argv`), encoded keys
//! (`config::Secret`) and the TLS certificate pair (`config::cert`).
//! [`signature`] is the HMAC, the constant-time comparison and the Standard
//! Webhooks scheme that receive verifies with and delivery and alerts sign
//! with (like config, it imports nothing of hookbox). [`support`] holds
//! the small pieces every part uses: the wall clock the store and the
//! verifiers read (`support::clock`; tests can shift it), every answer
//! that is not "stored" (`support::error`), text cut to a length
//! (`support::excerpt`), the settings every outbound HTTP request shares
//! (`support::outbound`), and files only hookbox's user may read
//! (`support::private_file`). [`telemetry`] sets up logging and holds the
//! Prometheus metrics.
//!
//! [`cli`] is the `hookbox` command's verbs (`main.rs` only parses and
//! dispatches): each opens its own connection or runtime and calls the
//! parts above, and renders what they return for the terminal; it also
//! generates the man pages and completions (`cli::manual`).
//!
//! `docs/src/architecture.md` draws the same system by threads, channels
//! and connections.

pub mod alerts;
pub mod catchup;
pub mod cli;
pub mod config;
pub mod delivery;
pub mod edge;
pub mod ingress;
pub mod service;
pub mod signature;
pub mod store;
pub mod support;
pub mod telemetry;
