//! Hopper over its HTTP API, with a server this program starts and stops.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;

use super::{Broker, ConsumeOpts, Consumer, Link, Producer, Queue};
use crate::cpu::CpuSource;
use crate::payload;

/// How long to back off after a 429 before trying again.
const BACKPRESSURE_PAUSE: Duration = Duration::from_millis(25);
/// Concurrent batch requests used to fill a backlog.
const FILL_TASKS: usize = 8;

/// The HTTP side shared by the broker and its producers and consumers.
struct Api {
    client: reqwest::Client,
    /// Requests answered 429 (and retried) since the last `take_note`.
    backpressure: std::sync::atomic::AtomicU64,
    /// `http://127.0.0.1:PORT/client/v4/accounts/bench`
    base: String,
    auth: String,
}

#[derive(Deserialize)]
struct Envelope<T> {
    result: T,
}

impl Api {
    /// Sends a request with a JSON body (pre-serialized), retrying on 429
    /// backpressure: a refused message was never accepted, so the request
    /// is simply made again and its latency includes the wait.
    async fn request(&self, method: Method, path: &str, body: Bytes) -> Result<Bytes> {
        let url = format!("{}{path}", self.base);
        loop {
            let resp = self
                .client
                .request(method.clone(), &url)
                .header("authorization", &self.auth)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .with_context(|| format!("{method} {path}"))?;
            let status = resp.status();
            let bytes = resp
                .bytes()
                .await
                .with_context(|| format!("{method} {path}: reading reply"))?;
            if status == StatusCode::TOO_MANY_REQUESTS {
                self.backpressure
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(BACKPRESSURE_PAUSE).await;
                continue;
            }
            if !status.is_success() {
                bail!("{method} {path}: {status}: {}", String::from_utf8_lossy(&bytes));
            }
            return Ok(bytes);
        }
    }

    async fn post(&self, path: &str, body: Vec<u8>) -> Result<Bytes> {
        self.request(Method::POST, path, body.into()).await
    }

    async fn post_json(&self, path: &str, body: serde_json::Value) -> Result<Bytes> {
        self.post(path, serde_json::to_vec(&body)?).await
    }
}

pub struct Hopper {
    api: Arc<Api>,
    server: std::sync::Mutex<Option<Child>>,
    pid: u32,
    /// Queues whose pull consumer exists (pull needs one).
    pull_attached: Mutex<HashSet<String>>,
    data_dir: tempfile::TempDir,
}

