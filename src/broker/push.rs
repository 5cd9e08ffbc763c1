//! The push consumer: a child actor of its queue that fills batches and
//! delivers them to a function (an HTTP endpoint).
//!
//! The queue tells the child how many messages are ready and since when
//! (`ReadyState`). The child keeps the batch being filled as a timer: a
//! batch goes out when `batch_size` messages are ready or `max_wait_time_ms`
//! after the oldest ready message became visible, whichever is first, and
//! never empty. To send, it asks the queue to lease the messages (counting
//! the attempt on disk), POSTs them, and hands the verdicts back to the
//! queue, which acks, retries or dead-letters them with the same code as
//! pull consumers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::value::RawValue;
use sha2::Sha256;

use super::model::{now_ms, ConsumerRecord, FunctionRecord};
use super::queue::{LeaseForPush, PushOutcome, PushedMessage, QueueActor};
use super::registry::RegistryHandle;
use super::verdict::{decide, Reply, Verdict};
use crate::store::ContentType;

/// Extra lease time beyond the function's timeout, so a reply that comes
/// just in time still finds its lease live.
pub const LEASE_GRACE_MS: u64 = 5_000;

/// The queue's ready messages, as the child needs to know them.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct ReadyState {
    pub ready: usize,
    /// When the oldest ready message became visible.
    pub oldest_visible_at: Option<u64>,
    pub paused: bool,
}

/// What `inspect` shows of a push consumer; the child keeps it current.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PushStatus {
    pub filling: usize,
    pub batch_deadline_ms: Option<u64>,
    pub batches_in_flight: usize,
    pub concurrency: usize,
    pub max_concurrency: usize,
    pub delivered: u64,
    pub acked: u64,
    pub retried: u64,
    pub failed_batches: u64,
    pub last_error: Option<String>,
    pub last_error_at_ms: Option<u64>,
    pub function: String,
}

pub struct PushConsumer {
    queue: Addr<QueueActor>,
    queue_name: String,
    account: String,
    consumer: ConsumerRecord,
    registry: RegistryHandle,
    client: reqwest::Client,
    /// Server-wide ceiling for automatic concurrency.
    ceiling: usize,
    ready: ReadyState,
    /// Ready messages already claimed by batches being leased.
    claimed: usize,
    timer: Option<(u64, SpawnHandle)>,
    in_flight: usize,
    concurrency: usize,
    status: Arc<Mutex<PushStatus>>,
}

impl PushConsumer {
    pub fn new(
        queue: Addr<QueueActor>,
        queue_name: String,
        account: String,
        consumer: ConsumerRecord,
        registry: RegistryHandle,
        ceiling: usize,
        status: Arc<Mutex<PushStatus>>,
    ) -> Self {
        let concurrency = consumer.settings.max_concurrency.map(|c| c as usize).unwrap_or(1);
        PushConsumer {
            queue,
            queue_name,
            account,
            consumer,
            registry,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .unwrap_or_default(),
            ceiling: ceiling.max(1),
            ready: ReadyState {
                ready: 0,
                oldest_visible_at: None,
                paused: false,
            },
            claimed: 0,
            timer: None,
            in_flight: 0,
            concurrency,
            status,
        }
    }

    fn max_concurrency(&self) -> usize {
        match self.consumer.settings.max_concurrency {
            Some(c) => c as usize,
            None => self.ceiling,
        }
    }

    fn batch_size(&self) -> usize {
        self.consumer.settings.batch_size as usize
    }

    fn available(&self) -> usize {
        self.ready.ready.saturating_sub(self.claimed)
    }

    fn publish_status(&self) {
        if let Ok(mut s) = self.status.lock() {
            s.filling = self.available().min(self.batch_size());
            s.batch_deadline_ms = self.timer.map(|(at, _)| at);
            s.batches_in_flight = self.in_flight;
            s.concurrency = self.concurrency;
            s.max_concurrency = self.max_concurrency();
        }
    }

    fn record_error(&self, message: String) {
        let function = self.consumer.script_name.as_deref().unwrap_or_default();
        tracing::warn!(queue = %self.queue_name, function, error = %message, "push delivery failed");
        if let Ok(mut s) = self.status.lock() {
            s.last_error = Some(message);
            s.last_error_at_ms = Some(now_ms());
        }
    }

