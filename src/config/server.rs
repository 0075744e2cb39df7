//! The `[server]` table: listeners, the database and its durability, body
//! and timeout limits, and the optional TLS table (checked in `tls.rs`).
//!
//! It is read by most of hookbox as it is written (`Config::server` is the
//! raw table), so this module only adds the defaults and the checks of its
//! own fields; TLS and the edge settings that depend on it are checked by
//! their own modules.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ForwardedHeader, RawTls, duration, limits};

/// 25 MiB: GitHub's payload cap, the largest any provider documents.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 25 * 1024 * 1024;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawServer {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub database: PathBuf,
    pub durability: Durability,
    pub max_body_bytes: u64,
    /// How long a client may take to send its request headers.
    #[serde(with = "duration")]
    pub header_timeout: Duration,
    /// How long a client may take to send its body once headers are in.
    #[serde(with = "duration")]
    pub body_timeout: Duration,
    /// Requests waiting for the writer beyond this get 503 at once.
    pub writer_queue: usize,
    /// Peers (CIDRs or addresses) whose forwarding header names the client.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
    /// The header a trusted proxy sets: `x-forwarded-for` or `forwarded`.
    pub forwarded_header: ForwardedHeader,
    /// Connections each listener serves at once; past it, hookbox stops
    /// accepting until one closes (the kernel queues the rest).
    pub max_connections: usize,
    /// Certificate and key files; when set the public listener speaks
    /// only TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawTls>,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            database: default_database(),
            durability: Durability::Full,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            writer_queue: 8192,
            trusted_proxies: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            max_connections: 1024,
            tls: None,
        }
    }
}

/// `synchronous` for the write connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// `synchronous=FULL`: a 2xx survives power loss.
    Full,
    /// `synchronous=NORMAL`: a 2xx survives a crash of hookbox, but the last
    /// commits before a power loss may be lost.
    Normal,
}

/// `$STATE_DIRECTORY/hookbox.db` under systemd, else `./hookbox.db`.
fn default_database() -> PathBuf {
    std::env::var_os("STATE_DIRECTORY")
        .and_then(|dirs| std::env::split_paths(&dirs).next())
        .map(|dir| dir.join("hookbox.db"))
        .unwrap_or_else(|| PathBuf::from("hookbox.db"))
}

/// The checks of `[server]`'s own fields, in the order `hookbox check`
/// lists them.
pub(super) fn validate(server: &RawServer, problems: &mut Vec<String>) {
    limits::MAX_BODY_BYTES.check("server", server.max_body_bytes, problems);
    limits::WRITER_QUEUE.check("server", server.writer_queue, problems);
    limits::HEADER_TIMEOUT.check("server", server.header_timeout, problems);
    limits::BODY_TIMEOUT.check("server", server.body_timeout, problems);
    if server.listen == server.admin_listen && server.listen.port() != 0 {
        problems.push("server.admin_listen: must differ from server.listen".to_owned());
    }
}
