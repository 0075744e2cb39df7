//! GitHub: `X-Hub-Signature-256: sha256=<hex>` over the body.
#![no_main]

use hookbox::ingress::receive::github::GitHub;
use hookbox::ingress::receive::payload::Inbound;
use hookbox_fuzz::{Input, check_identified, first, is_hex_mac, utf8_secrets};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let body = input.body;
    let headers = input.headers(|_| vec![body.to_vec()]);
    let github = GitHub::new(&utf8_secrets());
    let req = Inbound::new(&headers, body);
    if github.verify(&req).is_ok() {
        let value = first(&headers, "x-hub-signature-256").expect("accepted without a header");
        let hex = value
            .strip_prefix(b"sha256=")
            .expect("accepted without sha256=");
        assert!(is_hex_mac(hex, &[body]), "accepted a wrong MAC: {value:?}");
    }
    check_identified(github.identify(&req));
});
