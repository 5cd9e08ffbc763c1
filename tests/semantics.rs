//! Delivery semantics (README "What it does", RELIABILITY.md) and the message routes,
//! exercised end to end against the real binary over HTTP.
//!
//! Timing: lease timeouts are ~1 s and the tests sleep ~2 s past them; lower
//! bounds ("not visible before") are checked against the server's own clock
//! semantics, upper bounds are generous so a slow machine does not flake.

mod common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use common::{decode_json_body, Server};
use serde_json::{json, Value};

// ---------------------------------------------------------------- helpers

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(v: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().expect("base64 string"))
        .expect("valid base64")
}

fn messages(pulled: &Value) -> Vec<Value> {
    pulled["messages"].as_array().expect("messages array").clone()
}

/// Bodies of text messages (they come back as plain strings).
fn bodies(msgs: &[Value]) -> BTreeSet<String> {
    msgs.iter()
        .map(|m| m["body"].as_str().expect("text body").to_owned())
        .collect()
}

fn by_body<'a>(msgs: &'a [Value], body: &str) -> &'a Value {
    msgs.iter()
        .find(|m| m["body"] == body)
        .unwrap_or_else(|| panic!("no message with body {body:?} in {msgs:?}"))
}

fn lease(m: &Value) -> String {
    m["lease_id"].as_str().expect("lease_id").to_owned()
}

async fn send_text(s: &Server, q: &str, body: &str, delay: Option<u64>) -> Value {
    let mut req = json!({"body": body, "content_type": "text"});
    if let Some(d) = delay {
        req["delay_seconds"] = json!(d);
    }
    let (status, v) = s.send(q, req).await;
    assert_eq!(status, 200, "send: {v}");
    assert_eq!(v["success"], true);
    v["result"].clone()
}

async fn send_batch(s: &Server, q: &str, body: Value) -> Value {
    let (status, v) = s.post(&format!("/queues/{q}/messages/batch"), body).await;
    assert_eq!(status, 200, "send batch: {v}");
    v["result"].clone()
}

async fn pull_msgs(s: &Server, q: &str, body: Value) -> Vec<Value> {
    messages(&s.pull(q, body).await)
}

/// A pull with a hard client-side timeout, and how long it took.
async fn timed_pull(s: &Server, q: &str, body: Value) -> (Vec<Value>, Duration) {
    let start = Instant::now();
    let pulled = tokio::time::timeout(Duration::from_secs(30), s.pull(q, body))
        .await
        .expect("pull answered within 30 s");
    (messages(&pulled), start.elapsed())
}

async fn metrics(s: &Server, q: &str) -> Value {
    let (status, v) = s.get(&format!("/queues/{q}/metrics")).await;
    assert_eq!(status, 200, "metrics: {v}");
    v["result"].clone()
}

async fn backlog(s: &Server, q: &str) -> u64 {
    metrics(s, q).await["backlog_count"]
        .as_u64()
        .expect("backlog_count")
}

async fn peek(s: &Server, q: &str, body: Value) -> Vec<Value> {
    let (status, v) = s.post(&format!("/queues/{q}/messages/peek"), body).await;
    assert_eq!(status, 200, "peek: {v}");
    messages(&v["result"])
}

/// The queues of the test account called `name` (0 or 1 of them).
async fn queues_named(s: &Server, name: &str) -> Vec<Value> {
    let (status, v) = s.get(&format!("/queues?name={name}")).await;
    assert_eq!(status, 200, "list: {v}");
    v["result"].as_array().expect("queue list").clone()
}

/// Polls `check` every 100 ms until it returns Some, or panics after `limit`.
async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

// ------------------------------------------------------ leases & visibility

#[tokio::test]
async fn unacked_message_becomes_visible_again_after_lease_expires() {
    let s = Server::start().await;
    let q = s.create_queue("leases", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "hello", None).await;

    let first = pull_msgs(&s, &q, json!({"visibility_timeout_ms": 1000})).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["attempts"], 1);
    assert_eq!(first[0]["body"], "hello");
    let id = first[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32, "message ids are 32 hex chars: {id}");
    assert!(id.bytes().all(|c| c.is_ascii_hexdigit()));

    // Leased: invisible to other pullers.
    assert!(pull_msgs(&s, &q, json!({})).await.is_empty());
    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["messages"]["leased"], 1);
    assert_eq!(inspect["messages"]["ready"], 0);

    sleep_ms(2000).await;
    let again = pull_msgs(&s, &q, json!({"visibility_timeout_ms": 60000})).await;
    assert_eq!(again.len(), 1, "redelivered after the lease expired");
    assert_eq!(again[0]["id"], id.as_str());
    assert_eq!(again[0]["attempts"], 2);
    assert_eq!(again[0]["body"], "hello");
    assert_ne!(
        again[0]["lease_id"], first[0]["lease_id"],
        "a new delivery has a new lease id"
    );
}

#[tokio::test]
async fn concurrent_pullers_get_disjoint_sets_covering_everything() {
    let s = Arc::new(Server::start().await);
    let q = s.create_queue("concurrent", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    for half in 0..2 {
        let batch: Vec<Value> = (0..100)
            .map(|i| json!({"body": format!("m{}", half * 100 + i), "content_type": "text"}))
            .collect();
        send_batch(&s, &q, json!({"messages": batch})).await;
    }
    assert_eq!(backlog(&s, &q).await, 200);

    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            let q = q.clone();
            tokio::spawn(async move {
                pull_msgs(&s, &q, json!({"batch_size": 25, "visibility_timeout_ms": 60000})).await
            })
        })
        .collect();
    let mut ids = HashSet::new();
    let mut all = Vec::new();
    for t in tasks {
        let got = t.await.expect("puller task");
        assert_eq!(
            got.len(),
            25,
            "each of 8 pullers gets a full batch of 25 out of 200"
        );
        for m in got {
            assert_eq!(m["attempts"], 1);
            assert!(
                ids.insert(m["id"].as_str().unwrap().to_owned()),
                "message {} delivered to two pullers",
                m["id"]
            );
            all.push(m);
        }
    }
    let expected: BTreeSet<String> = (0..200).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies(&all), expected, "together the pullers got every message");
    assert!(
        pull_msgs(&s, &q, json!({"batch_size": 100})).await.is_empty(),
        "nothing left to pull"
    );

    let acks: Vec<Value> = all.iter().map(|m| json!({"lease_id": m["lease_id"]})).collect();
    let acked = s.ack(&q, json!({"acks": acks})).await;
    assert_eq!(acked["ackCount"], 200);
    assert_eq!(backlog(&s, &q).await, 0);
}

#[tokio::test]
async fn concurrent_long_pollers_share_arriving_messages_disjointly() {
    let s = Arc::new(Server::start().await);
    let q = s.create_queue("waiting-room", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            let q = q.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while got.len() < 25 {
                    let (more, _) =
                        timed_pull(&s, &q, json!({"batch_size": 25 - got.len(), "visibility_timeout_ms": 60000, "wait_ms": 5000})).await;
                    if more.is_empty() {
                        break;
                    }
                    got.extend(more);
                }
                got
            })
        })
        .collect();
    eventually(Duration::from_secs(10), "8 long pollers waiting", || async {
        (s.inspect(&q).await["long_pollers"] == 8).then_some(())
    })
    .await;
    for half in 0..2 {
        let batch: Vec<Value> = (0..100)
            .map(|i| json!({"body": format!("w{}", half * 100 + i), "content_type": "text"}))
            .collect();
        send_batch(&s, &q, json!({"messages": batch})).await;
    }
    let mut ids = HashSet::new();
    let mut all = Vec::new();
    for t in tasks {
        let got = t.await.expect("poller task");
        assert_eq!(got.len(), 25, "each long poller filled its share");
        for m in got {
            assert!(
                ids.insert(m["id"].as_str().unwrap().to_owned()),
                "message {} delivered twice",
                m["id"]
            );
            all.push(m);
        }
    }
    let expected: BTreeSet<String> = (0..200).map(|i| format!("w{i}")).collect();
    assert_eq!(bodies(&all), expected);
    assert_eq!(s.inspect(&q).await["messages"]["leased"], 200);
}

