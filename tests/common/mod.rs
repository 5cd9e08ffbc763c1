//! Test harness: runs the real `hopper` binary on 127.0.0.1 with a temp
//! data dir and speaks HTTP to it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub mod function;

pub const ACCOUNT: &str = "test-acct";

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub token: String,
    pub client: reqwest::Client,
    extra_env: Vec<(String, String)>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Server {
    /// Starts a server on a fresh temp dir with a known root token.
    pub async fn start() -> Server {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let mut s = Server::new_in(&dir, Vec::new());
        s._tmp = Some(tmp);
        s.spawn().await;
        s
    }

    /// Starts a server whose data dir is `dir` (kept by the caller).
    pub async fn start_in(dir: &Path, env: Vec<(String, String)>) -> Server {
        let mut s = Server::new_in(dir, env);
        s.spawn().await;
        s
    }

    fn new_in(dir: &Path, extra_env: Vec<(String, String)>) -> Server {
        Server {
            child: None,
            port: free_port(),
            dir: dir.to_path_buf(),
            _tmp: None,
            token: format!("test-root-{}", uuid::Uuid::new_v4().simple()),
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("http client"),
            extra_env,
        }
    }

    pub async fn spawn(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopper"));
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(&self.dir)
            .env("HOPPER_ROOT_TOKEN", &self.token)
            .env(
                "RUST_LOG",
                std::env::var("HOPPER_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(if std::env::var("HOPPER_TEST_LOG").is_ok() {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("spawn hopper"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = self.client.get(format!("{}/healthz", self.root())).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "hopper did not become healthy");
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
        c.wait().expect("exit status")
    }

    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn().await;
    }

    pub fn root(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn base(&self) -> String {
        format!("{}/client/v4/accounts/{ACCOUNT}", self.root())
    }

    /// Sends a request with the root token; returns status and JSON body.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(
            &self.token.clone(),
            method,
            &format!("{}{path}", self.base()),
            body,
        )
        .await
    }

    pub async fn call_as(&self, token: &str, method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.client.request(method, url).bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON response {status}: {text}"));
        (status, value)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(body)).await
    }

    /// Creates a queue and returns its id.
    pub async fn create_queue(&self, name: &str, settings: Value) -> String {
        let (status, v) = self
            .post("/queues", json!({"queue_name": name, "settings": settings}))
            .await;
        assert_eq!(status, 200, "create queue: {v}");
        v["result"]["queue_id"].as_str().expect("queue_id").to_owned()
    }

    /// Adds an http_pull consumer with the given settings (and DLQ).
    pub async fn add_pull_consumer(&self, queue_id: &str, settings: Value, dlq: Option<&str>) -> String {
        let mut body = json!({"type": "http_pull", "settings": settings});
        if let Some(d) = dlq {
            body["dead_letter_queue"] = json!(d);
        }
        let (status, v) = self.post(&format!("/queues/{queue_id}/consumers"), body).await;
        assert_eq!(status, 200, "add consumer: {v}");
        v["result"]["consumer_id"]
            .as_str()
            .expect("consumer_id")
            .to_owned()
    }

    pub async fn send(&self, queue_id: &str, body: Value) -> (u16, Value) {
        self.post(&format!("/queues/{queue_id}/messages"), body).await
    }

    pub async fn pull(&self, queue_id: &str, body: Value) -> Value {
        let (status, v) = self
            .post(&format!("/queues/{queue_id}/messages/pull"), body)
            .await;
        assert_eq!(status, 200, "pull: {v}");
        v["result"].clone()
    }

    pub async fn ack(&self, queue_id: &str, body: Value) -> Value {
        let (status, v) = self.post(&format!("/queues/{queue_id}/messages/ack"), body).await;
        assert_eq!(status, 200, "ack: {v}");
        v["result"].clone()
    }

    pub async fn inspect(&self, queue_id: &str) -> Value {
        let (status, v) = self.get(&format!("/queues/{queue_id}/inspect")).await;
        assert_eq!(status, 200, "inspect: {v}");
        v["result"].clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Decodes a pulled json body (base64 of the JSON text).
pub fn decode_json_body(body: &Value) -> Value {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(body.as_str().expect("body string"))
        .expect("base64");
    serde_json::from_slice(&raw).expect("json")
}
