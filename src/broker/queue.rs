//! The queue actor: one per queue, owner of its store and in-memory state.
//!
//! Group commit: handlers change the in-memory state at once (so concurrent
//! pullers get disjoint messages) and append the matching store ops to the
//! open batch, then `flush`. While a commit is in flight, everything that
//! arrives joins the next batch; when the commit returns, its requests are
//! answered and the next batch goes out. Commits run on the blocking pool,
//! never on the actor's thread. A failed commit fails its requests and the
//! batch built on top of it, then reloads the state from disk: the disk is
//! the truth.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::lease::LeaseSigner;
use super::message::{
    encode_body, format_message_id, message_metadata, BacklogMetrics, NewMessage, PeekedMessage,
    PulledMessage,
};
use super::model::{now_ms, ConsumerRecord, ConsumerType, QueueSettings};
use super::push::{PushConsumer, PushStatus, ReadyState, StopConsumer};
use super::registry::{RegistryHandle, ResolveDeadLetterQueue};
use super::state::{QueueState, RetryOutcome};
use super::BrokerError;
use crate::store::{CommitOutcome, ContentType, MessageRecord, QueueStore, StoreError, StoreOp};

/// Long pollers one queue keeps at most; more get an empty answer at once.
const MAX_WAITERS: usize = 10_000;
/// Messages the actor will accept into its mailbox before senders wait.
const MAILBOX_CAPACITY: usize = 4096;
/// Mailbox slots kept for internal messages (configuration, timers, push).
const MAILBOX_HEADROOM: usize = 256;

/// Limits every queue actor applies.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    /// Ceiling for push consumers' automatic concurrency.
    pub push_ceiling: usize,
    /// Message bytes waiting for (or in) a commit before sends get 429.
    pub max_pending_bytes: usize,
    /// Never-delivered records kept in memory (see `QueueState`).
    pub resident_messages: usize,
}
/// How long a pull may wait for a chunk of the on-disk backlog to load.
const LOAD_WAIT_MS: u64 = 2_000;
/// Without a consumer, messages may still be delivered this many times.
const DEFAULT_MAX_DELIVERIES: u32 = 4;

type Reply<T> = oneshot::Sender<Result<T, BrokerError>>;

fn reply_future<T: Send + 'static>(
    rx: oneshot::Receiver<Result<T, BrokerError>>,
    queue: String,
) -> ResponseFuture<Result<T, BrokerError>> {
    Box::pin(async move { rx.await.unwrap_or(Err(BrokerError::ActorUnavailable(queue))) })
}

/// What the queue actor needs from the catalog; sent again on every change.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    pub queue_id: String,
    pub account: String,
    pub name: String,
    pub settings: QueueSettings,
    pub consumer: Option<ConsumerRecord>,
}

/// The front's handle on a queue actor: its address plus a mailbox gauge
/// (actix does not expose mailbox depth).
#[derive(Clone)]
pub struct QueueHandle {
    pub addr: Addr<QueueActor>,
    queue_id: Arc<str>,
    depth: Arc<AtomicUsize>,
    recovery: Arc<std::sync::atomic::AtomicU8>,
}

/// Where a queue actor is in opening its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    Loading,
    Ready,
    Failed,
}

const RECOVERY_LOADING: u8 = 0;
const RECOVERY_READY: u8 = 1;
const RECOVERY_FAILED: u8 = 2;

impl QueueHandle {
    pub fn recovery(&self) -> Recovery {
        match self.recovery.load(Ordering::Acquire) {
            RECOVERY_READY => Recovery::Ready,
            RECOVERY_FAILED => Recovery::Failed,
            _ => Recovery::Loading,
        }
    }

    /// Sends a front request to the actor and waits for its answer.
    pub async fn ask<M>(&self, msg: M) -> Result<M::Ok, BrokerError>
    where
        M: FrontRequest,
        QueueActor: Handler<M>,
        M::Result: Send,
    {
        // Refuse rather than queue without bound: the client retries later.
        if self.depth.fetch_add(1, Ordering::Relaxed) >= MAILBOX_CAPACITY - MAILBOX_HEADROOM {
            self.depth.fetch_sub(1, Ordering::Relaxed);
            return Err(BrokerError::Overloaded(self.queue_id.to_string()));
        }
        match self.addr.send(msg).await {
            Ok(result) => M::into_result(result),
            Err(_) => {
                self.depth.fetch_sub(1, Ordering::Relaxed);
                Err(BrokerError::ActorUnavailable("queue".into()))
            }
        }
    }
}

/// Requests from the HTTP front; each counts in the mailbox gauge.
pub trait FrontRequest: Message + Send + 'static {
    type Ok;
    fn into_result(r: Self::Result) -> Result<Self::Ok, BrokerError>;
}

macro_rules! front_request {
    ($msg:ty, $ok:ty) => {
        impl Message for $msg {
            type Result = Result<$ok, BrokerError>;
        }
        impl FrontRequest for $msg {
            type Ok = $ok;
            fn into_result(r: Self::Result) -> Result<$ok, BrokerError> {
                r
            }
        }
    };
}

pub struct SendMessages {
    pub messages: Vec<NewMessage>,
}
front_request!(SendMessages, BacklogMetrics);

pub struct Pull {
    pub batch_size: Option<u64>,
    pub visibility_timeout_ms: Option<u64>,
    pub wait_ms: u64,
}
front_request!(Pull, PullResult);

pub struct Ack {
    pub acks: Vec<String>,
    /// (lease id, delay seconds)
    pub retries: Vec<(String, Option<u64>)>,
    /// (lease id, visibility timeout ms)
    pub extensions: Vec<(String, u64)>,
}
front_request!(Ack, AckResult);

pub struct Peek {
    pub limit: usize,
}
front_request!(Peek, Vec<PeekedMessage>);

pub struct PurgeRefs {
    pub refs: Vec<String>,
}
front_request!(PurgeRefs, RefPurgeResult);

pub struct PurgeAll;
front_request!(PurgeAll, ());

pub struct GetPurgeStatus;
front_request!(GetPurgeStatus, PurgeStatus);

pub struct GetMetrics;
front_request!(GetMetrics, BacklogMetrics);

pub struct Inspect;
front_request!(Inspect, Value);

/// The push consumer asks for up to `limit` messages, leased for
/// `visibility_ms` (the function's timeout plus a grace period).
#[derive(Message)]
#[rtype(result = "Result<Vec<PushedMessage>, BrokerError>")]
pub struct LeaseForPush {
    pub limit: usize,
    pub visibility_ms: u64,
}

/// A message leased for push delivery, with its body.
#[derive(Debug, Clone)]
pub struct PushedMessage {
    pub seq: u64,
    pub attempt: u32,
    pub id: String,
    pub timestamp_ms: u64,
    pub content_type: ContentType,
    pub body: Vec<u8>,
}

/// The verdicts on a pushed batch: (seq, attempt) acks and
/// (seq, attempt, delay seconds) retries.
#[derive(Message, Default, Debug)]
#[rtype(result = "()")]
pub struct PushOutcome {
    pub acks: Vec<(u64, u32)>,
    pub retries: Vec<(u64, u32, u64)>,
}

/// New catalog settings for the queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Configure(pub QueueConfig);