#[tokio::test]
async fn ack_deletes_and_acked_messages_are_never_redelivered() {
    let s = Server::start().await;
    let q = s.create_queue("acks", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    for b in ["aa", "bbb", "cccc"] {
        send_text(&s, &q, b, None).await;
    }
    let m0 = metrics(&s, &q).await;
    assert_eq!(m0["backlog_count"], 3);
    assert_eq!(m0["backlog_bytes"], 9);

    let got = pull_msgs(&s, &q, json!({"batch_size": 10, "visibility_timeout_ms": 1000})).await;
    assert_eq!(
        bodies(&got),
        BTreeSet::from(["aa".into(), "bbb".into(), "cccc".into()])
    );
    let (a, b) = (by_body(&got, "aa"), by_body(&got, "bbb"));
    let acked = s
        .ack(
            &q,
            json!({"acks": [{"lease_id": a["lease_id"]}, {"lease_id": b["lease_id"]}]}),
        )
        .await;
    assert_eq!(acked["ackCount"], 2);
    assert_eq!(acked["retryCount"], 0);
    assert_eq!(acked["warnings"], json!({}));
    let m1 = metrics(&s, &q).await;
    assert_eq!(m1["backlog_count"], 1);
    assert_eq!(m1["backlog_bytes"], 4);

    // Let every lease expire: only the unacked message comes back.
    sleep_ms(2000).await;
    let again = pull_msgs(&s, &q, json!({"batch_size": 10, "visibility_timeout_ms": 60000})).await;
    assert_eq!(
        again.len(),
        1,
        "only the unacked message is redelivered: {again:?}"
    );
    assert_eq!(again[0]["body"], "cccc");
    assert_eq!(again[0]["attempts"], 2);

    // Acking an already-acked message: a warning, nothing else.
    let twice = s.ack(&q, json!({"acks": [{"lease_id": a["lease_id"]}]})).await;
    assert_eq!(twice["ackCount"], 0);
    assert!(
        twice["warnings"][lease(a)].is_string(),
        "warning keyed by the lease id: {twice}"
    );
    assert_eq!(s.inspect(&q).await["counters"]["acked"], 2);
}

// ----------------------------------------------------------------- retries

#[tokio::test]
async fn retry_without_delay_is_visible_immediately() {
    let s = Server::start().await;
    let q = s.create_queue("retry-now", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "again", None).await;
    let first = pull_msgs(&s, &q, json!({})).await;
    assert_eq!(first.len(), 1);
    let r = s
        .ack(&q, json!({"retries": [{"lease_id": first[0]["lease_id"]}]}))
        .await;
    assert_eq!(r["retryCount"], 1);
    assert_eq!(r["ackCount"], 0);
    assert_eq!(r["warnings"], json!({}));
    let second = pull_msgs(&s, &q, json!({})).await;
    assert_eq!(second.len(), 1, "a retry without delay is visible at once");
    assert_eq!(second[0]["id"], first[0]["id"]);
    assert_eq!(second[0]["attempts"], 2);
    assert_eq!(s.inspect(&q).await["counters"]["retried"], 1);
}

#[tokio::test]
async fn retry_with_delay_seconds_waits_that_long() {
    let s = Server::start().await;
    let q = s.create_queue("retry-delay", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "later", None).await;
    let first = pull_msgs(&s, &q, json!({})).await;
    let t0 = Instant::now();
    let r = s
        .ack(
            &q,
            json!({"retries": [{"lease_id": first[0]["lease_id"], "delay_seconds": 2}]}),
        )
        .await;
    assert_eq!(r["retryCount"], 1);
    assert!(
        pull_msgs(&s, &q, json!({})).await.is_empty(),
        "not visible before the retry delay"
    );
    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["messages"]["delayed"], 1);
    assert_eq!(inspect["messages"]["leased"], 0);
    let (got, _) = timed_pull(&s, &q, json!({"wait_ms": 10000})).await;
    let waited = t0.elapsed();
    assert_eq!(got.len(), 1, "visible after the retry delay");
    assert_eq!(got[0]["attempts"], 2);
    assert!(
        waited >= Duration::from_millis(1900),
        "became visible after only {waited:?}"
    );
    assert!(waited < Duration::from_secs(8), "took {waited:?}");
}

#[tokio::test]
async fn consumer_retry_delay_applies_unless_the_retry_gives_one() {
    let s = Server::start().await;
    let q = s.create_queue("retry-default", json!({})).await;
    s.add_pull_consumer(&q, json!({"retry_delay": 2}), None).await;
    send_text(&s, &q, "uses-consumer-delay", None).await;
    send_text(&s, &q, "explicit-zero", None).await;
    send_text(&s, &q, "explicit-one", None).await;
    let got = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    assert_eq!(got.len(), 3);
    let t0 = Instant::now();
    let r = s
        .ack(
            &q,
            json!({"retries": [
                {"lease_id": by_body(&got, "uses-consumer-delay")["lease_id"]},
                {"lease_id": by_body(&got, "explicit-zero")["lease_id"], "delay_seconds": 0},
                {"lease_id": by_body(&got, "explicit-one")["lease_id"], "delay_seconds": 1},
            ]}),
        )
        .await;
    assert_eq!(r["retryCount"], 3);
    let now = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    assert_eq!(
        bodies(&now),
        BTreeSet::from(["explicit-zero".to_owned()]),
        "delay_seconds 0 beats the consumer's retry_delay"
    );
    assert_eq!(now[0]["attempts"], 2);

    let (next, _) = timed_pull(&s, &q, json!({"batch_size": 10, "wait_ms": 10000})).await;
    assert_eq!(
        bodies(&next),
        BTreeSet::from(["explicit-one".to_owned()]),
        "the 1 s retry comes first"
    );
    assert!(t0.elapsed() >= Duration::from_millis(900));
    let (last, _) = timed_pull(&s, &q, json!({"batch_size": 10, "wait_ms": 10000})).await;
    let waited = t0.elapsed();
    assert_eq!(bodies(&last), BTreeSet::from(["uses-consumer-delay".to_owned()]));
    assert_eq!(last[0]["attempts"], 2);
    assert!(
        waited >= Duration::from_millis(1900),
        "consumer retry_delay of 2 s not applied: visible after {waited:?}"
    );
}

#[tokio::test]
async fn late_ack_after_redelivery_is_honoured() {
    let s = Server::start().await;
    let q = s.create_queue("late-ack", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "slow", None).await;
    let first = pull_msgs(&s, &q, json!({"visibility_timeout_ms": 1000})).await;
    sleep_ms(2000).await;
    let second = pull_msgs(&s, &q, json!({"visibility_timeout_ms": 1000})).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0]["attempts"], 2);

    let late = s
        .ack(&q, json!({"acks": [{"lease_id": first[0]["lease_id"]}]}))
        .await;
    assert_eq!(late["ackCount"], 1, "a late ack is accepted: {late}");
    assert_eq!(late["warnings"], json!({}));
    assert_eq!(backlog(&s, &q).await, 0, "the message is gone");

    let current = s
        .ack(&q, json!({"acks": [{"lease_id": second[0]["lease_id"]}]}))
        .await;
    assert_eq!(current["ackCount"], 0);
    assert!(current["warnings"][lease(&second[0])].is_string(), "{current}");

    // The second lease would have expired by now: still never redelivered.
    sleep_ms(1500).await;
    assert!(pull_msgs(&s, &q, json!({})).await.is_empty());
    assert_eq!(s.inspect(&q).await["counters"]["acked"], 1);
}

