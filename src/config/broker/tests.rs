use crate::config::{Config, ConfigError, Destination, from_toml};

fn load(table: &str) -> Result<Config, ConfigError> {
    from_toml(
        &format!(
            "[[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"s\"]\ndeliver = {{ {table} }}\n"
        ),
        "test".to_owned(),
        &crate::ingress::receive::registry::PROVIDERS,
    )
}

fn problems(table: &str) -> String {
    load(table).unwrap_err().to_string()
}

const AT: &str = "sources[0] (\"github\").deliver";

#[test]
fn each_broker_table_loads_with_its_defaults() {
    let config =
        load(r#"mqtt = { url = "mqtt://u:p@127.0.0.1:1883", topic = "hooks/{source}/{/repo}" }"#)
            .unwrap();
    let Destination::Mqtt(mqtt) = &config.sources[0].destinations[0].destination else {
        panic!("{config:?}")
    };
    assert_eq!(mqtt.qos, 1);
    assert_eq!(mqtt.url.shown(), "mqtt://127.0.0.1:1883");
    let debug = format!("{config:?}");
    assert!(!debug.contains("u:p@"), "{debug}");
    for table in [
        r#"nats = { url = "nats+tls://n:4222", subject = "a.{event_type}" }"#,
        r#"redis = { url = "rediss://r:6380/2", stream = "s:{source}", maxlen = 10 }"#,
        r#"amqp = { url = "amqp://a/%2f", exchange = "", routing_key = "q" }"#,
    ] {
        load(table).unwrap_or_else(|e| panic!("{table}: {e}"));
    }
}

#[test]
fn a_broker_destination_defaults_to_more_publishes_in_flight_than_url() {
    let concurrency = |table: &str| {
        load(table)
            .unwrap_or_else(|e| panic!("{table}: {e}"))
            .sources[0]
            .destinations[0]
            .concurrency
    };
    for table in [
        r#"nats = { url = "nats://n:4222", subject = "a" }"#,
        r#"redis = { url = "redis://r:6379", stream = "s" }"#,
        r#"amqp = { url = "amqp://a/%2f", exchange = "", routing_key = "q" }"#,
        r#"mqtt = { url = "mqtt://m:1883", topic = "t" }"#,
    ] {
        assert_eq!(concurrency(table), super::CONCURRENCY, "{table}");
        assert_eq!(
            concurrency(&format!("{table}, concurrency = 2")),
            2,
            "{table}"
        );
    }
    assert_eq!(super::CONCURRENCY, 64);
    assert_eq!(
        concurrency(
            r#"url = "http://127.0.0.1:9/", signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw""#
        ),
        crate::config::deliver::DEFAULT_URL_CONCURRENCY
    );
    let refused = problems(r#"redis = { url = "redis://r:6379", stream = "s" }, concurrency = 0"#);
    assert!(refused.contains(&format!("{AT}.concurrency")), "{refused}");
}

#[test]
fn each_problem_is_named_under_its_key_and_never_shows_the_url() {
    for (table, needle) in [
        (
            r#"nats = { url = "redis://user:hunter2@h", subject = "a" }"#,
            format!("{AT}.nats.url ([redacted]): the scheme must be nats, tls or nats+tls"),
        ),
        (
            r#"nats = { url = "nats://h", subject = "a.*" }"#,
            format!(r#"{AT}.nats.subject: "a.*" is not a valid subject: no wildcard"#),
        ),
        (
            r#"nats = { url = "nats://h", subject = "a..{source}" }"#,
            format!("{AT}.nats.subject: \"a..{{source}}\" is not a valid subject: no empty token"),
        ),
        (
            r#"nats = { url = "env:HOOKBOX_TEST_UNSET_NATS", subject = "a" }"#,
            format!("{AT}.nats.url (env:HOOKBOX_TEST_UNSET_NATS): environment variable"),
        ),
        (
            r#"redis = { url = "redis://:hunter2@", stream = "s" }"#,
            format!("{AT}.redis.url ([redacted]): "),
        ),
        (
            r#"redis = { url = "redis://h", stream = "s", maxlen = 0 }"#,
            format!("{AT}.redis.maxlen: 0 is under the minimum of 1"),
        ),
        (
            r#"amqp = { url = "amqp://h", exchange = "a b", routing_key = "k" }"#,
            format!(r#"{AT}.amqp.exchange: "a b" is not an exchange name"#),
        ),
        (
            r#"mqtt = { url = "mqtt://h", topic = "$SYS/x" }"#,
            format!("{AT}.mqtt.topic: \"$SYS/x\" is not a valid topic"),
        ),
        (
            r#"mqtt = { url = "mqtt://h", topic = "a/+" }"#,
            format!("{AT}.mqtt.topic: \"a/+\" is not a valid topic: no wildcard"),
        ),
        (
            r#"mqtt = { url = "mqtt://h", topic = "t", qos = 0 }"#,
            format!("{AT}.mqtt.qos: 0 is under the minimum of 1"),
        ),
        (
            r#"mqtt = { url = "mqtt://h", topic = "t", qos = 3 }"#,
            format!("{AT}.mqtt.qos: 3 is over the maximum of 2"),
        ),
        (
            r#"nats = { url = "nats://h", subject = "a" }, signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw""#,
            format!(
                "{AT}.signing_secret: only for url destinations (a broker is not sent signed requests)"
            ),
        ),
        (
            r#"nats = { url = "nats://h", subject = "a" }, redis = { url = "redis://h", stream = "s" }"#,
            format!("{AT}: set only one of url, command, pull, nats, redis, amqp and mqtt"),
        ),
    ] {
        let text = problems(table);
        assert!(text.contains(&needle), "{table}:\n{text}\nwanted {needle}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}