/// Messages moved here from a queue whose consumer gave up on them.
#[derive(Message)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct AcceptDeadLettered {
    pub messages: Vec<(MessageRecord, Vec<u8>)>,
}

/// Stop: the queue was deleted. Waiting pullers are told so.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

/// Answer every waiting long poll now, with what there is (nothing).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReleaseLongPolls;

impl Handler<ReleaseLongPolls> for QueueActor {
    type Result = ();

    fn handle(&mut self, _: ReleaseLongPolls, ctx: &mut Context<Self>) {
        for w in std::mem::take(&mut self.waiters) {
            ctx.cancel_future(w.timeout);
            let _ = w.tx.send(Ok(self.empty_pull()));
        }
    }
}

/// Finish every commit in flight and pending, then answer.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;

#[derive(Debug, Clone, Serialize)]
pub struct PullResult {
    pub message_backlog_count: u64,
    pub messages: Vec<PulledMessage>,
    pub metadata: Value,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct AckResult {
    #[serde(rename = "ackCount")]
    pub ack_count: u64,
    #[serde(rename = "retryCount")]
    pub retry_count: u64,
    #[serde(rename = "extendCount")]
    pub extend_count: u64,
    pub warnings: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RefPurgeResult {
    pub errors: Vec<Value>,
    pub warnings: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PurgeStatus {
    pub started_at: Option<String>,
    pub completed: String,
    pub complete: bool,
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
struct Counters {
    sent: u64,
    delivered: u64,
    acked: u64,
    retried: u64,
    expired: u64,
    dead_lettered: u64,
    dropped: u64,
}

/// Pairs leased messages with the bodies their commit read (in lease order,
/// from `first_read`). A message without a body was deleted later in the
/// same commit (a purge) and is left out.
fn with_bodies<'a>(
    leased: Vec<(u64, MessageRecord)>,
    reads: &'a mut [Option<Vec<u8>>],
    first_read: usize,
) -> impl Iterator<Item = (u64, MessageRecord, Vec<u8>)> + 'a {
    leased
        .into_iter()
        .zip(reads.iter_mut().skip(first_read))
        .filter_map(|((seq, record), body)| body.take().map(|b| (seq, record, b)))
}

/// What to do when a commit returns.
enum Completion {
    Sent {
        tx: Reply<BacklogMetrics>,
        count: u64,
    },
    DeadLetteredIn {
        tx: Reply<()>,
        count: u64,
    },
    Pulled {
        tx: Reply<PullResult>,
        leased: Vec<(u64, MessageRecord)>,
        first_read: usize,
    },
    PushLeased {
        tx: Reply<Vec<PushedMessage>>,
        leased: Vec<(u64, MessageRecord)>,
        first_read: usize,
    },
    Acked {
        tx: Reply<AckResult>,
        result: AckResult,
    },
    Purged {
        tx: Reply<()>,
    },
    RefsPurged {
        tx: Reply<RefPurgeResult>,
        result: RefPurgeResult,
    },
    ToDeadLetter {
        seqs: Vec<u64>,
        first_read: usize,
    },
    Internal,
}

#[derive(Default)]
struct CommitBatch {
    ops: Vec<StoreOp>,
    reads: usize,
    completions: Vec<Completion>,
}

impl CommitBatch {
    fn read(&mut self, seq: u64) {
        self.ops.push(StoreOp::Read { seq });
        self.reads += 1;
    }

    fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.completions.is_empty()
    }
}

struct Waiter {
    id: u64,
    tx: Reply<PullResult>,
    limit: usize,
    visibility_ms: u64,
    timeout: SpawnHandle,
}

/// A queue's metric handles, labelled with its account and name.
struct QueueMetrics {
    ready: metrics::Gauge,
    delayed: metrics::Gauge,
    leased: metrics::Gauge,
    backlog: metrics::Gauge,
    backlog_bytes: metrics::Gauge,
    oldest_age: metrics::Gauge,
    long_pollers: metrics::Gauge,
    store_bytes: metrics::Gauge,
    sent: metrics::Counter,
    delivered: metrics::Counter,
    acked: metrics::Counter,
    retried: metrics::Counter,
    expired: metrics::Counter,
    dead_lettered: metrics::Counter,
    dropped: metrics::Counter,
}

impl QueueMetrics {
    fn register(account: &str, queue: &str) -> Self {
        let labels = [("account", account.to_owned()), ("queue", queue.to_owned())];
        let gauge = |name: &'static str| metrics::gauge!(name, &labels);
        let counter = |name: &'static str| metrics::counter!(name, &labels);
        QueueMetrics {
            ready: gauge("hopper_queue_ready_messages"),
            delayed: gauge("hopper_queue_delayed_messages"),
            leased: gauge("hopper_queue_leased_messages"),
            backlog: gauge("hopper_queue_backlog_messages"),
            backlog_bytes: gauge("hopper_queue_backlog_bytes"),
            oldest_age: gauge("hopper_queue_oldest_message_age_seconds"),
            long_pollers: gauge("hopper_queue_long_pollers"),
            store_bytes: gauge("hopper_queue_store_bytes"),
            sent: counter("hopper_messages_sent_total"),
            delivered: counter("hopper_messages_delivered_total"),
            acked: counter("hopper_messages_acked_total"),
            retried: counter("hopper_messages_retried_total"),
            expired: counter("hopper_messages_expired_total"),
            dead_lettered: counter("hopper_messages_dead_lettered_total"),
            dropped: counter("hopper_messages_dropped_total"),
        }
    }
}

/// The running push consumer child actor.
struct PushChild {
    addr: Addr<PushConsumer>,
    consumer: ConsumerRecord,
    status: Arc<Mutex<PushStatus>>,
    last_sent: Option<ReadyState>,
}

pub struct QueueActor {
    config: QueueConfig,
    path: PathBuf,
    store: Option<Arc<QueueStore>>,
    state: QueueState,
    signer: Arc<LeaseSigner>,
    registry: RegistryHandle,
    limits: QueueLimits,
    metrics: QueueMetrics,
    push: Option<PushChild>,
    /// Body bytes in the open batch and in the commit in flight.
    batch_bytes: usize,
    inflight_bytes: usize,
    depth: Arc<AtomicUsize>,
    recovery: Arc<std::sync::atomic::AtomicU8>,
    batch: CommitBatch,
    committing: bool,
    /// A chunk of the on-disk backlog is being read.
    loading: bool,
    waiters: VecDeque<Waiter>,
    next_waiter: u64,
    wakeup: Option<(u64, SpawnHandle)>,
    counters: Counters,
    store_bytes: u64,
    last_commit_at_ms: Option<u64>,
    last_commit_duration: Duration,
    last_commit_ops: usize,
    commits: u64,
    purge_started_at: Option<String>,
    purge_complete: bool,
    broken: Option<String>,
    /// Failed attempts to open the store since it last opened.
    open_failures: u64,
    last_error: Option<(String, u64)>,
    drainers: Vec<oneshot::Sender<()>>,
}

impl QueueActor {
    /// Starts a queue actor on `arbiter`; it opens its store before serving.
    pub fn launch(
        config: QueueConfig,
        path: PathBuf,
        signer: Arc<LeaseSigner>,
        registry: RegistryHandle,
        limits: QueueLimits,
        arbiter: &ArbiterHandle,
    ) -> QueueHandle {
        let queue_id = config.queue_id.clone();
        let depth = Arc::new(AtomicUsize::new(0));
        let actor_depth = depth.clone();
        let recovery = Arc::new(std::sync::atomic::AtomicU8::new(RECOVERY_LOADING));
        let actor_recovery = recovery.clone();
        let metrics = QueueMetrics::register(&config.account, &config.name);
        let addr = QueueActor::start_in_arbiter(arbiter, move |_| QueueActor {
            config,
            path,
            store: None,
            state: QueueState::default(),
            signer,
            registry,
            limits,
            metrics,
            push: None,
            batch_bytes: 0,
            inflight_bytes: 0,
            depth: actor_depth,
            recovery: actor_recovery,
            batch: CommitBatch::default(),
            committing: false,
            loading: false,
            waiters: VecDeque::new(),
            next_waiter: 0,
            wakeup: None,
            counters: Counters::default(),
            store_bytes: 0,
            last_commit_at_ms: None,
            last_commit_duration: Duration::ZERO,
            last_commit_ops: 0,
            commits: 0,
            purge_started_at: None,
            purge_complete: true,
            broken: None,
            open_failures: 0,
            last_error: None,
            drainers: Vec::new(),
        });
        QueueHandle {
            addr,
            queue_id: Arc::from(queue_id.as_str()),
            depth,
            recovery,
        }
    }

