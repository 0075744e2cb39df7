//! The pull API as a consumer speaks it: take (long-poll) and ack, over one
//! keep-alive HTTP/1.1 connection, reconnecting when the server closed it.
//!
//! Only what the bench reads of an answer is parsed: each event's
//! `delivery_id` (the `X-GitHub-Delivery` the load generator sent) and
//! `lease`.

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::Full;
use hyper::StatusCode;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use std::net::SocketAddr;
use std::time::Duration;

use crate::load;

/// One event of a take's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub delivery_id: String,
    pub lease: String,
}

/// What an ack answered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    pub acked: u64,
    pub stale: u64,
}

/// A consumer of one pull destination.
pub struct Client {
    addr: SocketAddr,
    /// `/pull/{source}/{destination}`.
    path: String,
    host: HeaderValue,
    auth: HeaderValue,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// Connections opened after the first.
    pub reconnects: u64,
}

impl Client {
    pub fn new(addr: SocketAddr, source: &str, destination: &str, token: &str) -> Result<Client> {
        Ok(Client {
            addr,
            path: format!("/pull/{source}/{destination}"),
            host: HeaderValue::from_str(&addr.to_string()).context("a host header")?,
            auth: HeaderValue::from_str(&format!("Bearer {token}"))
                .context("the token as a header value")?,
            sender: None,
            reconnects: 0,
        })
    }

    /// `POST {path}?max=&wait=`: the status, and the events of a 200.
    pub async fn take(&mut self, max: usize, wait: Duration) -> Result<(StatusCode, Vec<Taken>)> {
        let uri = format!("{}?max={max}&wait={}s", self.path, wait.as_secs());
        let (status, body) = self.post(&uri, Bytes::new()).await?;
        if status != StatusCode::OK {
            return Ok((status, Vec::new()));
        }
        Ok((status, events(&body)?))
    }

    /// `POST {path}/ack` with `leases`.
    pub async fn ack(&mut self, leases: &[String]) -> Result<Acked> {
        let body = serde_json::to_vec(&serde_json::json!({ "leases": leases }))
            .context("encoding an ack")?;
        let uri = format!("{}/ack", self.path);
        let (status, body) = self.post(&uri, Bytes::from(body)).await?;
        if status != StatusCode::OK {
            bail!(
                "ack answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            );
        }
        acked(&body)
    }

    async fn post(&mut self, uri: &str, body: Bytes) -> Result<(StatusCode, Bytes)> {
        let mut sender = match self.sender.take() {
            Some(s) if !s.is_closed() => s,
            previous => {
                if previous.is_some() {
                    self.reconnects += 1;
                }
                load::connect(self.addr).await?
            }
        };
        let mut req = hyper::Request::new(Full::new(body));
        *req.method_mut() = hyper::Method::POST;
        *req.uri_mut() = uri.parse().context("a pull URI")?;
        let h = req.headers_mut();
        h.insert(HOST, self.host.clone());
        h.insert(AUTHORIZATION, self.auth.clone());
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let answer = load::send(&mut sender, req).await?;
        self.sender = Some(sender);
        Ok(answer)
    }
}

/// The events of a take's `200 {"events": [...]}`.
fn events(body: &[u8]) -> Result<Vec<Taken>> {
    let v: serde_json::Value = serde_json::from_slice(body).context("a take's answer as JSON")?;
    let list = v["events"]
        .as_array()
        .context("a take's answer without an events list")?;
    list.iter()
        .map(|e| {
            let text = |k: &str| {
                e[k].as_str()
                    .map(str::to_owned)
                    .with_context(|| format!("an event without {k}"))
            };
            Ok(Taken {
                delivery_id: text("delivery_id")?,
                lease: text("lease")?,
            })
        })
        .collect()
}

/// `{"acked": N, "stale": [...]}`.
fn acked(body: &[u8]) -> Result<Acked> {
    let v: serde_json::Value = serde_json::from_slice(body).context("an ack's answer as JSON")?;
    Ok(Acked {
        acked: v["acked"]
            .as_u64()
            .context("an ack's answer without acked")?,
        stale: v["stale"].as_array().map_or(0, |s| s.len() as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_answer_gives_each_events_delivery_id_and_lease() {
        let body = br#"{"events": [
            {"id": 1, "delivery_id": "d-1", "event_type": "push", "lease": "5.9", "body_base64": "e30="},
            {"id": 2, "delivery_id": "d-2", "event_type": "push", "lease": "6.10", "body_base64": "e30="}
        ]}"#;
        let taken = events(body).unwrap();
        assert_eq!(
            taken,
            vec![
                Taken {
                    delivery_id: "d-1".into(),
                    lease: "5.9".into()
                },
                Taken {
                    delivery_id: "d-2".into(),
                    lease: "6.10".into()
                },
            ]
        );
        assert!(events(br#"{"events": []}"#).unwrap().is_empty());
        assert!(events(br#"{"error": "x"}"#).is_err());
        assert!(events(br#"{"events": [{"lease": "1.2"}]}"#).is_err());
    }

    #[test]
    fn an_ack_answer_counts_acked_and_stale() {
        assert_eq!(
            acked(br#"{"acked": 3, "stale": ["1.2"]}"#).unwrap(),
            Acked { acked: 3, stale: 1 }
        );
        assert_eq!(
            acked(br#"{"acked": 0, "stale": []}"#).unwrap(),
            Acked::default()
        );
        assert!(acked(br#"{"nacked": 1}"#).is_err());
    }
}
