//! Paddle: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=..]` over `ts:body`.
#![no_main]

use hookbox::ingress::receive::paddle::Paddle;
use hookbox::ingress::receive::payload::Inbound;
use hookbox_fuzz::{Input, NOW, TOLERANCE, check_identified, first, is_hex_mac, timestamp_ok};
use libfuzzer_sys::fuzz_target;

/// The `ts` element of a Paddle-Signature value, as the verifier splits it.
fn ts_of(value: &[u8]) -> Option<&[u8]> {
    value
        .split(|&b| b == b';')
        .find_map(|item| item.strip_prefix(b"ts="))
}

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let body = input.body;
    let headers = input.headers(|h| {
        let ts = first(h, "paddle-signature")
            .and_then(ts_of)
            .unwrap_or_default();
        vec![ts.to_vec(), b":".to_vec(), body.to_vec()]
    });
    let paddle = Paddle::new(&hookbox_fuzz::utf8_secrets(), TOLERANCE);
    let req = Inbound::new(&headers, body);
    if paddle.verify(&req, NOW).is_ok() {
        let value = first(&headers, "paddle-signature").expect("accepted without a header");
        let ts = ts_of(value).expect("accepted without ts");
        assert!(timestamp_ok(ts), "accepted a bad timestamp: {ts:?}");
        let signed = value
            .split(|&b| b == b';')
            .filter_map(|item| item.strip_prefix(b"h1="))
            .any(|hex| is_hex_mac(hex, &[ts, b":", body]));
        assert!(signed, "accepted a wrong MAC: {value:?}");
    }
    check_identified(paddle.identify(&req));
});
