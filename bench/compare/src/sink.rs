//! The local HTTP function for push delivery (workload 7): counts the
//! messages of each batch and records receipt time − `t`, then answers 200
//! with an empty body, which acks the batch.
//!
//! Hopper's worker consumer and the peers' bridges post the same body shape:
//! `{"queue":…,"batch_id":…,"messages":[{"id":…,"body":"<doc>",…}]}`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use serde::Deserialize;

use crate::payload;
use crate::stats::clamp_us;

#[derive(Default)]
struct Inner {
    /// Batches are counted only when posted to the current run's path, so
    /// a late delivery from an earlier run can't leak into this one.
    run: Mutex<String>,
    messages: AtomicU64,
    latencies_us: Mutex<Vec<u32>>,
}

#[derive(Clone)]
pub struct Sink {
    inner: Arc<Inner>,
    addr: std::net::SocketAddr,
}

impl Sink {
    /// Serves the function on a free loopback port.
    pub async fn start() -> Result<Sink> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the push function's port")?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/push/{run}", post(receive))
            .with_state(inner.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("push function stopped: {e}");
            }
        });
        Ok(Sink { inner, addr })
    }

    /// Starts counting for a new run; returns the URL to push to.
    pub fn begin(&self, run: &str) -> String {
        if let Ok(mut current) = self.inner.run.lock() {
            *current = run.to_owned();
        }
        self.inner.messages.store(0, Ordering::Relaxed);
        if let Ok(mut l) = self.inner.latencies_us.lock() {
            l.clear();
        }
        format!("http://{}/push/{run}", self.addr)
    }

    /// Messages received so far in this run.
    pub fn received(&self) -> u64 {
        self.inner.messages.load(Ordering::Relaxed)
    }

    /// Latencies recorded so far in this run (taken, not copied).
    pub fn take_latencies(&self) -> Vec<u32> {
        self.inner
            .latencies_us
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }
}

#[derive(Deserialize)]
struct PushBatch {
    messages: Vec<PushMessage>,
}

#[derive(Deserialize)]
struct PushMessage {
    body: String,
}

async fn receive(State(inner): State<Arc<Inner>>, Path(run): Path<String>, body: Bytes) -> StatusCode {
    let now = payload::now_us();
    let current = inner.run.lock().map(|r| *r == run).unwrap_or(false);
    if !current {
        return StatusCode::OK; // an earlier run's delivery: ack and ignore
    }
    let Ok(batch) = serde_json::from_slice::<PushBatch>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let latencies = batch
        .messages
        .iter()
        .filter_map(|m| payload::read_t(m.body.as_bytes()))
        .map(|t| clamp_us(now.saturating_sub(t) as u128));
    if let Ok(mut l) = inner.latencies_us.lock() {
        l.extend(latencies);
    }
    inner
        .messages
        .fetch_add(batch.messages.len() as u64, Ordering::Relaxed);
    StatusCode::OK
}

/// The body a bridge posts for one batch: Hopper's push shape.
pub fn push_body(queue: &str, batch_id: u64, bodies: &[Vec<u8>]) -> Result<Vec<u8>> {
    #[derive(serde::Serialize)]
    struct Batch<'a> {
        queue: &'a str,
        batch_id: String,
        messages: Vec<Message<'a>>,
    }
    #[derive(serde::Serialize)]
    struct Message<'a> {
        id: String,
        timestamp_ms: u64,
        attempts: u32,
        content_type: &'static str,
        body: &'a str,
    }
    let timestamp_ms = payload::now_us() / 1000;
    let mut messages = Vec::with_capacity(bodies.len());
    for (i, body) in bodies.iter().enumerate() {
        messages.push(Message {
            id: format!("{batch_id}-{i}"),
            timestamp_ms,
            attempts: 1,
            content_type: "text",
            body: std::str::from_utf8(body).context("message body is not UTF-8")?,
        });
    }
    Ok(serde_json::to_vec(&Batch {
        queue,
        batch_id: batch_id.to_string(),
        messages,
    })?)
}
