//! Shopify: `X-Shopify-Hmac-Sha256: <base64>` (or `Shopify-Hmac-Sha256`)
//! over the body.
#![no_main]

use hookbox::ingress::receive::payload::Inbound;
use hookbox::ingress::receive::shopify::Shopify;
use hookbox_fuzz::{Input, check_identified, first, is_b64_mac, utf8_secrets};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let body = input.body;
    let headers = input.headers(|_| vec![body.to_vec()]);
    let shopify = Shopify::new(&utf8_secrets());
    let req = Inbound::new(&headers, body);
    if shopify.verify(&req).is_ok() {
        let value = first(&headers, "x-shopify-hmac-sha256")
            .or_else(|| first(&headers, "shopify-hmac-sha256"))
            .expect("accepted without a header");
        assert!(
            is_b64_mac(value, &[body]),
            "accepted a wrong MAC: {value:?}"
        );
    }
    check_identified(shopify.identify(&req));
});
