//! Crash durability: kill -9 the real binary while producers send and
//! consumers pull and ack, restart it, and account for every message.
//!
//! - confirmed-but-lost: a send answered 200 whose message never comes back
//!   and was never acked. Must be 0.
//! - acked-but-redelivered: a message whose ack was answered 200 (and not
//!   warned about) that is delivered again. Must be 0.
//! - unexpected: a delivered message nobody sent. Must be 0.
//! - duplicates (at-least-once redeliveries) are allowed and reported.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{decode_json_body, Server};
use serde_json::{json, Value};

#[derive(Default)]
struct Ledger {
    attempted: HashSet<String>,
    confirmed: HashSet<String>,
    acked: HashSet<String>,
    delivered: HashMap<String, usize>,
    /// message ids delivered after their ack was confirmed
    redelivered_after_ack: Vec<String>,
}

fn key_of(msg: &Value) -> String {
    decode_json_body(&msg["body"])["k"]
        .as_str()
        .unwrap_or("?")
        .to_owned()
}

async fn producer(
    base: String,
    token: String,
    queue: String,
    worker: String,
    round: usize,
    ledger: Arc<Mutex<Ledger>>,
) {
    let client = reqwest::Client::new();
    for n in 0.. {
        let batch: Vec<Value> = (0..5)
            .map(|i| json!({"body": {"k": format!("r{round}-{worker}-{n}-{i}")}}))
            .collect();
        let keys: Vec<String> = batch
            .iter()
            .map(|m| m["body"]["k"].as_str().unwrap().to_owned())
            .collect();
        ledger.lock().unwrap().attempted.extend(keys.iter().cloned());
        let resp = client
            .post(format!("{base}/queues/{queue}/messages/batch"))
            .bearer_auth(&token)
            .timeout(Duration::from_secs(10))
            .json(&json!({"messages": batch}))
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => ledger.lock().unwrap().confirmed.extend(keys),
            _ => return, // the server died: stop this producer
        }
    }
}

async fn consumer(base: String, token: String, queue: String, ledger: Arc<Mutex<Ledger>>) {
    let client = reqwest::Client::new();
    loop {
        let pulled = client
            .post(format!("{base}/queues/{queue}/messages/pull"))
            .bearer_auth(&token)
            .timeout(Duration::from_secs(10))
            .json(&json!({"batch_size": 20, "visibility_timeout_ms": 1500}))
            .send()
            .await;
        let Ok(resp) = pulled else { return };
        let Ok(v) = resp.json::<Value>().await else { return };
        let msgs = v["result"]["messages"].as_array().cloned().unwrap_or_default();
        if msgs.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        {
            let mut l = ledger.lock().unwrap();
            for m in &msgs {
                let k = key_of(m);
                if l.acked.contains(&k) {
                    l.redelivered_after_ack.push(k.clone());
                }
                *l.delivered.entry(k).or_default() += 1;
            }
        }
        let acks: Vec<Value> = msgs.iter().map(|m| json!({"lease_id": m["lease_id"]})).collect();
        let acked = client
            .post(format!("{base}/queues/{queue}/messages/ack"))
            .bearer_auth(&token)
            .timeout(Duration::from_secs(10))
            .json(&json!({"acks": acks}))
            .send()
            .await;
        let Ok(resp) = acked else { return };
        if !resp.status().is_success() {
            return;
        }
        let Ok(v) = resp.json::<Value>().await else { return };
        let warned = v["result"]["warnings"].as_object().cloned().unwrap_or_default();
        let mut l = ledger.lock().unwrap();
        for m in &msgs {
            if !warned.contains_key(m["lease_id"].as_str().unwrap_or_default()) {
                l.acked.insert(key_of(m));
            }
        }
    }
}