    fn dequeued(&self) {
        self.depth.fetch_sub(1, Ordering::Relaxed);
    }

    fn max_deliveries(&self) -> u32 {
        self.config
            .consumer
            .as_ref()
            .map(|c| c.settings.max_deliveries())
            .unwrap_or(DEFAULT_MAX_DELIVERIES)
    }

    fn retention_ms(&self) -> u64 {
        self.config.settings.message_retention_period * 1000
    }

    fn storage_error(&self, message: String, disk_full: bool) -> BrokerError {
        BrokerError::StorageFailure {
            queue: self.config.name.clone(),
            message,
            disk_full,
        }
    }

    fn usable(&self) -> Result<(), BrokerError> {
        match &self.broken {
            Some(msg) => Err(self.storage_error(msg.clone(), false)),
            None if self.store.is_none() => Err(self.storage_error("store is being reopened".into(), false)),
            None => Ok(()),
        }
    }

    pub fn metrics(&self) -> BacklogMetrics {
        BacklogMetrics {
            backlog_count: self.state.len() as u64,
            backlog_bytes: self.state.bytes(),
            oldest_message_timestamp_ms: self.state.oldest_timestamp().unwrap_or(0),
        }
    }

    fn metrics_metadata(&self) -> Value {
        json!({ "metrics": self.metrics() })
    }

    fn empty_pull(&self) -> PullResult {
        PullResult {
            message_backlog_count: self.state.len() as u64,
            messages: Vec::new(),
            metadata: self.metrics_metadata(),
        }
    }

    /// Opens the store and rebuilds the state; the actor serves nothing
    /// until this finishes (`ctx.wait`), without blocking its thread.
    fn open_store(&mut self, ctx: &mut Context<Self>) {
        let path = self.path.clone();
        let queue_id = self.config.queue_id.clone();
        let panic_path = self.path.clone();
        let resident_limit = self.limits.resident_messages;
        let open = async move {
            tokio::task::spawn_blocking(move || {
                // A reopen can race the last holder of the old handle.
                let mut attempt = 0;
                loop {
                    match QueueStore::open(&path, &queue_id, resident_limit) {
                        Err(StoreError::Open {
                            source: redb::DatabaseError::DatabaseAlreadyOpen,
                            ..
                        }) if attempt < 50 => {
                            attempt += 1;
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        other => return other,
                    }
                }
            })
            .await
            .map_err(|e| {
                if e.is_panic() {
                    // redb may panic on a file altered behind its back.
                    StoreError::Damaged {
                        path: panic_path,
                        detail: "it panicked while opening the file".into(),
                    }
                } else {
                    StoreError::TaskAborted
                }
            })?
        };
        ctx.wait(open.into_actor(self).map(|result, act, ctx| match result {
            Ok((store, recovered)) => {
                act.state = QueueState::recover(recovered, now_ms(), act.limits.resident_messages);
                let n = act.state.len();
                let on_disk_only = act.state.unloaded_count();
                act.store_bytes = store.file_bytes();
                act.store = Some(Arc::new(store));
                act.broken = None;
                if act.open_failures > 0 {
                    tracing::info!(queue = %act.config.name, attempts = act.open_failures, "queue store reopened");
                }
                act.open_failures = 0;
                act.recovery.store(RECOVERY_READY, Ordering::Release);
                act.sync_push_child(ctx);
                tracing::info!(queue = %act.config.name, queue_id = %act.config.queue_id, messages = n, on_disk_only, "queue recovered");
                act.tick(ctx);
            }
            Err(e) => {
                let permanent = e.is_permanent();
                if act.open_failures == 0 || permanent {
                    tracing::error!(account = %act.config.account, queue = %act.config.name, queue_id = %act.config.queue_id, error = %e, retrying = !permanent, "queue store failed to open; this queue refuses requests meanwhile; other queues are unaffected");
                }
                act.open_failures += 1;
                act.broken = Some(e.to_string());
                act.recovery.store(RECOVERY_FAILED, Ordering::Release);
                if !permanent {
                    // Transient (a full disk, I/O errors): try again, up to every 5 s.
                    let delay = Duration::from_millis((250 * act.open_failures).min(5000));
                    ctx.run_later(delay, |act, ctx| {
                        if act.store.is_none() {
                            act.open_store(ctx);
                        }
                    });
                }
            }
        }));
    }

    /// Reads the next chunk of the on-disk backlog when the ready set runs
    /// low (or retention is due there). A read transaction on a blocking
    /// thread: it neither blocks the actor nor waits for a commit.
    fn load_if_due(&mut self, ctx: &mut Context<Self>) {
        // Runs at every flush: no clock read unless there is a backlog on disk.
        if self.loading || self.state.unloaded_count() == 0 {
            return;
        }
        let Some(store) = self.store.clone() else {
            return;
        };
        let Some(from) = self.state.load_due(now_ms(), self.retention_ms()) else {
            return;
        };
        let limit = self.state.load_chunk_len();
        self.loading = true;
        let read = async move {
            tokio::task::spawn_blocking(move || store.read_records(from, limit))
                .await
                .unwrap_or(Err(StoreError::TaskAborted))
        };
        ctx.spawn(read.into_actor(self).map(move |result, act, ctx| {
            act.loading = false;
            match result {
                Ok(chunk) => {
                    let progressed = !chunk.records.is_empty();
                    act.state.apply_load(from, chunk, now_ms());
                    if progressed {
                        // Serve and notify first; `tick` reads again if due.
                        act.tick(ctx);
                    }
                }
                Err(e) => {
                    tracing::error!(queue = %act.config.name, error = %e, "reading the on-disk backlog failed; retrying");
                    act.last_error = Some((format!("backlog read failed: {e}"), now_ms()));
                    ctx.run_later(Duration::from_millis(500), |act, ctx| act.tick(ctx));
                }
            }
        }));
    }

    /// Sends the open batch to disk unless a commit is already in flight.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        self.load_if_due(ctx);
        self.notify_push();
        if self.committing {
            return;
        }
        if self.batch.is_empty() {
            for d in self.drainers.drain(..) {
                let _ = d.send(());
            }
            return;
        }
        let Some(store) = self.store.clone() else {
            if self.broken.is_some() {
                for d in self.drainers.drain(..) {
                    let _ = d.send(());
                }
            }
            return;
        };
        let batch = std::mem::take(&mut self.batch);
        self.inflight_bytes = std::mem::take(&mut self.batch_bytes);
        let next_seq = self.state.next_seq();
        let ops_len = batch.ops.len();
        self.committing = true;
        let ops = batch.ops;
        let completions = batch.completions;
        let commit = async move {
            tokio::task::spawn_blocking(move || store.commit(ops, next_seq))
                .await
                .unwrap_or(Err(StoreError::TaskAborted))
        };
        ctx.spawn(commit.into_actor(self).map(move |result, act, ctx| {
            act.committing = false;
            act.inflight_bytes = 0;
            act.last_commit_ops = ops_len;
            act.on_commit(result, completions, ctx);
            act.publish_metrics();
            act.flush(ctx);
        }));
    }

