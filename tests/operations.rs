//! Running Hopper for real: config file, scoped tokens (the full route x
//! scope x account matrix), metrics, readiness and logs.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Server, ACCOUNT};
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[tokens]]
name = "worker-pool"
token_env = "TEST_POOL_TOKEN"
scopes = ["queues_read", "queues_write"]
accounts = ["acme"]

[[functions]]
account = "acme"
name = "thumbnailer"
url = "http://127.0.0.1:9/queue"
secret_env = "TEST_THUMB_SECRET"

[[queues]]
account = "acme"
name = "images"
delivery_delay = 3

[[queues.consumers]]
type = "worker"
script_name = "thumbnailer"
max_batch_size = 20
max_batch_timeout = 2
max_retries = 5
dead_letter_queue = "images-dlq"

[[queues]]
account = "acme"
name = "jobs"

[[queues.consumers]]
type = "http_pull"
max_batch_size = 7
visibility_timeout_ms = 1234
retry_delay = 9
"#;

fn env_for(config: &std::path::Path) -> Vec<(String, String)> {
    vec![
        ("HOPPER_CONFIG".into(), config.display().to_string()),
        ("TEST_POOL_TOKEN".into(), "pool-token-value".into()),
        ("TEST_THUMB_SECRET".into(), "thumb-secret".into()),
    ]
}

async fn queue_named(s: &Server, account: &str, name: &str) -> Value {
    let url = format!("{}/client/v4/accounts/{account}/queues?name={name}", s.root());
    let (status, v) = s.call_as(&s.token.clone(), "GET", &url, None).await;
    assert_eq!(status, 200, "{v}");
    v["result"][0].clone()
}

