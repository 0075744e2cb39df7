//! Square: `x-square-hmacsha256-signature: <base64>` over public URL +
//! `?query` + body; `@query` sets the request's query string.
#![no_main]

use hookbox::ingress::receive::payload::Inbound;
use hookbox::ingress::receive::square::Square;
use hookbox_fuzz::{Input, check_identified, first, is_b64_mac, utf8_secrets};
use libfuzzer_sys::fuzz_target;

const URL: &str = "https://hooks.example.com/hooks/square";

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let body = input.body;
    let query = input.setting("query");
    let signed_url = match &query {
        Some(q) => format!("{URL}?{q}"),
        None => URL.to_owned(),
    };
    let headers = input.headers(|_| vec![signed_url.as_bytes().to_vec(), body.to_vec()]);
    let square = Square::new(&utf8_secrets(), URL);
    let req = Inbound::new(&headers, body).with_query(query.as_deref());
    if square.verify(&req).is_ok() {
        let value =
            first(&headers, "x-square-hmacsha256-signature").expect("accepted without a header");
        assert!(
            is_b64_mac(value, &[signed_url.as_bytes(), body]),
            "accepted a wrong MAC: {value:?}"
        );
    }
    check_identified(square.identify(&req));
});