#[tokio::test]
async fn garbage_and_forged_lease_ids_warn_while_the_rest_takes_effect() {
    let s = Server::start().await;
    let q = s.create_queue("garbage", json!({})).await;
    let other = s.create_queue("other", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    s.add_pull_consumer(&other, json!({}), None).await;
    send_text(&s, &q, "to-ack", None).await;
    send_text(&s, &q, "to-retry", None).await;
    send_text(&s, &other, "elsewhere", None).await;
    let got = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    let foreign = pull_msgs(&s, &other, json!({})).await;
    let to_ack = lease(by_body(&got, "to-ack"));
    let to_retry = lease(by_body(&got, "to-retry"));
    let foreign_lease = lease(&foreign[0]);

    // A genuine lease id with one character changed in the middle.
    let mut forged: Vec<char> = to_ack.chars().collect();
    forged[5] = if forged[5] == 'A' { 'B' } else { 'A' };
    let forged: String = forged.into_iter().collect();

    let r = s
        .ack(
            &q,
            json!({
                "acks": [
                    {"lease_id": "not-a-lease"},
                    {"lease_id": forged},
                    {"lease_id": foreign_lease},
                    {"lease_id": ""},
                    {"lease_id": to_ack},
                ],
                "retries": [{"lease_id": "bogus-retry"}, {"lease_id": to_retry, "delay_seconds": 0}],
                "extensions": [{"lease_id": "bogus-extension", "visibility_timeout_ms": 5000}],
            }),
        )
        .await;
    assert_eq!(r["ackCount"], 1, "{r}");
    assert_eq!(r["retryCount"], 1, "{r}");
    assert_eq!(r["extendCount"], 0, "{r}");
    let warnings = r["warnings"].as_object().expect("warnings object");
    for key in [
        "not-a-lease",
        forged.as_str(),
        foreign_lease.as_str(),
        "",
        "bogus-retry",
        "bogus-extension",
    ] {
        assert!(
            warnings
                .get(key)
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty()),
            "a warning keyed by {key:?}: {r}"
        );
    }
    assert_eq!(warnings.len(), 6, "no warnings for the genuine ids: {r}");

    // The genuine parts took effect.
    let again = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    assert_eq!(bodies(&again), BTreeSet::from(["to-retry".to_owned()]));
    assert_eq!(again[0]["attempts"], 2);
    assert_eq!(backlog(&s, &q).await, 1);
    // The other queue's message was not touched by its lease used here.
    assert_eq!(backlog(&s, &other).await, 1);
    assert_eq!(s.inspect(&other).await["messages"]["leased"], 1);
}

#[tokio::test]
async fn non_string_lease_id_is_a_warning_not_a_failure() {
    let s = Server::start().await;
    let q = s.create_queue("odd-ids", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "x", None).await;
    let got = pull_msgs(&s, &q, json!({})).await;
    let (status, v) = s
        .post(
            &format!("/queues/{q}/messages/ack"),
            json!({"acks": [{"lease_id": 42}, {"lease_id": got[0]["lease_id"]}]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["ackCount"], 1);
    assert_eq!(
        v["result"]["warnings"].as_object().map(|w| w.len()),
        Some(1),
        "{v}"
    );
}

#[tokio::test]
async fn retry_or_extension_with_a_stale_lease_has_no_effect() {
    let s = Server::start().await;
    let q = s.create_queue("stale", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "one", None).await;
    send_text(&s, &q, "two", None).await;
    let first = pull_msgs(&s, &q, json!({"batch_size": 2, "visibility_timeout_ms": 1000})).await;
    assert_eq!(first.len(), 2);
    sleep_ms(2000).await;

    // One message is redelivered (superseding its first lease); the other's
    // lease has merely expired.
    let redelivered = pull_msgs(&s, &q, json!({"batch_size": 1, "visibility_timeout_ms": 60000})).await;
    assert_eq!(redelivered.len(), 1);
    assert_eq!(redelivered[0]["attempts"], 2);
    let r_body = redelivered[0]["body"].as_str().unwrap().to_owned();
    let e_body = if r_body == "one" { "two" } else { "one" };
    let superseded = lease(by_body(&first, &r_body));
    let expired = lease(by_body(&first, e_body));

    for (what, body) in [
        (
            "retry, superseded",
            json!({"retries": [{"lease_id": superseded}]}),
        ),
        (
            "extension, superseded",
            json!({"extensions": [{"lease_id": superseded, "visibility_timeout_ms": 60000}]}),
        ),
        (
            "retry, expired",
            json!({"retries": [{"lease_id": expired, "delay_seconds": 0}]}),
        ),
        (
            "extension, expired",
            json!({"extensions": [{"lease_id": expired, "visibility_timeout_ms": 60000}]}),
        ),
    ] {
        let r = s.ack(&q, body).await;
        assert_eq!(
            (
                r["ackCount"].as_u64(),
                r["retryCount"].as_u64(),
                r["extendCount"].as_u64()
            ),
            (Some(0), Some(0), Some(0)),
            "{what}: {r}"
        );
        assert_eq!(
            r["warnings"].as_object().map(|w| w.len()),
            Some(1),
            "{what}: one warning: {r}"
        );
        let key = r["warnings"].as_object().unwrap().keys().next().unwrap().clone();
        assert!(
            key == superseded || key == expired,
            "{what}: keyed by the lease id: {r}"
        );
    }

    // No effect: the redelivered message is still leased under its new lease
    // (the stale retry did not free it), and the expired one was not leased
    // again by the stale extension.
    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["messages"]["leased"], 1, "{inspect}");
    assert_eq!(inspect["messages"]["ready"], 1, "{inspect}");
    let next = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    assert_eq!(bodies(&next), BTreeSet::from([e_body.to_owned()]));
    assert_eq!(next[0]["attempts"], 2);

    // The live lease still works.
    let r = s
        .ack(&q, json!({"retries": [{"lease_id": redelivered[0]["lease_id"]}]}))
        .await;
    assert_eq!(r["retryCount"], 1);
    let third = pull_msgs(&s, &q, json!({})).await;
    assert_eq!(third[0]["body"], r_body.as_str());
    assert_eq!(third[0]["attempts"], 3);
}

#[tokio::test]
async fn lease_extension_keeps_a_message_invisible_past_its_deadline() {
    let s = Server::start().await;
    let q = s.create_queue("extend", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "a", None).await;
    send_text(&s, &q, "b", None).await;
    let got = pull_msgs(&s, &q, json!({"batch_size": 2, "visibility_timeout_ms": 1000})).await;
    let t_pull = Instant::now();
    let (la, lb) = (lease(by_body(&got, "a")), lease(by_body(&got, "b")));
    let t_ext = Instant::now();
    let r = s
        .ack(
            &q,
            json!({"extensions": [
                {"lease_id": la, "visibility_timeout_ms": 3000},
                {"lease_id": lb, "visibility_timeout_ms": 3000},
            ]}),
        )
        .await;
    assert_eq!(r["extendCount"], 2, "{r}");
    assert_eq!(r["warnings"], json!({}));

    // Past the original 1 s deadline: still invisible.
    tokio::time::sleep_until((t_pull + Duration::from_millis(1800)).into()).await;
    assert!(
        pull_msgs(&s, &q, json!({"batch_size": 10})).await.is_empty(),
        "extended leases hold"
    );
    assert_eq!(s.inspect(&q).await["messages"]["leased"], 2);

    // The extended lease is still live: a retry with it is honoured.
    let r = s.ack(&q, json!({"retries": [{"lease_id": la}]})).await;
    assert_eq!(r["retryCount"], 1, "retry with an extended lease: {r}");
    let a = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    assert_eq!(bodies(&a), BTreeSet::from(["a".to_owned()]));
    assert_eq!(a[0]["attempts"], 2);

    // The other comes back once the extended deadline passes.
    let (b, _) = timed_pull(&s, &q, json!({"batch_size": 10, "wait_ms": 10000})).await;
    let waited = t_ext.elapsed();
    assert_eq!(bodies(&b), BTreeSet::from(["b".to_owned()]));
    assert_eq!(b[0]["attempts"], 2);
    assert!(
        waited >= Duration::from_millis(2900),
        "extended lease ended after only {waited:?}"
    );
}

// ----------------------------------------------- attempts & dead-lettering

#[tokio::test]
async fn max_retries_plus_one_deliveries_then_dead_letter_queue_created_on_demand() {
    let s = Server::start().await;
    let q = s.create_queue("orders", json!({})).await;
    assert!(queues_named(&s, "orders-dlq").await.is_empty());
    s.add_pull_consumer(&q, json!({"max_retries": 2}), Some("orders-dlq"))
        .await;

    // Named but missing: created with the consumer, visible in the list.
    let dlqs = queues_named(&s, "orders-dlq").await;
    assert_eq!(dlqs.len(), 1, "the dead-letter queue was created");
    let dlq = dlqs[0]["queue_id"].as_str().unwrap().to_owned();
    let (_, all) = s.get("/queues").await;
    assert_eq!(all["result_info"]["total_count"], 2);
    let (_, qv) = s.get(&format!("/queues/{q}")).await;
    assert_eq!(qv["result"]["consumers"][0]["dead_letter_queue"], "orders-dlq");

    send_text(&s, &q, "poison", None).await;
    let bytes = b64(&[0, 1, 2, 255]);
    let (status, _) = s.send(&q, json!({"body": bytes, "content_type": "bytes"})).await;
    assert_eq!(status, 200);

    let mut originals: HashMap<String, Value> = HashMap::new();
    for attempt in 1..=3 {
        let got = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
        assert_eq!(got.len(), 2, "delivery {attempt}");
        for m in &got {
            assert_eq!(m["attempts"], attempt, "attempts counts deliveries: {m}");
            originals
                .entry(m["id"].as_str().unwrap().to_owned())
                .or_insert_with(|| m.clone());
        }
        let retries: Vec<Value> = got.iter().map(|m| json!({"lease_id": m["lease_id"]})).collect();
        let r = s.ack(&q, json!({"retries": retries})).await;
        assert_eq!(r["retryCount"], 2, "{r}");
    }
    // Three deliveries (max_retries + 1) used up: dead-lettered, not redelivered.
    assert!(pull_msgs(&s, &q, json!({"batch_size": 10})).await.is_empty());
    // The move is asynchronous: wait until the DLQ has both and the source
    // has let go of them.
    eventually(
        Duration::from_secs(10),
        "messages moved to the dead-letter queue",
        || async { (backlog(&s, &dlq).await == 2 && backlog(&s, &q).await == 0).then_some(()) },
    )
    .await;
    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["counters"]["dead_lettered"], 2);
    assert_eq!(inspect["counters"]["dropped"], 0);

    s.add_pull_consumer(&dlq, json!({}), None).await;
    let dead = pull_msgs(&s, &dlq, json!({"batch_size": 10})).await;
    assert_eq!(dead.len(), 2);
    for m in &dead {
        let orig = originals
            .get(m["id"].as_str().unwrap())
            .expect("same message id in the DLQ");
        assert_eq!(m["body"], orig["body"], "body kept");
        assert_eq!(m["metadata"], orig["metadata"], "content type kept");
        assert_eq!(m["timestamp_ms"], orig["timestamp_ms"], "original timestamp kept");
        assert_eq!(m["attempts"], 1, "attempts start again in the DLQ");
    }
    let text = dead
        .iter()
        .find(|m| m["metadata"]["CF-Content-Type"] == "text")
        .expect("text message");
    assert_eq!(text["body"], "poison");
    let raw = dead
        .iter()
        .find(|m| m["metadata"]["CF-Content-Type"] == "bytes")
        .expect("bytes message");
    assert_eq!(unb64(&raw["body"]), vec![0, 1, 2, 255]);
}