#[tokio::test]
async fn the_config_file_is_applied_idempotently_and_updates_what_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("hopper.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let data = tmp.path().join("data");
    let mut s = Server::start_in(&data, env_for(&config)).await;

    let images = queue_named(&s, "acme", "images").await;
    assert_eq!(images["settings"]["delivery_delay"], 3);
    let c = &images["consumers"][0];
    assert_eq!(c["type"], "worker");
    assert_eq!(c["script_name"], "thumbnailer");
    assert_eq!(c["settings"]["batch_size"], 20);
    assert_eq!(c["settings"]["max_wait_time_ms"], 2000);
    assert_eq!(c["settings"]["max_retries"], 5);
    assert_eq!(c["dead_letter_queue"], "images-dlq");
    assert!(
        queue_named(&s, "acme", "images-dlq").await.is_object(),
        "the dead-letter queue exists"
    );
    let jobs = queue_named(&s, "acme", "jobs").await;
    assert_eq!(jobs["consumers"][0]["settings"]["batch_size"], 7);
    assert_eq!(jobs["consumers"][0]["settings"]["visibility_timeout_ms"], 1234);
    assert_eq!(jobs["consumers"][0]["settings"]["retry_delay"], 9);

    // the declared token works on its account only
    let url = format!("{}/client/v4/accounts/acme/queues", s.root());
    assert_eq!(s.call_as("pool-token-value", "GET", &url, None).await.0, 200);
    let other = format!("{}/client/v4/accounts/other/queues", s.root());
    assert_eq!(s.call_as("pool-token-value", "GET", &other, None).await.0, 403);

    // the same file again changes nothing
    s.restart().await;
    let again = queue_named(&s, "acme", "images").await;
    assert_eq!(again["modified_on"], images["modified_on"]);
    assert_eq!(again["consumers"][0]["consumer_id"], c["consumer_id"]);

    // a changed setting is updated; an API change to a declared field is overridden
    let id = images["queue_id"].as_str().unwrap();
    let (status, _) = s
        .call_as(
            &s.token.clone(),
            "PATCH",
            &format!("{}/client/v4/accounts/acme/queues/{id}", s.root()),
            Some(json!({"settings": {"delivery_delay": 60}})),
        )
        .await;
    assert_eq!(status, 200);
    // an undeclared consumer field changed through the API is left alone
    let jobs_id = jobs["queue_id"].as_str().unwrap();
    let jobs_consumer = jobs["consumers"][0]["consumer_id"].as_str().unwrap();
    let (status, v) = s
        .call_as(
            &s.token.clone(),
            "PUT",
            &format!("{}/client/v4/accounts/acme/queues/{jobs_id}/consumers/{jobs_consumer}", s.root()),
            Some(json!({"type": "http_pull", "settings": {"batch_size": 7, "visibility_timeout_ms": 1234, "retry_delay": 9, "max_retries": 8}})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    std::fs::write(&config, CONFIG.replace("max_retries = 5", "max_retries = 6")).unwrap();
    s.restart().await;
    let jobs_after = queue_named(&s, "acme", "jobs").await;
    assert_eq!(
        jobs_after["consumers"][0]["settings"]["max_retries"], 8,
        "undeclared: left alone"
    );
    let changed = queue_named(&s, "acme", "images").await;
    assert_eq!(changed["consumers"][0]["settings"]["max_retries"], 6);
    assert_eq!(
        changed["settings"]["delivery_delay"], 3,
        "the file is the desired state"
    );
    assert_eq!(
        changed["consumers"][0]["consumer_id"], c["consumer_id"],
        "updated in place"
    );
}

/// `hopper serve` on any free port with this data dir and config file.
fn serve_args(data: &std::path::Path, config: &std::path::Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = ["serve", "--listen", "127.0.0.1:0", "--data-dir"]
        .map(Into::into)
        .into();
    args.extend([data.into(), "--config".into(), config.into()]);
    args
}

fn run_to_exit<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopper"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn an_invalid_config_file_stops_the_start_naming_line_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("bad.toml");
    std::fs::write(
        &config,
        CONFIG.replace("max_batch_size = 20", "max_batch_size = 500"),
    )
    .unwrap();
    let data = tmp.path().join("data");
    let args = serve_args(&data, &config);
    let env = [("TEST_POOL_TOKEN", "x"), ("TEST_THUMB_SECRET", "y")];
    let (code, text) = run_to_exit(&args, &env);
    assert_ne!(code, 0);
    assert!(
        text.contains("line 22") && text.contains("max_batch_size") && text.contains("1 to 100"),
        "{text}"
    );
    assert!(!data.exists(), "nothing is opened before the file is valid");

    std::fs::write(&config, CONFIG).unwrap();
    let (code, text) = run_to_exit(&args, &[("TEST_POOL_TOKEN", "x")]);
    assert_ne!(code, 0);
    assert!(text.contains("TEST_THUMB_SECRET"), "{text}");
}

#[test]
fn a_config_naming_a_missing_function_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("typo.toml");
    std::fs::write(
        &config,
        CONFIG.replace("script_name = \"thumbnailer\"", "script_name = \"thumbnailr\""),
    )
    .unwrap();
    let data = tmp.path().join("data");
    let args = serve_args(&data, &config);
    let env = [
        ("TEST_POOL_TOKEN", "x"),
        ("TEST_THUMB_SECRET", "y"),
        ("HOPPER_ROOT_TOKEN", "r"),
    ];
    let (code, text) = run_to_exit(&args, &env);
    assert_ne!(code, 0);
    assert!(text.contains("thumbnailr") && text.contains("line 19"), "{text}");
    assert!(!text.contains("queue created"), "nothing was applied: {text}");
    // and the env check names every missing variable at once
    std::fs::write(&config, CONFIG).unwrap();
    let (code, text) = run_to_exit(&args, &[]);
    assert_ne!(code, 0);
    assert!(
        text.contains("TEST_POOL_TOKEN") && text.contains("TEST_THUMB_SECRET"),
        "{text}"
    );
}

