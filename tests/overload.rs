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
    s.kill9();
    s.spawn().await;
    let (_, m) = s.get(&format!("/queues/{q}/metrics")).await;
    assert_eq!(
        m["result"]["backlog_count"],
        accepted * 100,
        "every 200 survived kill -9"
    );
}
