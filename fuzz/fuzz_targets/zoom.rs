//! Zoom: `x-zm-signature: v0=<hex>` over `v0:ts:body`, `ts` from
//! `x-zm-request-timestamp` (no window); answers `endpoint.url_validation`.
#![no_main]

use hookbox::ingress::receive::payload::{Handshake, Identified, Inbound};
use hookbox::ingress::receive::zoom::Zoom;
use hookbox_fuzz::{Input, check_identified, first, is_hex_mac, utf8_secrets};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let body = input.body;
    let headers = input.headers(|h| {
        let ts = first(h, "x-zm-request-timestamp").unwrap_or_default();
        vec![b"v0:".to_vec(), ts.to_vec(), b":".to_vec(), body.to_vec()]
    });
    let zoom = Zoom::new(&utf8_secrets());
    let req = Inbound::new(&headers, body);
    if zoom.verify(&req).is_ok() {
        let ts = first(&headers, "x-zm-request-timestamp").expect("accepted without ts");
        assert!(
            !ts.is_empty() && ts.iter().all(u8::is_ascii_digit),
            "accepted a bad timestamp: {ts:?}"
        );
        let value = first(&headers, "x-zm-signature").expect("accepted without a header");
        let hex = value.strip_prefix(b"v0=").expect("accepted without v0=");
        assert!(
            is_hex_mac(hex, &[b"v0:", ts, b":", body]),
            "accepted a wrong MAC: {value:?}"
        );
        // A verified validation is answered with some key's MAC of the token.
        if let Ok(Identified::Handshake(Handshake::Json(answer))) = zoom.identify(&req) {
            let token = answer["plainToken"].as_str().expect("plainToken");
            let encrypted = answer["encryptedToken"].as_str().expect("encryptedToken");
            assert!(is_hex_mac(encrypted.as_bytes(), &[token.as_bytes()]));
        }
    }
    check_identified(zoom.identify(&req));
});