/// max_retries 0 with a DLQ; pull, retry (exhausts it), then at once ack the
/// same lease. The message is already on its way to the DLQ, so the ack is
/// refused with a warning rather than counted: an ack counted in `ackCount`
/// means the message is never delivered again, anywhere.
#[tokio::test]
async fn a_message_acked_during_dead_lettering_never_reaches_the_dlq() {
    let s = Server::start().await;
    let q = s.create_queue("racy", json!({})).await;
    s.add_pull_consumer(&q, json!({"max_retries": 0}), Some("racy-dlq"))
        .await;
    let dlq = queues_named(&s, "racy-dlq").await[0]["queue_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut acked = HashSet::new();
    for i in 0..20 {
        send_text(&s, &q, &format!("r{i}"), None).await;
        let got = pull_msgs(&s, &q, json!({})).await;
        let l = lease(&got[0]);
        let r = s.ack(&q, json!({"retries": [{"lease_id": l}]})).await;
        assert_eq!(r["retryCount"], 1);
        let a = s.ack(&q, json!({"acks": [{"lease_id": l}]})).await;
        if a["ackCount"] == 1 {
            acked.insert(got[0]["id"].as_str().unwrap().to_owned());
        } else {
            // refused honestly: the message is already on its way to the DLQ
            let warning = a["warnings"][l.as_str()].as_str().unwrap_or_default();
            assert!(
                warning.contains("dead-letter"),
                "an ack of a dead-lettering message: {a}"
            );
        }
    }
    eventually(Duration::from_secs(10), "the source to settle", || async {
        let i = s.inspect(&q).await;
        (i["messages"]["total"] == 0 && i["messages"]["dead_lettering"] == 0).then_some(())
    })
    .await;
    sleep_ms(300).await;
    s.add_pull_consumer(&dlq, json!({}), None).await;
    let dead = pull_msgs(&s, &dlq, json!({"batch_size": 100})).await;
    let redelivered: Vec<&Value> = dead
        .iter()
        .filter(|m| acked.contains(m["id"].as_str().unwrap()))
        .collect();
    assert!(
        redelivered.is_empty(),
        "{} of {} acked messages (ackCount 1) were dead-lettered anyway; DLQ holds {}, source counted dead_lettered={}",
        redelivered.len(),
        acked.len(),
        dead.len(),
        s.inspect(&q).await["counters"]["dead_lettered"]
    );
}

#[tokio::test]
async fn dead_letter_queue_deleted_after_consumer_creation_is_recreated() {
    let s = Server::start().await;
    let q = s.create_queue("jobs", json!({})).await;
    s.add_pull_consumer(&q, json!({"max_retries": 0}), Some("jobs-dlq"))
        .await;
    let old = queues_named(&s, "jobs-dlq").await;
    assert_eq!(old.len(), 1);
    let old_id = old[0]["queue_id"].as_str().unwrap().to_owned();
    let (status, v) = s.call("DELETE", &format!("/queues/{old_id}"), None).await;
    assert_eq!(status, 200, "{v}");
    assert!(queues_named(&s, "jobs-dlq").await.is_empty());

    send_text(&s, &q, "doomed", None).await;
    let got = pull_msgs(&s, &q, json!({"visibility_timeout_ms": 1000})).await;
    assert_eq!(got[0]["attempts"], 1);
    // max_retries 0: the lease running out uses the only delivery.
    sleep_ms(2000).await;
    assert!(
        pull_msgs(&s, &q, json!({})).await.is_empty(),
        "no second delivery"
    );

    let recreated = eventually(
        Duration::from_secs(10),
        "the dead-letter queue to be re-created",
        || async { queues_named(&s, "jobs-dlq").await.into_iter().next() },
    )
    .await;
    let new_id = recreated["queue_id"].as_str().unwrap().to_owned();
    assert_ne!(new_id, old_id, "a new queue, not the deleted one");
    eventually(
        Duration::from_secs(10),
        "the message in the re-created DLQ",
        || async { (backlog(&s, &new_id).await == 1 && backlog(&s, &q).await == 0).then_some(()) },
    )
    .await;
    assert_eq!(s.inspect(&q).await["counters"]["dead_lettered"], 1);
    s.add_pull_consumer(&new_id, json!({}), None).await;
    let dead = pull_msgs(&s, &new_id, json!({})).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["id"], got[0]["id"]);
    assert_eq!(dead[0]["body"], "doomed");
    assert_eq!(dead[0]["attempts"], 1);
}

