//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=...]` over `t.body`.
#![no_main]

use hookbox::ingress::receive::payload::Inbound;
use hookbox::ingress::receive::stripe::Stripe;
use hookbox_fuzz::{Input, NOW, TOLERANCE, check_identified, first, is_hex_mac, timestamp_ok};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let body = input.body;
    // The MAC placeholders sign `$T.body`; the fuzzer decides whether the
    // header's `t` agrees.
    let headers =
        input.headers(|_| vec![NOW.to_string().into_bytes(), b".".to_vec(), body.to_vec()]);
    let stripe = Stripe::new(&hookbox_fuzz::utf8_secrets(), TOLERANCE);
    let req = Inbound::new(&headers, body);
    if stripe.verify(&req, NOW).is_ok() {
        // The oracle, from Stripe's documentation: exactly one `t`, a
        // timestamp within tolerance, and some `v1` the MAC of `t.body`.
        let value = first(&headers, "stripe-signature").expect("accepted without a header");
        let items: Vec<&[u8]> = value.split(|&b| b == b',').collect();
        let ts: Vec<&[u8]> = items.iter().filter_map(|i| i.strip_prefix(b"t=")).collect();
        assert_eq!(
            ts.len(),
            1,
            "accepted with {} t= items: {value:?}",
            ts.len()
        );
        assert!(timestamp_ok(ts[0]), "accepted a bad timestamp: {value:?}");
        let ok = items
            .iter()
            .filter_map(|i| i.strip_prefix(b"v1="))
            .any(|sig| is_hex_mac(sig, &[ts[0], b".", body]));
        assert!(ok, "accepted without a correct v1: {value:?}");
    }
    check_identified(stripe.identify(&req));
});