    fn on_commit(
        &mut self,
        result: Result<CommitOutcome, StoreError>,
        completions: Vec<Completion>,
        ctx: &mut Context<Self>,
    ) {
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(e) => {
                let disk_full = e.is_disk_full();
                tracing::error!(queue = %self.config.name, error = %e, disk_full, "commit failed; reloading queue state from disk");
                self.last_error = Some((format!("commit failed: {e}"), now_ms()));
                let pending = std::mem::take(&mut self.batch);
                self.batch_bytes = 0;
                for c in completions.into_iter().chain(pending.completions) {
                    self.fail(c, self.storage_error(e.to_string(), disk_full));
                }
                self.store = None;
                self.open_store(ctx);
                return;
            }
        };
        self.commits += 1;
        metrics::histogram!("hopper_commit_duration_seconds").record(outcome.duration.as_secs_f64());
        metrics::histogram!("hopper_commit_ops").record(self.last_commit_ops as f64);
        self.store_bytes = outcome.file_bytes;
        self.last_commit_at_ms = Some(now_ms());
        self.last_commit_duration = outcome.duration;
        let mut reads = outcome.reads;
        for completion in completions {
            match completion {
                Completion::Sent { tx, count } => {
                    self.counters.sent += count;
                    let _ = tx.send(Ok(self.metrics()));
                }
                Completion::DeadLetteredIn { tx, count } => {
                    self.counters.sent += count;
                    let _ = tx.send(Ok(()));
                }
                Completion::Pulled {
                    tx,
                    leased,
                    first_read,
                } => {
                    let messages: Vec<PulledMessage> = with_bodies(leased, &mut reads, first_read)
                        .map(|(seq, record, body)| PulledMessage {
                            id: format_message_id(record.id),
                            timestamp_ms: record.timestamp_ms,
                            attempts: record.attempts,
                            body: encode_body(record.content_type, body),
                            metadata: message_metadata(record.content_type),
                            lease_id: self.signer.lease_id(&self.config.queue_id, seq, record.attempts),
                        })
                        .collect();
                    self.counters.delivered += messages.len() as u64;
                    let mut result = self.empty_pull();
                    result.messages = messages;
                    let _ = tx.send(Ok(result));
                }
                Completion::PushLeased {
                    tx,
                    leased,
                    first_read,
                } => {
                    let messages: Vec<PushedMessage> = with_bodies(leased, &mut reads, first_read)
                        .map(|(seq, record, body)| PushedMessage {
                            seq,
                            attempt: record.attempts,
                            id: format_message_id(record.id),
                            timestamp_ms: record.timestamp_ms,
                            content_type: record.content_type,
                            body,
                        })
                        .collect();
                    self.counters.delivered += messages.len() as u64;
                    let _ = tx.send(Ok(messages));
                }
                Completion::Acked { tx, result } => {
                    self.counters.acked += result.ack_count;
                    self.counters.retried += result.retry_count;
                    let _ = tx.send(Ok(result));
                }
                Completion::Purged { tx } => {
                    self.purge_complete = true;
                    let _ = tx.send(Ok(()));
                }
                Completion::RefsPurged { tx, result } => {
                    let _ = tx.send(Ok(result));
                }
                Completion::ToDeadLetter { seqs, first_read } => {
                    let mut moving = Vec::with_capacity(seqs.len());
                    for (i, seq) in seqs.into_iter().enumerate() {
                        let body = reads.get_mut(first_read + i).and_then(Option::take);
                        match (self.state.get(seq), body) {
                            (Some(record), Some(body)) => moving.push((seq, *record, body)),
                            _ => {
                                self.state.finish_transit(seq);
                            }
                        }
                    }
                    self.send_to_dead_letter_queue(moving, ctx);
                }
                Completion::Internal => {}
            }
        }
    }

    /// Publishes this queue's gauges and counters: atomic stores into
    /// handles registered once, so it is cheap enough after every commit.
    fn publish_metrics(&self) {
        let m = &self.metrics;
        // Messages waiting on disk were never delivered: nearly all ready.
        m.ready
            .set((self.state.ready_count() as u64 + self.state.unloaded_count()) as f64);
        m.delayed.set(self.state.delayed_count() as f64);
        m.leased.set(self.state.leased_count() as f64);
        m.backlog.set(self.state.len() as f64);
        m.backlog_bytes.set(self.state.bytes() as f64);
        let age_ms = self
            .state
            .oldest_timestamp()
            .map(|t| now_ms().saturating_sub(t))
            .unwrap_or(0);
        m.oldest_age.set(age_ms as f64 / 1000.0);
        m.long_pollers.set(self.waiters.len() as f64);
        m.store_bytes.set(self.store_bytes as f64);
        let c = self.counters;
        m.sent.absolute(c.sent);
        m.delivered.absolute(c.delivered);
        m.acked.absolute(c.acked);
        m.retried.absolute(c.retried);
        m.expired.absolute(c.expired);
        m.dead_lettered.absolute(c.dead_lettered);
        m.dropped.absolute(c.dropped);
    }

    fn fail(&self, completion: Completion, err: BrokerError) {
        let queue = self.config.name.clone();
        let copy = |e: &BrokerError| match e {
            BrokerError::StorageFailure {
                message, disk_full, ..
            } => BrokerError::StorageFailure {
                queue: queue.clone(),
                message: message.clone(),
                disk_full: *disk_full,
            },
            other => BrokerError::InvalidRequest(other.to_string()),
        };
        match completion {
            Completion::Sent { tx, .. } => drop(tx.send(Err(copy(&err)))),
            Completion::DeadLetteredIn { tx, .. } => drop(tx.send(Err(copy(&err)))),
            Completion::Pulled { tx, .. } => drop(tx.send(Err(copy(&err)))),
            Completion::PushLeased { tx, .. } => drop(tx.send(Err(copy(&err)))),
            Completion::Acked { tx, .. } => drop(tx.send(Err(copy(&err)))),
            Completion::Purged { tx } => drop(tx.send(Err(copy(&err)))),
            Completion::RefsPurged { tx, .. } => drop(tx.send(Err(copy(&err)))),
            Completion::ToDeadLetter { .. } | Completion::Internal => {}
        }
    }

