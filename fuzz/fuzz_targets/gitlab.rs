//! GitLab: `X-Gitlab-Token` equal to a configured secret.
#![no_main]

use hookbox::ingress::receive::gitlab::Gitlab;
use hookbox::ingress::receive::payload::Inbound;
use hookbox_fuzz::{Input, KEYS, check_identified, first, utf8_secrets};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let headers = input.headers(|_| Vec::new());
    let gitlab = Gitlab::new(&utf8_secrets());
    let req = Inbound::new(&headers, input.body);
    if gitlab.verify(&req).is_ok() {
        let token = first(&headers, "x-gitlab-token").expect("accepted without a token");
        assert!(KEYS.contains(&token), "accepted a wrong token: {token:?}");
    }
    check_identified(gitlab.identify(&req));
});
