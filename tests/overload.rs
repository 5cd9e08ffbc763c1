//! Backpressure: when the disk cannot keep up, sends are refused with 429
//! (code 10250, Retry-After) rather than buffered without bound, and every
//! 200 given is still durable.

mod common;

use common::Server;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_beyond_the_pending_limit_get_429_and_every_200_is_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(
        tmp.path(),
        vec![("HOPPER_QUEUE_MAX_PENDING_BYTES".into(), "300000".into())],
    )
    .await;
    let q = s.create_queue("flooded", json!({})).await;
    let body = json!({"messages": (0..100).map(|_| json!({"body": "x".repeat(2000), "content_type": "text"})).collect::<Vec<_>>()});
    let url = format!("{}/queues/{q}/messages/batch", s.base());
    let mut tasks = Vec::new();
    for _ in 0..48 {
        let (client, url, token, body) = (s.client.clone(), url.clone(), s.token.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for _ in 0..5 {
                let r = client
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let retry_after = r
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_owned());
                let v: Value = r.json().await.unwrap();
                outcomes.push((status, retry_after, v));
            }
            outcomes
        }));
    }
    let mut accepted = 0u64;
    let mut refused = 0u64;
    for t in tasks {
        for (status, retry_after, v) in t.await.unwrap() {
            match status {
                200 => accepted += 1,
                429 => {
                    refused += 1;
                    assert_eq!(v["errors"][0]["code"], 10250, "{v}");
                    assert!(retry_after.is_some(), "429 without Retry-After");
                }
                other => panic!("unexpected {other}: {v}"),
            }
        }
    }
    assert!(refused > 0, "the limit never pushed back ({accepted} accepted)");
    assert!(accepted > 0);
    assert_every_200_survives_kill9(&mut s, &q, accepted * 100).await;
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// 64 clients push 250 KB batches as fast as they can for 8 s: resident
/// memory stays bounded, the excess gets 429, and every 200 is durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_under_a_sustained_flood() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(
        tmp.path(),
        vec![
            ("HOPPER_QUEUE_MAX_PENDING_BYTES".into(), "4000000".into()),
            ("HOPPER_MAX_INFLIGHT_BODY_BYTES".into(), "16000000".into()),
        ],
    )
    .await;
    let q = s.create_queue("flood", json!({})).await;
    let body = serde_json::to_vec(&json!({"messages": (0..100).map(|_| json!({"body": "y".repeat(2500), "content_type": "text"})).collect::<Vec<_>>()})).unwrap();
    let url = format!("{}/queues/{q}/messages/batch", s.base());
    let pid = s.pid().unwrap();
    let baseline = rss_kib(pid);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (client, url, token, body, stop) = (
            s.client.clone(),
            url.clone(),
            s.token.clone(),
            body.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut refused) = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = client
                    .post(&url)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                match r.map(|r| r.status().as_u16()) {
                    Ok(200) => ok += 1,
                    Ok(429) => refused += 1,
                    Ok(other) => panic!("unexpected status {other}"),
                    Err(_) => {}
                }
            }
            (ok, refused)
        }));
    }
    let mut peak = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(8) {
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut accepted, mut refused) = (0, 0);
    for t in tasks {
        let (a, r) = t.await.unwrap();
        accepted += a;
        refused += r;
    }
    eprintln!("flood: {accepted} accepted, {refused} refused, RSS {baseline} KiB at rest, peak {peak} KiB");
    assert!(refused > 0, "the flood was never pushed back");
    assert!(
        peak < 300 * 1024,
        "resident memory reached {peak} KiB under overload"
    );
    assert_every_200_survives_kill9(&mut s, &q, accepted * 100).await;
}

/// Kills the server with SIGKILL, restarts it, and checks that the queue
/// holds exactly the messages whose sends got a 200.
async fn assert_every_200_survives_kill9(s: &mut Server, q: &str, accepted_messages: u64) {
    s.kill9();
    s.spawn().await;
    let (_, m) = s.get(&format!("/queues/{q}/metrics")).await;
    assert_eq!(
        m["result"]["backlog_count"], accepted_messages,
        "every 200 survived kill -9"
    );
}
