//! Slack: `X-Slack-Signature: v0=<hex>` over `v0:ts:body`, `ts` from
//! `X-Slack-Request-Timestamp`.
#![no_main]

use hookbox::ingress::receive::payload::Inbound;
use hookbox::ingress::receive::slack::Slack;
use hookbox_fuzz::{Input, NOW, TOLERANCE, check_identified, first, is_hex_mac, timestamp_ok};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let body = input.body;
    let headers = input.headers(|h| {
        let ts = first(h, "x-slack-request-timestamp").unwrap_or_default();
        vec![b"v0:".to_vec(), ts.to_vec(), b":".to_vec(), body.to_vec()]
    });
    let slack = Slack::new(&hookbox_fuzz::utf8_secrets(), TOLERANCE);
    let req = Inbound::new(&headers, body);
    if slack.verify(&req, NOW).is_ok() {
        let ts = first(&headers, "x-slack-request-timestamp").expect("accepted without ts");
        assert!(timestamp_ok(ts), "accepted a bad timestamp: {ts:?}");
        let value = first(&headers, "x-slack-signature").expect("accepted without a header");
        let hex = value.strip_prefix(b"v0=").expect("accepted without v0=");
        assert!(
            is_hex_mac(hex, &[b"v0:", ts, b":", body]),
            "accepted a wrong MAC: {value:?}"
        );
    }
    check_identified(slack.identify(&req));
});