#[tokio::test]
async fn without_a_dead_letter_queue_exhausted_messages_are_dropped() {
    let s = Server::start().await;
    let q = s.create_queue("no-dlq", json!({})).await;
    s.add_pull_consumer(&q, json!({"max_retries": 1}), None).await;
    send_text(&s, &q, "drop-me", None).await;
    send_text(&s, &q, "keep-me", None).await;
    for attempt in 1..=2 {
        let got = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
        let m = by_body(&got, "drop-me");
        assert_eq!(m["attempts"], attempt);
        let r = s.ack(&q, json!({"retries": [{"lease_id": m["lease_id"]}]})).await;
        assert_eq!(r["retryCount"], 1);
        if attempt == 1 {
            let keep = by_body(&got, "keep-me");
            s.ack(
                &q,
                json!({"retries": [{"lease_id": keep["lease_id"]}], "extensions": []}),
            )
            .await;
        }
    }
    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["counters"]["dropped"], 1, "{inspect}");
    assert_eq!(inspect["counters"]["dead_lettered"], 0);
    assert_eq!(
        inspect["messages"]["total"], 1,
        "only keep-me is left (leased): {inspect}"
    );
    assert!(pull_msgs(&s, &q, json!({"batch_size": 10})).await.is_empty());
    let (_, all) = s.get("/queues").await;
    assert_eq!(all["result_info"]["total_count"], 1, "no queue was created");
}

// ------------------------------------------------------------------ delays

#[tokio::test]
async fn delay_precedence_message_over_batch_over_queue_default() {
    let s = Server::start().await;
    let q = s.create_queue("delays", json!({"delivery_delay": 2})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let t0 = Instant::now();
    send_text(&s, &q, "queue-default", None).await; // 2 s (queue)
    send_text(&s, &q, "single-zero", Some(0)).await; // 0 overrides the queue
    send_batch(
        &s,
        &q,
        json!({"delay_seconds": 0, "messages": [
            {"body": "batch-zero", "content_type": "text"},                      // 0 (batch)
            {"body": "msg-over-batch-zero", "content_type": "text", "delay_seconds": 2}, // 2 (message)
        ]}),
    )
    .await;
    send_batch(
        &s,
        &q,
        json!({"delay_seconds": 2, "messages": [
            {"body": "msg-zero-over-batch", "content_type": "text", "delay_seconds": 0}, // 0 (message)
            {"body": "batch-delay", "content_type": "text"},                            // 2 (batch)
        ]}),
    )
    .await;
    send_batch(
        &s,
        &q,
        json!({"messages": [{"body": "batch-queue-default", "content_type": "text"}]}),
    )
    .await; // 2 (queue)

    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["messages"]["ready"], 3, "{inspect}");
    assert_eq!(inspect["messages"]["delayed"], 4, "{inspect}");
    let now = pull_msgs(&s, &q, json!({"batch_size": 100})).await;
    assert_eq!(
        bodies(&now),
        BTreeSet::from([
            "single-zero".to_owned(),
            "batch-zero".to_owned(),
            "msg-zero-over-batch".to_owned()
        ])
    );

    let mut later = Vec::new();
    while later.len() < 4 {
        let (got, _) = timed_pull(&s, &q, json!({"batch_size": 100, "wait_ms": 10000})).await;
        assert!(!got.is_empty(), "delayed messages arrive");
        later.extend(got);
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(1900),
        "delayed messages came after {:?}",
        t0.elapsed()
    );
    assert_eq!(
        bodies(&later),
        BTreeSet::from([
            "queue-default".to_owned(),
            "msg-over-batch-zero".to_owned(),
            "batch-delay".to_owned(),
            "batch-queue-default".to_owned()
        ])
    );
    assert!(later.iter().all(|m| m["attempts"] == 1));
}

// ------------------------------------------------------------------- pause