    /// Time-driven work: delays ending, leases expiring, retention.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.store.is_none() {
            return;
        }
        let now = now_ms();
        let exhausted = self.state.promote(now, self.max_deliveries());
        self.route_exhausted(exhausted);
        let expired = self.state.expire(now, self.retention_ms());
        if !expired.is_empty() {
            self.counters.expired += expired.len() as u64;
            for seq in expired {
                self.batch.ops.push(StoreOp::Delete { seq });
            }
            self.batch.completions.push(Completion::Internal);
        }
        self.serve_waiters(ctx);
        self.flush(ctx);
        self.schedule_wakeup(ctx);
    }

    /// Keeps one timer armed for the next due delay, lease or expiry.
    fn schedule_wakeup(&mut self, ctx: &mut Context<Self>) {
        let retention = self.retention_ms();
        let next = [
            self.state.next_visible_at(),
            self.state.oldest_timestamp().map(|t| t + retention),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(at) = next else {
            if let Some((_, handle)) = self.wakeup.take() {
                ctx.cancel_future(handle);
            }
            return;
        };
        if let Some((scheduled, handle)) = self.wakeup {
            if scheduled <= at {
                return;
            }
            ctx.cancel_future(handle);
        }
        let now = now_ms();
        let delay = Duration::from_millis(at.saturating_sub(now).max(10));
        let handle = ctx.run_later(delay, |act, ctx| {
            act.wakeup = None;
            act.tick(ctx);
        });
        self.wakeup = Some((now + delay.as_millis() as u64, handle));
    }

    fn paused(&self) -> bool {
        self.config.settings.delivery_paused
    }

    fn pull_consumer(&self) -> Option<&ConsumerRecord> {
        self.config
            .consumer
            .as_ref()
            .filter(|c| c.kind == ConsumerType::HttpPull)
    }

    /// Leases messages for one puller and queues the commit that confirms
    /// the lease. Gives the reply channel back when nothing could be leased.
    fn lease_for(
        &mut self,
        tx: Reply<PullResult>,
        limit: usize,
        visibility_ms: u64,
    ) -> Option<Reply<PullResult>> {
        let (leased, first_read) = self.lease_and_read(limit, visibility_ms);
        if leased.is_empty() {
            return Some(tx);
        }
        self.batch.completions.push(Completion::Pulled {
            tx,
            leased,
            first_read,
        });
        None
    }

    /// Leases ready messages and queues their lease updates and body reads.
    fn lease_and_read(&mut self, limit: usize, visibility_ms: u64) -> (Vec<(u64, MessageRecord)>, usize) {
        let now = now_ms();
        let (leased, exhausted) = self.state.lease(now, limit, visibility_ms, self.max_deliveries());
        self.route_exhausted(exhausted);
        let first_read = self.batch.reads;
        for (seq, record) in &leased {
            self.batch.ops.push(StoreOp::Update {
                seq: *seq,
                record: *record,
            });
            self.batch.read(*seq);
        }
        (leased, first_read)
    }

    fn push_consumer(&self) -> Option<&ConsumerRecord> {
        self.config
            .consumer
            .as_ref()
            .filter(|c| c.kind == ConsumerType::Worker)
    }

    /// Starts, restarts or stops the push child to match the config.
    fn sync_push_child(&mut self, ctx: &mut Context<Self>) {
        let wanted = self.push_consumer().cloned();
        if let Some(child) = &self.push {
            if Some(&child.consumer) == wanted.as_ref() {
                return;
            }
        }
        if let Some(old) = self.push.take() {
            old.addr.do_send(StopConsumer);
        }
        if let Some(consumer) = wanted {
            let status = Arc::new(Mutex::new(PushStatus::default()));
            let child = PushConsumer::new(
                ctx.address(),
                self.config.name.clone(),
                self.config.account.clone(),
                consumer.clone(),
                self.registry.clone(),
                self.limits.push_ceiling,
                status.clone(),
            );
            self.push = Some(PushChild {
                addr: child.start(),
                consumer,
                status,
                last_sent: None,
            });
        }
    }

    /// Tells the push child about ready messages when that changed.
    fn notify_push(&mut self) {
        let now_state = ReadyState {
            ready: self.state.ready_count(),
            oldest_visible_at: self.state.oldest_ready_visible_at(),
            paused: self.paused(),
        };
        if let Some(child) = &mut self.push {
            if child.last_sent != Some(now_state) {
                child.last_sent = Some(now_state);
                child.addr.do_send(now_state);
            }
        }
    }

    fn serve_waiters(&mut self, ctx: &mut Context<Self>) {
        if self.paused() || self.pull_consumer().is_none() {
            return;
        }
        while self.state.has_ready() {
            let Some(waiter) = self.waiters.pop_front() else {
                break;
            };
            if waiter.tx.is_closed() {
                ctx.cancel_future(waiter.timeout);
                continue;
            }
            match self.lease_for(waiter.tx, waiter.limit, waiter.visibility_ms) {
                None => {
                    ctx.cancel_future(waiter.timeout);
                }
                Some(tx) => {
                    self.waiters.push_front(Waiter { tx, ..waiter });
                }
            }
        }
    }

    fn expire_waiter(&mut self, id: u64) {
        if let Some(pos) = self.waiters.iter().position(|w| w.id == id) {
            if let Some(w) = self.waiters.remove(pos) {
                let _ = w.tx.send(Ok(self.empty_pull()));
            }
        }
    }

    /// Messages out of deliveries go to the dead-letter queue, or are dropped.
    fn route_exhausted(&mut self, seqs: Vec<u64>) {
        if seqs.is_empty() {
            return;
        }
        let has_dlq = self
            .config
            .consumer
            .as_ref()
            .and_then(|c| c.dead_letter_queue.as_ref())
            .is_some();
        if has_dlq {
            let first_read = self.batch.reads;
            for &seq in &seqs {
                self.batch.read(seq);
            }
            self.batch
                .completions
                .push(Completion::ToDeadLetter { seqs, first_read });
        } else {
            let mut dropped = 0;
            for seq in seqs {
                if self.state.finish_transit(seq).is_some() {
                    dropped += 1;
                    self.batch.ops.push(StoreOp::Delete { seq });
                }
            }
            self.counters.dropped += dropped;
            tracing::warn!(
                queue = %self.config.name,
                dropped,
                max_deliveries = self.max_deliveries(),
                "messages used their last delivery and were dropped (the consumer has no dead_letter_queue)"
            );
            self.batch.completions.push(Completion::Internal);
        }
    }

    fn send_to_dead_letter_queue(
        &mut self,
        moving: Vec<(u64, MessageRecord, Vec<u8>)>,
        ctx: &mut Context<Self>,
    ) {
        if moving.is_empty() {
            return;
        }
        let Some(dlq) = self
            .config
            .consumer
            .as_ref()
            .and_then(|c| c.dead_letter_queue.clone())
        else {
            // The consumer lost its dead-letter queue meanwhile: drop.
            let seqs: Vec<u64> = moving.iter().map(|(s, _, _)| *s).collect();
            self.route_exhausted(seqs);
            self.flush(ctx);
            return;
        };
        let seqs: Vec<u64> = moving.iter().map(|(s, _, _)| *s).collect();
        let messages: Vec<(MessageRecord, Vec<u8>)> = moving.into_iter().map(|(_, r, b)| (r, b)).collect();
        let registry = self.registry.clone();
        let account = self.config.account.clone();
        let dlq_name = dlq.clone();
        let transfer = async move {
            let handle = registry
                .addr
                .send(ResolveDeadLetterQueue {
                    account,
                    name: dlq_name,
                })
                .await
                .map_err(|_| BrokerError::ActorUnavailable("registry".into()))??;
            handle
                .addr
                .send(AcceptDeadLettered { messages })
                .await
                .map_err(|_| BrokerError::ActorUnavailable("dead-letter queue".into()))?
        };
        ctx.spawn(transfer.into_actor(self).map(move |result, act, ctx| {
            match result {
                Ok(()) => {
                    for seq in seqs {
                        if act.state.finish_transit(seq).is_some() {
                            act.counters.dead_lettered += 1;
                            act.batch.ops.push(StoreOp::Delete { seq });
                        }
                    }
                    act.batch.completions.push(Completion::Internal);
                }
                Err(e) => {
                    tracing::warn!(queue = %act.config.name, dead_letter_queue = %dlq, error = %e, "dead-lettering failed; retrying in 1 s");
                    act.last_error = Some((format!("dead-lettering to {dlq} failed: {e}"), now_ms()));
                    let at = now_ms() + 1000;
                    for seq in seqs {
                        act.state.abort_transit(seq, at);
                    }
                }
            }
            act.flush(ctx);
            act.schedule_wakeup(ctx);
        }));
    }

    fn inspect(&self) -> Value {
        let now = now_ms();
        let consumers: Vec<Value> = self
            .config
            .consumer
            .iter()
            .map(|c| {
                if let (ConsumerType::Worker, Some(child)) = (c.kind, &self.push) {
                    let status = child.status.lock().map(|s| s.clone()).unwrap_or_default();
                    return json!({
                        "consumer_id": c.consumer_id,
                        "type": c.kind.as_str(),
                        "actor": "push consumer (child of the queue actor)",
                        "settings": c.to_api(&self.config.queue_id, &self.config.name)["settings"],
                        "dead_letter_queue": c.dead_letter_queue.clone().unwrap_or_default(),
                        "function": status.function,
                        "batch": { "filling": status.filling, "batch_size": c.settings.batch_size },
                        "batch_deadline_ms": status.batch_deadline_ms,
                        "batches_in_flight": status.batches_in_flight,
                        "concurrency": { "current": status.concurrency, "max": status.max_concurrency },
                        "counters": {
                            "delivered": status.delivered,
                            "acked": status.acked,
                            "retried": status.retried,
                            "failed_batches": status.failed_batches,
                        },
                        "last_error": status.last_error.as_ref().map(|m| json!({"message": m, "at_ms": status.last_error_at_ms})),
                    });
                }
                json!({
                    "consumer_id": c.consumer_id,
                    "type": c.kind.as_str(),
                    "actor": "queue actor (pull consumers are served by their queue)",
                    "settings": c.to_api(&self.config.queue_id, &self.config.name)["settings"],
                    "dead_letter_queue": c.dead_letter_queue.clone().unwrap_or_default(),
                    "long_pollers": if c.kind == ConsumerType::HttpPull { self.waiters.len() } else { 0 },
                    // Push delivery state (batches, concurrency) belongs to the
                    // worker child actor; a pull consumer has none.
                    "batch": Value::Null,
                    "batch_deadline_ms": Value::Null,
                    "batches_in_flight": 0,
                    "concurrency": { "current": 0, "max": c.settings.max_concurrency },
                    "last_error": Value::Null,
                })
            })
            .collect();
        json!({
            "queue_id": self.config.queue_id,
            "queue_name": self.config.name,
            "mailbox": self.depth.load(Ordering::Relaxed),
            "mailbox_capacity": MAILBOX_CAPACITY,
            "messages": {
                "ready": self.state.ready_count(),
                "delayed": self.state.delayed_count(),
                "leased": self.state.leased_count(),
                "dead_lettering": self.state.transit_count(),
                "total": self.state.len(),
                "on_disk_only": self.state.unloaded_count(),
                "bytes": self.state.bytes(),
            },
            "oldest_message_age_ms": self.state.oldest_timestamp().map(|t| now.saturating_sub(t)),
            "store": {
                "path": self.path.display().to_string(),
                "format_version": crate::store::QUEUE_FORMAT_VERSION,
                "bytes": self.store_bytes,
                "last_commit_ms": self.last_commit_duration.as_secs_f64() * 1000.0,
                "last_commit_at_ms": self.last_commit_at_ms,
                "last_commit_ops": self.last_commit_ops,
                "commits": self.commits,
                "commit_in_flight": self.committing,
                "pending_ops": self.batch.ops.len(),
                "pending_bytes": self.batch_bytes + self.inflight_bytes,
                "max_pending_bytes": self.limits.max_pending_bytes,
                "healthy": self.broken.is_none() && self.store.is_some(),
                "error": self.broken,
            },
            "counters": self.counters,
            "long_pollers": self.waiters.len(),
            "settings": self.config.settings,
            "next_wakeup_ms": self.wakeup.map(|(at, _)| at.saturating_sub(now)),
            "consumers": consumers,
            "last_error": self.last_error.as_ref().map(|(m, at)| json!({"message": m, "at_ms": at})),
        })
    }
}