/// Pulls until the queue is empty (waiting out leases from before the crash).
async fn drain(s: &Server, queue: &str, ledger: &Arc<Mutex<Ledger>>) {
    let mut empty_rounds = 0;
    for _ in 0..2000 {
        let r = s
            .pull(
                queue,
                json!({"batch_size": 100, "visibility_timeout_ms": 60000, "wait_ms": 200}),
            )
            .await;
        let msgs = r["messages"].as_array().cloned().unwrap_or_default();
        if msgs.is_empty() {
            if r["message_backlog_count"] == 0 {
                empty_rounds += 1;
                if empty_rounds >= 2 {
                    return;
                }
            }
            continue;
        }
        empty_rounds = 0;
        {
            let mut l = ledger.lock().unwrap();
            for m in &msgs {
                let k = key_of(m);
                if l.acked.contains(&k) {
                    l.redelivered_after_ack.push(k.clone());
                }
                *l.delivered.entry(k).or_default() += 1;
            }
        }
        let acks: Vec<Value> = msgs.iter().map(|m| json!({"lease_id": m["lease_id"]})).collect();
        let v = s.ack(queue, json!({"acks": acks})).await;
        assert_eq!(v["ackCount"].as_u64().unwrap() as usize, msgs.len());
        let mut l = ledger.lock().unwrap();
        for m in &msgs {
            l.acked.insert(key_of(m));
        }
    }
    panic!("queue did not drain");
}

