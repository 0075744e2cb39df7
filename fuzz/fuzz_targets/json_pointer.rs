//! JSON pointer extraction and body-based identification: each `@pointer`
//! line is read from the body with `Inbound::json_str` (what `order_key`
//! and the hmac kind's `id_pointer`/`event_type_pointer` use), and the kinds
//! that identify from the body (Stripe, Slack, Standard Webhooks, hmac with
//! pointers) identify it.
#![no_main]

use hookbox::config::{Encoding, Field, HmacConfig, IdFrom, PayloadPart, Secret};
use hookbox::ingress::receive::payload::Inbound;
use hookbox::ingress::receive::{hmac::Hmac, slack::Slack, standard::Standard, stripe};
use hookbox_fuzz::{Input, check_identified};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let headers = input.headers(|_| Vec::new());
    let req = Inbound::new(&headers, input.body);
    let pointers: Vec<String> = input
        .settings
        .iter()
        .filter(|(n, _)| *n == b"pointer")
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect();
    for pointer in &pointers {
        if let Some(value) = req.json_str(pointer) {
            assert!(!value.is_empty(), "empty string for {pointer:?}");
            // A value comes out of the body: never longer than it (numbers
            // are rendered as text, `1e5` as `100000.0`, so allow slack).
            assert!(value.len() <= input.body.len() + 32, "{pointer:?} grew");
        }
        let config = HmacConfig {
            header: "x-signature".into(),
            prefix: String::new(),
            encoding: Encoding::Hex,
            timestamp_header: None,
            signed_payload: vec![PayloadPart::Body],
            id: IdFrom::Field(Field::Pointer(pointer.clone())),
            event_type: Some(Field::Pointer(pointer.clone())),
        };
        let hmac = Hmac::new(&[Secret::new("k")], 300, &config);
        check_identified(hmac.identify(&req));
    }
    check_identified(stripe::identify(&req));
    check_identified(Slack::new(&[Secret::new("k")], 300).identify(&req));
    check_identified(Standard::new(&[Secret::new("whsec_a2V5")], 300).identify(&req));
});
