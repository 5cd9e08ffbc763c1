//! The machinery every workload shares: the measured window, the producer
//! and consumer loops, and joining and tallying their tasks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use futures_util::future::try_join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::task::JoinSet;

use super::thousands;
use crate::cpu::CpuMeter;
use crate::payload::{self, now_us};
use crate::stats::clamp_us;
use crate::systems::{Broker, Consumer, Link, Producer, Queue};

/// How long tasks get to wind down after a window closes before the run
/// is declared stuck.
const WIND_DOWN: Duration = Duration::from_secs(30);
/// After an open-loop send window, how long consumers get to take the
/// messages still in flight.
const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// Long-poll wait where a queue can be empty.
pub(super) const LONG_POLL: Duration = Duration::from_millis(1000);

/// A measured period, and the flag that ends the tasks working in it.
pub(super) struct Window {
    pub(super) start: Instant,
    /// Wall clock at `start`, for stamping intended send times.
    pub(super) start_us: u64,
    pub(super) deadline: Instant,
    stop: AtomicBool,
}

impl Window {
    pub(super) fn new(duration: Duration) -> Arc<Window> {
        let start = Instant::now();
        Arc::new(Window {
            start,
            start_us: now_us(),
            deadline: start + duration,
            stop: AtomicBool::new(false),
        })
    }

    pub(super) fn open(&self) -> bool {
        Instant::now() <= self.deadline
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What one task counted.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) produced: u64,
    pub(super) consumed: u64,
    /// Every message acked, in the window or not (for backlog top-ups).
    pub(super) acked: u64,
    pub(super) send_latencies: Vec<u32>,
    pub(super) receive_latencies: Vec<u32>,
}

impl Tally {
    fn merge(tallies: Vec<Tally>) -> Tally {
        let mut all = Tally::default();
        for t in tallies {
            all.produced += t.produced;
            all.consumed += t.consumed;
            all.acked += t.acked;
            all.send_latencies.extend(t.send_latencies);
            all.receive_latencies.extend(t.receive_latencies);
        }
        all
    }
}

pub(super) type Tasks = JoinSet<Result<Tally>>;

/// Spawns a task that stops the whole window if it fails, so one broken
/// connection ends the run promptly instead of after the full duration.
pub(super) fn spawn<F>(tasks: &mut Tasks, w: &Arc<Window>, task: F)
where
    F: std::future::Future<Output = Result<Tally>> + Send + 'static,
{
    let w = w.clone();
    tasks.spawn(async move {
        let result = task.await;
        if result.is_err() {
            w.stop();
        }
        result
    });
}