/// A small deterministic RNG for kill timings; the seed is printed so a
/// failing run can be replayed with HOPPER_CRASH_SEED.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The crash loop: producers, pull consumers and a push consumer run while
/// the server is killed with SIGKILL at random moments, `HOPPER_CRASH_CYCLES`
/// times (default 4; `scripts/crash-loop.sh` runs 100). Then everything is
/// drained and every message accounted for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_concurrent_send_and_ack_loses_nothing() {
    let cycles: usize = std::env::var("HOPPER_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let mut seed: u64 = std::env::var("HOPPER_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("crash loop: {cycles} cycles, seed {seed}");
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(tmp.path(), Vec::new()).await;
    let queue = s.create_queue("crashy", json!({})).await;
    s.add_pull_consumer(&queue, json!({"max_retries": 100}), None)
        .await;
    // the push side: a function that acks everything it receives
    let function = common::function::Function::start();
    let (status, _) = s
        .call(
            "PUT",
            "/functions/sink",
            Some(json!({"url": function.url, "timeout_ms": 2000})),
        )
        .await;
    assert_eq!(status, 200);
    let pushed = s.create_queue("crashy-push", json!({})).await;
    let (status, v) = s
        .post(
            &format!("/queues/{pushed}/consumers"),
            json!({"type": "worker", "script_name": "sink", "settings": {"batch_size": 10, "max_wait_time_ms": 20, "max_retries": 100}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let push_ledger = Arc::new(Mutex::new(Ledger::default()));
    for round in 0..cycles {
        let mut tasks = Vec::new();
        for w in 0..3 {
            tasks.push(tokio::spawn(producer(
                s.base(),
                s.token.clone(),
                queue.clone(),
                format!("p{w}"),
                round,
                ledger.clone(),
            )));
        }
        tasks.push(tokio::spawn(producer(
            s.base(),
            s.token.clone(),
            pushed.clone(),
            "push".into(),
            round,
            push_ledger.clone(),
        )));
        for _ in 0..3 {
            tasks.push(tokio::spawn(consumer(
                s.base(),
                s.token.clone(),
                queue.clone(),
                ledger.clone(),
            )));
        }
        // kill at a random moment in the traffic
        let delay = 150 + next_random(&mut seed) % 900;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        s.kill9();
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(20), t).await;
        }
        s.spawn().await;
    }
    drain(&s, &queue, &ledger).await;
    // the push queue drains through the function
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, m) = s.get(&format!("/queues/{pushed}/metrics")).await;
        if m["result"]["backlog_count"] == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the push queue never drained: {m}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let l = std::mem::take(&mut *ledger.lock().unwrap());
    let lost: Vec<&String> = l
        .confirmed
        .iter()
        .filter(|k| !l.delivered.contains_key(*k))
        .collect();
    let unexpected: Vec<&String> = l.delivered.keys().filter(|k| !l.attempted.contains(*k)).collect();
    let duplicates = l.delivered.values().filter(|n| **n > 1).count();
    // push: every confirmed message reached the function at least once
    let p = std::mem::take(&mut *push_ledger.lock().unwrap());
    let mut received: HashMap<String, usize> = HashMap::new();
    for (_, _, body) in function.messages() {
        *received
            .entry(body["k"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    let push_lost: Vec<&String> = p
        .confirmed
        .iter()
        .filter(|k| !received.contains_key(*k))
        .collect();
    let push_unexpected: Vec<&String> = received.keys().filter(|k| !p.attempted.contains(*k)).collect();
    let push_duplicates = received.values().filter(|n| **n > 1).count();
    eprintln!(
        "crash loop: cycles {cycles} | pull: confirmed {} delivered {} acked {} lost {} acked-but-redelivered {} duplicates {} unexpected {} | push: confirmed {} received {} lost {} duplicates {} unexpected {}",
        l.confirmed.len(),
        l.delivered.len(),
        l.acked.len(),
        lost.len(),
        l.redelivered_after_ack.len(),
        duplicates,
        unexpected.len(),
        p.confirmed.len(),
        received.len(),
        push_lost.len(),
        push_duplicates,
        push_unexpected.len(),
    );
    assert!(
        l.confirmed.len() > 100,
        "the test produced too little traffic to mean anything"
    );
    assert!(lost.is_empty(), "confirmed but lost: {lost:?}");
    assert!(
        l.redelivered_after_ack.is_empty(),
        "acked but redelivered: {:?}",
        l.redelivered_after_ack
    );
    assert!(unexpected.is_empty(), "unexpected: {unexpected:?}");
    assert!(!p.confirmed.is_empty(), "no push traffic");
    assert!(
        push_lost.is_empty(),
        "pushed messages confirmed but never delivered: {push_lost:?}"
    );
    assert!(
        push_unexpected.is_empty(),
        "unexpected pushed messages: {push_unexpected:?}"
    );
    let (_, v) = s.get(&format!("/queues/{queue}/metrics")).await;
    assert_eq!(v["result"]["backlog_count"], 0);
}

/// Attempt counts, delays and leases survive a kill -9.
#[tokio::test]
async fn kill9_preserves_attempts_delays_and_consumers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(tmp.path(), Vec::new()).await;
    let q = s.create_queue("state", json!({"delivery_delay": 0})).await;
    s.add_pull_consumer(&q, json!({"max_retries": 5, "visibility_timeout_ms": 800}), None)
        .await;
    assert_eq!(
        s.send(&q, json!({"body": "now", "content_type": "text"})).await.0,
        200
    );
    assert_eq!(
        s.send(
            &q,
            json!({"body": "later", "content_type": "text", "delay_seconds": 3})
        )
        .await
        .0,
        200
    );
    let first = s.pull(&q, json!({})).await;
    assert_eq!(first["messages"][0]["attempts"], 1);
    let lease = first["messages"][0]["lease_id"].clone();
    s.restart().await;
    // the lease survives: the message stays invisible until its deadline
    let during = s.pull(&q, json!({})).await;
    assert!(during["messages"].as_array().unwrap().is_empty(), "{during}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let again = s.pull(&q, json!({})).await;
    assert_eq!(again["messages"][0]["body"], "now");
    assert_eq!(again["messages"][0]["attempts"], 2, "attempts survive the crash");
    // a late ack from before the crash is honoured
    let acked = s.ack(&q, json!({"acks": [{"lease_id": lease}]})).await;
    assert_eq!(acked["ackCount"], 1);
    s.restart().await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let delayed = s.pull(&q, json!({})).await;
    assert_eq!(delayed["messages"].as_array().unwrap().len(), 1, "{delayed}");
    assert_eq!(delayed["messages"][0]["body"], "later");
    let (_, consumers) = s.get(&format!("/queues/{q}/consumers")).await;
    assert_eq!(consumers["result"][0]["settings"]["max_retries"], 5);
}

/// A backlog deeper than the in-memory index (`HOPPER_QUEUE_RESIDENT_MESSAGES`
/// set tiny) is delivered in arrival order, counted in full, survives
/// kill -9 with leases outstanding, and honours acks from before the crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_deeper_than_memory_is_delivered_in_order_across_kill9() {
    let tmp = tempfile::tempdir().unwrap();
    let env = vec![("HOPPER_QUEUE_RESIDENT_MESSAGES".to_owned(), "7".to_owned())];
    let mut s = Server::start_in(tmp.path(), env).await;
    let q = s.create_queue("deep", json!({})).await;
    s.add_pull_consumer(&q, json!({"visibility_timeout_ms": 60000}), None)
        .await;
    const N: usize = 300;
    for chunk in (0..N).collect::<Vec<_>>().chunks(100) {
        let messages: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"body": format!("m{i:04}"), "content_type": "text"}))
            .collect();
        let (status, v) = s
            .post(
                &format!("/queues/{q}/messages/batch"),
                json!({ "messages": messages }),
            )
            .await;
        assert_eq!(status, 200, "{v}");
    }
    let inspect = s.inspect(&q).await;
    assert_eq!(inspect["messages"]["total"], N, "{inspect}");
    assert!(
        inspect["messages"]["on_disk_only"].as_u64().unwrap() > 0,
        "{inspect}"
    );

    // Lease a first batch and keep the leases; ack the next ones. (A pull
    // may return fewer than asked while the next chunk loads.)
    let held = s.pull(&q, json!({"batch_size": 10})).await["messages"].clone();
    let held_count = held.as_array().unwrap().len();
    assert!(held_count > 0);
    let mut seen: Vec<String> = held
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap().to_owned())
        .collect();
    while seen.len() < 50 {
        let got = s.pull(&q, json!({"batch_size": 10})).await["messages"].clone();
        let got = got.as_array().unwrap();
        assert!(!got.is_empty(), "an empty pull over a backlog");
        let acks: Vec<Value> = got.iter().map(|m| json!({"lease_id": m["lease_id"]})).collect();
        assert_eq!(s.ack(&q, json!({ "acks": acks })).await["ackCount"], got.len());
        seen.extend(got.iter().map(|m| m["body"].as_str().unwrap().to_owned()));
    }

    s.kill9();
    s.spawn().await;
    let inspect = s.inspect(&q).await;
    let acked = seen.len() - held_count;
    assert_eq!(inspect["messages"]["total"], N - acked, "{inspect}");
    assert_eq!(inspect["messages"]["leased"], held_count, "{inspect}");
    // Leases from before the crash still ack.
    let acks: Vec<Value> = held
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!({"lease_id": m["lease_id"]}))
        .collect();
    assert_eq!(s.ack(&q, json!({ "acks": acks })).await["ackCount"], held_count);
    loop {
        let got = s.pull(&q, json!({"batch_size": 100})).await["messages"].clone();
        let got = got.as_array().unwrap().clone();
        if got.is_empty() {
            break;
        }
        let acks: Vec<Value> = got.iter().map(|m| json!({"lease_id": m["lease_id"]})).collect();
        s.ack(&q, json!({ "acks": acks })).await;
        seen.extend(got.iter().map(|m| m["body"].as_str().unwrap().to_owned()));
    }
    let expected: Vec<String> = (0..N).map(|i| format!("m{i:04}")).collect();
    assert_eq!(seen, expected, "every message once, in arrival order");
    assert_eq!(s.inspect(&q).await["messages"]["total"], 0);
}
