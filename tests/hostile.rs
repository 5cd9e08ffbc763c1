//! Hostile input: malformed, deep, oversized and slow requests are refused
//! by explicit limits; the server never panics or hangs, and secrets never
//! show up where they should not.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Server;
use serde_json::{json, Value};

async fn raw_post(s: &Server, path: &str, body: Vec<u8>) -> (u16, Value) {
    let r = s
        .client
        .post(format!("{}{path}", s.base()))
        .bearer_auth(&s.token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn malformed_deep_and_oversized_bodies_get_clean_errors() {
    let s = Server::start().await;
    let q = s.create_queue("hostile", json!({})).await;
    let path = format!("/queues/{q}/messages");
    let deep = format!("{{\"body\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes();
    let (status, v) = raw_post(&s, &path, deep).await;
    assert_eq!(
        (status, v["errors"][0]["code"].clone()),
        (400, json!(10208)),
        "{v}"
    );
    let (status, v) = raw_post(&s, &path, vec![b'{', 0xff, 0xfe, b'}']).await;
    assert_eq!(
        (status, v["errors"][0]["code"].clone()),
        (400, json!(10208)),
        "{v}"
    );
    let (status, v) = raw_post(
        &s,
        &format!("/queues/{q}/messages/batch"),
        vec![b' '; 3 * 1024 * 1024],
    )
    .await;
    assert_eq!(status, 413, "{v}");
    for garbage in [&b"null"[..], b"[]", b"\"x\"", b"{\"body\": }", b"\x00\x01"] {
        let (status, v) = raw_post(&s, &path, garbage.to_vec()).await;
        assert_eq!(status, 400, "{garbage:?}: {v}");
    }
    // raw garbage instead of HTTP
    let mut stream = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    stream
        .write_all(b"\x16\x03\x01 this is not http\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = stream.read_to_end(&mut buf);
    // still alive, and nothing accepted was harmed
    assert_eq!(s.send(&q, json!({"body": "still here"})).await.0, 200);
    let (_, m) = s.get(&format!("/queues/{q}/metrics")).await;
    assert_eq!(m["result"]["backlog_count"], 1);
}

#[tokio::test]
async fn slow_clients_and_idle_connections_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(
        tmp.path(),
        vec![("HOPPER_HEADER_TIMEOUT_MS".into(), "1000".into())],
    )
    .await;
    // slowloris: headers that never finish are cut off
    let mut slow = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    slow.write_all(b"POST /client/v4/accounts/a/queues HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = slow.read_to_end(&mut buf);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "a slow client held its connection for {:?}",
        started.elapsed()
    );
    // hundreds of idle connections do not stop the server from serving
    let idle: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", s.port)).ok())
        .collect();
    assert!(idle.len() >= 300);
    let r = s
        .client
        .get(format!("{}/healthz", s.root()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    drop(idle);
}

/// Function secrets and token values never appear in logs, inspect,
/// metrics or API views.
#[tokio::test]
async fn secrets_stay_out_of_logs_inspect_and_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log.txt");
    let data = tmp.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let root = "root-SECRET-token-value-0001";
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(&data)
        .env("HOPPER_ROOT_TOKEN", root)
        .env("RUST_LOG", "debug")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(tmp.path().join("err.txt")).unwrap())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}/client/v4/accounts/sec");
    for _ in 0..200 {
        if client
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let call = |method: reqwest::Method, url: String, body: Value| {
        let c = client.clone();
        async move {
            c.request(method, url)
                .bearer_auth(root)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let secret = "FUNCTION-SECRET-0002";
    let f = common::function::Function::start();
    call(
        reqwest::Method::PUT,
        format!("{base}/functions/signer"),
        json!({"url": f.url, "secret": secret}),
    )
    .await;
    let q = call(
        reqwest::Method::POST,
        format!("{base}/queues"),
        json!({"queue_name": "sec"}),
    )
    .await["result"]["queue_id"]
        .as_str()
        .unwrap()
        .to_owned();
    call(
        reqwest::Method::POST,
        format!("{base}/queues/{q}/consumers"),
        json!({"type": "worker", "script_name": "signer", "settings": {"max_wait_time_ms": 0, "batch_size": 1}}),
    )
    .await;
    let created = call(
        reqwest::Method::POST,
        format!("http://127.0.0.1:{port}/client/v4/user/tokens"),
        json!({"name": "t", "scopes": ["queues_read"]}),
    )
    .await;
    let token_value = created["result"]["value"].as_str().unwrap().to_owned();
    call(
        reqwest::Method::POST,
        format!("{base}/queues/{q}/messages"),
        json!({"body": 1}),
    )
    .await;
    f.wait_for("a delivery", Duration::from_secs(10), |b| !b.is_empty())
        .await;
    assert!(f.batches()[0].signature.is_some(), "deliveries are signed");
    let inspect = call(
        reqwest::Method::GET,
        format!("{base}/queues/{q}/inspect"),
        Value::Null,
    )
    .await
    .to_string();
    let function = call(
        reqwest::Method::GET,
        format!("{base}/functions/signer"),
        Value::Null,
    )
    .await
    .to_string();
    let tokens = call(
        reqwest::Method::GET,
        format!("http://127.0.0.1:{port}/client/v4/user/tokens"),
        Value::Null,
    )
    .await
    .to_string();
    let metrics = client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .bearer_auth(root)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
    let logs = std::fs::read_to_string(&log).unwrap()
        + &std::fs::read_to_string(tmp.path().join("err.txt")).unwrap();
    assert!(logs.contains("request"), "debug logs were captured");
    for (what, text) in [
        ("logs", &logs),
        ("inspect", &inspect),
        ("function view", &function),
        ("token list", &tokens),
        ("metrics", &metrics),
    ] {
        for needle in [root, secret, token_value.as_str()] {
            assert!(!text.contains(needle), "a secret leaked into the {what}");
        }
    }
}