    /// Sends every batch that is due, and arms the timer for the next one.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.ready.paused {
            self.cancel_timer(ctx);
            self.publish_status();
            return;
        }
        while self.in_flight < self.concurrency && self.available() >= self.batch_size() {
            self.dispatch(self.batch_size(), ctx);
        }
        let available = self.available();
        if available == 0 {
            self.cancel_timer(ctx);
        } else if self.in_flight < self.concurrency {
            let oldest = self.ready.oldest_visible_at.unwrap_or_else(now_ms);
            let deadline = oldest + self.consumer.settings.max_wait_time_ms;
            let now = now_ms();
            if deadline <= now {
                self.cancel_timer(ctx);
                self.dispatch(available.min(self.batch_size()), ctx);
            } else if self.timer.map(|(at, _)| at) != Some(deadline) {
                self.cancel_timer(ctx);
                let handle = ctx.run_later(Duration::from_millis(deadline - now), |act, ctx| {
                    act.timer = None;
                    let n = act.available().min(act.batch_size());
                    if n > 0 && act.in_flight < act.concurrency && !act.ready.paused {
                        act.dispatch(n, ctx);
                    }
                    act.pump(ctx);
                });
                self.timer = Some((deadline, handle));
            }
        }
        self.publish_status();
    }

    fn cancel_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some((_, handle)) = self.timer.take() {
            ctx.cancel_future(handle);
        }
    }

    fn dispatch(&mut self, n: usize, ctx: &mut Context<Self>) {
        let script = self.consumer.script_name.clone().unwrap_or_default();
        let Some(function) = self.registry.function(&self.account, &script) else {
            self.record_error(format!("function {script:?} is not registered"));
            // Try again later rather than spin.
            self.cancel_timer(ctx);
            let handle = ctx.run_later(Duration::from_secs(1), |act, ctx| {
                act.timer = None;
                act.pump(ctx);
            });
            self.timer = Some((now_ms() + 1000, handle));
            return;
        };
        self.in_flight += 1;
        self.claimed += n;
        let visibility_ms = function.timeout_ms + LEASE_GRACE_MS;
        let lease = self.queue.send(LeaseForPush {
            limit: n,
            visibility_ms,
        });
        ctx.spawn(lease.into_actor(self).map(move |result, act, ctx| {
            // The queue has told us the new ready count by now: drop the claim.
            act.claimed = act.claimed.saturating_sub(n);
            match result {
                Ok(Ok(leased)) if !leased.is_empty() => act.deliver_batch(leased, function, ctx),
                Ok(Ok(_)) => act.in_flight -= 1,
                Ok(Err(e)) => {
                    act.in_flight -= 1;
                    act.record_error(e.to_string());
                }
                Err(_) => {
                    act.in_flight -= 1;
                    act.record_error("queue actor unavailable".into());
                }
            }
            act.pump(ctx);
        }));
    }

    fn deliver_batch(
        &mut self,
        leased: Vec<PushedMessage>,
        function: FunctionRecord,
        ctx: &mut Context<Self>,
    ) {
        let queue = self.queue.clone();
        let client = self.client.clone();
        let queue_name = self.queue_name.clone();
        let retry_delay = self.consumer.settings.retry_delay;
        let delivery = async move {
            let (reply, failure) = deliver(&client, &function, &queue_name, &leased).await;
            let ids: Vec<String> = leased.iter().map(|m| m.id.clone()).collect();
            let verdicts = decide(&ids, &reply, retry_delay);
            let (failed, error) = match &reply {
                Reply::Http { status, body, .. } if (200..300).contains(status) => {
                    if !body.iter().all(u8::is_ascii_whitespace) && !super::verdict::body_is_a_reply(body) {
                        tracing::warn!(
                            queue = %queue_name,
                            url = %function.url,
                            "function answered 2xx with a body that is not a reply object (acks/retries/ack_all/retry_all); acking the whole batch"
                        );
                    }
                    (false, None)
                }
                Reply::Http { status, .. } => (true, Some(format!("function answered HTTP {status}"))),
                Reply::NoResponse => (true, Some(failure.clone().unwrap_or_default())),
            };
            let mut outcome = PushOutcome::default();
            for (m, v) in leased.iter().zip(&verdicts) {
                match v {
                    Verdict::Ack => outcome.acks.push((m.seq, m.attempt)),
                    Verdict::Retry { delay_seconds } => {
                        outcome.retries.push((m.seq, m.attempt, *delay_seconds))
                    }
                }
            }
            let summary = (
                leased.len(),
                outcome.acks.len(),
                outcome.retries.len(),
                failed,
                error,
            );
            queue.do_send(outcome);
            summary
        };
        ctx.spawn(
            delivery
                .into_actor(self)
                .map(move |(sent, acked, retried, failed, error), act, ctx| {
                    act.in_flight -= 1;
                    if let Ok(mut s) = act.status.lock() {
                        s.delivered += sent as u64;
                        s.acked += acked as u64;
                        s.retried += retried as u64;
                        if failed {
                            s.failed_batches += 1;
                        }
                    }
                    if let Some(e) = error {
                        act.record_error(e);
                    }
                    act.adapt(sent, failed);
                    act.pump(ctx);
                }),
        );
    }

    /// Automatic concurrency: grow while full batches keep coming back and
    /// the backlog remains; halve on a failed delivery.
    fn adapt(&mut self, sent: usize, failed: bool) {
        if self.consumer.settings.max_concurrency.is_some() {
            return;
        }
        if failed {
            self.concurrency = (self.concurrency / 2).max(1);
        } else if sent >= self.batch_size() && self.available() >= self.batch_size() {
            self.concurrency = (self.concurrency + 1).min(self.ceiling);
        }
    }
}

