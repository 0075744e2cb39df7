//! The HTTP client settings every outbound request shares: deliveries to
//! url destinations, catch-up's provider APIs, the named IP sets and ACME.
//!
//! None follows a redirect (a token or a signed body must not travel to
//! wherever a `Location` points; the public IP lists alone opt back in),
//! each names itself `hookbox/<version>`,
//! and each trusts the system's CA certificates. A system with none (a
//! minimal VM or image without Debian's `ca-certificates`) used to make
//! start-up fail right after READY, in a restart loop; hookbox then falls
//! back to the Mozilla roots compiled into it, with a warning.

use std::sync::Once;
use std::time::Duration;

/// How long a TCP (and TLS) connection may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The shared settings; callers add their own request timeout.
pub fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("hookbox/", env!("CARGO_PKG_VERSION")))
}

/// Builds the client `make` describes, trusting the system's roots, or
/// the bundled ones when the system has none.
pub fn build(make: impl Fn() -> reqwest::ClientBuilder) -> reqwest::Result<reqwest::Client> {
    make().build().or_else(|system| {
        let bundled = webpki_root_certs::TLS_SERVER_ROOT_CERTS
            .iter()
            .filter_map(|der| reqwest::Certificate::from_der(der).ok());
        let client = make().tls_certs_only(bundled).build().map_err(|_| system)?;
        static WARNED: Once = Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                "no CA certificates could be loaded from the system; trusting the Mozilla roots built into hookbox instead (install ca-certificates to use the system's)"
            )
        });
        Ok(client)
    })
}