#[tokio::test]
async fn paused_queue_refuses_pulls_accepts_sends_and_resumes() {
    let s = Server::start().await;
    let q = s.create_queue("pausable", json!({"delivery_delay": 0})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "before", None).await;

    // As wrangler does it: the unchanged name comes along.
    let (status, v) = s
        .call(
            "PATCH",
            &format!("/queues/{q}"),
            Some(json!({"queue_name": "pausable", "settings": {"delivery_paused": true}})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["settings"]["delivery_paused"], true);
    assert_eq!(
        v["result"]["settings"]["message_retention_period"], 345600,
        "other settings untouched"
    );

    for body in [json!({}), json!({"wait_ms": 1000})] {
        let (status, v) = s.post(&format!("/queues/{q}/messages/pull"), body.clone()).await;
        assert_eq!(status, 409, "pull {body} while paused: {v}");
        assert_eq!(v["success"], false);
        assert_eq!(v["errors"][0]["code"], 11005);
        let msg = v["errors"][0]["message"].as_str().unwrap();
        assert!(msg.starts_with("queue_delivery_paused"), "message: {msg}");
    }
    send_text(&s, &q, "during", None).await;
    send_batch(
        &s,
        &q,
        json!({"messages": [{"body": "during-batch", "content_type": "text"}]}),
    )
    .await;
    assert_eq!(backlog(&s, &q).await, 3);
    let (_, got) = s.get(&format!("/queues/{q}")).await;
    assert_eq!(got["result"]["settings"]["delivery_paused"], true);

    let (status, v) = s
        .call(
            "PATCH",
            &format!("/queues/{q}"),
            Some(json!({"settings": {"delivery_paused": false}})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["settings"]["delivery_paused"], false);
    let all = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    assert_eq!(
        bodies(&all),
        BTreeSet::from([
            "before".to_owned(),
            "during".to_owned(),
            "during-batch".to_owned()
        ])
    );
}

// ------------------------------------------------------------------- purge

#[tokio::test]
async fn purge_deletes_ready_delayed_and_in_flight_messages() {
    let s = Server::start().await;
    let q = s.create_queue("purgeable", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "in-flight", None).await;
    let leased = pull_msgs(&s, &q, json!({"visibility_timeout_ms": 60000})).await;
    assert_eq!(leased.len(), 1);
    send_text(&s, &q, "ready-1", None).await;
    send_text(&s, &q, "ready-2", None).await;
    send_text(&s, &q, "delayed", Some(600)).await;
    let inspect = s.inspect(&q).await;
    assert_eq!(
        (
            inspect["messages"]["ready"].as_u64(),
            inspect["messages"]["delayed"].as_u64(),
            inspect["messages"]["leased"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );

    // Without the confirmation: refused, nothing deleted.
    let (status, v) = s.post(&format!("/queues/{q}/purge"), json!({})).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["success"], false);
    let (status, _) = s
        .post(
            &format!("/queues/{q}/purge"),
            json!({"delete_messages_permanently": false}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(backlog(&s, &q).await, 4);

    let (status, v) = s
        .post(
            &format!("/queues/{q}/purge"),
            json!({"delete_messages_permanently": true}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["queue_id"], q.as_str(), "purge answers the Queue");
    let status_v = eventually(Duration::from_secs(10), "purge to complete", || async {
        let (status, v) = s.get(&format!("/queues/{q}/purge")).await;
        assert_eq!(status, 200, "{v}");
        (v["result"]["complete"] == true).then_some(v["result"].clone())
    })
    .await;
    assert_eq!(status_v["completed"], "true");
    assert!(status_v["started_at"].is_string(), "{status_v}");

    let m = metrics(&s, &q).await;
    assert_eq!(m["backlog_count"], 0);
    assert_eq!(m["backlog_bytes"], 0);
    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["messages"]["total"], 0, "{inspect}");
    assert!(pull_msgs(&s, &q, json!({"batch_size": 10})).await.is_empty());
    let r = s
        .ack(&q, json!({"acks": [{"lease_id": leased[0]["lease_id"]}]}))
        .await;
    assert_eq!(r["ackCount"], 0, "the in-flight message is gone");

    // The queue still works afterwards.
    send_text(&s, &q, "after", None).await;
    let got = pull_msgs(&s, &q, json!({})).await;
    assert_eq!(bodies(&got), BTreeSet::from(["after".to_owned()]));
}

// -------------------------------------------------------------------- peek

#[tokio::test]
async fn peek_returns_ready_messages_in_order_without_leasing() {
    let s = Server::start().await;
    let q = s.create_queue("peekable", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    for i in 0..5 {
        let (status, _) = s.send(&q, json!({"body": {"n": i}})).await;
        assert_eq!(status, 200);
    }
    send_text(&s, &q, "delayed", Some(600)).await;

    let first = peek(&s, &q, json!({"batch_size": 3})).await;
    let ns: Vec<Value> = first
        .iter()
        .map(|m| decode_json_body(&m["body"])["n"].clone())
        .collect();
    assert_eq!(ns, vec![json!(0), json!(1), json!(2)], "first three in order");
    for m in &first {
        assert_eq!(m["metadata"]["CF-Content-Type"], "json");
        assert!(m["ref"].as_str().is_some_and(|r| !r.is_empty()));
        assert!(m["id"].as_str().is_some_and(|id| id.len() == 32));
    }
    // Default batch: everything ready (the delayed message is not ready).
    let all = peek(&s, &q, json!({})).await;
    assert_eq!(all.len(), 5);
    assert_eq!(
        all[..3].iter().map(|m| &m["id"]).collect::<Vec<_>>(),
        first.iter().map(|m| &m["id"]).collect::<Vec<_>>(),
        "peek is repeatable"
    );
    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["messages"]["leased"], 0, "peek leases nothing");
    assert_eq!(inspect["counters"]["delivered"], 0);

    let pulled = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    assert_eq!(pulled.len(), 5);
    let pulled_ids: Vec<&Value> = pulled.iter().map(|m| &m["id"]).collect();
    assert_eq!(
        pulled_ids,
        all.iter().map(|m| &m["id"]).collect::<Vec<_>>(),
        "pull sees the peeked messages, same order"
    );
    assert!(
        pulled.iter().all(|m| m["attempts"] == 1),
        "peek did not count as a delivery"
    );
    assert!(
        peek(&s, &q, json!({})).await.is_empty(),
        "leased messages are not ready"
    );
}

#[tokio::test]
async fn peek_refs_purge_exactly_those_messages() {
    let s = Server::start().await;
    let q = s.create_queue("refs", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    for b in ["r1", "r2", "r3"] {
        send_text(&s, &q, b, None).await;
    }
    let peeked = peek(&s, &q, json!({})).await;
    assert_eq!(
        peeked
            .iter()
            .map(|m| m["body"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["r1", "r2", "r3"]
    );
    let (r1, r3) = (peeked[0]["ref"].clone(), peeked[2]["ref"].clone());
    let (status, v) = s
        .post(
            &format!("/queues/{q}/messages/purge"),
            json!({"refs": [{"ref": r1}, {"ref": r3}]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["errors"], json!([]));
    assert_eq!(v["result"]["warnings"], json!({}));
    assert_eq!(backlog(&s, &q).await, 1);
    let left = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    assert_eq!(bodies(&left), BTreeSet::from(["r2".to_owned()]));

    // A ref already used, and garbage: warnings keyed by the ref.
    let (status, v) = s
        .post(
            &format!("/queues/{q}/messages/purge"),
            json!({"refs": [{"ref": r1}, {"ref": "garbage"}]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let w = v["result"]["warnings"].as_object().expect("warnings");
    assert!(
        w.contains_key(r1.as_str().unwrap()) && w.contains_key("garbage"),
        "{v}"
    );
    assert_eq!(backlog(&s, &q).await, 1, "r2 untouched");
}

// ----------------------------------------------------------------- metrics

#[tokio::test]
async fn metrics_in_metrics_route_send_and_pull_replies() {
    let s = Server::start().await;
    let q = s.create_queue("measured", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let m = metrics(&s, &q).await;
    assert_eq!(
        (m["backlog_count"].as_u64(), m["backlog_bytes"].as_u64()),
        (Some(0), Some(0))
    );

    let before = common_now_ms();
    let (status, v) = s.send(&q, json!({"body": {"a": 1}})).await; // {"a":1} = 7 bytes
    let after = common_now_ms();
    assert_eq!(status, 200);
    let sm = &v["result"]["metadata"]["metrics"];
    assert_eq!(sm["backlog_count"], 1, "{v}");
    assert_eq!(sm["backlog_bytes"], 7, "{v}");
    let oldest = sm["oldest_message_timestamp_ms"]
        .as_u64()
        .expect("oldest timestamp");
    assert!(
        before <= oldest && oldest <= after,
        "{before} <= {oldest} <= {after}"
    );

    sleep_ms(20).await;
    let r = send_batch(&s, &q, json!({"messages": [{"body": "hello", "content_type": "text"}, {"body": b64(b"xyz"), "content_type": "bytes"}]})).await;
    let bm = &r["metadata"]["metrics"];
    assert_eq!(bm["backlog_count"], 3);
    assert_eq!(bm["backlog_bytes"], 15, "7 + 5 + 3 (bytes count decoded)");
    assert_eq!(bm["oldest_message_timestamp_ms"], oldest);
    assert_eq!(metrics(&s, &q).await, *bm, "the metrics route agrees");

    let pulled = s.pull(&q, json!({"batch_size": 1})).await;
    let msgs = messages(&pulled);
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0]["timestamp_ms"], oldest, "the oldest comes first");
    assert_eq!(pulled["message_backlog_count"], 3, "{pulled}");
    assert_eq!(pulled["metadata"]["metrics"]["backlog_count"], 3);
    assert_eq!(pulled["metadata"]["metrics"]["backlog_bytes"], 15);
    assert_eq!(
        pulled["metadata"]["metrics"]["oldest_message_timestamp_ms"],
        oldest
    );

    s.ack(&q, json!({"acks": [{"lease_id": msgs[0]["lease_id"]}]}))
        .await;
    let m = metrics(&s, &q).await;
    assert_eq!(m["backlog_count"], 2);
    assert_eq!(m["backlog_bytes"], 8);
    assert!(
        m["oldest_message_timestamp_ms"].as_u64().unwrap() > oldest,
        "the oldest moved on: {m}"
    );
    let empty = s.pull(&q, json!({"batch_size": 10})).await;
    assert_eq!(messages(&empty).len(), 2);
    assert_eq!(empty["message_backlog_count"], 2);
}

fn common_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// ------------------------------------------------------------ long polling

#[tokio::test]
async fn long_poll_is_answered_promptly_when_a_message_arrives() {
    let s = Arc::new(Server::start().await);
    let q = s.create_queue("long-poll", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let poller = {
        let (s, q) = (s.clone(), q.clone());
        tokio::spawn(async move { timed_pull(&s, &q, json!({"wait_ms": 5000})).await })
    };
    sleep_ms(300).await;
    assert_eq!(s.inspect(&q).await["long_pollers"], 1, "the pull is waiting");
    send_text(&s, &q, "wake-up", None).await;
    let (got, took) = poller.await.expect("poller");
    assert_eq!(bodies(&got), BTreeSet::from(["wake-up".to_owned()]));
    assert_eq!(got[0]["attempts"], 1);
    assert!(
        took >= Duration::from_millis(250),
        "it did wait for the message: {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "answered promptly, not at the end of wait_ms: {took:?}"
    );
    assert_eq!(s.inspect(&q).await["long_pollers"], 0);
}

#[tokio::test]
async fn long_poll_on_an_empty_queue_answers_empty_after_wait_ms() {
    let s = Server::start().await;
    let q = s.create_queue("long-empty", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let (got, took) = timed_pull(&s, &q, json!({"wait_ms": 300})).await;
    assert!(got.is_empty());
    assert!(took >= Duration::from_millis(280), "waited only {took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let (got, took) = timed_pull(&s, &q, json!({})).await;
    assert!(got.is_empty());
    assert!(took < Duration::from_secs(3), "short poll by default: {took:?}");
}

// ----------------------------------------------------------- content types

#[tokio::test]
async fn content_types_round_trip() {
    let s = Server::start().await;
    let q = s.create_queue("types", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let json_body = json!({"k": [1, 2, "x"], "nested": {"ok": true}});
    let raw: Vec<u8> = vec![0, 1, 2, 254, 255, 10, 13];
    assert_eq!(s.send(&q, json!({"body": json_body})).await.0, 200); // json is the default
    assert_eq!(
        s.send(&q, json!({"body": "héllo wörld ✓", "content_type": "text"}))
            .await
            .0,
        200
    );
    assert_eq!(
        s.send(&q, json!({"body": b64(&raw), "content_type": "bytes"}))
            .await
            .0,
        200
    );
    send_batch(
        &s,
        &q,
        json!({"messages": [
            {"body": "a json string", "content_type": "json"},
            {"body": 42},
            {"body": "batch text", "content_type": "text"},
        ]}),
    )
    .await;

    let peeked = peek(&s, &q, json!({})).await;
    let got = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    assert_eq!(got.len(), 6);
    for (p, g) in peeked.iter().zip(&got) {
        assert_eq!(p["body"], g["body"], "peek and pull encode bodies the same way");
        assert_eq!(p["metadata"], g["metadata"]);
    }
    let meta = |t: &str| json!({"CF-Content-Type": t, "CF-sourceMessageSource": "api"});
    assert_eq!(got[0]["metadata"], meta("json"));
    assert_eq!(decode_json_body(&got[0]["body"]), json_body);
    assert_eq!(got[1]["metadata"], meta("text"));
    assert_eq!(got[1]["body"], "héllo wörld ✓", "text comes back plain");
    assert_eq!(got[2]["metadata"], meta("bytes"));
    assert_eq!(unb64(&got[2]["body"]), raw, "bytes come back base64");
    assert_eq!(got[3]["metadata"], meta("json"));
    assert_eq!(
        unb64(&got[3]["body"]),
        br#""a json string""#.to_vec(),
        "a JSON string is base64 of its JSON text"
    );
    assert_eq!(decode_json_body(&got[4]["body"]), json!(42));
    assert_eq!(got[5]["body"], "batch text");
    // Sizes: json serialized, text UTF-8, bytes decoded.
    let expected_bytes = serde_json::to_vec(&json_body).unwrap().len()
        + "héllo wörld ✓".len()
        + raw.len()
        + r#""a json string""#.len()
        + 2
        + "batch text".len();
    assert_eq!(metrics(&s, &q).await["backlog_bytes"], expected_bytes as u64);
}

// --------------------------------------------------------------- retention

/// The one slow test (~62 s): messages older than the retention period go,
/// even while delivery is paused, and a dead-lettered message keeps counting
/// from its original timestamp.
#[tokio::test]
async fn retention_deletes_old_messages() {
    let s = Server::start().await;
    let paused = s
        .create_queue(
            "short-lived",
            json!({"message_retention_period": 60, "delivery_paused": true}),
        )
        .await;
    let dlq = s
        .create_queue("short-dlq", json!({"message_retention_period": 60}))
        .await;
    let src = s.create_queue("long-lived", json!({})).await;
    s.add_pull_consumer(&src, json!({"max_retries": 0}), Some("short-dlq"))
        .await;

    let t0 = Instant::now();
    send_text(&s, &paused, "expires", None).await;
    send_text(&s, &src, "dead-lettered-late", None).await;

    // The message spends 20 s in its source queue before being dead-lettered.
    sleep_ms(20_000).await;
    let got = pull_msgs(&s, &src, json!({})).await;
    assert_eq!(got.len(), 1);
    let r = s
        .ack(&src, json!({"retries": [{"lease_id": got[0]["lease_id"]}]}))
        .await;
    assert_eq!(r["retryCount"], 1);
    eventually(Duration::from_secs(10), "the message in the DLQ", || async {
        (backlog(&s, &dlq).await == 1).then_some(())
    })
    .await;
    assert_eq!(backlog(&s, &paused).await, 1);

    let mut gone_paused = None;
    let mut gone_dlq = None;
    while gone_paused.is_none() || gone_dlq.is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(75),
            "messages outlived retention: {:?} {:?}",
            gone_paused,
            gone_dlq
        );
        if gone_paused.is_none() && backlog(&s, &paused).await == 0 {
            gone_paused = Some(t0.elapsed());
        }
        if gone_dlq.is_none() && backlog(&s, &dlq).await == 0 {
            gone_dlq = Some(t0.elapsed());
        }
        sleep_ms(250).await;
    }
    let (gp, gd) = (gone_paused.unwrap(), gone_dlq.unwrap());
    assert!(
        gp >= Duration::from_millis(59_500),
        "deleted before its retention: {gp:?}"
    );
    assert!(
        gd >= Duration::from_millis(59_500),
        "DLQ copy deleted before retention: {gd:?}"
    );
    assert!(
        gd < Duration::from_secs(75),
        "DLQ retention counts from the original timestamp: {gd:?}"
    );
    assert_eq!(s.inspect(&paused).await["counters"]["expired"], 1);
    assert_eq!(s.inspect(&dlq).await["counters"]["expired"], 1);
}

// ---------------------------------------------------------------- restart

#[tokio::test]
async fn restart_recovers_messages_delays_attempts_consumers_and_settings() {
    let mut s = Server::start().await;
    let q = s
        .create_queue(
            "durable",
            json!({"delivery_delay": 1, "message_retention_period": 7200}),
        )
        .await;
    let consumer_id = s
        .add_pull_consumer(
            &q,
            json!({"batch_size": 7, "max_retries": 5, "retry_delay": 3, "visibility_timeout_ms": 45000}),
            Some("durable-dlq"),
        )
        .await;
    let paused = s
        .create_queue("paused-one", json!({"delivery_paused": true}))
        .await;
    s.add_pull_consumer(&paused, json!({}), None).await;
    send_text(&s, &paused, "held", None).await;

    // retried (attempts 1, ready again), leased (attempts 1, in flight) and
    // acked (must stay gone)
    send_text(&s, &q, "retried", Some(0)).await;
    send_text(&s, &q, "leased", Some(0)).await;
    send_text(&s, &q, "acked", Some(0)).await;
    let got = pull_msgs(&s, &q, json!({"batch_size": 3, "visibility_timeout_ms": 60000})).await;
    assert_eq!(got.len(), 3);
    let leased_msg = by_body(&got, "leased").clone();
    let acked = [by_body(&got, "acked").clone()];
    let r = s
        .ack(
            &q,
            json!({"acks": [{"lease_id": acked[0]["lease_id"]}],
                   "retries": [{"lease_id": by_body(&got, "retried")["lease_id"], "delay_seconds": 0}]}),
        )
        .await;
    assert_eq!(
        (r["ackCount"].as_u64(), r["retryCount"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    send_text(&s, &q, "ready", Some(0)).await;
    send_text(&s, &q, "delayed", Some(600)).await;
    let (_, before) = s.get(&format!("/queues/{q}")).await;
    let before_inspect = s.inspect(&q).await;
    assert_eq!(before_inspect["messages"]["total"], 4);

    s.restart().await;

    let (status, after) = s.get(&format!("/queues/{q}")).await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(
        after["result"], before["result"],
        "queue, settings and consumer unchanged"
    );
    assert_eq!(after["result"]["settings"]["delivery_delay"], 1);
    assert_eq!(after["result"]["settings"]["message_retention_period"], 7200);
    let c = &after["result"]["consumers"][0];
    assert_eq!(c["consumer_id"], consumer_id.as_str());
    assert_eq!(c["dead_letter_queue"], "durable-dlq");
    assert_eq!(
        c["settings"],
        json!({"batch_size": 7, "max_retries": 5, "retry_delay": 3, "visibility_timeout_ms": 45000})
    );
    assert_eq!(
        queues_named(&s, "durable-dlq").await.len(),
        1,
        "the dead-letter queue survived"
    );

    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["messages"]["total"], 4, "{inspect}");
    assert_eq!(inspect["messages"]["ready"], 2, "{inspect}");
    assert_eq!(inspect["messages"]["delayed"], 1, "the delay survived: {inspect}");
    assert_eq!(inspect["messages"]["leased"], 1, "the lease survived: {inspect}");

    // Consumer batch_size 7 applies; the delayed and the leased message stay hidden.
    let pulled = pull_msgs(&s, &q, json!({})).await;
    assert_eq!(
        bodies(&pulled),
        BTreeSet::from(["retried".to_owned(), "ready".to_owned()])
    );
    assert_eq!(
        by_body(&pulled, "retried")["attempts"],
        2,
        "attempts survived the restart"
    );
    assert_eq!(by_body(&pulled, "ready")["attempts"], 1);

    // Lease ids issued before the restart still work.
    let r = s
        .ack(&q, json!({"acks": [{"lease_id": leased_msg["lease_id"]}]}))
        .await;
    assert_eq!(r["ackCount"], 1, "{r}");
    assert_eq!(r["warnings"], json!({}));
    // The ack of "acked" is durable, and its old lease matches nothing new.
    let r = s
        .ack(&q, json!({"acks": [{"lease_id": acked[0]["lease_id"]}]}))
        .await;
    assert_eq!(r["ackCount"], 0);
    send_text(&s, &q, "new-after-restart", Some(0)).await;
    let r = s
        .ack(&q, json!({"acks": [{"lease_id": acked[0]["lease_id"]}]}))
        .await;
    assert_eq!(r["ackCount"], 0, "an old lease id never names a new message: {r}");
    let (_, m) = s.get(&format!("/queues/{q}/metrics")).await;
    assert_eq!(
        m["result"]["backlog_count"], 4,
        "retried, ready (leased), delayed, new: {m}"
    );

    // Queue default delay still applies to new sends without their own.
    send_text(&s, &q, "default-delay", None).await;
    assert!(pull_msgs(&s, &q, json!({}))
        .await
        .iter()
        .all(|m| m["body"] != "default-delay"));

    // The paused queue is still paused, with its message.
    let (status, v) = s
        .post(&format!("/queues/{paused}/messages/pull"), json!({}))
        .await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["errors"][0]["code"], 11005);
    assert_eq!(backlog(&s, &paused).await, 1);
}

// ------------------------------------------------- pull defaults & ordering

#[tokio::test]
async fn pull_defaults_come_from_the_consumer_and_visibility_timeout_is_an_alias() {
    let s = Server::start().await;
    let q = s.create_queue("defaults", json!({})).await;
    s.add_pull_consumer(&q, json!({"batch_size": 3, "visibility_timeout_ms": 1000}), None)
        .await;
    let plain = s.create_queue("plain-defaults", json!({})).await;
    s.add_pull_consumer(&plain, json!({}), None).await;
    let batch: Vec<Value> = (0..10)
        .map(|i| json!({"body": format!("d{i}"), "content_type": "text"}))
        .collect();
    send_batch(&s, &q, json!({"messages": batch.clone()})).await;
    send_batch(&s, &plain, json!({"messages": batch})).await;

    assert_eq!(
        pull_msgs(&s, &plain, json!({})).await.len(),
        5,
        "http_pull batch_size defaults to 5"
    );
    let by_consumer = pull_msgs(&s, &q, json!({})).await;
    assert_eq!(by_consumer.len(), 3, "the consumer's batch_size applies");
    assert_eq!(
        pull_msgs(&s, &q, json!({"batch_size": 4})).await.len(),
        4,
        "the request's batch_size wins"
    );
    // `visibility_timeout` is the same field, in milliseconds.
    let aliased = pull_msgs(&s, &q, json!({"batch_size": 1, "visibility_timeout": 60000})).await;
    assert_eq!(aliased.len(), 1);

    sleep_ms(2000).await;
    // The consumer's 1 s visibility timeout let the first 7 come back; the
    // one leased for 60 s via `visibility_timeout` did not.
    let back = pull_msgs(&s, &q, json!({"batch_size": 100, "visibility_timeout_ms": 60000})).await;
    assert_eq!(back.len(), 9, "7 expired + 2 never pulled: {back:?}");
    assert_eq!(back.iter().filter(|m| m["attempts"] == 2).count(), 7);
    assert!(
        back.iter().all(|m| m["id"] != aliased[0]["id"]),
        "visibility_timeout (ms) was honoured"
    );
}

#[tokio::test]
async fn order_is_by_visibility_time_then_arrival() {
    let s = Server::start().await;
    let q = s.create_queue("ordered", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    send_text(&s, &q, "delayed-1s", Some(1)).await;
    send_text(&s, &q, "first", None).await;
    send_text(&s, &q, "second", None).await;
    sleep_ms(1500).await;
    send_text(&s, &q, "late", None).await;
    let got = pull_msgs(&s, &q, json!({"batch_size": 10})).await;
    let order: Vec<&str> = got.iter().map(|m| m["body"].as_str().unwrap()).collect();
    assert_eq!(order, vec!["first", "second", "delayed-1s", "late"]);
}

#[tokio::test]
async fn dead_letter_queue_named_on_consumer_update_is_created() {
    let s = Server::start().await;
    let q = s.create_queue("updated", json!({})).await;
    let cid = s.add_pull_consumer(&q, json!({}), None).await;
    let (status, v) = s
        .call(
            "PUT",
            &format!("/queues/{q}/consumers/{cid}"),
            Some(json!({"type": "http_pull", "dead_letter_queue": "updated-dlq", "settings": {"max_retries": 0}})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["dead_letter_queue"], "updated-dlq");
    let dlq = queues_named(&s, "updated-dlq").await;
    assert_eq!(dlq.len(), 1, "created by the consumer update");
    let dlq_id = dlq[0]["queue_id"].as_str().unwrap().to_owned();

    send_text(&s, &q, "x", None).await;
    let got = pull_msgs(&s, &q, json!({})).await;
    s.ack(&q, json!({"retries": [{"lease_id": got[0]["lease_id"]}]}))
        .await;
    eventually(
        Duration::from_secs(10),
        "dead-lettered after one delivery",
        || async { (backlog(&s, &dlq_id).await == 1).then_some(()) },
    )
    .await;
}
