//! Bad input, auth, the generated root token and clean shutdown, against the
//! real binary over HTTP. Every refusal must come in the Cloudflare envelope
//! with the documented status and code, and must leave accepted data alone.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use common::{Server, ACCOUNT};
use serde_json::{json, Value};

// ---------------------------------------------------------------- helpers

/// Sends a raw body (or none) with an optional bearer token.
async fn raw(
    client: &reqwest::Client,
    token: Option<&str>,
    method: &str,
    url: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = client.request(method, url).timeout(Duration::from_secs(30));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b.to_owned());
    }
    let resp = req.send().await.expect("request sent");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON response {status}: {text}"));
    (status, v)
}

/// The Cloudflare error envelope with this status and code.
#[track_caller]
fn assert_error(got: &(u16, Value), status: u16, code: u64) {
    let (s, v) = got;
    assert_eq!(*s, status, "status (want code {code}): {v}");
    assert_eq!(v["success"], false, "{v}");
    assert_eq!(v["errors"][0]["code"], code, "{v}");
    assert!(
        v["errors"][0]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "an actionable message: {v}"
    );
    assert!(v["messages"].is_array(), "envelope has messages: {v}");
    assert!(v["result"].is_null(), "no result on failure: {v}");
}

async fn backlog(s: &Server, q: &str) -> u64 {
    let (status, v) = s.get(&format!("/queues/{q}/metrics")).await;
    assert_eq!(status, 200, "{v}");
    v["result"]["backlog_count"].as_u64().unwrap()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn text(body: String) -> Value {
    json!({"body": body, "content_type": "text"})
}

const UNKNOWN_QUEUE: &str = "0123456789abcdef0123456789abcdef";

// ------------------------------------------------------ message validation

#[tokio::test]
async fn bad_sends_are_refused_and_leave_the_backlog_alone() {
    let s = Server::start().await;
    let q = s.create_queue("validated", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let send = format!("/queues/{q}/messages");
    let batch = format!("/queues/{q}/messages/batch");
    let send_url = format!("{}{send}", s.base());
    let batch_url = format!("{}{batch}", s.base());

    assert_eq!(s.post(&send, text("keep-1".into())).await.0, 200);
    assert_eq!(
        s.post(
            &batch,
            json!({"messages": [text("keep-2".into()), {"body": {"n": 3}}]})
        )
        .await
        .0,
        200
    );
    let mut expected = 3;

    // (description, path, body, status, code)
    let big = "x".repeat(128_001);
    let cases: Vec<(&str, &str, Value, u16, u64)> = vec![
        (
            "text body over 128000 bytes",
            &send,
            text(big.clone()),
            413,
            10204,
        ),
        (
            "json body over 128000 bytes",
            &send,
            json!({"body": "y".repeat(127_999)}),
            413,
            10204,
        ),
        (
            "bytes body decoding to 128001 bytes",
            &send,
            json!({"body": b64(&vec![7u8; 128_001]), "content_type": "bytes"}),
            413,
            10204,
        ),
        (
            "oversize message inside a batch",
            &batch,
            json!({"messages": [text("ok".into()), text(big.clone())]}),
            413,
            10204,
        ),
        (
            "batch over 256000 bytes",
            &batch,
            json!({"messages": [text("a".repeat(100_000)), text("b".repeat(100_000)), text("c".repeat(56_001))]}),
            413,
            10205,
        ),
        (
            "batch of 101 messages",
            &batch,
            json!({"messages": (0..101).map(|i| json!({"body": i})).collect::<Vec<_>>()}),
            413,
            10206,
        ),
        (
            "content type v8",
            &send,
            json!({"body": "x", "content_type": "v8"}),
            400,
            10203,
        ),
        (
            "unknown content type",
            &send,
            json!({"body": "x", "content_type": "xml"}),
            400,
            10203,
        ),
        (
            "content type not a string",
            &send,
            json!({"body": "x", "content_type": 5}),
            400,
            10203,
        ),
        (
            "v8 inside a batch",
            &batch,
            json!({"messages": [{"body": 1}, {"body": "x", "content_type": "v8"}]}),
            400,
            10203,
        ),
        (
            "bytes body not base64",
            &send,
            json!({"body": "not base64!!", "content_type": "bytes"}),
            400,
            10203,
        ),
        (
            "text body not a string",
            &send,
            json!({"body": {"a": 1}, "content_type": "text"}),
            400,
            10203,
        ),
        (
            "delay over 86400",
            &send,
            json!({"body": 1, "delay_seconds": 86_401}),
            400,
            10202,
        ),
        (
            "negative delay",
            &send,
            json!({"body": 1, "delay_seconds": -1}),
            400,
            10202,
        ),
        (
            "fractional delay",
            &send,
            json!({"body": 1, "delay_seconds": 1.5}),
            400,
            10202,
        ),
        (
            "delay as a string",
            &send,
            json!({"body": 1, "delay_seconds": "soon"}),
            400,
            10202,
        ),
        (
            "batch delay out of range",
            &batch,
            json!({"delay_seconds": 90_000, "messages": [{"body": 1}]}),
            400,
            10202,
        ),
        (
            "message delay out of range in a batch",
            &batch,
            json!({"messages": [{"body": 1}, {"body": 2, "delay_seconds": 86_401}]}),
            400,
            10202,
        ),
        ("no body", &send, json!({"content_type": "json"}), 400, 10207),
        (
            "messages not an array",
            &batch,
            json!({"messages": "nope"}),
            400,
            10207,
        ),
        ("no messages", &batch, json!({}), 400, 10207),
        ("empty batch", &batch, json!({"messages": []}), 400, 10207),
        (
            "batch entry not an object",
            &batch,
            json!({"messages": [1, 2]}),
            400,
            10207,
        ),
    ];
    for (what, path, body, status, code) in cases {
        let got = s.post(path, body).await;
        assert!(
            got.0 == status && got.1["errors"][0]["code"] == code,
            "{what}: want {status}/{code}, got {} {}",
            got.0,
            got.1
        );
        assert_error(&got, status, code);
        assert_eq!(
            backlog(&s, &q).await,
            expected,
            "after {what}: accepted messages untouched"
        );
    }

    // Raw bodies: malformed JSON and JSON of the wrong shape.
    for (what, url, body, status, code) in [
        ("truncated JSON", &send_url, r#"{"body": "#, 400, 10208),
        ("not JSON at all", &send_url, "hello", 400, 10208),
        ("malformed batch", &batch_url, r#"{"messages": [1,}"#, 400, 10208),
        ("a JSON array", &send_url, r#"[{"body": 1}]"#, 400, 10207),
        ("a JSON string", &batch_url, r#""messages""#, 400, 10207),
    ] {
        let got = raw(&s.client, Some(&s.token), "POST", url, Some(body)).await;
        assert!(
            got.0 == status && got.1["errors"][0]["code"] == code,
            "{what}: want {status}/{code}, got {} {}",
            got.0,
            got.1
        );
        assert_error(&got, status, code);
        assert_eq!(backlog(&s, &q).await, expected, "after {what}");
    }

    // The limits themselves are accepted.
    assert_eq!(
        s.post(&send, text("z".repeat(128_000))).await.0,
        200,
        "exactly 128000 bytes is fine"
    );
    expected += 1;
    let (status, v) = s
        .post(
            &batch,
            json!({"messages": [text("a".repeat(128_000)), text("b".repeat(128_000))]}),
        )
        .await;
    assert_eq!(status, 200, "exactly 256000 bytes is fine: {v}");
    expected += 2;
    let (status, v) = s
        .post(
            &batch,
            json!({"messages": (0..100).map(|i| json!({"body": i})).collect::<Vec<_>>()}),
        )
        .await;
    assert_eq!(status, 200, "exactly 100 messages is fine: {v}");
    expected += 100;
    let (status, v) = s.post(&send, json!({"body": 1, "delay_seconds": 86_400})).await;
    assert_eq!(status, 200, "86400 s delay is fine: {v}");
    expected += 1;
    assert_eq!(backlog(&s, &q).await, expected);

    // And the first three are intact and deliverable.
    let pulled = s.pull(&q, json!({"batch_size": 3})).await;
    let msgs = pulled["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["body"], "keep-1");
    assert_eq!(msgs[1]["body"], "keep-2");
    assert_eq!(common::decode_json_body(&msgs[2]["body"]), json!({"n": 3}));
}

#[tokio::test]
async fn bad_pull_and_ack_requests_are_400_10207() {
    let s = Server::start().await;
    let q = s.create_queue("pull-checks", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    assert_eq!(
        s.send(&q, json!({"body": "m", "content_type": "text"})).await.0,
        200
    );
    let pull = format!("/queues/{q}/messages/pull");
    let ack = format!("/queues/{q}/messages/ack");
    let peek = format!("/queues/{q}/messages/peek");
    for (what, path, body) in [
        ("batch_size 0", &pull, json!({"batch_size": 0})),
        ("batch_size 101", &pull, json!({"batch_size": 101})),
        ("batch_size a string", &pull, json!({"batch_size": "ten"})),
        ("batch_size negative", &pull, json!({"batch_size": -1})),
        ("wait_ms 20001", &pull, json!({"wait_ms": 20_001})),
        ("wait_ms negative", &pull, json!({"wait_ms": -5})),
        (
            "visibility_timeout_ms 0",
            &pull,
            json!({"visibility_timeout_ms": 0}),
        ),
        (
            "visibility_timeout_ms over 12 h",
            &pull,
            json!({"visibility_timeout_ms": 43_200_001}),
        ),
        (
            "visibility_timeout over 12 h",
            &pull,
            json!({"visibility_timeout": 43_200_001}),
        ),
        ("acks not an array", &ack, json!({"acks": "x"})),
        ("ack entry without lease_id", &ack, json!({"acks": [{}]})),
        (
            "extension without a timeout",
            &ack,
            json!({"extensions": [{"lease_id": "x"}]}),
        ),
        (
            "extension timeout 0",
            &ack,
            json!({"extensions": [{"lease_id": "x", "visibility_timeout_ms": 0}]}),
        ),
        ("peek batch_size 101", &peek, json!({"batch_size": 101})),
    ] {
        let got = s.post(path, body).await;
        assert!(
            got.0 == 400 && got.1["errors"][0]["code"] == 10207,
            "{what}: got {} {}",
            got.0,
            got.1
        );
        assert_error(&got, 400, 10207);
    }
    let got = s
        .post(
            &ack,
            json!({"retries": [{"lease_id": "x", "delay_seconds": 86_401}]}),
        )
        .await;
    assert_error(&got, 400, 10202);
    // None of that leased or deleted anything.
    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["messages"]["ready"], 1, "{inspect}");
    let pulled = s
        .pull(
            &q,
            json!({"batch_size": 100, "wait_ms": 20_000, "visibility_timeout_ms": 43_200_000}),
        )
        .await;
    assert_eq!(
        pulled["messages"][0]["attempts"], 1,
        "the limits themselves are accepted"
    );
}

#[tokio::test]
async fn unknown_fields_in_request_bodies_are_ignored() {
    let s = Server::start().await;
    let (status, v) = s
        .post(
            "/queues",
            json!({"queue_name": "lenient", "wrangler_extra": 1, "settings": {"future_knob": true}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let q = v["result"]["queue_id"].as_str().unwrap().to_owned();
    let (status, v) = s
        .post(
            &format!("/queues/{q}/consumers"),
            json!({"type": "http_pull", "script_name": null, "extra": [1]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = s
        .send(
            &q,
            json!({"body": "x", "content_type": "text", "extra": {"a": 1}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = s
        .post(
            &format!("/queues/{q}/messages/batch"),
            json!({"messages": [{"body": 1, "x": 2}], "y": 3}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let pulled = s.pull(&q, json!({"batch_size": 10, "unknown": "field"})).await;
    let msgs = pulled["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    let acks: Vec<Value> = msgs
        .iter()
        .map(|m| json!({"lease_id": m["lease_id"], "note": "hi"}))
        .collect();
    assert_eq!(
        s.ack(&q, json!({"acks": acks, "whatever": true})).await["ackCount"],
        2
    );
}

/// A single message far past the request-body cap (2.2 MB) is still "message
/// too large" (10204), not "batch too large": the cap answers per route.
#[tokio::test]
async fn a_huge_single_message_is_10204() {
    let s = Server::start().await;
    let q = s.create_queue("huge", json!({})).await;
    let got = s
        .send(&q, json!({"body": "x".repeat(2_200_000), "content_type": "text"}))
        .await;
    assert_error(&got, 413, 10204);
}

// ------------------------------------------------------------------ queues

#[tokio::test]
async fn queue_errors() {
    let s = Server::start().await;
    let q = s.create_queue("taken", json!({})).await;
    let other = s.create_queue("other", json!({})).await;

    for name in [
        "Upper",
        "under_score",
        "-leading",
        "trailing-",
        "has.dot",
        "",
        &"a".repeat(64),
    ] {
        let got = s.post("/queues", json!({"queue_name": name})).await;
        assert!(got.0 == 400, "name {name:?}: {}", got.1);
        assert_error(&got, 400, 11003);
    }
    assert_error(&s.post("/queues", json!({})).await, 400, 10207);
    assert_eq!(
        s.post("/queues", json!({"queue_name": "a".repeat(63)})).await.0,
        200,
        "63 chars is fine"
    );

    assert_error(
        &s.post("/queues", json!({"queue_name": "taken"})).await,
        409,
        11009,
    );
    assert_error(
        &s.call(
            "PATCH",
            &format!("/queues/{other}"),
            Some(json!({"queue_name": "taken"})),
        )
        .await,
        409,
        11009,
    );
    assert_error(
        &s.call(
            "PUT",
            &format!("/queues/{other}"),
            Some(json!({"queue_name": "taken"})),
        )
        .await,
        409,
        11009,
    );
    assert_error(
        &s.call(
            "PATCH",
            &format!("/queues/{other}"),
            Some(json!({"queue_name": "Bad Name"})),
        )
        .await,
        400,
        11003,
    );

    for (method, path) in [
        ("GET", format!("/queues/{UNKNOWN_QUEUE}")),
        ("DELETE", format!("/queues/{UNKNOWN_QUEUE}")),
        ("GET", format!("/queues/{UNKNOWN_QUEUE}/metrics")),
        ("GET", format!("/queues/{UNKNOWN_QUEUE}/consumers")),
        ("POST", format!("/queues/{UNKNOWN_QUEUE}/messages")),
        ("POST", format!("/queues/{UNKNOWN_QUEUE}/messages/pull")),
        ("POST", format!("/queues/{UNKNOWN_QUEUE}/messages/ack")),
    ] {
        let body = (method == "POST").then(|| json!({"body": 1}));
        let got = s.call(method, &path, body).await;
        assert!(got.0 == 404, "{method} {path}: {}", got.1);
        assert_error(&got, 404, 11000);
    }
    let got = s
        .call(
            "PATCH",
            &format!("/queues/{UNKNOWN_QUEUE}"),
            Some(json!({"settings": {}})),
        )
        .await;
    assert_error(&got, 404, 11000);

    for bad_id in [
        "xyz",
        "0123456789ABCDEF0123456789ABCDEF",
        "0123456789abcdef0123456789abcde",
        "g123456789abcdef0123456789abcdef",
    ] {
        let got = s.get(&format!("/queues/{bad_id}")).await;
        assert!(got.0 == 400, "id {bad_id:?}: {}", got.1);
        assert_error(&got, 400, 10107);
        assert_error(
            &s.post(&format!("/queues/{bad_id}/messages"), json!({"body": 1}))
                .await,
            400,
            10107,
        );
    }

    for settings in [
        json!({"delivery_delay": 86_401}),
        json!({"delivery_delay": -1}),
        json!({"message_retention_period": 59}),
        json!({"message_retention_period": 1_209_601}),
        json!({"delivery_paused": "yes"}),
        json!("not an object"),
    ] {
        let got = s
            .post(
                "/queues",
                json!({"queue_name": "bad-settings", "settings": settings}),
            )
            .await;
        assert!(got.0 == 400, "settings {settings}: {}", got.1);
        assert_error(&got, 400, 100128);
        assert_error(
            &s.call(
                "PATCH",
                &format!("/queues/{q}"),
                Some(json!({"settings": settings})),
            )
            .await,
            400,
            100128,
        );
    }
    assert!(
        s.get("/queues?name=bad-settings").await.1["result"]
            .as_array()
            .unwrap()
            .is_empty(),
        "refused creations created nothing"
    );
    let (_, v) = s.get(&format!("/queues/{q}")).await;
    assert_eq!(
        v["result"]["settings"],
        json!({"delivery_delay": 0, "delivery_paused": false, "message_retention_period": 345600}),
        "refused updates changed nothing"
    );
    let ok = s
        .post("/queues", json!({"queue_name": "edge-settings", "settings": {"delivery_delay": 86_400, "message_retention_period": 60}}))
        .await;
    assert_eq!(ok.0, 200, "the range limits are accepted: {}", ok.1);
    let (_, list) = s.get("/queues").await;
    assert_eq!(
        list["result_info"]["total_count"], 4,
        "taken, other, a*63, edge-settings"
    );
}

// --------------------------------------------------------------- consumers

#[tokio::test]
async fn consumer_errors() {
    let s = Server::start().await;
    let q = s.create_queue("consumed", json!({})).await;
    let consumers = format!("/queues/{q}/consumers");

    // Pull without any consumer: 405 telling how to add one.
    let got = s.post(&format!("/queues/{q}/messages/pull"), json!({})).await;
    assert_error(&got, 405, 11006);
    assert!(
        got.1["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("http_pull"),
        "{}",
        got.1
    );

    for (what, body) in [
        (
            "batch_size 0",
            json!({"type": "http_pull", "settings": {"batch_size": 0}}),
        ),
        (
            "batch_size 101",
            json!({"type": "http_pull", "settings": {"batch_size": 101}}),
        ),
        (
            "max_retries 101",
            json!({"type": "http_pull", "settings": {"max_retries": 101}}),
        ),
        (
            "retry_delay 86401",
            json!({"type": "http_pull", "settings": {"retry_delay": 86_401}}),
        ),
        (
            "visibility_timeout_ms 0",
            json!({"type": "http_pull", "settings": {"visibility_timeout_ms": 0}}),
        ),
        (
            "visibility_timeout_ms over 12 h",
            json!({"type": "http_pull", "settings": {"visibility_timeout_ms": 43_200_001}}),
        ),
        (
            "max_wait_time_ms 60001",
            json!({"type": "worker", "script_name": "fn", "settings": {"max_wait_time_ms": 60_001}}),
        ),
        (
            "max_concurrency 0",
            json!({"type": "worker", "script_name": "fn", "settings": {"max_concurrency": 0}}),
        ),
        (
            "max_concurrency 251",
            json!({"type": "worker", "script_name": "fn", "settings": {"max_concurrency": 251}}),
        ),
        (
            "batch_size a string",
            json!({"type": "http_pull", "settings": {"batch_size": "5"}}),
        ),
        ("unknown type", json!({"type": "carrier_pigeon"})),
        ("no type", json!({})),
        (
            "own dead-letter queue",
            json!({"type": "http_pull", "dead_letter_queue": "consumed"}),
        ),
        (
            "invalid dead-letter queue name",
            json!({"type": "http_pull", "dead_letter_queue": "Not Valid"}),
        ),
    ] {
        let got = s.post(&consumers, body).await;
        assert!(got.0 == 400, "{what}: {}", got.1);
        assert_error(&got, 400, 100127);
    }
    let got = s
        .post(&consumers, json!({"type": "worker", "script_name": "missing-fn"}))
        .await;
    assert_error(&got, 400, 11001);
    assert!(
        got.1["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("missing-fn"),
        "names the function: {}",
        got.1
    );
    let (_, v) = s.get(&consumers).await;
    assert_eq!(v["result"], json!([]), "no refused consumer was created");

    let cid = s.add_pull_consumer(&q, json!({}), None).await;
    assert_error(
        &s.post(&consumers, json!({"type": "http_pull"})).await,
        409,
        11004,
    );
    assert_error(&s.get(&format!("{consumers}/{UNKNOWN_QUEUE}")).await, 404, 11002);
    let got = s
        .call(
            "PUT",
            &format!("{consumers}/{cid}"),
            Some(json!({"settings": {"batch_size": 1000}})),
        )
        .await;
    assert_error(&got, 400, 100127);
    let (_, v) = s.get(&format!("{consumers}/{cid}")).await;
    assert_eq!(
        v["result"]["settings"]["batch_size"], 5,
        "a refused update changed nothing"
    );

    // A worker consumer is not an http_pull one.
    let push = s.create_queue("pushed", json!({})).await;
    let (status, v) = s
        .call(
            "PUT",
            "/functions/handler",
            Some(json!({"url": "http://127.0.0.1:9/never"})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = s
        .post(
            &format!("/queues/{push}/consumers"),
            json!({"type": "worker", "script_name": "handler"}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_error(
        &s.post(&format!("/queues/{push}/messages/pull"), json!({})).await,
        405,
        11006,
    );
}

// ------------------------------------------------------ routes and methods

#[tokio::test]
async fn unknown_routes_and_wrong_methods() {
    let s = Server::start().await;
    let q = s.create_queue("routed", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    assert_eq!(s.send(&q, json!({"body": 1})).await.0, 200);
    let token = Some(s.token.as_str());
    let base = s.base();
    let root = s.root();
    for url in [
        format!("{root}/nope"),
        format!("{root}/client/v4/nope"),
        format!("{base}/nope"),
        format!("{base}/queues/{q}/nope"),
        format!("{base}/queues/{q}/messages/nope"),
    ] {
        let got = raw(&s.client, token, "GET", &url, None).await;
        assert!(got.0 == 404, "GET {url}: {}", got.1);
        assert_error(&got, 404, 7000);
    }
    for (method, url) in [
        ("DELETE", format!("{base}/queues")),
        ("PUT", format!("{base}/queues/{q}/messages")),
        ("GET", format!("{base}/queues/{q}/messages")),
        ("GET", format!("{base}/queues/{q}/messages/pull")),
        ("DELETE", format!("{base}/queues/{q}/messages/ack")),
        ("POST", format!("{base}/queues/{q}/metrics")),
        ("POST", format!("{base}/queues/{q}")),
        ("POST", format!("{root}/healthz")),
    ] {
        let got = raw(&s.client, token, method, &url, Some("{}")).await;
        assert!(got.0 == 405, "{method} {url}: {}", got.1);
        assert_error(&got, 405, 7001);
    }
    assert_eq!(backlog(&s, &q).await, 1, "nothing happened to the queue");
}

// -------------------------------------------------------------------- auth

#[tokio::test]
async fn requests_without_a_valid_token_are_401() {
    let s = Server::start().await;
    let q = s.create_queue("guarded", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    assert_eq!(
        s.send(&q, json!({"body": "kept", "content_type": "text"}))
            .await
            .0,
        200
    );
    let base = s.base();
    let routes = [
        ("GET", format!("{base}/queues"), None),
        (
            "POST",
            format!("{base}/queues"),
            Some(r#"{"queue_name": "sneaky"}"#),
        ),
        ("GET", format!("{base}/queues/{q}"), None),
        ("DELETE", format!("{base}/queues/{q}"), None),
        (
            "POST",
            format!("{base}/queues/{q}/messages"),
            Some(r#"{"body": 1}"#),
        ),
        ("POST", format!("{base}/queues/{q}/messages/pull"), Some("{}")),
        (
            "POST",
            format!("{base}/queues/{q}/purge"),
            Some(r#"{"delete_messages_permanently": true}"#),
        ),
        ("GET", format!("{}/client/v4/user/tokens/verify", s.root()), None),
    ];
    for (method, url, body) in &routes {
        let none = raw(&s.client, None, method, url, *body).await;
        assert!(none.0 == 401, "no token, {method} {url}: {}", none.1);
        assert_error(&none, 401, 10106);
        let wrong = raw(&s.client, Some("not-the-token"), method, url, *body).await;
        assert_error(&wrong, 401, 10106);
        let close = raw(&s.client, Some(&format!("{}x", s.token)), method, url, *body).await;
        assert_error(&close, 401, 10106);
    }
    // Not a bearer scheme at all.
    let resp = s
        .client
        .get(format!("{base}/queues"))
        .header("authorization", format!("Basic {}", s.token))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["errors"][0]["code"], 10106);

    // Nothing changed, and the right token works.
    assert_eq!(backlog(&s, &q).await, 1);
    let (_, list) = s.get("/queues").await;
    assert_eq!(
        list["result_info"]["total_count"], 1,
        "no queue was created without a token"
    );
    let verify = raw(
        &s.client,
        Some(&s.token),
        "GET",
        &format!("{}/client/v4/user/tokens/verify", s.root()),
        None,
    )
    .await;
    assert_eq!(verify.0, 200, "{}", verify.1);
    assert_eq!(verify.1["result"]["status"], "active");

    // Health checks need no token.
    for path in ["/healthz", "/readyz", "/client/v4/healthz"] {
        let resp = s.client.get(format!("{}{path}", s.root())).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
    }
}

#[tokio::test]
async fn accounts_never_see_each_others_queues() {
    let s = Server::start().await;
    let q = s.create_queue("shared-name", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    assert_eq!(
        s.send(&q, json!({"body": "a-only", "content_type": "text"}))
            .await
            .0,
        200
    );
    let b = format!("{}/client/v4/accounts/other-account", s.root());
    let token = s.token.clone();
    let call_b = |method: &'static str, path: String, body: Option<Value>| {
        let url = format!("{b}{path}");
        let token = token.clone();
        let s = &s;
        async move { s.call_as(&token, method, &url, body).await }
    };

    for (method, path, body) in [
        ("GET", format!("/queues/{q}"), None),
        ("GET", format!("/queues/{q}/metrics"), None),
        ("POST", format!("/queues/{q}/messages"), Some(json!({"body": 1}))),
        ("POST", format!("/queues/{q}/messages/pull"), Some(json!({}))),
        (
            "PATCH",
            format!("/queues/{q}"),
            Some(json!({"settings": {"delivery_paused": true}})),
        ),
        ("DELETE", format!("/queues/{q}"), None),
        (
            "POST",
            format!("/queues/{q}/purge"),
            Some(json!({"delete_messages_permanently": true})),
        ),
    ] {
        let got = call_b(method, path.clone(), body).await;
        assert!(got.0 == 404, "account B {method} {path}: {}", got.1);
        assert_error(&got, 404, 11000);
    }
    let (status, list) = call_b("GET", "/queues".into(), None).await;
    assert_eq!(status, 200);
    assert_eq!(list["result"], json!([]), "B's list is empty");
    assert_eq!(list["result_info"]["total_count"], 0);
    let (_, named) = call_b("GET", "/queues?name=shared-name".into(), None).await;
    assert_eq!(named["result"], json!([]));

    // Names are unique per account only.
    let (status, created) = call_b(
        "POST",
        "/queues".into(),
        Some(json!({"queue_name": "shared-name"})),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let qb = created["result"]["queue_id"].as_str().unwrap().to_owned();
    assert_ne!(qb, q);
    let (_, list_a) = s.get("/queues").await;
    assert_eq!(list_a["result"].as_array().unwrap().len(), 1);
    assert_eq!(list_a["result"][0]["queue_id"], q.as_str());
    assert_error(&s.get(&format!("/queues/{qb}")).await, 404, 11000);

    // A's queue is untouched.
    let (_, v) = s.get(&format!("/queues/{q}")).await;
    assert_eq!(v["result"]["settings"]["delivery_paused"], false);
    assert_eq!(backlog(&s, &q).await, 1);
    let pulled = s.pull(&q, json!({})).await;
    assert_eq!(pulled["messages"][0]["body"], "a-only");

    // An account id outside [A-Za-z0-9_-]{1,64} is refused.
    let bad = raw(
        &s.client,
        Some(&s.token),
        "GET",
        &format!("{}/client/v4/accounts/bad.account/queues", s.root()),
        None,
    )
    .await;
    assert_eq!(bad.0, 400, "{}", bad.1);
    assert_eq!(bad.1["success"], false);
}

/// Tokens created through the tokens API are limited to their scopes and
/// accounts: outside their grant they get 403 (10106).
#[tokio::test]
async fn scoped_and_account_limited_tokens_are_403_outside_their_grant() {
    let s = Server::start().await;
    let q = s.create_queue("scoped", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let tokens = format!("{}/client/v4/user/tokens", s.root());
    let create = |body: Value| {
        let (s, tokens) = (&s, tokens.clone());
        async move {
            let (status, v) = s.call_as(&s.token, "POST", &tokens, Some(body)).await;
            assert_eq!(status, 200, "create token: {v}");
            let r = &v["result"];
            let value = r["value"]
                .as_str()
                .or_else(|| r["token"].as_str())
                .expect("the token value, once");
            (value.to_owned(), r["id"].as_str().unwrap_or_default().to_owned())
        }
    };
    let (read_only, read_id) = create(json!({"name": "reader", "scopes": ["queues_read"]})).await;
    let (elsewhere, _) = create(
        json!({"name": "elsewhere", "scopes": ["queues_read", "queues_write"], "accounts": ["another"]}),
    )
    .await;
    let base = s.base();

    let got = s
        .call_as(&read_only, "GET", &format!("{base}/queues/{q}"), None)
        .await;
    assert_eq!(got.0, 200, "{}", got.1);
    assert_error(
        &s.call_as(
            &read_only,
            "POST",
            &format!("{base}/queues/{q}/messages"),
            Some(json!({"body": 1})),
        )
        .await,
        403,
        10106,
    );
    assert_error(
        &s.call_as(
            &read_only,
            "POST",
            &format!("{base}/queues/{q}/messages/pull"),
            Some(json!({})),
        )
        .await,
        403,
        10106,
    );
    assert_error(
        &s.call_as(&elsewhere, "GET", &format!("{base}/queues"), None)
            .await,
        403,
        10106,
    );

    let (status, list) = s.call_as(&s.token, "GET", &tokens, None).await;
    assert_eq!(status, 200);
    assert!(!list.to_string().contains(&read_only), "values are never listed");
    let (status, _) = s
        .call_as(&s.token, "DELETE", &format!("{tokens}/{read_id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_error(
        &s.call_as(&read_only, "GET", &format!("{base}/queues"), None)
            .await,
        401,
        10106,
    );
}

// -------------------------------------------------------- root token file

struct Hopper {
    child: Option<Child>,
    port: u16,
}

impl Hopper {
    /// Starts the binary on `dir` WITHOUT HOPPER_ROOT_TOKEN.
    async fn start(dir: &Path, client: &reqwest::Client) -> Hopper {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_hopper"))
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir)
            .env_remove("HOPPER_ROOT_TOKEN")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn hopper");
        let h = Hopper {
            child: Some(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{}/healthz", h.root())).send().await {
                if r.status().is_success() {
                    return h;
                }
            }
            assert!(Instant::now() < deadline, "hopper did not become healthy");
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }

    fn root(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn base(&self) -> String {
        format!("{}/client/v4/accounts/{ACCOUNT}", self.root())
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Hopper {
    fn drop(&mut self) {
        self.stop();
    }
}

#[tokio::test]
async fn generated_root_token_is_written_0600_works_and_is_reused() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let client = reqwest::Client::new();

    let mut first = Hopper::start(dir, &client).await;
    let path = dir.join("root-token");
    assert!(path.exists(), "root-token written on first start");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "root-token mode is {mode:o}");
    let content = std::fs::read_to_string(&path).unwrap();
    let token = content.trim().to_owned();
    assert!(token.len() >= 32, "a long random token: {token:?}");

    let (status, v) = raw(
        &client,
        Some(&token),
        "GET",
        &format!("{}/queues", first.base()),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = raw(
        &client,
        Some(&token),
        "POST",
        &format!("{}/queues", first.base()),
        Some(r#"{"queue_name": "from-root"}"#),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_error(
        &raw(&client, None, "GET", &format!("{}/queues", first.base()), None).await,
        401,
        10106,
    );
    assert_error(
        &raw(
            &client,
            Some("hopper_guess"),
            "GET",
            &format!("{}/queues", first.base()),
            None,
        )
        .await,
        401,
        10106,
    );
    first.stop();

    // Second start: the same file, the same token, the data still there.
    let second = Hopper::start(dir, &client).await;
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        content,
        "the token file is reused, not rewritten"
    );
    let (status, v) = raw(
        &client,
        Some(&token),
        "GET",
        &format!("{}/queues?name=from-root", second.base()),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"].as_array().unwrap().len(), 1);
    drop(second);

    // With HOPPER_ROOT_TOKEN set, both that and the stored root token work.
    let s = Server::start_in(dir, Vec::new()).await;
    let (status, _) = s.get("/queues").await;
    assert_eq!(status, 200, "HOPPER_ROOT_TOKEN works");
    let (status, v) = s
        .call_as(&token, "GET", &format!("{}/queues", s.base()), None)
        .await;
    assert_eq!(status, 200, "the stored root token still works alongside it: {v}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
}

// ----------------------------------------------------------------- SIGTERM

#[tokio::test]
async fn sigterm_exits_zero_and_keeps_data() {
    let mut s = Server::start().await;
    let q = s.create_queue("graceful", json!({"delivery_delay": 0})).await;
    s.add_pull_consumer(&q, json!({"batch_size": 9}), None).await;
    for i in 0..5 {
        assert_eq!(
            s.send(&q, json!({"body": format!("s{i}"), "content_type": "text"}))
                .await
                .0,
            200
        );
    }
    let batch: Vec<Value> = (0..20)
        .map(|i| json!({"body": format!("b{i}"), "content_type": "text"}))
        .collect();
    assert_eq!(
        s.post(&format!("/queues/{q}/messages/batch"), json!({"messages": batch}))
            .await
            .0,
        200
    );
    let leased = s.pull(&q, json!({"batch_size": 2})).await;
    let acked = leased["messages"][0].clone();
    assert_eq!(
        s.ack(&q, json!({"acks": [{"lease_id": acked["lease_id"]}]}))
            .await["ackCount"],
        1
    );

    let t = Instant::now();
    let status = s.terminate();
    let took = t.elapsed();
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(status.code(), Some(0));

    s.spawn().await;
    assert_eq!(
        backlog(&s, &q).await,
        24,
        "25 sent, 1 acked (shutdown took {took:?})"
    );
    let (_, v) = s.get(&format!("/queues/{q}")).await;
    assert_eq!(v["result"]["consumers"][0]["settings"]["batch_size"], 9);
    let pulled = s.pull(&q, json!({"batch_size": 100})).await;
    let bodies: std::collections::BTreeSet<String> = pulled["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !bodies.contains(acked["body"].as_str().unwrap()),
        "the acked message stays acked"
    );
    // One more was leased before the shutdown (30 s lease): 23 ready now.
    assert_eq!(bodies.len(), 23, "{bodies:?}");
}