/// HMAC-SHA256 of the body with the function's secret, hex encoded.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The body a function receives: stored JSON goes out as the bytes that
/// were stored (checked, not rebuilt), text as a string, bytes as base64.
#[derive(Serialize)]
#[serde(untagged)]
enum PushedBody<'a> {
    Json(&'a RawValue),
    Text(std::borrow::Cow<'a, str>),
    Base64(String),
    Missing(Option<()>),
}

fn pushed_body(content_type: ContentType, body: &[u8]) -> PushedBody<'_> {
    match content_type {
        ContentType::Json => serde_json::from_slice(body).map_or(PushedBody::Missing(None), PushedBody::Json),
        ContentType::Text => PushedBody::Text(String::from_utf8_lossy(body)),
        ContentType::Bytes => PushedBody::Base64(STANDARD.encode(body)),
    }
}

#[derive(Serialize)]
struct PushedItem<'a> {
    id: &'a str,
    timestamp_ms: u64,
    attempts: u32,
    content_type: &'static str,
    body: PushedBody<'a>,
}

#[derive(Serialize)]
struct PushRequest<'a> {
    queue: &'a str,
    batch_id: &'a str,
    messages: Vec<PushedItem<'a>>,
}

/// POSTs a batch. On no response, also says why (connect error or timeout).
async fn deliver(
    client: &reqwest::Client,
    function: &FunctionRecord,
    queue: &str,
    batch: &[PushedMessage],
) -> (Reply, Option<String>) {
    let batch_id = uuid::Uuid::new_v4().simple().to_string();
    let messages = batch
        .iter()
        .map(|m| PushedItem {
            id: &m.id,
            timestamp_ms: m.timestamp_ms,
            attempts: m.attempt,
            content_type: m.content_type.as_str(),
            body: pushed_body(m.content_type, &m.body),
        })
        .collect();
    let request = PushRequest {
        queue,
        batch_id: &batch_id,
        messages,
    };
    let body = serde_json::to_vec(&request).unwrap_or_default();
    let mut request = client
        .post(&function.url)
        .timeout(Duration::from_millis(function.timeout_ms))
        .header("content-type", "application/json")
        .header("hopper-queue", queue)
        .header("hopper-batch-id", &batch_id);
    if let Some(secret) = &function.secret {
        request = request.header("hopper-signature", format!("sha256={}", signature(secret, &body)));
    }
    let response = match request.body(body).send().await {
        Ok(r) => r,
        Err(e) => {
            let why = if e.is_timeout() {
                format!(
                    "no response from {} within {} ms",
                    function.url, function.timeout_ms
                )
            } else if e.is_connect() {
                format!("could not connect to {}: is the function running?", function.url)
            } else {
                format!("request to {} failed: {e}", function.url)
            };
            return (Reply::NoResponse, Some(why));
        }
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match response.bytes().await {
        Ok(b) => (
            Reply::Http {
                status,
                body: b.to_vec(),
                retry_after,
            },
            None,
        ),
        Err(e) => (
            Reply::NoResponse,
            Some(format!("the reply from {} broke off: {e}", function.url)),
        ),
    }
}

impl Actor for PushConsumer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(1024);
        if let Ok(mut s) = self.status.lock() {
            s.function = self.consumer.script_name.clone().unwrap_or_default();
        }
        self.publish_status();
    }
}

impl Handler<ReadyState> for PushConsumer {
    type Result = ();

    fn handle(&mut self, msg: ReadyState, ctx: &mut Context<Self>) {
        self.ready = msg;
        self.pump(ctx);
    }
}

/// Stop the child: its timer dies with it; batches in flight are dropped
/// and their leases expire, so their messages are delivered again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopConsumer;

impl Handler<StopConsumer> for PushConsumer {
    type Result = ();

    fn handle(&mut self, _: StopConsumer, ctx: &mut Context<Self>) {
        self.cancel_timer(ctx);
        ctx.stop();
    }
}
