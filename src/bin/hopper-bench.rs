//! Load generator for Hopper: measures durable sends (batched and single)
//! and pull+ack cycles over real HTTP, printing msg/s and latency.
//!
//! `cargo run --release --bin hopper-bench` starts its own server (the
//! `hopper` binary beside this one) on a temp data dir; `--url` and
//! `--token` point it at a running server instead.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser, Debug, Clone)]
#[command(about = "Benchmark a Hopper server over HTTP")]
struct Opts {
    /// Server root URL (e.g. http://127.0.0.1:8787); none: start one.
    #[arg(long)]
    url: Option<String>,
    /// Bearer token (needed with --url).
    #[arg(long, env = "HOPPER_TOKEN")]
    token: Option<String>,
    #[arg(long, default_value = "bench")]
    account: String,
    /// Scenarios to run: batch, single, pullack, push; or store-layout alone
    /// (in-process redb comparison, no server); or scaling alone (cost per
    /// message against backlog depth, then recovery after kill -9).
    #[arg(long, value_delimiter = ',', default_value = "batch,single,pullack,push")]
    scenarios: Vec<String>,
    /// Seconds per scenario.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    #[arg(long, default_value_t = 1024)]
    message_bytes: usize,
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// Concurrent producers for the batch scenario.
    #[arg(long, default_value_t = 8)]
    batch_producers: usize,
    /// Concurrent producers (connections) for the single-send scenario.
    #[arg(long, default_value_t = 64)]
    single_producers: usize,
    /// Concurrent pull+ack consumers.
    #[arg(long, default_value_t = 4)]
    consumers: usize,
    /// Messages loaded before the pull+ack scenario.
    #[arg(long, default_value_t = 300_000)]
    prefill: usize,
    /// Backlog delivered by the push-drain measurement.
    #[arg(long, default_value_t = 20_000)]
    push_backlog: usize,
    /// Offered load (msg/s) for the push latency measurement.
    #[arg(long, default_value_t = 2_000)]
    push_rate: u64,
    /// Offered load (msg/s) for the pull latency scenario.
    #[arg(long, default_value_t = 5_000)]
    latency_rate: u64,
    /// Runs of each scenario; the table shows medians (and the msg/s range).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Data dir for a server the bench starts (default: a temp dir).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Backlogs compared by the scaling scenario (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "10000,10000000")]
    scaling_backlogs: Vec<u64>,
    /// Offered load (msg/s) while the scaling scenario measures the cost
    /// per message; consumers keep up, so the backlog holds steady.
    #[arg(long, default_value_t = 10_000)]
    scaling_rate: u64,
}

struct Stats {
    messages: AtomicU64,
    latencies_us: Mutex<Vec<u32>>,
}

impl Stats {
    fn new() -> Arc<Self> {
        Arc::new(Stats {
            messages: AtomicU64::new(0),
            latencies_us: Mutex::new(Vec::with_capacity(1 << 20)),
        })
    }

    fn record(&self, messages: u64, started: Instant) {
        self.messages.fetch_add(messages, Ordering::Relaxed);
        let us = started.elapsed().as_micros().min(u32::MAX as u128) as u32;
        if let Ok(mut l) = self.latencies_us.lock() {
            l.push(us);
        }
    }
}

struct Row {
    name: String,
    messages: u64,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn summarize(name: &str, stats: &Stats, seconds: f64) -> Row {
    let mut lat = stats.latencies_us.lock().map(|l| l.clone()).unwrap_or_default();
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1000.0
    };
    Row {
        name: name.to_owned(),
        messages: stats.messages.load(Ordering::Relaxed),
        seconds,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
    }
}

struct Target {
    root: String,
    token: String,
    account: String,
    client: reqwest::Client,
}

impl Target {
    fn new(root: String, token: &str, account: &str) -> Target {
        Target {
            root,
            token: token.to_owned(),
            account: account.to_owned(),
            client: client(),
        }
    }

    fn base(&self) -> String {
        format!("{}/client/v4/accounts/{}", self.root, self.account)
    }