impl Hopper {
    /// Starts `hopper serve` on a free loopback port and a fresh temp data
    /// dir, and waits until it reports ready.
    pub async fn start(bin: &Path, data_parent: Option<&Path>) -> Result<Hopper> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port")?
            .port();
        let mut dir = tempfile::Builder::new();
        dir.prefix("hopper-compare-");
        let data_dir = match data_parent {
            Some(p) => dir.tempdir_in(p),
            None => dir.tempdir(),
        }
        .context("creating Hopper's data dir")?;
        let token = format!("bench-{}", uuid::Uuid::new_v4().simple());
        let log = std::fs::File::create(data_dir.path().join("hopper.log")).context("creating hopper.log")?;
        let mut child = Command::new(bin)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(data_dir.path())
            .env("HOPPER_ROOT_TOKEN", &token)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id();
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(512)
            .tcp_nodelay(true)
            .build()
            .context("building the HTTP client")?;
        let root = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(data_dir.path().join("hopper.log")).unwrap_or_default();
                bail!("hopper exited at startup ({status}): {}", tail(&log, 2000));
            }
            let ready = client.get(format!("{root}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("hopper did not become ready within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Hopper {
            api: Arc::new(Api {
                client,
                backpressure: Default::default(),
                base: format!("{root}/client/v4/accounts/bench"),
                auth: format!("Bearer {token}"),
            }),
            server: std::sync::Mutex::new(Some(child)),
            pid,
            pull_attached: Mutex::new(HashSet::new()),
            data_dir,
        })
    }

    /// Where the server keeps its data (for the report's filesystem line).
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.path().to_path_buf()
    }

    /// Stops the server: SIGTERM for a clean shutdown, SIGKILL if it lingers.
    pub async fn stop(&self) {
        let child = self.server.lock().ok().and_then(|mut c| c.take());
        let Some(mut child) = child else { return };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        for _ in 0..100 {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Hopper {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.lock().ok().and_then(|mut c| c.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

impl Broker for Hopper {
    type Producer = HopperProducer;
    type Consumer = HopperConsumer;

    fn name(&self) -> &'static str {
        "Hopper"
    }

    fn cpu_source(&self) -> CpuSource {
        CpuSource::Pid(self.pid)
    }

    async fn create_queue(&self, name: &str) -> Result<Queue> {
        #[derive(Deserialize)]
        struct Created {
            queue_id: String,
        }
        let reply = self
            .api
            .post_json("/queues", json!({ "queue_name": name }))
            .await?;
        let created: Envelope<Created> = serde_json::from_slice(&reply).context("create queue reply")?;
        Ok(Queue {
            name: name.to_owned(),
            id: created.result.queue_id,
        })
    }

    async fn delete_queue(&self, queue: &Queue) -> Result<()> {
        self.api
            .request(Method::DELETE, &format!("/queues/{}", queue.id), Bytes::new())
            .await?;
        self.pull_attached.lock().await.remove(&queue.id);
        Ok(())
    }

    async fn producer(&self, queue: &Queue, _link: Link) -> Result<HopperProducer> {
        // One pooled client: each concurrent request gets its own keep-alive
        // connection, which is what a fleet of HTTP producers looks like.
        Ok(HopperProducer {
            api: self.api.clone(),
            single: format!("/queues/{}/messages", queue.id),
            batch: format!("/queues/{}/messages/batch", queue.id),
        })
    }

    async fn consumer(&self, queue: &Queue, _link: Link, opts: ConsumeOpts) -> Result<HopperConsumer> {
        let mut attached = self.pull_attached.lock().await;
        if !attached.contains(&queue.id) {
            self.api
                .post_json(
                    &format!("/queues/{}/consumers", queue.id),
                    json!({"type": "http_pull",
                           "settings": {"batch_size": opts.batch, "visibility_timeout_ms": 60000}}),
                )
                .await?;
            attached.insert(queue.id.clone());
        }
        Ok(HopperConsumer {
            api: self.api.clone(),
            pull: format!("/queues/{}/messages/pull", queue.id),
            ack: format!("/queues/{}/messages/ack", queue.id),
            batch: opts.batch,
            leases: Vec::new(),
        })
    }

    async fn fill(&self, queue: &Queue, count: u64) -> Result<()> {
        let path = format!("/queues/{}/messages/batch", queue.id);
        let left = Arc::new(std::sync::atomic::AtomicU64::new(count));
        let full = Bytes::from(payload::hopper_batch(payload::now_us(), 100));
        let mut tasks = tokio::task::JoinSet::<Result<()>>::new();
        for _ in 0..FILL_TASKS {
            let (api, path, left, full) = (self.api.clone(), path.clone(), left.clone(), full.clone());
            tasks.spawn(async move {
                use std::sync::atomic::Ordering;
                loop {
                    let (Ok(before) | Err(before)) =
                        left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                            Some(l.saturating_sub(100))
                        });
                    let n = before.min(100) as usize;
                    if n == 0 {
                        return Ok(());
                    }
                    let body = if n == 100 {
                        full.clone()
                    } else {
                        payload::hopper_batch(payload::now_us(), n).into()
                    };
                    api.request(Method::POST, &path, body).await?;
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        Ok(())
    }

    fn has_push(&self) -> bool {
        true
    }

    fn take_note(&self) -> Option<String> {
        let n = self
            .api
            .backpressure
            .swap(0, std::sync::atomic::Ordering::Relaxed);
        (n > 0).then(|| format!("{n} requests answered 429 (backpressure) and retried"))
    }

    async fn attach_push(&self, queue: &Queue, url: &str) -> Result<()> {
        let function = &queue.name;
        self.api
            .request(
                Method::PUT,
                &format!("/functions/{function}"),
                serde_json::to_vec(&json!({"url": url, "timeout_ms": 30000}))?.into(),
            )
            .await?;
        self.api
            .post_json(
                &format!("/queues/{}/consumers", queue.id),
                json!({"type": "worker", "script_name": function,
                       // Like the peers' bridges: send whatever is ready at once.
                       "settings": {"batch_size": 100, "max_wait_time_ms": 0}}),
            )
            .await?;
        Ok(())
    }
}

pub struct HopperProducer {
    api: Arc<Api>,
    single: String,
    batch: String,
}

impl Producer for HopperProducer {
    async fn send(&self, t: u64, count: usize) -> Result<()> {
        // A 200 means the messages are fsynced.
        if count == 1 {
            self.api.post(&self.single, payload::hopper_single(t)).await?;
        } else {
            self.api
                .post(&self.batch, payload::hopper_batch(t, count))
                .await?;
        }
        Ok(())
    }

    async fn close(self) {}
}

pub struct HopperConsumer {
    api: Arc<Api>,
    pull: String,
    ack: String,
    batch: usize,
    leases: Vec<String>,
}

impl Consumer for HopperConsumer {
    async fn receive(&mut self, wait: Duration) -> Result<Vec<Vec<u8>>> {
        #[derive(Deserialize)]
        struct Pulled {
            messages: Vec<Pulled1>,
        }
        #[derive(Deserialize)]
        struct Pulled1 {
            lease_id: String,
            body: String,
        }
        let body = format!(
            r#"{{"batch_size":{},"visibility_timeout_ms":60000,"wait_ms":{}}}"#,
            self.batch,
            wait.as_millis().min(20_000)
        );
        let reply = self.api.post(&self.pull, body.into_bytes()).await?;
        let pulled: Envelope<Pulled> = serde_json::from_slice(&reply).context("pull reply")?;
        self.leases.clear();
        let mut bodies = Vec::with_capacity(pulled.result.messages.len());
        for m in pulled.result.messages {
            self.leases.push(m.lease_id);
            bodies.push(m.body.into_bytes());
        }
        Ok(bodies)
    }

    async fn ack(&mut self) -> Result<()> {
        if self.leases.is_empty() {
            return Ok(());
        }
        #[derive(serde::Serialize)]
        struct Acks<'a> {
            acks: Vec<Ack<'a>>,
        }
        #[derive(serde::Serialize)]
        struct Ack<'a> {
            lease_id: &'a str,
        }
        let acks = Acks {
            acks: self.leases.iter().map(|l| Ack { lease_id: l }).collect(),
        };
        self.api.post(&self.ack, serde_json::to_vec(&acks)?).await?;
        self.leases.clear();
        Ok(())
    }

    async fn close(self) {}
}