impl Actor for QueueActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        self.open_store(ctx);
        // Ages keep growing on an idle queue: refresh the gauges even when
        // nothing commits, so "oldest message too old" alerts can fire.
        ctx.run_interval(Duration::from_secs(5), |act, _| act.publish_metrics());
    }
}

impl Handler<SendMessages> for QueueActor {
    type Result = ResponseFuture<Result<BacklogMetrics, BrokerError>>;

    fn handle(&mut self, msg: SendMessages, ctx: &mut Context<Self>) -> Self::Result {
        self.dequeued();
        let (tx, rx) = oneshot::channel();
        if let Err(e) = self.usable() {
            let _ = tx.send(Err(e));
            return reply_future(rx, self.config.name.clone());
        }
        let incoming: usize = msg.messages.iter().map(|m| m.body.len()).sum();
        let pending = self.batch_bytes + self.inflight_bytes;
        if pending > 0 && pending + incoming > self.limits.max_pending_bytes {
            // The disk is not keeping up: push back instead of buffering.
            let _ = tx.send(Err(BrokerError::Overloaded(self.config.name.clone())));
            return reply_future(rx, self.config.name.clone());
        }
        self.batch_bytes += incoming;
        let now = now_ms();
        let default_delay = self.config.settings.delivery_delay;
        let count = msg.messages.len() as u64;
        for m in msg.messages {
            let delay = m.delay_seconds.unwrap_or(default_delay);
            let record = MessageRecord {
                id: uuid::Uuid::new_v4().as_u128(),
                timestamp_ms: now,
                visible_at_ms: now + delay * 1000,
                attempts: 0,
                size: m.body.len() as u32,
                content_type: m.content_type,
                leased: false,
            };
            let seq = self.state.insert(record, now);
            self.batch.ops.push(StoreOp::Insert {
                seq,
                record,
                body: m.body,
            });
        }
        self.batch.completions.push(Completion::Sent { tx, count });
        self.serve_waiters(ctx);
        self.flush(ctx);
        self.schedule_wakeup(ctx);
        reply_future(rx, self.config.name.clone())
    }
}