    async fn call(&self, path: &str, body: &Value) -> Result<Value, String> {
        let resp = self
            .client
            .post(format!("{}{path}", self.base()))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        let v: Value = resp.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {v}"));
        }
        Ok(v["result"].clone())
    }

    /// Posts pre-serialized JSON; returns the raw reply body on success.
    async fn post_raw(&self, path: &str, body: bytes::Bytes) -> Result<bytes::Bytes, String> {
        let resp = self
            .client
            .post(format!("{}{path}", self.base()))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)));
        }
        Ok(bytes)
    }

    async fn create_queue(&self, name: &str, pull: bool) -> Result<String, String> {
        let v = self.call("/queues", &json!({"queue_name": name})).await?;
        let id = v["queue_id"].as_str().ok_or("no queue_id")?.to_owned();
        if pull {
            self.call(
                &format!("/queues/{id}/consumers"),
                &json!({"type": "http_pull", "settings": {"batch_size": 100, "visibility_timeout_ms": 60000}}),
            )
            .await?;
        }
        Ok(id)
    }
}

fn message(size: usize) -> Value {
    json!({"body": "x".repeat(size), "content_type": "text"})
}

async fn run_producers(
    target: Arc<Target>,
    queue: String,
    producers: usize,
    batch: usize,
    size: usize,
    duration: Duration,
) -> Row {
    let stats = Stats::new();
    let stop = Arc::new(AtomicBool::new(false));
    let body = if batch > 1 {
        json!({"messages": (0..batch).map(|_| message(size)).collect::<Vec<_>>()})
    } else {
        message(size)
    };
    // Serialized once: the client's CPU is the server's CPU on this box.
    let body = bytes::Bytes::from(serde_json::to_vec(&body).expect("json"));
    let path = if batch > 1 {
        format!("/queues/{queue}/messages/batch")
    } else {
        format!("/queues/{queue}/messages")
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let (t, s, stop, body, path) = (
            target.clone(),
            stats.clone(),
            stop.clone(),
            body.clone(),
            path.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let at = Instant::now();
                match t.post_raw(&path, body.clone()).await {
                    Ok(_) => s.record(batch as u64, at),
                    Err(e) => {
                        eprintln!("send failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let name = if batch > 1 {
        format!("send batch ({producers} producers x {batch} msgs)")
    } else {
        format!("send single ({producers} producers)")
    };
    summarize(&name, &stats, started.elapsed().as_secs_f64())
}

async fn run_pull_ack(
    target: Arc<Target>,
    queue: String,
    consumers: usize,
    batch: usize,
    duration: Duration,
) -> Row {
    #[derive(serde::Deserialize)]
    struct Pulled {
        result: PulledResult,
    }
    #[derive(serde::Deserialize)]
    struct PulledResult {
        messages: Vec<Lease>,
    }
    #[derive(serde::Deserialize, serde::Serialize)]
    struct Lease {
        lease_id: String,
    }
    #[derive(serde::Deserialize)]
    struct Acked {
        result: AckedResult,
    }
    #[derive(serde::Deserialize)]
    struct AckedResult {
        #[serde(rename = "ackCount")]
        ack_count: u64,
    }
    let pull_body = bytes::Bytes::from(
        serde_json::to_vec(&json!({"batch_size": batch, "visibility_timeout_ms": 60000})).expect("json"),
    );
    let stats = Stats::new();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..consumers {
        let pull_body = pull_body.clone();
        let (t, s, stop, queue) = (target.clone(), stats.clone(), stop.clone(), queue.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let at = Instant::now();
                let pulled: Pulled = match t
                    .post_raw(&format!("/queues/{queue}/messages/pull"), pull_body.clone())
                    .await
                    .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
                {
                    Ok(v) => v,
                    Err(e) => {
                        eprintln!("pull failed: {e}");
                        continue;
                    }
                };
                let msgs = pulled.result.messages;
                if msgs.is_empty() {
                    break; // drained
                }
                let ack_body = serde_json::to_vec(&json!({ "acks": msgs })).expect("json");
                match t
                    .post_raw(&format!("/queues/{queue}/messages/ack"), ack_body.into())
                    .await
                    .and_then(|b| serde_json::from_slice::<Acked>(&b).map_err(|e| e.to_string()))
                {
                    Ok(v) => s.record(v.result.ack_count, at),
                    Err(e) => eprintln!("ack failed: {e}"),
                }
            }
        }));
    }
    let deadline = tokio::time::sleep(duration);
    tokio::pin!(deadline);
    let all = futures_util::future::join_all(tasks);
    tokio::select! {
        _ = &mut deadline => { stop.store(true, Ordering::Relaxed); }
        _ = all => {}
    }
    // give in-flight cycles a moment to finish after the stop signal
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seconds = started.elapsed().as_secs_f64();
    summarize(
        &format!("pull+ack ({consumers} consumers x batch {batch})"),
        &stats,
        seconds,
    )
}

/// A trivial function for the push scenario: counts messages and records
/// send-to-receipt latency from the send time each body carries.
#[derive(Clone)]
struct Sink {
    stats: Arc<Stats>,
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

async fn sink_handler(
    body: actix_web::web::Bytes,
    sink: actix_web::web::Data<Sink>,
) -> actix_web::HttpResponse {
    #[derive(serde::Deserialize)]
    struct Batch {
        messages: Vec<Msg>,
    }
    #[derive(serde::Deserialize)]
    struct Msg {
        body: Body,
    }
    #[derive(serde::Deserialize)]
    struct Body {
        t: u64,
    }
    if let Ok(batch) = serde_json::from_slice::<Batch>(&body) {
        let now = now_us();
        let mut lat = sink.stats.latencies_us.lock().unwrap_or_else(|p| p.into_inner());
        for m in &batch.messages {
            lat.push(now.saturating_sub(m.body.t).min(u32::MAX as u64) as u32);
        }
        sink.stats
            .messages
            .fetch_add(batch.messages.len() as u64, Ordering::Relaxed);
    }
    actix_web::HttpResponse::Ok().finish()
}

fn start_sink(stats: Arc<Stats>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("sink port");
    let url = format!("http://{}/push", listener.local_addr().expect("addr"));
    let sink = actix_web::web::Data::new(Sink { stats });
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            actix_web::HttpServer::new(move || {
                actix_web::App::new()
                    .app_data(sink.clone())
                    .app_data(actix_web::web::PayloadConfig::new(16 << 20))
                    .default_service(actix_web::web::to(sink_handler))
            })
            .workers(1)
            .listen(listener)
            .expect("sink listen")
            .run()
            .await
        })
    });
    url
}

