//! `hookbox healthcheck`: the container health check, a bare HTTP/1.0
//! `GET /readyz` to the admin listener, because a minimal image has
//! nothing else to run one with.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;

/// Exit 0 when the running server answers ready.
pub fn run(config: &Config) -> ExitCode {
    match healthcheck(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookbox healthcheck: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// No client library for one request.
fn healthcheck(config: &Config) -> anyhow::Result<()> {
    let mut addr = config.server.admin_listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let timeout = Duration::from_secs(3);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| anyhow::anyhow!("cannot connect to {addr}: {e}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut answer = String::new();
    stream.take(4096).read_to_string(&mut answer)?;
    let status = answer.lines().next().unwrap_or_default();
    anyhow::ensure!(
        status.split(' ').nth(1) == Some("200"),
        "{addr} answered {status:?}"
    );
    Ok(())
}