impl Handler<AcceptDeadLettered> for QueueActor {
    type Result = ResponseFuture<Result<(), BrokerError>>;

    fn handle(&mut self, msg: AcceptDeadLettered, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        if let Err(e) = self.usable() {
            let _ = tx.send(Err(e));
            return reply_future(rx, self.config.name.clone());
        }
        let now = now_ms();
        let count = msg.messages.len() as u64;
        for (original, body) in msg.messages {
            // Keeps id, body, content type and publish time; attempts restart.
            let record = MessageRecord {
                visible_at_ms: now,
                attempts: 0,
                leased: false,
                ..original
            };
            let seq = self.state.insert(record, now);
            self.batch.ops.push(StoreOp::Insert { seq, record, body });
        }
        self.batch
            .completions
            .push(Completion::DeadLetteredIn { tx, count });
        self.serve_waiters(ctx);
        self.flush(ctx);
        self.schedule_wakeup(ctx);
        reply_future(rx, self.config.name.clone())
    }
}

impl Handler<Pull> for QueueActor {
    type Result = ResponseFuture<Result<PullResult, BrokerError>>;

    fn handle(&mut self, msg: Pull, ctx: &mut Context<Self>) -> Self::Result {
        self.dequeued();
        let (tx, rx) = oneshot::channel();
        let consumer = match (self.usable(), self.pull_consumer()) {
            (Err(e), _) => {
                let _ = tx.send(Err(e));
                return reply_future(rx, self.config.name.clone());
            }
            (Ok(()), None) => {
                let _ = tx.send(Err(BrokerError::NoPullConsumer(self.config.name.clone())));
                return reply_future(rx, self.config.name.clone());
            }
            (Ok(()), Some(c)) => c.clone(),
        };
        if self.paused() {
            let _ = tx.send(Err(BrokerError::DeliveryPaused(self.config.name.clone())));
            return reply_future(rx, self.config.name.clone());
        }
        let limit = msg.batch_size.unwrap_or(consumer.settings.batch_size) as usize;
        let visibility = msg
            .visibility_timeout_ms
            .unwrap_or(consumer.settings.visibility_timeout_ms);
        self.tick(ctx);
        if let Some(tx) = self.lease_for(tx, limit, visibility) {
            // Messages still on disk are on their way in: wait for them
            // rather than answer "empty" over a backlog.
            let wait_ms = if self.state.unloaded_count() > 0 {
                msg.wait_ms.max(LOAD_WAIT_MS)
            } else {
                msg.wait_ms
            };
            if wait_ms > 0 && self.waiters.len() < MAX_WAITERS {
                let id = self.next_waiter;
                self.next_waiter += 1;
                let timeout = ctx.run_later(Duration::from_millis(wait_ms), move |act, _| {
                    act.expire_waiter(id)
                });
                self.waiters.push_back(Waiter {
                    id,
                    tx,
                    limit,
                    visibility_ms: visibility,
                    timeout,
                });
            } else {
                let _ = tx.send(Ok(self.empty_pull()));
            }
        }
        self.flush(ctx);
        self.schedule_wakeup(ctx);
        reply_future(rx, self.config.name.clone())
    }
}

impl Handler<Ack> for QueueActor {
    type Result = ResponseFuture<Result<AckResult, BrokerError>>;

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) -> Self::Result {
        self.dequeued();
        let (tx, rx) = oneshot::channel();
        if let Err(e) = self.usable() {
            let _ = tx.send(Err(e));
            return reply_future(rx, self.config.name.clone());
        }
        self.tick(ctx);
        let now = now_ms();
        let max = self.max_deliveries();
        let default_retry_delay = self
            .config
            .consumer
            .as_ref()
            .map(|c| c.settings.retry_delay)
            .unwrap_or(0);
        let queue_id = self.config.queue_id.clone();
        let mut result = AckResult::default();
        let mut exhausted = Vec::new();
        let mut ops_before = self.batch.ops.len();
        for lease_id in msg.acks {
            match self.signer.parse_lease(&queue_id, &lease_id) {
                None => {
                    result
                        .warnings
                        .insert(lease_id, "malformed or forged lease id; ignored".into());
                }
                Some((seq, _attempt)) => match self.state.ack(seq) {
                    Ok(_) => {
                        result.ack_count += 1;
                        self.batch.ops.push(StoreOp::Delete { seq });
                    }
                    Err(problem) => {
                        result.warnings.insert(lease_id, problem.describe().into());
                    }
                },
            }
        }
        for (lease_id, delay) in msg.retries {
            let Some((seq, attempt)) = self.signer.parse_lease(&queue_id, &lease_id) else {
                result
                    .warnings
                    .insert(lease_id, "malformed or forged lease id; ignored".into());
                continue;
            };
            let delay_ms = delay.unwrap_or(default_retry_delay) * 1000;
            match self.state.retry(seq, attempt, now, delay_ms, max) {
                Ok(RetryOutcome::Scheduled(record)) => {
                    result.retry_count += 1;
                    self.batch.ops.push(StoreOp::Update { seq, record });
                }
                Ok(RetryOutcome::Exhausted) => {
                    result.retry_count += 1;
                    exhausted.push(seq);
                }
                Err(problem) => {
                    result.warnings.insert(lease_id, problem.describe().into());
                }
            }
        }
        for (lease_id, visibility_ms) in msg.extensions {
            let Some((seq, attempt)) = self.signer.parse_lease(&queue_id, &lease_id) else {
                result
                    .warnings
                    .insert(lease_id, "malformed or forged lease id; ignored".into());
                continue;
            };
            match self.state.extend(seq, attempt, now, visibility_ms) {
                Ok(record) => {
                    result.extend_count += 1;
                    self.batch.ops.push(StoreOp::Update { seq, record });
                }
                Err(problem) => {
                    result.warnings.insert(lease_id, problem.describe().into());
                }
            }
        }
        ops_before = self.batch.ops.len() - ops_before;
        self.route_exhausted(exhausted);
        if ops_before == 0 && result.retry_count == 0 {
            let _ = tx.send(Ok(result));
        } else {
            self.batch.completions.push(Completion::Acked { tx, result });
        }
        self.serve_waiters(ctx);
        self.flush(ctx);
        self.schedule_wakeup(ctx);
        reply_future(rx, self.config.name.clone())
    }
}

impl Handler<Peek> for QueueActor {
    type Result = ResponseFuture<Result<Vec<PeekedMessage>, BrokerError>>;

    fn handle(&mut self, msg: Peek, ctx: &mut Context<Self>) -> Self::Result {
        self.dequeued();
        if let Err(e) = self.usable() {
            return Box::pin(async move { Err(e) });
        }
        self.tick(ctx);
        let picked = self.state.peek(msg.limit);
        let Some(store) = self.store.clone() else {
            return Box::pin(async { Ok(Vec::new()) });
        };
        let signer = self.signer.clone();
        let queue_id = self.config.queue_id.clone();
        Box::pin(async move {
            let seqs: Vec<u64> = picked.iter().map(|(s, _)| *s).collect();
            let bodies = tokio::task::spawn_blocking(move || store.read_bodies(&seqs))
                .await
                .map_err(|_| BrokerError::Store(StoreError::TaskAborted))??;
            // A message not yet committed has no body on disk: skip it.
            Ok(picked
                .into_iter()
                .zip(bodies)
                .filter_map(|((seq, record), body)| {
                    let body = body?;
                    Some(PeekedMessage {
                        id: format_message_id(record.id),
                        timestamp_ms: record.timestamp_ms,
                        attempts: record.attempts,
                        body: encode_body(record.content_type, body),
                        metadata: message_metadata(record.content_type),
                        message_ref: signer.message_ref(&queue_id, seq),
                    })
                })
                .collect())
        })
    }
}

