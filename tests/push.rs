//! Push consumers: batches delivered to a real local HTTP function.

mod common;

use std::time::{Duration, Instant};

use common::function::{Answer, Function};
use common::Server;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

async fn register(s: &Server, name: &str, f: &Function, extra: Value) {
    let mut body = json!({"url": f.url});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, v) = s.call("PUT", &format!("/functions/{name}"), Some(body)).await;
    assert_eq!(status, 200, "{v}");
}

async fn push_queue(s: &Server, name: &str, f: &Function, settings: Value, dlq: Option<&str>) -> String {
    register(s, &format!("{name}-fn"), f, json!({})).await;
    let q = s.create_queue(name, json!({})).await;
    let mut body = json!({"type": "worker", "script_name": format!("{name}-fn"), "settings": settings});
    if let Some(d) = dlq {
        body["dead_letter_queue"] = json!(d);
    }
    let (status, v) = s.post(&format!("/queues/{q}/consumers"), body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["script"], format!("{name}-fn"));
    q
}

async fn send_batch(s: &Server, q: &str, bodies: Vec<Value>) {
    let messages: Vec<Value> = bodies.into_iter().map(|b| json!({"body": b})).collect();
    let (status, v) = s
        .post(
            &format!("/queues/{q}/messages/batch"),
            json!({"messages": messages}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn a_full_batch_goes_out_at_once_and_a_partial_one_on_the_timer() {
    let s = Server::start().await;
    let f = Function::start();
    let q = push_queue(
        &s,
        "sized",
        &f,
        json!({"batch_size": 5, "max_wait_time_ms": 60000}),
        None,
    )
    .await;
    let t0 = Instant::now();
    send_batch(&s, &q, (0..5).map(|i| json!(i)).collect()).await;
    f.wait_for("a batch of 5", Duration::from_secs(10), |b| b.len() == 1)
        .await;
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(f.batches()[0].body["messages"].as_array().unwrap().len(), 5);
    assert_eq!(f.batches()[0].body["queue"], "sized");

    let f2 = Function::start();
    let q2 = push_queue(
        &s,
        "timed",
        &f2,
        json!({"batch_size": 10, "max_wait_time_ms": 1000}),
        None,
    )
    .await;
    let t1 = Instant::now();
    send_batch(&s, &q2, vec![json!("a"), json!("b"), json!("c")]).await;
    f2.wait_for("a timer batch", Duration::from_secs(10), |b| !b.is_empty())
        .await;
    let waited = f2.batches()[0].at - t1;
    assert!(
        waited >= Duration::from_millis(900),
        "the timer fired early: {waited:?}"
    );
    assert_eq!(f2.batches()[0].body["messages"].as_array().unwrap().len(), 3);
    // never an empty batch
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(f2.batches().len(), 1);
    // everything acked by the empty 2xx
    let (_, m) = s.get(&format!("/queues/{q2}/metrics")).await;
    assert_eq!(m["result"]["backlog_count"], 0);
}

#[tokio::test]
async fn request_format_and_signature() {
    let s = Server::start().await;
    let f = Function::start();
    register(&s, "signed", &f, json!({"secret": "s3cret"})).await;
    let q = s.create_queue("sig", json!({})).await;
    let (status, v) = s
        .post(
            &format!("/queues/{q}/consumers"),
            json!({"type": "worker", "script_name": "signed", "settings": {"batch_size": 3, "max_wait_time_ms": 100}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, fv) = s.get("/functions/signed").await;
    assert!(fv["result"].get("secret").is_none(), "the secret is never shown");
    s.post(
        &format!("/queues/{q}/messages/batch"),
        json!({"messages": [
            {"body": {"k": [1, 2]}},
            {"body": "plain", "content_type": "text"},
            {"body": "AAEC", "content_type": "bytes"},
        ]}),
    )
    .await;
    f.wait_for("the batch", Duration::from_secs(10), |b| !b.is_empty())
        .await;
    let got = &f.batches()[0];
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"s3cret").unwrap();
    mac.update(&got.raw);
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(got.signature.as_deref(), Some(expected.as_str()));
    assert_eq!(got.queue_header.as_deref(), Some("sig"));
    assert_eq!(got.batch_header.as_deref(), got.body["batch_id"].as_str());
    let msgs = got.body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    let by_type = |t: &str| msgs.iter().find(|m| m["content_type"] == t).unwrap().clone();
    assert_eq!(by_type("json")["body"], json!({"k": [1, 2]}));
    assert_eq!(by_type("text")["body"], "plain");
    assert_eq!(by_type("bytes")["body"], "AAEC");
    for m in msgs {
        assert_eq!(m["attempts"], 1);
        assert_eq!(m["id"].as_str().unwrap().len(), 32);
        assert!(m["timestamp_ms"].as_u64().unwrap() > 0);
    }
}

#[tokio::test]
async fn explicit_retries_partial_failures_and_retry_after() {
    let s = Server::start().await;
    let f = Function::start();
    // first delivery: retry the message whose body is "again", ack the rest
    f.answer_with(|batch| {
        let retry: Vec<Value> = batch["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["body"] == "again" && m["attempts"] == 1)
            .map(|m| json!({"id": m["id"]}))
            .collect();
        Answer::json(json!({"retries": retry}))
    });
    let q = push_queue(
        &s,
        "mix",
        &f,
        json!({"batch_size": 3, "max_wait_time_ms": 50}),
        None,
    )
    .await;
    send_batch(&s, &q, vec![json!("once"), json!("again"), json!("done")]).await;
    f.wait_for("the redelivery", Duration::from_secs(10), |b| b.len() >= 2)
        .await;
    let msgs = f.messages();
    let again: Vec<_> = msgs.iter().filter(|m| m.2 == "again").collect();
    assert_eq!(again.len(), 2);
    assert_eq!(again[1].1, 2, "the retry counts an attempt");
    assert_eq!(msgs.iter().filter(|m| m.2 == "once").count(), 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(f.messages().len(), 4, "acked messages are not delivered again");

    // a 500 that acks one message: only that one is acked
    let f2 = Function::start();
    f2.answer_with(|batch| {
        let first = &batch["messages"][0];
        if first["attempts"] == 1 {
            let keep = batch["messages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["body"] == "keep")
                .unwrap();
            Answer::status(500, &json!({"acks": [keep["id"]], "ack_all": true}).to_string())
        } else {
            Answer::ok()
        }
    });
    let q2 = push_queue(
        &s,
        "partial",
        &f2,
        json!({"batch_size": 3, "max_wait_time_ms": 50}),
        None,
    )
    .await;
    send_batch(&s, &q2, vec![json!("keep"), json!("x"), json!("y")]).await;
    f2.wait_for("the retried batch", Duration::from_secs(10), |b| b.len() >= 2)
        .await;
    let second: Vec<Value> = f2.batches()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].clone())
        .collect();
    assert!(
        !second.contains(&json!("keep")),
        "an explicit ack on a failed batch holds"
    );
    assert_eq!(second.len(), 2);

    // a 429 with Retry-After delays the redelivery
    let f3 = Function::start();
    f3.answer_with(|batch| {
        if batch["messages"][0]["attempts"] == 1 {
            Answer::status(429, "").header("Retry-After", "2")
        } else {
            Answer::ok()
        }
    });
    let q3 = push_queue(
        &s,
        "limited",
        &f3,
        json!({"batch_size": 1, "max_wait_time_ms": 0}),
        None,
    )
    .await;
    send_batch(&s, &q3, vec![json!("slow down")]).await;
    f3.wait_for("the redelivery after Retry-After", Duration::from_secs(15), |b| {
        b.len() >= 2
    })
    .await;
    let b = f3.batches();
    let gap = b[1].at - b[0].at;
    assert!(
        gap >= Duration::from_millis(1900),
        "redelivered after {gap:?}, before Retry-After"
    );
    let (_, inspect) = s.get(&format!("/queues/{q3}/inspect")).await;
    let consumer = &inspect["result"]["consumers"][0];
    assert_eq!(consumer["counters"]["failed_batches"], 1);
    assert!(consumer["last_error"]["message"]
        .as_str()
        .unwrap()
        .contains("429"));
}

#[tokio::test]
async fn exhausted_messages_go_to_the_dead_letter_queue() {
    let s = Server::start().await;
    let f = Function::start();
    f.answer_with(|_| Answer::status(500, "broken"));
    let q = push_queue(
        &s,
        "failing",
        &f,
        json!({"batch_size": 1, "max_wait_time_ms": 0, "max_retries": 1}),
        Some("failing-dlq"),
    )
    .await;
    send_batch(&s, &q, vec![json!("doomed")]).await;
    f.wait_for("two deliveries", Duration::from_secs(10), |b| b.len() >= 2)
        .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let dlq_id = loop {
        let (_, list) = s.get("/queues?name=failing-dlq").await;
        if let Some(id) = list["result"][0]["queue_id"].as_str() {
            let (_, m) = s.get(&format!("/queues/{id}/metrics")).await;
            if m["result"]["backlog_count"] == 1 {
                break id.to_owned();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the message never reached the dead-letter queue"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (_, peek) = s
        .post(&format!("/queues/{dlq_id}/messages/peek"), json!({}))
        .await;
    let moved = &peek["result"]["messages"][0];
    assert_eq!(moved["id"].as_str().unwrap(), f.messages()[0].0);
    assert_eq!(
        moved["attempts"], 0,
        "attempts start again in the dead-letter queue"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.batches().len(), 2, "max_retries 1 means exactly 2 deliveries");
    let (_, m) = s.get(&format!("/queues/{q}/metrics")).await;
    assert_eq!(m["result"]["backlog_count"], 0);
}

#[tokio::test]
async fn concurrency_never_exceeds_its_limit_and_reaches_it() {
    let s = Server::start().await;
    let f = Function::start();
    f.answer_with(|_| Answer::ok().after(Duration::from_millis(300)));
    let q = push_queue(
        &s,
        "bounded",
        &f,
        json!({"batch_size": 1, "max_wait_time_ms": 0, "max_concurrency": 3}),
        None,
    )
    .await;
    send_batch(&s, &q, (0..15).map(|i| json!(i)).collect()).await;
    f.wait_for("all 15", Duration::from_secs(20), |b| b.len() >= 15)
        .await;
    assert_eq!(f.max_in_flight.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test]
async fn automatic_concurrency_grows_under_backlog_within_the_ceiling() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(
        tmp.path(),
        vec![("HOPPER_PUSH_MAX_CONCURRENCY".into(), "4".into())],
    )
    .await;
    let f = Function::start();
    f.answer_with(|_| Answer::ok().after(Duration::from_millis(100)));
    let q = push_queue(
        &s,
        "auto",
        &f,
        json!({"batch_size": 2, "max_wait_time_ms": 0}),
        None,
    )
    .await;
    for _ in 0..4 {
        send_batch(&s, &q, (0..50).map(|i| json!(i)).collect()).await;
    }
    f.wait_for("all 200", Duration::from_secs(60), |b| {
        b.iter()
            .map(|x| x.body["messages"].as_array().unwrap().len())
            .sum::<usize>()
            >= 200
    })
    .await;
    let peak = f.max_in_flight.load(std::sync::atomic::Ordering::SeqCst);
    assert!(peak > 1, "automatic concurrency never grew");
    assert!(peak <= 4, "automatic concurrency exceeded the ceiling: {peak}");
}

#[tokio::test]
async fn paused_queues_push_nothing_until_resumed() {
    let s = Server::start().await;
    let f = Function::start();
    let q = push_queue(
        &s,
        "paused",
        &f,
        json!({"batch_size": 1, "max_wait_time_ms": 0}),
        None,
    )
    .await;
    let (status, _) = s
        .call(
            "PATCH",
            &format!("/queues/{q}"),
            Some(json!({"settings": {"delivery_paused": true}})),
        )
        .await;
    assert_eq!(status, 200);
    send_batch(&s, &q, vec![json!("held")]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(f.batches().is_empty(), "a paused queue pushed");
    s.call(
        "PATCH",
        &format!("/queues/{q}"),
        Some(json!({"settings": {"delivery_paused": false}})),
    )
    .await;
    f.wait_for("delivery after resume", Duration::from_secs(10), |b| b.len() == 1)
        .await;
}

#[tokio::test]
async fn changing_or_deleting_the_consumer_restarts_or_stops_its_child() {
    let s = Server::start().await;
    let f = Function::start();
    let q = push_queue(
        &s,
        "lifecycle",
        &f,
        json!({"batch_size": 100, "max_wait_time_ms": 60000}),
        None,
    )
    .await;
    send_batch(&s, &q, vec![json!(1), json!(2)]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let inspect = s.inspect(&q).await;
    let c = &inspect["consumers"][0];
    assert_eq!(c["batch"]["filling"], 2, "{inspect}");
    assert!(
        c["batch_deadline_ms"].as_u64().is_some(),
        "the batch timer is armed: {inspect}"
    );
    assert!(f.batches().is_empty());
    // a shorter wait takes effect: the child restarts with the new settings
    let (_, consumers) = s.get(&format!("/queues/{q}/consumers")).await;
    let cid = consumers["result"][0]["consumer_id"].as_str().unwrap().to_owned();
    let (status, v) = s
        .call(
            "PUT",
            &format!("/queues/{q}/consumers/{cid}"),
            Some(json!({"type": "worker", "script_name": "lifecycle-fn", "settings": {"batch_size": 100, "max_wait_time_ms": 200}})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    f.wait_for("delivery under the new settings", Duration::from_secs(10), |b| {
        b.len() == 1
    })
    .await;
    // deleted: nothing more is pushed and no timer survives
    let (status, _) = s
        .call("DELETE", &format!("/queues/{q}/consumers/{cid}"), None)
        .await;
    assert_eq!(status, 200);
    send_batch(&s, &q, vec![json!(3)]).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(f.batches().len(), 1);
    assert!(s.inspect(&q).await["consumers"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_function_is_refused_with_how_to_register_it() {
    let s = Server::start().await;
    let q = s.create_queue("nofn", json!({})).await;
    let (status, v) = s
        .post(
            &format!("/queues/{q}/consumers"),
            json!({"type": "worker", "script_name": "ghost"}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(v["errors"][0]["code"], 11001);
    assert!(v["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("PUT /client/v4/accounts/"));
}

#[tokio::test]
async fn kill9_with_batches_in_flight_redelivers_them_and_not_acked_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(tmp.path(), Vec::new()).await;
    let f = Function::start();
    // "quick" is acked at once; "stuck" holds its batch open past the crash
    f.answer_with(|batch| {
        if batch["messages"][0]["body"] == "stuck" && batch["messages"][0]["attempts"] == 1 {
            Answer::ok().after(Duration::from_secs(30))
        } else {
            Answer::ok()
        }
    });
    register(&s, "slow-fn", &f, json!({"timeout_ms": 1000})).await;
    let q = s.create_queue("crash-push", json!({})).await;
    let (status, _) = s
        .post(
            &format!("/queues/{q}/consumers"),
            json!({"type": "worker", "script_name": "slow-fn", "settings": {"batch_size": 1, "max_wait_time_ms": 0, "max_concurrency": 2}}),
        )
        .await;
    assert_eq!(status, 200);
    send_batch(&s, &q, vec![json!("quick")]).await;
    f.wait_for("quick", Duration::from_secs(10), |b| b.len() == 1)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await; // let its ack commit
    send_batch(&s, &q, vec![json!("stuck")]).await;
    f.wait_for("stuck in flight", Duration::from_secs(10), |b| b.len() == 2)
        .await;
    s.kill9();
    s.spawn().await;
    // redelivered once its lease (timeout 1 s + 5 s grace) runs out
    f.wait_for("the redelivery", Duration::from_secs(20), |b| b.len() >= 3)
        .await;
    let msgs = f.messages();
    let stuck: Vec<_> = msgs.iter().filter(|m| m.2 == "stuck").collect();
    assert_eq!(stuck.len(), 2);
    assert_eq!(stuck[1].1, 2, "the interrupted delivery counted as an attempt");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        f.messages().iter().filter(|m| m.2 == "quick").count(),
        1,
        "an acked message came back"
    );
}
