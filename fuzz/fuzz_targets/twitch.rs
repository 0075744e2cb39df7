//! Twitch EventSub: `Twitch-Eventsub-Message-Signature: sha256=<hex>` over
//! message id + timestamp (RFC 3339) + body. `$T` is not RFC 3339, so the
//! accept path needs a timestamp within tolerance of the fuzz clock, as
//! in the seeds (2023-11-14T22:13:20Z).
#![no_main]

use hookbox::ingress::receive::payload::Inbound;
use hookbox::ingress::receive::twitch::Twitch;
use hookbox_fuzz::{Input, NOW, TOLERANCE, check_identified, first, is_hex_mac, utf8_secrets};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let body = input.body;
    let headers = input.headers(|h| {
        let id = first(h, "twitch-eventsub-message-id").unwrap_or_default();
        let ts = first(h, "twitch-eventsub-message-timestamp").unwrap_or_default();
        vec![id.to_vec(), ts.to_vec(), body.to_vec()]
    });
    let twitch = Twitch::new(&utf8_secrets(), TOLERANCE);
    let req = Inbound::new(&headers, body);
    if twitch.verify(&req, NOW).is_ok() {
        let id = first(&headers, "twitch-eventsub-message-id").expect("accepted without an id");
        let ts = first(&headers, "twitch-eventsub-message-timestamp").expect("accepted without ts");
        assert!(ts.ends_with(b"Z"), "accepted a non-UTC timestamp: {ts:?}");
        let value = first(&headers, "twitch-eventsub-message-signature").expect("no header");
        let hex = value
            .strip_prefix(b"sha256=")
            .expect("accepted without sha256=");
        assert!(
            is_hex_mac(hex, &[id, ts, body]),
            "accepted a wrong MAC: {value:?}"
        );
    }
    check_identified(twitch.identify(&req));
});