/// Registers the sink as function `name` and creates queue `name`.
async fn function_queue(target: &Target, name: &str, url: &str) -> String {
    let _ = target
        .client
        .put(format!("{}/functions/{name}", target.base()))
        .bearer_auth(&target.token)
        .json(&json!({"url": url, "timeout_ms": 30000}))
        .send()
        .await;
    target.create_queue(name, false).await.expect("queue")
}

async fn attach_worker(target: &Target, queue: &str, function: &str, batch_size: usize) {
    target
        .call(
            &format!("/queues/{queue}/consumers"),
            &json!({"type": "worker", "script_name": function,
                    "settings": {"batch_size": batch_size, "max_wait_time_ms": 50}}),
        )
        .await
        .expect("consumer");
}

/// Push delivery: producers send for `duration` at a steady pace while the
/// queue's worker consumer delivers to the in-process sink.
async fn run_push(
    target: Arc<Target>,
    run: &str,
    batch_size: usize,
    size: usize,
    duration: Duration,
    rate: u64,
) -> Row {
    let stats = Stats::new();
    let url = start_sink(stats.clone());
    let name = format!("push{batch_size}-{run}");
    let q = function_queue(&target, &name, &url).await;
    attach_worker(&target, &q, &name, batch_size).await;
    let pad = "x".repeat(size.saturating_sub(30));
    let per_request = 10usize;
    let interval = Duration::from_secs_f64(per_request as f64 / rate as f64);
    let started = Instant::now();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sent = 0u64;
    let mut inflight = Vec::new();
    while started.elapsed() < duration {
        ticker.tick().await;
        let t = now_us();
        let body = json!({"messages": (0..per_request).map(|_| json!({"body": {"t": t, "p": pad}})).collect::<Vec<_>>()});
        let (target, q) = (target.clone(), q.clone());
        inflight.push(tokio::spawn(async move {
            let _ = target.call(&format!("/queues/{q}/messages/batch"), &body).await;
        }));
        sent += per_request as u64;
    }
    futures_util::future::join_all(inflight).await;
    // wait for the tail to arrive
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats.messages.load(Ordering::Relaxed) < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    summarize(
        &format!("push, batch_size {batch_size} (offered {rate} msg/s), e2e latency"),
        &stats,
        seconds,
    )
}