/// Waits for every task (at most [`WIND_DOWN`]) and merges their tallies;
/// the first error wins.
pub(super) async fn join(tasks: &mut Tasks) -> Result<Tally> {
    let mut tallies = Vec::new();
    let mut first_error = None;
    let all = async {
        while let Some(joined) = tasks.join_next().await {
            match joined.map_err(anyhow::Error::from).and_then(|r| r) {
                Ok(t) => tallies.push(t),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    };
    if tokio::time::timeout(WIND_DOWN, all).await.is_err() {
        tasks.abort_all();
        bail!("tasks still running {WIND_DOWN:?} after the window closed");
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(Tally::merge(tallies)),
    }
}

/// Lets the tasks work until the deadline, until all of them are done
/// (a drained backlog) or one fails; then stops and joins them. Returns the
/// merged tally, the measured seconds and the server CPU (µs) used.
pub(super) async fn measure(
    tasks: &mut Tasks,
    w: &Arc<Window>,
    cpu: &CpuMeter,
) -> Result<(Tally, f64, Option<u64>)> {
    let mut finished = Vec::new();
    let end = loop {
        tokio::select! {
            _ = tokio::time::sleep_until(w.deadline.into()) => break Instant::now(),
            _ = tokio::time::sleep(Duration::from_millis(20)), if w.stopped() => break Instant::now(),
            next = tasks.join_next() => match next {
                None => break Instant::now(),
                Some(joined) => finished.push(joined),
            },
        }
    };
    let cpu_us = cpu.used_us();
    w.stop();
    let mut all = join(tasks).await?;
    for joined in finished {
        let t = joined??;
        all = Tally::merge(vec![all, t]);
    }
    let seconds = end.min(w.deadline).duration_since(w.start).as_secs_f64();
    Ok((all, seconds, cpu_us))
}

pub(super) fn per_message(cpu_us: Option<u64>, messages: u64) -> Option<f64> {
    cpu_us
        .filter(|_| messages > 0)
        .map(|us| us as f64 / messages as f64)
}

/// Closed loop: sends `per_send` messages, waits until they're durable,
/// repeats; latency is per send.
pub(super) async fn produce<P: Producer>(p: P, per_send: usize, w: Arc<Window>) -> Result<Tally> {
    let mut tally = Tally::default();
    let result = async {
        while !w.stopped() {
            let started = Instant::now();
            p.send(now_us(), per_send).await?;
            if w.open() {
                tally.produced += per_send as u64;
                tally.send_latencies.push(clamp_us(started.elapsed().as_micros()));
            }
        }
        anyhow::Ok(())
    }
    .await;
    p.close().await;
    result.map(|()| tally)
}

#[derive(Clone, Copy)]
pub(super) enum Latency {
    /// From the start of the receive to the end of the ack.
    PerBatch,
    /// Receipt time − the `t` in each message.
    EndToEnd,
}

#[derive(Clone)]
pub(super) struct ConsumeSpec {
    pub(super) wait: Duration,
    pub(super) latency: Latency,
    /// Consuming a backlog of known size: stop once it is all acked. (An
    /// empty receive can't tell: a RabbitMQ queue busy after a large fill
    /// may deliver nothing for a while.)
    pub(super) drain: Option<Drain>,
    /// Count what arrives after the deadline too (the tail of an
    /// open-loop run); `received` then tracks the count for the coordinator.
    pub(super) after_deadline: bool,
    pub(super) received: Option<Arc<AtomicU64>>,
}

/// A backlog being drained by several consumers.
#[derive(Clone)]
pub(super) struct Drain {
    acked: Arc<AtomicU64>,
    size: u64,
}

impl Drain {
    pub(super) fn new(size: u64) -> Drain {
        Drain {
            acked: Arc::new(AtomicU64::new(0)),
            size,
        }
    }

    fn done(&self) -> bool {
        self.acked.load(Ordering::Relaxed) >= self.size
    }
}

pub(super) async fn consume<C: Consumer>(mut c: C, spec: ConsumeSpec, w: Arc<Window>) -> Result<Tally> {
    let mut tally = Tally::default();
    let result = async {
        while !w.stopped() && !spec.drain.as_ref().is_some_and(Drain::done) {
            let started = Instant::now();
            let bodies = c.receive(spec.wait).await?;
            if bodies.is_empty() {
                continue;
            }
            let received_us = now_us();
            c.ack().await?;
            let n = bodies.len() as u64;
            tally.acked += n;
            if let Some(d) = &spec.drain {
                d.acked.fetch_add(n, Ordering::Relaxed);
            }
            if !(spec.after_deadline || w.open()) {
                continue;
            }
            tally.consumed += n;
            if let Some(r) = &spec.received {
                r.fetch_add(n, Ordering::Relaxed);
            }
            match spec.latency {
                Latency::PerBatch => tally
                    .receive_latencies
                    .push(clamp_us(started.elapsed().as_micros())),
                Latency::EndToEnd => tally.receive_latencies.extend(
                    bodies
                        .iter()
                        .filter_map(|b| payload::read_t(b))
                        .map(|t| clamp_us(received_us.saturating_sub(t) as u128)),
                ),
            }
        }
        anyhow::Ok(())
    }
    .await;
    c.close().await;
    result.map(|()| tally)
}

/// Open loop: message k (this sender's share: k = first, first + stride, …)
/// is due at `start + k / rate`, is sent then even if earlier sends are
/// still in flight, and is stamped with that intended time, so neither a
/// slow send nor a stall can hide latency or lower the offered load.
async fn open_loop<P: Producer>(p: P, first: u64, stride: u64, rate: f64, w: Arc<Window>) -> Result<Tally> {
    let mut tally = Tally::default();
    let result = async {
        let mut in_flight = FuturesUnordered::new();
        let mut k = first;
        loop {
            let offset = Duration::from_secs_f64(k as f64 / rate);
            let due = w.start + offset;
            let sending = due < w.deadline && !w.stopped();
            if !sending && in_flight.is_empty() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(due.into()), if sending => {
                    in_flight.push(p.send(w.start_us + offset.as_micros() as u64, 1));
                    k += stride;
                }
                Some(sent) = in_flight.next() => {
                    sent?;
                    if w.open() {
                        tally.produced += 1;
                    }
                }
            }
        }
        anyhow::Ok(())
    }
    .await;
    p.close().await;
    result.map(|()| tally)
}

/// Sender tasks of the open-loop workloads.
const OPEN_LOOP_SENDERS: u64 = 32;

/// Runs open-loop senders at `rate` until the window's deadline, then
/// waits (briefly) until `delivered()` has caught up with what was sent.
/// Returns messages sent in the window and the server CPU used from the
/// start until delivery caught up.
pub(super) async fn offer_load<P: Producer>(
    producers: Vec<P>,
    rate: u64,
    w: &Arc<Window>,
    cpu: &CpuMeter,
    delivered: impl Fn() -> u64,
) -> Result<(u64, Option<u64>)> {
    let stride = producers.len() as u64;
    let mut senders = Tasks::new();
    for (i, p) in producers.into_iter().enumerate() {
        spawn(
            &mut senders,
            w,
            open_loop(p, i as u64, stride, rate as f64, w.clone()),
        );
    }
    tokio::time::sleep_until(w.deadline.into()).await;
    let sent = join(&mut senders).await?.produced;
    let grace = Instant::now() + DRAIN_GRACE;
    while delivered() < sent && Instant::now() < grace && !w.stopped() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((sent, cpu.used_us()))
}

pub(super) async fn open_loop_senders<B: Broker>(b: &B, q: &Queue) -> Result<Vec<B::Producer>> {
    try_join_all((0..OPEN_LOOP_SENDERS).map(|_| b.producer(q, Link::Own))).await
}

pub(super) fn shortfall_note(sent: u64, delivered: u64, offered: u64, seconds: f64) -> Option<String> {
    let mut notes = Vec::new();
    let achieved = sent as f64 / seconds;
    if achieved < offered as f64 * 0.95 {
        notes.push(format!("sent {achieved:.0} of {offered} msg/s offered"));
    }
    if delivered < sent {
        notes.push(format!(
            "{} of {} sent messages not delivered within {} s after sending stopped",
            thousands(sent - delivered),
            thousands(sent),
            DRAIN_GRACE.as_secs()
        ));
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}