impl Handler<PurgeRefs> for QueueActor {
    type Result = ResponseFuture<Result<RefPurgeResult, BrokerError>>;

    fn handle(&mut self, msg: PurgeRefs, ctx: &mut Context<Self>) -> Self::Result {
        self.dequeued();
        let (tx, rx) = oneshot::channel();
        if let Err(e) = self.usable() {
            let _ = tx.send(Err(e));
            return reply_future(rx, self.config.name.clone());
        }
        let mut result = RefPurgeResult::default();
        for r in msg.refs {
            match self.signer.parse_ref(&self.config.queue_id, &r) {
                None => {
                    result
                        .warnings
                        .insert(r, "malformed or forged message ref; ignored".into());
                }
                Some(seq) => match self.state.ack(seq) {
                    Ok(_) => self.batch.ops.push(StoreOp::Delete { seq }),
                    Err(super::state::LeaseProblem::DeadLettering) => {
                        result.warnings.insert(
                            r,
                            "message is being moved to the dead-letter queue; purge it there".into(),
                        );
                    }
                    Err(_) => {
                        result
                            .warnings
                            .insert(r, "message not found: already deleted".into());
                    }
                },
            }
        }
        self.batch.completions.push(Completion::RefsPurged { tx, result });
        self.flush(ctx);
        reply_future(rx, self.config.name.clone())
    }
}

impl Handler<PurgeAll> for QueueActor {
    type Result = ResponseFuture<Result<(), BrokerError>>;

    fn handle(&mut self, _: PurgeAll, ctx: &mut Context<Self>) -> Self::Result {
        self.dequeued();
        let (tx, rx) = oneshot::channel();
        if let Err(e) = self.usable() {
            let _ = tx.send(Err(e));
            return reply_future(rx, self.config.name.clone());
        }
        let n = self.state.purge();
        tracing::info!(queue = %self.config.name, messages = n, "queue purged");
        self.purge_started_at = Some(super::model::iso_now());
        self.purge_complete = false;
        self.batch.ops.push(StoreOp::DeleteAll);
        self.batch.completions.push(Completion::Purged { tx });
        self.flush(ctx);
        self.schedule_wakeup(ctx);
        reply_future(rx, self.config.name.clone())
    }
}

impl Handler<GetPurgeStatus> for QueueActor {
    type Result = Result<PurgeStatus, BrokerError>;

    fn handle(&mut self, _: GetPurgeStatus, _: &mut Context<Self>) -> Self::Result {
        self.dequeued();
        Ok(PurgeStatus {
            started_at: self.purge_started_at.clone(),
            completed: self.purge_complete.to_string(),
            complete: self.purge_complete,
        })
    }
}

impl Handler<GetMetrics> for QueueActor {
    type Result = Result<BacklogMetrics, BrokerError>;

    fn handle(&mut self, _: GetMetrics, ctx: &mut Context<Self>) -> Self::Result {
        self.dequeued();
        self.usable()?;
        self.tick(ctx);
        Ok(self.metrics())
    }
}

impl Handler<Inspect> for QueueActor {
    type Result = Result<Value, BrokerError>;

    fn handle(&mut self, _: Inspect, ctx: &mut Context<Self>) -> Self::Result {
        self.dequeued();
        self.tick(ctx);
        Ok(self.inspect())
    }
}

impl Handler<Configure> for QueueActor {
    type Result = ();

    fn handle(&mut self, msg: Configure, ctx: &mut Context<Self>) {
        if msg.0.name != self.config.name {
            self.metrics = QueueMetrics::register(&msg.0.account, &msg.0.name);
        }
        self.config = msg.0;
        if self.store.is_some() {
            self.sync_push_child(ctx);
        }
        if self.pull_consumer().is_none() {
            // Nobody left to serve long pollers: answer them empty.
            for w in std::mem::take(&mut self.waiters) {
                ctx.cancel_future(w.timeout);
                let _ = w.tx.send(Ok(self.empty_pull()));
            }
        }
        self.tick(ctx);
    }
}

impl Handler<Stop> for QueueActor {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        if let Some(child) = self.push.take() {
            child.addr.do_send(StopConsumer);
        }
        for w in std::mem::take(&mut self.waiters) {
            let _ =
                w.tx.send(Err(BrokerError::QueueNotFound(self.config.queue_id.clone())));
        }
        ctx.stop();
    }
}

impl Handler<Drain> for QueueActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.drainers.push(tx);
        for w in std::mem::take(&mut self.waiters) {
            ctx.cancel_future(w.timeout);
            let _ = w.tx.send(Err(BrokerError::ShuttingDown));
        }
        self.flush(ctx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl Handler<LeaseForPush> for QueueActor {
    type Result = ResponseFuture<Result<Vec<PushedMessage>, BrokerError>>;

    fn handle(&mut self, msg: LeaseForPush, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        if let Err(e) = self.usable() {
            let _ = tx.send(Err(e));
            return reply_future(rx, self.config.name.clone());
        }
        if self.paused() || self.push_consumer().is_none() {
            let _ = tx.send(Ok(Vec::new()));
            return reply_future(rx, self.config.name.clone());
        }
        self.tick(ctx);
        let (leased, first_read) = self.lease_and_read(msg.limit, msg.visibility_ms);
        if leased.is_empty() {
            let _ = tx.send(Ok(Vec::new()));
        } else {
            self.batch.completions.push(Completion::PushLeased {
                tx,
                leased,
                first_read,
            });
        }
        self.flush(ctx);
        self.schedule_wakeup(ctx);
        reply_future(rx, self.config.name.clone())
    }
}

impl Handler<PushOutcome> for QueueActor {
    type Result = ();

    fn handle(&mut self, msg: PushOutcome, ctx: &mut Context<Self>) {
        if self.usable().is_err() {
            // The leases expire and the messages are delivered again.
            return;
        }
        let now = now_ms();
        let max = self.max_deliveries();
        let mut exhausted = Vec::new();
        for (seq, _attempt) in msg.acks {
            if self.state.ack(seq).is_ok() {
                self.counters.acked += 1;
                self.batch.ops.push(StoreOp::Delete { seq });
            }
        }
        for (seq, attempt, delay_seconds) in msg.retries {
            match self.state.retry(seq, attempt, now, delay_seconds * 1000, max) {
                Ok(RetryOutcome::Scheduled(record)) => {
                    self.counters.retried += 1;
                    self.batch.ops.push(StoreOp::Update { seq, record });
                }
                Ok(RetryOutcome::Exhausted) => {
                    self.counters.retried += 1;
                    exhausted.push(seq);
                }
                Err(_) => {}
            }
        }
        self.route_exhausted(exhausted);
        self.batch.completions.push(Completion::Internal);
        self.flush(ctx);
        self.schedule_wakeup(ctx);
    }
}