/// Pull latency: single sends at a fixed offered load (open loop, each
/// stamped with its intended send time) while `consumers` long-poll, pull
/// and ack; records send-to-receipt latency.
async fn run_pull_latency(
    target: Arc<Target>,
    run: &str,
    rate: u64,
    consumers: usize,
    duration: Duration,
) -> Row {
    let q = target
        .create_queue(&format!("latency-{run}"), true)
        .await
        .expect("queue");
    let stats = Stats::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..consumers {
        let (t, q, s, stop) = (target.clone(), q.clone(), stats.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let pull = bytes::Bytes::from_static(
                br#"{"batch_size": 100, "visibility_timeout_ms": 60000, "wait_ms": 1000}"#,
            );
            while !stop.load(Ordering::Relaxed) {
                let Ok(body) = t
                    .post_raw(&format!("/queues/{q}/messages/pull"), pull.clone())
                    .await
                else {
                    continue;
                };
                let now = now_us();
                let Ok(v) = serde_json::from_slice::<Value>(&body) else {
                    continue;
                };
                let Some(msgs) = v["result"]["messages"].as_array() else {
                    continue;
                };
                if msgs.is_empty() {
                    continue;
                }
                if let Ok(mut lat) = s.latencies_us.lock() {
                    for m in msgs {
                        let sent: u64 = m["body"]
                            .as_str()
                            .and_then(|b| b.split(':').next()?.parse().ok())
                            .unwrap_or(now);
                        lat.push(now.saturating_sub(sent).min(u32::MAX as u64) as u32);
                    }
                }
                s.messages.fetch_add(msgs.len() as u64, Ordering::Relaxed);
                let acks: Vec<Value> = msgs.iter().map(|m| json!({"lease_id": m["lease_id"]})).collect();
                let ack = serde_json::to_vec(&json!({ "acks": acks })).expect("json");
                let _ = t.post_raw(&format!("/queues/{q}/messages/ack"), ack.into()).await;
            }
        }));
    }
    let senders = 32u64;
    let pad = "x".repeat(1000);
    let started = Instant::now();
    let base_us = now_us();
    for i in 0..senders {
        let (t, q, stop, pad) = (target.clone(), q.clone(), stop.clone(), pad.clone());
        tasks.push(tokio::spawn(async move {
            let interval_us = senders * 1_000_000 / rate;
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let intended = base_us + i * 1_000_000 / rate + k * interval_us;
                k += 1;
                let now = now_us();
                if intended > now {
                    tokio::time::sleep(Duration::from_micros(intended - now)).await;
                }
                let body =
                    serde_json::to_vec(&json!({"body": format!("{intended}:{pad}"), "content_type": "text"}))
                        .expect("json");
                let _ = t.post_raw(&format!("/queues/{q}/messages"), body.into()).await;
            }
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    summarize(
        &format!("pull latency at {rate} msg/s offered, {consumers} consumers, send to receipt"),
        &stats,
        started.elapsed().as_secs_f64(),
    )
}

/// Push throughput: a backlog delivered as fast as the consumer can.
async fn run_push_drain(
    target: Arc<Target>,
    run: &str,
    batch_size: usize,
    size: usize,
    backlog: usize,
) -> Row {
    let stats = Stats::new();
    let url = start_sink(stats.clone());
    let name = format!("pushdrain{batch_size}-{run}");
    let q = function_queue(&target, &name, &url).await;
    let pad = "x".repeat(size.saturating_sub(30));
    let t = now_us();
    let body = json!({"messages": (0..100).map(|_| json!({"body": {"t": t, "p": pad}})).collect::<Vec<_>>()});
    for _ in 0..backlog.div_ceil(100) {
        target
            .call(&format!("/queues/{q}/messages/batch"), &body)
            .await
            .expect("fill");
    }
    let started = Instant::now();
    attach_worker(&target, &q, &name, batch_size).await;
    let want = (backlog.div_ceil(100) * 100) as u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while stats.messages.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut row = summarize(
        &format!("push drain of {want}, batch_size {batch_size}"),
        &stats,
        seconds,
    );
    // the latencies here are queueing time in the backlog, not meaningful
    row.p50_ms = f64::NAN;
    row.p99_ms = f64::NAN;
    row
}

fn start_server(opts: &Opts) -> (Child, String, String, Option<tempfile::TempDir>) {
    let (dir, tmp) = match &opts.data_dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::Builder::new()
                .prefix("hopper-bench")
                .tempdir()
                .expect("temp dir");
            (t.path().to_path_buf(), Some(t))
        }
    };
    let token = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let (child, root) = spawn_server(&dir, &token);
    (child, root, token, tmp)
}

