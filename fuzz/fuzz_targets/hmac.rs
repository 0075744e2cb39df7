//! The generic HMAC kind: its `[sources.hmac]` table comes from the input's
//! `@` lines (`@header`, `@prefix`, `@encoding`, `@timestamp_header`,
//! `@signed_payload`, `@id_header`, `@id_pointer`, `@event_type_header`,
//! `@event_type_pointer`) and goes through real config validation; a valid
//! one then verifies and identifies the request.
#![no_main]

use std::time::Duration;

use hookbox::config::{Encoding, RawConfig, RawHmac, RawSource};
use hookbox::ingress::receive::hmac::Hmac;
use hookbox::ingress::receive::payload::Inbound;
use hookbox_fuzz::{
    Input, KEYS, NOW, TOLERANCE, check_identified, first, is_b64_mac, is_hex_mac, replace,
    timestamp_ok,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let raw_hmac = RawHmac {
        header: input
            .setting("header")
            .unwrap_or_else(|| "x-signature".to_owned()),
        prefix: input.setting("prefix").unwrap_or_default(),
        encoding: match input.setting("encoding").as_deref() {
            Some("base64") => Encoding::Base64,
            _ => Encoding::Hex,
        },
        timestamp_header: input.setting("timestamp_header"),
        signed_payload: input.setting("signed_payload"),
        id_header: input.setting("id_header"),
        id_pointer: input.setting("id_pointer"),
        event_type_header: input.setting("event_type_header"),
        event_type_pointer: input.setting("event_type_pointer"),
    };
    let template = raw_hmac.signed_payload.clone().unwrap_or_else(|| {
        if raw_hmac.timestamp_header.is_some() {
            "{timestamp}.{body}"
        } else {
            "{body}"
        }
        .to_owned()
    });
    let raw = RawConfig {
        sources: vec![{
            // Parsed, so a field added to sources later gets its default.
            let mut source: RawSource = toml::from_str("name = \"fuzz\"\nkind = \"hmac\"")
                .expect("a minimal source parses");
            source.secrets = KEYS
                .iter()
                .map(|k| String::from_utf8(k.to_vec()).unwrap())
                .collect();
            source.tolerance = Some(Duration::from_secs(TOLERANCE as u64));
            source.order_key = input.setting("order_key").into_iter().collect();
            source.hmac = Some(raw_hmac.clone());
            source
        }],
        ..RawConfig::default()
    };
    let Ok(config) = hookbox::config::validate(
        raw,
        "fuzz".into(),
        &hookbox::ingress::receive::registry::PROVIDERS,
    ) else {
        return;
    };
    let source = &config.sources[0];
    let hmac_config = source
        .hmac
        .as_ref()
        .expect("validated hmac source has its table");
    let body = input.body;
    // The signed string per the documented template: `{timestamp}` is the
    // timestamp header's raw value, `{body}` the body, the rest literal.
    let signed = |ts: &[u8]| {
        let with_ts = replace(template.as_bytes(), b"{timestamp}", ts);
        replace(&with_ts, b"{body}", body)
    };
    let ts_name = raw_hmac
        .timestamp_header
        .as_deref()
        .map(str::to_ascii_lowercase);
    let headers = input.headers(|h| {
        let ts = ts_name
            .as_deref()
            .and_then(|n| first(h, n))
            .unwrap_or_default();
        vec![signed(ts)]
    });
    let hmac = Hmac::new(
        &source.secrets,
        source.tolerance.as_secs() as i64,
        hmac_config,
    );
    let req = Inbound::new(&headers, body);
    if hmac.verify(&req, NOW).is_ok() {
        let ts: &[u8] = match &ts_name {
            Some(n) => {
                let ts = first(&headers, n).expect("accepted without its timestamp header");
                assert!(timestamp_ok(ts), "accepted a bad timestamp: {ts:?}");
                ts
            }
            None => b"",
        };
        let value = first(&headers, &raw_hmac.header.to_ascii_lowercase())
            .expect("accepted without a header");
        let encoded = value
            .strip_prefix(raw_hmac.prefix.as_bytes())
            .expect("accepted without the prefix");
        let message = signed(ts);
        let ok = match raw_hmac.encoding {
            Encoding::Hex => is_hex_mac(encoded, &[&message]),
            Encoding::Base64 => is_b64_mac(encoded, &[&message]),
        };
        assert!(ok, "accepted a wrong MAC: {value:?}");
    }
    check_identified(hmac.identify(&req));
    for pointer in &source.order_key {
        if let Some(key) = req.json_str(pointer) {
            assert!(!key.is_empty());
        }
    }
});
