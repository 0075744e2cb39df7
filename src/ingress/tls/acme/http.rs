//! instant-acme's HTTP requests, made by hookbox's own outbound client
//! ([`crate::support::outbound`]): the same roots as every other request (with the
//! built-in fallback where the system has none), plus `directory_ca` for a
//! private CA, and one HTTP stack in the binary instead of two.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Context as _;
use axum::http;
use bytes::Bytes;
use http_body_util::BodyExt as _;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};

/// What one request to the ACME server may take.
const TIMEOUT: Duration = Duration::from_secs(30);

pub struct Client(reqwest::Client);

impl Client {
    /// Trusts the system's roots, and `directory_ca`'s certificates too.
    pub fn new(directory_ca: Option<&Path>) -> anyhow::Result<Client> {
        let extra = match directory_ca {
            Some(path) => {
                let pem = std::fs::read(path)
                    .with_context(|| format!("reading directory_ca {}", path.display()))?;
                reqwest::Certificate::from_pem_bundle(&pem).with_context(|| {
                    format!("directory_ca {}: not PEM certificates", path.display())
                })?
            }
            None => Vec::new(),
        };
        let client = crate::support::outbound::build(|| {
            extra.iter().cloned().fold(
                crate::support::outbound::builder().timeout(TIMEOUT),
                reqwest::ClientBuilder::add_root_certificate,
            )
        })
        .context("building the HTTP client for ACME")?;
        Ok(Client(client))
    }
}

impl HttpClient for Client {
    fn request(
        &self,
        req: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let client = self.0.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(never) => match never {},
            };
            let request = reqwest::Request::try_from(http::Request::from_parts(parts, body))
                .map_err(|e| instant_acme::Error::Other(Box::new(e)))?;
            let response = client
                .execute(request)
                .await
                .map_err(|e| instant_acme::Error::Other(Box::new(e)))?;
            Ok(BytesResponse::from(http::Response::from(response)))
        })
    }
}