#[test]
fn a_remote_listen_address_needs_allow_remote() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, text) = run_to_exit(
        &[
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--data-dir",
            tmp.path().to_str().unwrap(),
        ],
        &[],
    );
    assert_ne!(code, 0);
    assert!(
        text.contains("--allow-remote") && text.contains("not a loopback"),
        "{text}"
    );
}

async fn create_token(s: &Server, scopes: Value, accounts: Option<Value>) -> (String, String) {
    let mut body = json!({"name": "t", "scopes": scopes});
    if let Some(a) = accounts {
        body["accounts"] = a;
    }
    let (status, v) = s
        .call_as(
            &s.token.clone(),
            "POST",
            &format!("{}/client/v4/user/tokens", s.root()),
            Some(body),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    (
        v["result"]["id"].as_str().unwrap().to_owned(),
        v["result"]["value"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn tokens_api_creates_lists_verifies_and_revokes() {
    let s = Server::start().await;
    let (id, value) = create_token(&s, json!(["queues_read"]), None).await;
    let tokens_url = format!("{}/client/v4/user/tokens", s.root());
    let (status, list) = s.call_as(&s.token.clone(), "GET", &tokens_url, None).await;
    assert_eq!(status, 200);
    let text = list.to_string();
    assert!(!text.contains(&value), "values are never listed");
    assert!(!text.contains("\"hash\""), "hashes are never listed");
    let listed = list["result"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap()
        .clone();
    assert_eq!(listed["scopes"], json!(["queues_read"]));
    let (status, v) = s
        .call_as(&value, "GET", &format!("{tokens_url}/verify"), None)
        .await;
    assert_eq!(
        (status, v["result"]["status"].clone(), v["result"]["id"].clone()),
        (200, json!("active"), json!(id))
    );
    // a read-only token may not manage tokens
    assert_eq!(s.call_as(&value, "GET", &tokens_url, None).await.0, 403);
    // used tokens show their last use
    let (_, list) = s.call_as(&s.token.clone(), "GET", &tokens_url, None).await;
    let listed = list["result"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap()
        .clone();
    assert!(listed["last_used_on"].is_string(), "{listed}");
    // revoke
    let (status, _) = s
        .call_as(&s.token.clone(), "DELETE", &format!("{tokens_url}/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        s.call_as(&value, "GET", &format!("{tokens_url}/verify"), None)
            .await
            .0,
        401
    );
    let (status, v) = s
        .call_as(
            &s.token.clone(),
            "POST",
            &tokens_url,
            Some(json!({"name": "x", "scopes": ["admin"]})),
        )
        .await;
    assert_eq!(status, 400, "{v}");
}

/// Every route, with every kind of token: reads need read, writes need
/// write, pull and ack need both, another account is 403, no token is 401.
#[tokio::test]
async fn the_full_route_scope_account_matrix() {
    let s = Server::start().await;
    let q = s.create_queue("matrix", json!({})).await;
    let cid = s.add_pull_consumer(&q, json!({}), None).await;
    let (_, read) = create_token(&s, json!(["queues_read"]), None).await;
    let (_, write) = create_token(&s, json!(["queues_write"]), None).await;
    let (_, both) = create_token(&s, json!(["queues_read", "queues_write"]), None).await;
    let (_, elsewhere) = create_token(
        &s,
        json!(["queues_read", "queues_write"]),
        Some(json!(["someone-else"])),
    )
    .await;
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Need {
        Read,
        Write,
        Both,
    }
    let qp = format!("/queues/{q}");
    let routes: Vec<(&str, String, Need)> = vec![
        ("GET", "/queues".into(), Need::Read),
        ("POST", "/queues".into(), Need::Write),
        ("GET", qp.clone(), Need::Read),
        ("PUT", qp.clone(), Need::Write),
        ("PATCH", qp.clone(), Need::Write),
        (
            "DELETE",
            "/queues/00000000000000000000000000000000".into(),
            Need::Write,
        ),
        ("GET", format!("{qp}/metrics"), Need::Read),
        ("GET", format!("{qp}/inspect"), Need::Read),
        ("POST", format!("{qp}/purge"), Need::Write),
        ("GET", format!("{qp}/purge"), Need::Read),
        ("GET", format!("{qp}/consumers"), Need::Read),
        ("POST", format!("{qp}/consumers"), Need::Write),
        ("GET", format!("{qp}/consumers/{cid}"), Need::Read),
        ("PUT", format!("{qp}/consumers/{cid}"), Need::Write),
        (
            "DELETE",
            format!("{qp}/consumers/00000000000000000000000000000000"),
            Need::Write,
        ),
        ("POST", format!("{qp}/messages"), Need::Write),
        ("POST", format!("{qp}/messages/batch"), Need::Write),
        ("POST", format!("{qp}/messages/pull"), Need::Both),
        ("POST", format!("{qp}/messages/ack"), Need::Both),
        ("POST", format!("{qp}/messages/peek"), Need::Write),
        ("POST", format!("{qp}/messages/purge"), Need::Write),
        ("GET", "/functions".into(), Need::Read),
        ("GET", "/functions/f".into(), Need::Read),
        ("PUT", "/functions/f".into(), Need::Write),
        ("DELETE", "/functions/nope".into(), Need::Write),
    ];
    let tokens: Vec<(&str, String)> = vec![
        ("none", String::new()),
        ("invalid", "not-a-token".into()),
        ("read", read),
        ("write", write),
        ("both", both),
        ("elsewhere", elsewhere),
    ];
    let mut failures = Vec::new();
    let mut checked = 0;
    for (method, path, need) in &routes {
        for (kind, token) in &tokens {
            let url = format!("{}{path}", s.base());
            let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let mut req = s.client.request(m, &url).json(&json!({}));
            if !token.is_empty() {
                req = req.bearer_auth(token);
            }
            let status = req.send().await.unwrap().status().as_u16();
            let allowed = match *kind {
                "read" => *need == Need::Read,
                "write" => *need == Need::Write,
                "both" => true,
                _ => false,
            };
            let expected_denial = match *kind {
                "none" | "invalid" => Some(401),
                "elsewhere" => Some(403),
                _ if !allowed => Some(403),
                _ => None,
            };
            let ok = match expected_denial {
                Some(code) => status == code,
                None => status != 401 && status != 403,
            };
            checked += 1;
            if !ok {
                failures.push(format!(
                    "{method} {path} with {kind} token: got {status}, expected {expected_denial:?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // the account walls hold for the tokens API too
    let url = format!("{}/client/v4/accounts/{ACCOUNT}/queues", s.root());
    assert_eq!(s.call_as("not-a-token", "GET", &url, None).await.0, 401);
}

#[tokio::test]
async fn metrics_are_prometheus_text_and_need_a_read_token() {
    let s = Server::start().await;
    let q = s.create_queue("measured", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    s.send(&q, json!({"body": 1})).await;
    s.send(&q, json!({"body": 2})).await;
    s.pull(&q, json!({"batch_size": 1})).await;
    let url = format!("{}/metrics", s.root());
    assert_eq!(s.client.get(&url).send().await.unwrap().status().as_u16(), 401);
    let text = s
        .client
        .get(&url)
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let labels = format!("account=\"{ACCOUNT}\",queue=\"measured\"");
    for needle in [
        format!("hopper_queue_ready_messages{{{labels}}} 1"),
        format!("hopper_queue_leased_messages{{{labels}}} 1"),
        format!("hopper_messages_sent_total{{{labels}}} 2"),
        format!("hopper_messages_delivered_total{{{labels}}} 1"),
        "hopper_commit_duration_seconds_bucket".to_owned(),
        "hopper_commit_ops_bucket".to_owned(),
        "hopper_http_request_duration_seconds_bucket".to_owned(),
    ] {
        assert!(text.contains(&needle), "missing {needle} in:\n{text}");
    }
    let ready = s.client.get(format!("{}/readyz", s.root())).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);

    let tmp = tempfile::tempdir().unwrap();
    let public = Server::start_in(tmp.path(), vec![("HOPPER_METRICS_PUBLIC".into(), "true".into())]).await;
    let r = public
        .client
        .get(format!("{}/metrics", public.root()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test]
async fn json_logs_carry_a_request_span() {
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args([
            "serve",
            "--log-format",
            "json",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(tmp.path())
        .env("HOPPER_ROOT_TOKEN", "tok")
        .env("RUST_LOG", "hopper=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..200 {
        if client.get(format!("{base}/healthz")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let r = client
        .post(format!("{base}/client/v4/accounts/logacct/queues"))
        .bearer_auth("tok")
        .json(&json!({"queue_name": "logged"}))
        .send()
        .await
        .unwrap();
    let request_id = r
        .headers()
        .get("x-request-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
    let mut out = String::new();
    use std::io::Read;
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    let lines: Vec<Value> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(!lines.is_empty(), "no JSON log lines in:\n{out}");
    let done = lines
        .iter()
        .find(|l| l["span"]["request_id"] == request_id.as_str())
        .unwrap_or_else(|| panic!("no line for request {request_id} in:\n{out}"));
    assert_eq!(done["span"]["account"], "logacct");
    assert!(!out.contains("\"tok\""), "the root token leaked into the logs");
}

#[tokio::test]
async fn sigterm_answers_long_polls_at_once_and_exits_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(tmp.path(), Vec::new()).await;
    let q = s.create_queue("polled", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let url = format!("{}/queues/{q}/messages/pull", s.base());
    let poll = tokio::spawn({
        let client = s.client.clone();
        let token = s.token.clone();
        async move {
            let r = client
                .post(url)
                .bearer_auth(token)
                .json(&json!({"wait_ms": 15000}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let status = tokio::task::spawn_blocking(move || s.terminate()).await.unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the drain waited out the long poll"
    );
    let (code, body) = poll.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["result"]["messages"], json!([]));
}

/// The OpenAPI document is generated from the route table: every operation
/// it lists is routed (never 404 7000 / 405 7001), and it covers the API.
#[tokio::test]
async fn openapi_describes_every_route() {
    let s = Server::start().await;
    let doc: Value = s
        .client
        .get(format!("{}/client/v4/openapi.json", s.root()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().unwrap();
    let mut operations = 0;
    for (path, methods) in paths {
        for (method, op) in methods.as_object().unwrap() {
            operations += 1;
            assert!(op["summary"].is_string());
            let url = format!(
                "{}{}",
                s.root(),
                path.replace("{account_id}", ACCOUNT)
                    .replace("{queue_id}", "0123456789abcdef0123456789abcdef")
                    .replace("{consumer_id}", "0123456789abcdef0123456789abcdef")
                    .replace("{token_id}", "0123456789abcdef0123456789abcdef")
                    .replace("{name}", "f")
            );
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let r = s
                .client
                .request(m, &url)
                .bearer_auth(&s.token)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            let code = body["errors"][0]["code"].as_i64();
            assert!(
                code != Some(7000) && code != Some(7001),
                "{method} {path} is not routed: {status} {body}"
            );
        }
    }
    assert!(operations >= 34, "only {operations} operations documented");
    for needed in [
        "/client/v4/accounts/{account_id}/queues/{queue_id}/messages/pull",
        "/client/v4/user/tokens",
        "/client/v4/accounts/{account_id}/functions/{name}",
    ] {
        assert!(paths.contains_key(needed), "{needed} missing");
    }
    let pull = &paths["/client/v4/accounts/{account_id}/queues/{queue_id}/messages/pull"]["post"];
    assert_eq!(
        pull["requestBody"]["content"]["application/json"]["schema"]["properties"]["wait_ms"]["maximum"],
        20000
    );
}