/// Starts the `hopper` binary beside this one on a free loopback port.
fn spawn_server(dir: &std::path::Path, token: &str) -> (Child, String) {
    let exe = std::env::current_exe().expect("bench path");
    let hopper = exe.with_file_name("hopper");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let child = Command::new(&hopper)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir)
        .env("HOPPER_ROOT_TOKEN", token)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", hopper.display()));
    (child, format!("http://127.0.0.1:{port}"))
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split(' ').collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat(5), in clock ticks (100/s).
    (ticks(11) + ticks(12)) / 100.0
}

/// A `/proc/<pid>/status` field in MiB (VmRSS, VmHWM).
fn memory_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim_start_matches(':')
                .trim()
                .strip_suffix(" kB")?
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .expect("client")
}

async fn wait_ready(target: &Target) {
    // Recovery of a deep store after kill -9 can take a while: wait 10 min.
    for _ in 0..120_000 {
        if let Ok(r) = target.client.get(format!("{}/readyz", target.root)).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("server at {} never became ready", target.root);
}

/// Sends batches until `count` more messages are stored.
async fn fill(target: &Arc<Target>, queue: &str, count: u64, size: usize) {
    let body = json!({"messages": (0..100).map(|_| message(size)).collect::<Vec<_>>()});
    let body = bytes::Bytes::from(serde_json::to_vec(&body).expect("json"));
    let batches = Arc::new(AtomicU64::new(count.div_ceil(100)));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (t, batches, body) = (target.clone(), batches.clone(), body.clone());
        let path = format!("/queues/{queue}/messages/batch");
        tasks.push(tokio::spawn(async move {
            while batches
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_ok()
            {
                while let Err(e) = t.post_raw(&path, body.clone()).await {
                    eprintln!("fill: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }));
    }
    futures_util::future::join_all(tasks).await;
}

/// Steady state over a backlog: producers offer `rate` msg/s in batches of
/// 100 while 4 consumers pull and ack batches of 100. Returns the row and
/// the server's CPU microseconds per message (send, delivery and ack).
async fn steady_state(
    target: Arc<Target>,
    queue: &str,
    rate: u64,
    size: usize,
    duration: Duration,
    pid: u32,
    label: &str,
) -> (Row, f64) {
    let cpu_before = cpu_seconds(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (t, q, stop) = (target.clone(), queue.to_owned(), stop.clone());
        let body = json!({"messages": (0..100).map(|_| message(size)).collect::<Vec<_>>()});
        let body = bytes::Bytes::from(serde_json::to_vec(&body).expect("json"));
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_secs_f64(100.0 / rate as f64));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut inflight = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                ticker.tick().await;
                let (t, q, body) = (t.clone(), q.clone(), body.clone());
                inflight.push(tokio::spawn(async move {
                    let _ = t.post_raw(&format!("/queues/{q}/messages/batch"), body).await;
                }));
            }
            futures_util::future::join_all(inflight).await;
        })
    };
    // Consumers paced to the same rate, so the backlog depth holds.
    let stats = Stats::new();
    let started = Instant::now();
    let mut consumers = Vec::new();
    for _ in 0..4 {
        let (t, q, s, stop) = (target.clone(), queue.to_owned(), stats.clone(), stop.clone());
        consumers.push(tokio::spawn(async move {
            let pull = bytes::Bytes::from_static(br#"{"batch_size": 100, "visibility_timeout_ms": 60000}"#);
            let mut ticker = tokio::time::interval(Duration::from_secs_f64(400.0 / rate as f64));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            while !stop.load(Ordering::Relaxed) {
                ticker.tick().await;
                let at = Instant::now();
                let Ok(body) = t
                    .post_raw(&format!("/queues/{q}/messages/pull"), pull.clone())
                    .await
                else {
                    continue;
                };
                let Ok(v) = serde_json::from_slice::<Value>(&body) else {
                    continue;
                };
                let acks: Vec<Value> = v["result"]["messages"]
                    .as_array()
                    .map(|m| m.iter().map(|m| json!({"lease_id": m["lease_id"]})).collect())
                    .unwrap_or_default();
                let n = acks.len() as u64;
                let ack = serde_json::to_vec(&json!({ "acks": acks })).expect("json");
                if t.post_raw(&format!("/queues/{q}/messages/ack"), ack.into())
                    .await
                    .is_ok()
                {
                    s.record(n, at);
                }
            }
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    futures_util::future::join_all(consumers).await;
    let row = summarize(label, &stats, started.elapsed().as_secs_f64());
    let _ = producer.await;
    let cpu = cpu_seconds(pid) - cpu_before;
    let per_message_us = cpu * 1e6 / row.messages.max(1) as f64;
    (row, per_message_us)
}

/// Cost per message against backlog depth, then recovery after kill -9
/// with the deepest backlog stored: time to serve again and memory.
async fn scaling(opts: &Opts) {
    let tmp = tempfile::Builder::new()
        .prefix("hopper-scaling")
        .tempdir()
        .expect("temp dir");
    let dir = opts.data_dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let token = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let (mut child, root) = spawn_server(&dir, &token);
    let target = Arc::new(Target::new(root, &token, &opts.account));
    wait_ready(&target).await;
    let queue = target.create_queue("scaling", true).await.expect("queue");
    let duration = Duration::from_secs(opts.duration);
    let mut stored = 0u64;
    let mut table = Vec::new();
    for &backlog in &opts.scaling_backlogs {
        if backlog > stored {
            let started = Instant::now();
            fill(&target, &queue, backlog - stored, opts.message_bytes).await;
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "filled to {backlog} in {secs:.1} s ({:.0} msg/s)",
                (backlog - stored) as f64 / secs
            );
            stored = backlog;
        }
        let mut runs = Vec::new();
        for _ in 0..opts.repeat.max(1) {
            let (row, us) = steady_state(
                target.clone(),
                &queue,
                opts.scaling_rate,
                opts.message_bytes,
                duration,
                child.id(),
                &format!("backlog {backlog}"),
            )
            .await;
            eprintln!(
                "backlog {backlog}: {:.0} msg/s consumed, {us:.1} µs server CPU per message, p99 {:.1} ms",
                row.messages as f64 / row.seconds,
                row.p99_ms
            );
            runs.push((row, us));
        }
        runs.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal));
        let (row, us) = runs.swap_remove(runs.len() / 2);
        table.push((backlog, row, us, memory_mib(child.id(), "VmRSS")));
    }
    // A clean restart (SIGTERM), then a crash (kill -9): each timed from
    // the start of the new process until a pull returns messages again.
    let mut restarts = Vec::new();
    for (label, crash) in [("after SIGTERM", false), ("after kill -9", true)] {
        if crash {
            let _ = child.kill();
        } else {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
        }
        let _ = child.wait();
        let started = Instant::now();
        let (next, root) = spawn_server(&dir, &token);
        child = next;
        let target = Arc::new(Target::new(root, &token, &opts.account));
        wait_ready(&target).await;
        let pull = bytes::Bytes::from_static(br#"{"batch_size": 1, "visibility_timeout_ms": 1000}"#);
        loop {
            if let Ok(b) = target
                .post_raw(&format!("/queues/{queue}/messages/pull"), pull.clone())
                .await
            {
                if serde_json::from_slice::<Value>(&b)
                    .is_ok_and(|v| v["result"]["messages"].as_array().is_some_and(|m| !m.is_empty()))
                {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let seconds = started.elapsed().as_secs_f64();
        let rss = memory_mib(child.id(), "VmRSS");
        let hwm = memory_mib(child.id(), "VmHWM");
        eprintln!("restart {label}: {seconds:.2} s to first delivery, RSS {rss:.0} MiB (peak {hwm:.0} MiB)");
        restarts.push((label, seconds, rss, hwm));
    }
    let disk: u64 = std::fs::read_dir(dir.join("queues"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    println!();
    println!("| backlog | consumed msg/s (offered {}) | server CPU µs/msg | vs first | pull+ack p50 ms | p99 ms | server RSS MiB |", opts.scaling_rate);
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let base = table.first().map(|t| t.2).unwrap_or(f64::NAN);
    for (backlog, row, us, rss) in &table {
        println!(
            "| {backlog} | {:.0} | {us:.1} | {:+.0}% | {:.2} | {:.2} | {rss:.0} |",
            row.messages as f64 / row.seconds,
            (us / base - 1.0) * 100.0,
            row.p50_ms,
            row.p99_ms
        );
    }
    println!();
    println!(
        "| restart with {stored} messages stored ({:.1} GiB on disk) | to first delivery | RSS after | peak RSS |",
        disk as f64 / (1u64 << 30) as f64
    );
    println!("|---|---:|---:|---:|");
    for (label, seconds, rss, hwm) in restarts {
        println!("| {label} | {seconds:.2} s | {rss:.0} MiB | {hwm:.0} MiB |");
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The storage-layout question behind ARCHITECTURE.md: N queues committing
/// at once, each with its own redb file, versus N tables in one shared file
/// (one writer at a time). Each commit: 10 x 1 KiB inserts, fsynced.
fn store_layout(queues: usize, seconds: u64) {
    use redb::{Database, TableDefinition};
    const T: [&str; 16] = [
        "q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "q10", "q11", "q12", "q13", "q14", "q15",
    ];
    let queues = queues.min(T.len());
    let dir = tempfile::tempdir().expect("temp dir");
    let body = vec![7u8; 1024];
    let run = |dbs: Vec<Arc<Database>>, label: &str| {
        let stop = Arc::new(AtomicBool::new(false));
        let commits = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let threads: Vec<_> = (0..queues)
            .map(|q| {
                let db = dbs[q % dbs.len()].clone();
                let (stop, commits, body) = (stop.clone(), commits.clone(), body.clone());
                std::thread::spawn(move || {
                    let def: TableDefinition<u64, &[u8]> = TableDefinition::new(T[q]);
                    let mut key = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let txn = db.begin_write().expect("begin");
                        {
                            let mut t = txn.open_table(def).expect("table");
                            for _ in 0..10 {
                                t.insert(key, body.as_slice()).expect("insert");
                                key += 1;
                            }
                        }
                        txn.commit().expect("commit");
                        commits.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        let secs = started.elapsed().as_secs_f64();
        let c = commits.load(Ordering::Relaxed) as f64;
        println!(
            "| {label} | {queues} | {:.0} | {:.0} |",
            c / secs,
            c * 10.0 / secs
        );
    };
    println!("| layout | queues | commits/s | msg/s |");
    println!("|---|---:|---:|---:|");
    let open = |name: &str| {
        Arc::new(
            Database::builder()
                .set_cache_size(32 << 20)
                .create(dir.path().join(name))
                .expect("db"),
        )
    };
    run(
        (0..queues).map(|q| open(&format!("own-{q}.redb"))).collect(),
        "one file per queue",
    );
    run(vec![open("shared.redb")], "one shared file");
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let opts = Opts::parse();
    if opts.scenarios.iter().any(|s| s == "store-layout") {
        store_layout(8, opts.duration.min(5));
        return;
    }
    if opts.scenarios == ["scaling"] {
        scaling(&opts).await;
        return;
    }
    let mut server = None;
    let (root, token) = match &opts.url {
        Some(u) => (
            u.trim_end_matches('/').to_owned(),
            opts.token.clone().expect("--token is needed with --url"),
        ),
        None => {
            let (child, root, token, tmp) = start_server(&opts);
            server = Some((child, tmp));
            (root, token)
        }
    };
    let target = Arc::new(Target::new(root.clone(), &token, &opts.account));
    for _ in 0..300 {
        if target.client.get(format!("{root}/healthz")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let duration = Duration::from_secs(opts.duration);
    let mut rows = Vec::new();
    for round in 0..opts.repeat.max(1) {
        let run = format!("{run}r{round}");
        for scenario in &opts.scenarios {
            match scenario.as_str() {
                "batch" => {
                    let q = target
                        .create_queue(&format!("batch-{run}"), false)
                        .await
                        .expect("queue");
                    rows.push(
                        run_producers(
                            target.clone(),
                            q,
                            opts.batch_producers,
                            opts.batch_size,
                            opts.message_bytes,
                            duration,
                        )
                        .await,
                    );
                }
                "single" => {
                    let q = target
                        .create_queue(&format!("single-{run}"), false)
                        .await
                        .expect("queue");
                    rows.push(
                        run_producers(
                            target.clone(),
                            q,
                            opts.single_producers,
                            1,
                            opts.message_bytes,
                            duration,
                        )
                        .await,
                    );
                }
                "pullack" => {
                    let q = target
                        .create_queue(&format!("pullack-{run}"), true)
                        .await
                        .expect("queue");
                    eprintln!("prefilling {} messages...", opts.prefill);
                    let body = json!({"messages": (0..100).map(|_| message(opts.message_bytes)).collect::<Vec<_>>()});
                    let per_task = opts.prefill.div_ceil(100).div_ceil(8);
                    let mut fills = Vec::new();
                    for _ in 0..8 {
                        let (t, q, body) = (target.clone(), q.clone(), body.clone());
                        fills.push(tokio::spawn(async move {
                            for _ in 0..per_task {
                                t.call(&format!("/queues/{q}/messages/batch"), &body)
                                    .await
                                    .expect("prefill");
                            }
                        }));
                    }
                    futures_util::future::join_all(fills).await;
                    rows.push(
                        run_pull_ack(target.clone(), q, opts.consumers, opts.batch_size, duration).await,
                    );
                }
                "push" => {
                    for b in [1usize, 10, 100] {
                        rows.push(
                            run_push_drain(target.clone(), &run, b, opts.message_bytes, opts.push_backlog)
                                .await,
                        );
                        rows.push(
                            run_push(
                                target.clone(),
                                &run,
                                b,
                                opts.message_bytes,
                                duration,
                                opts.push_rate,
                            )
                            .await,
                        );
                    }
                }
                "latency" => {
                    rows.push(run_pull_latency(target.clone(), &run, opts.latency_rate, 2, duration).await);
                }
                other => eprintln!("unknown scenario {other:?} (batch, single, pullack, push, latency)"),
            }
        }
    }
    println!();
    println!("| scenario | runs | median msg/s | min msg/s | max msg/s | median p50 ms | median p99 ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut names: Vec<String> = Vec::new();
    for r in &rows {
        if !names.contains(&r.name) {
            names.push(r.name.clone());
        }
    }
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let ms = |v: f64| {
        if v.is_nan() {
            "-".to_owned()
        } else {
            format!("{v:.2}")
        }
    };
    for name in names {
        let runs: Vec<&Row> = rows.iter().filter(|r| r.name == name).collect();
        let rates: Vec<f64> = runs.iter().map(|r| r.messages as f64 / r.seconds).collect();
        let min = rates.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = rates.iter().cloned().fold(0.0, f64::max);
        println!(
            "| {name} | {} | {:.0} | {:.0} | {:.0} | {} | {} |",
            runs.len(),
            median(rates.clone()),
            min,
            max,
            ms(median(runs.iter().map(|r| r.p50_ms).collect())),
            ms(median(runs.iter().map(|r| r.p99_ms).collect())),
        );
    }
    if let Some((mut child, _tmp)) = server {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let _ = child.wait();
    }
}
