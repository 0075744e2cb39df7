//! Listeners handed over by systemd socket activation
//! (`systemd/hookbox.socket`): systemd binds the port, so port 443 needs no
//! capability in the service and a restart refuses no connection (they
//! wait in the socket's queue).
//!
//! One socket is the public listener; a second, if passed, the admin
//! listener, in the order the `.socket` unit lists them. Passed sockets take
//! the place of `server.listen` / `server.admin_listen`.

use anyhow::{Context as _, bail};

/// The sockets systemd passed, if any.
#[derive(Debug, Default)]
pub struct Inherited {
    pub public: Option<std::net::TcpListener>,
    pub admin: Option<std::net::TcpListener>,
}

impl Inherited {
    /// Takes the sockets named by `LISTEN_FDS` (when `LISTEN_PID` is this
    /// process). It removes those variables from the environment, so
    /// command destinations do not inherit them: call it before any other
    /// thread starts.
    pub fn from_env() -> anyhow::Result<Inherited> {
        let mut fds = listenfd::ListenFd::from_env();
        let count = fds.len();
        if count > 2 {
            bail!(
                "systemd passed {count} sockets; hookbox takes one (the public listener) or two (public, then admin)"
            );
        }
        let mut take = |i: usize, which: &str| {
            fds.take_tcp_listener(i)
                .with_context(|| format!("the {which} socket systemd passed (fd {})", 3 + i))
        };
        let public = take(0, "public")?;
        let admin = take(1, "admin")?;
        Ok(Inherited { public, admin })
    }
}

/// The inherited socket as a tokio listener, or `addr` bound anew.
pub async fn listener(
    inherited: Option<std::net::TcpListener>,
    addr: std::net::SocketAddr,
    which: &str,
) -> anyhow::Result<tokio::net::TcpListener> {
    match inherited {
        Some(socket) => {
            socket
                .set_nonblocking(true)
                .with_context(|| format!("the {which} socket systemd passed"))?;
            tracing::info!(
                listener = which,
                addr = ?socket.local_addr().ok(),
                "serving on the socket systemd passed (socket activation)"
            );
            tokio::net::TcpListener::from_std(socket)
                .with_context(|| format!("the {which} socket systemd passed"))
        }
        None => tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the {which} listener {addr}")),
    }
}
