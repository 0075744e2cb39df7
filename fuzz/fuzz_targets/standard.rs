//! Standard Webhooks / Svix: `webhook-signature: v1,<base64> ...` over
//! `id.timestamp.body`, with the `svix-*` set when `svix-signature` is
//! present.
#![no_main]

use hookbox::config::Secret;
use hookbox::ingress::receive::payload::Inbound;
use hookbox::ingress::receive::standard::Standard;
use hookbox_fuzz::{
    Input, KEYS, NOW, TOLERANCE, b64, check_identified, first, is_b64_mac, timestamp_ok,
};
use http::HeaderMap;
use libfuzzer_sys::fuzz_target;

/// The (id, timestamp, signature) header names the spec says to read.
fn names(h: &HeaderMap) -> [&'static str; 3] {
    if h.contains_key("svix-signature") {
        ["svix-id", "svix-timestamp", "svix-signature"]
    } else {
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
    }
}

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let body = input.body;
    let headers = input.headers(|h| {
        let [id, ts, _] = names(h);
        let id = first(h, id).unwrap_or_default();
        let ts = first(h, ts).unwrap_or_default();
        vec![
            id.to_vec(),
            b".".to_vec(),
            ts.to_vec(),
            b".".to_vec(),
            body.to_vec(),
        ]
    });
    // Standard Webhooks secrets are `whsec_` + base64 of the key.
    let secrets: Vec<Secret> = KEYS
        .iter()
        .map(|k| Secret::new(format!("whsec_{}", b64(k))))
        .collect();
    let standard = Standard::new(&secrets, TOLERANCE);
    let req = Inbound::new(&headers, body);
    if standard.verify(&req, NOW).is_ok() {
        let [id_name, ts_name, sig_name] = names(&headers);
        let id = first(&headers, id_name).expect("accepted without an id");
        assert!(!id.is_empty() && !id.contains(&b'.'), "accepted id {id:?}");
        let ts = first(&headers, ts_name).expect("accepted without a timestamp");
        assert!(timestamp_ok(ts), "accepted a bad timestamp: {ts:?}");
        let value = first(&headers, sig_name).expect("accepted without a signature");
        let ok = value
            .split(|&b| b == b' ')
            .filter_map(|e| e.strip_prefix(b"v1,"))
            .any(|sig| is_b64_mac(sig, &[id, b".", ts, b".", body]));
        assert!(ok, "accepted without a correct v1: {value:?}");
    }
    check_identified(standard.identify(&req));
});
