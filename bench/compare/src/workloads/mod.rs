//! The seven workloads, written once against [`Broker`] so every system
//! runs exactly the same steps.
//!
//! Rates count what completed inside the measured window (an operation in
//! flight at the deadline finishes but isn't counted), divided by the
//! window's length. Server CPU is sampled at the window's edges too.

mod harness;
mod push;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::future::try_join_all;

use crate::cpu::CpuMeter;
use crate::sink::Sink;
use crate::stats::{percentiles, Percentiles};
use crate::systems::{Broker, ConsumeOpts, Link, Queue};
use harness::{
    consume, join, measure, offer_load, open_loop_senders, per_message, produce, shortfall_note, spawn,
    ConsumeSpec, Drain, Latency, Tasks, Window, LONG_POLL,
};
use push::{push_drain, push_latency};

/// Pause between filling a backlog and consuming it.
const FILL_SETTLE: Duration = Duration::from_secs(3);
/// Connections RabbitMQ channels are spread over in the 100-queue workload.
const MANY_QUEUES_CONNECTIONS: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    ProduceBatch,
    ProduceSingle,
    ConsumeBacklog,
    ProduceConsume,
    FixedRate,
    ManyQueues,
    PushDrain,
    PushLatency,
}

/// What a workload's latency columns measure.
pub enum LatencyKind {
    PerBatchSend,
    PerMessageSend,
    PerBatchPullAck,
    EndToEnd,
    None,
}

impl Workload {
    pub const ALL: [Workload; 8] = [
        Workload::ProduceBatch,
        Workload::ProduceSingle,
        Workload::ConsumeBacklog,
        Workload::ProduceConsume,
        Workload::FixedRate,
        Workload::ManyQueues,
        Workload::PushDrain,
        Workload::PushLatency,
    ];

    /// `1`…`6`, `7a`, `7b`.
    pub fn key(self) -> &'static str {
        match self {
            Workload::ProduceBatch => "1",
            Workload::ProduceSingle => "2",
            Workload::ConsumeBacklog => "3",
            Workload::ProduceConsume => "4",
            Workload::FixedRate => "5",
            Workload::ManyQueues => "6",
            Workload::PushDrain => "7a",
            Workload::PushLatency => "7b",
        }
    }

    /// Parses a `--workloads` entry: `7` means both push measurements.
    pub fn parse(s: &str) -> Result<Vec<Workload>> {
        let s = s.trim().trim_start_matches(['w', 'W']);
        if s == "7" {
            return Ok(vec![Workload::PushDrain, Workload::PushLatency]);
        }
        Workload::ALL
            .into_iter()
            .find(|w| w.key() == s)
            .map(|w| vec![w])
            .with_context(|| format!("unknown workload {s:?} (1-7, 7a, 7b)"))
    }

    /// A few words for the summary table.
    pub fn short(self) -> &'static str {
        match self {
            Workload::ProduceBatch => "produce, batches",
            Workload::ProduceSingle => "produce, single",
            Workload::ConsumeBacklog => "consume backlog",
            Workload::ProduceConsume => "produce + consume",
            Workload::FixedRate => "fixed-rate latency",
            Workload::ManyQueues => "100 queues",
            Workload::PushDrain => "push, drain",
            Workload::PushLatency => "push, fixed rate",
        }
    }

    pub fn title(self, ctx: &Ctx) -> String {
        match self {
            Workload::ProduceBatch => "produce only, batches of 100, 8 producers".into(),
            Workload::ProduceSingle => "produce only, single messages, 64 producers (a connection each)".into(),
            Workload::ConsumeBacklog => format!(
                "consume only from a {} backlog, batches of 100 acked per batch, 4 consumers",
                thousands(ctx.backlog)
            ),
            Workload::ProduceConsume => {
                "produce and consume together: 4 producers (batches of 100), 4 consumers (batch 100, long poll)"
                    .into()
            }
            Workload::FixedRate => format!(
                "end-to-end latency at {} msg/s offered (single messages, open loop), 2 consumers",
                thousands(ctx.fixed_rate)
            ),
            Workload::ManyQueues => {
                "100 queues at once, one producer (batches of 100) and one consumer (batch 100) each".into()
            }
            Workload::PushDrain => format!(
                "push to a local HTTP function: drain a {} backlog",
                thousands(ctx.push_backlog)
            ),
            Workload::PushLatency => format!(
                "push to a local HTTP function: end-to-end latency at {} msg/s offered",
                thousands(ctx.push_rate)
            ),
        }
    }

    pub fn latency_kind(self) -> LatencyKind {
        match self {
            Workload::ProduceBatch => LatencyKind::PerBatchSend,
            Workload::ProduceSingle => LatencyKind::PerMessageSend,
            Workload::ConsumeBacklog => LatencyKind::PerBatchPullAck,
            Workload::PushDrain => LatencyKind::None,
            _ => LatencyKind::EndToEnd,
        }
    }

    /// Whether the workload reports messages produced besides consumed.
    pub fn has_produced_rate(self) -> bool {
        matches!(self, Workload::ProduceConsume | Workload::ManyQueues)
    }
}

pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What one run of a workload on one system measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The headline rate: produced for 1–2, consumed for 3, 4, 6, 7a,
    /// achieved (sent) for 5 and 7b.
    pub rate: f64,
    /// Messages produced per second where consumption is the headline.
    pub produced_rate: Option<f64>,
    pub latency: Option<Percentiles>,
    /// Server CPU microseconds per (headline) message.
    pub cpu_us_per_msg: Option<f64>,
    /// Something a reader should know about this run.
    pub note: Option<String>,
}

/// Settings shared by every run.
pub struct Ctx {
    pub duration: Duration,
    pub backlog: u64,
    pub push_backlog: u64,
    pub fixed_rate: u64,
    pub push_rate: u64,
    /// pgmq `read_with_poll` interval (ms) for consumers that wait.
    pub pg_poll_ms: u32,
    /// The same in workload 6, where 100 consumers poll at once.
    pub pg_poll_ms_many: u32,
    pub sink: Sink,
    /// Client the bridges post to the function with.
    pub http: reqwest::Client,
    /// Makes queue names unique to this invocation.
    pub tag: String,
}

/// The workload 3 queue of one system: filled once, topped up before each
/// repeat, deleted at the end.
pub struct Backlog {
    pub queue: Queue,
    pub depth: u64,
}

/// Runs one workload once on one system.
pub async fn run<B: Broker>(
    b: &B,
    w: Workload,
    ctx: &Ctx,
    repeat: usize,
    backlog: &mut Option<Backlog>,
) -> Result<Outcome> {
    let name = format!("w{}-r{repeat}-{}", w.key(), ctx.tag);
    let outcome = match w {
        Workload::ConsumeBacklog => consume_backlog(b, ctx, backlog).await,
        Workload::ManyQueues => many_queues(b, ctx, &name).await,
        _ => {
            let q = b.create_queue(&name).await?;
            let outcome = match w {
                Workload::ProduceBatch => closed_loop_produce(b, &q, 8, 100, ctx.duration).await,
                Workload::ProduceSingle => closed_loop_produce(b, &q, 64, 1, ctx.duration).await,
                Workload::ProduceConsume => produce_consume(b, &q, ctx).await,
                Workload::FixedRate => fixed_rate(b, &q, ctx).await,
                Workload::PushDrain => push_drain(b, &q, ctx).await,
                Workload::PushLatency => push_latency(b, &q, ctx).await,
                Workload::ConsumeBacklog | Workload::ManyQueues => unreachable!("handled above"),
            };
            if let Err(e) = b.delete_queue(&q).await {
                eprintln!("  could not delete queue {}: {e:#}", q.name);
            }
            outcome
        }
    };
    b.end_run().await;
    with_note(outcome, b.take_note())
}

fn with_note(outcome: Result<Outcome>, extra: Option<String>) -> Result<Outcome> {
    outcome.map(|mut o| {
        if let Some(extra) = extra {
            o.note = Some(match o.note.take() {
                Some(n) => format!("{n}; {extra}"),
                None => extra,
            });
        }
        o
    })
}

/// Workloads 1 and 2.
async fn closed_loop_produce<B: Broker>(
    b: &B,
    q: &Queue,
    producers: usize,
    per_send: usize,
    duration: Duration,
) -> Result<Outcome> {
    let ps = try_join_all((0..producers).map(|_| b.producer(q, Link::Own))).await?;
    let cpu = CpuMeter::start(&b.cpu_source());
    let w = Window::new(duration);
    let mut tasks = Tasks::new();
    for p in ps {
        spawn(&mut tasks, &w, produce(p, per_send, w.clone()));
    }
    let (tally, seconds, cpu_us) = measure(&mut tasks, &w, &cpu).await?;
    Ok(Outcome {
        rate: tally.produced as f64 / seconds,
        latency: percentiles(tally.send_latencies),
        cpu_us_per_msg: per_message(cpu_us, tally.produced),
        ..Outcome::default()
    })
}

/// Workload 3: the backlog queue lives across repeats; only the
/// consumption is measured.
async fn consume_backlog<B: Broker>(b: &B, ctx: &Ctx, backlog: &mut Option<Backlog>) -> Result<Outcome> {
    if backlog.is_none() {
        let queue = b.create_queue(&format!("w3-backlog-{}", ctx.tag)).await?;
        *backlog = Some(Backlog { queue, depth: 0 });
    }
    let Some(state) = backlog.as_mut() else {
        unreachable!("set above")
    };
    if state.depth < ctx.backlog {
        let missing = ctx.backlog - state.depth;
        let started = Instant::now();
        eprintln!("  filling the backlog with {} messages", thousands(missing));
        b.fill(&state.queue, missing)
            .await
            .context("filling the backlog")?;
        let _ = b.take_note(); // the fill's backpressure isn't the measured run's
        state.depth = ctx.backlog;
        eprintln!(
            "  filled in {:.1} s ({:.0} msg/s)",
            started.elapsed().as_secs_f64(),
            missing as f64 / started.elapsed().as_secs_f64()
        );
        // Let the server finish what the fill left behind (flushes,
        // checkpoints, index writes) before measuring.
        tokio::time::sleep(FILL_SETTLE).await;
    }
    let opts = consume_opts(ctx);
    let cs = try_join_all((0..4).map(|_| b.consumer(&state.queue, Link::Own, opts))).await?;
    let spec = ConsumeSpec {
        wait: Duration::ZERO,
        latency: Latency::PerBatch,
        drain: Some(Drain::new(state.depth)),
        after_deadline: false,
        received: None,
    };
    let cpu = CpuMeter::start(&b.cpu_source());
    let w = Window::new(ctx.duration);
    let mut tasks = Tasks::new();
    for c in cs {
        spawn(&mut tasks, &w, consume(c, spec.clone(), w.clone()));
    }
    let (tally, seconds, cpu_us) = measure(&mut tasks, &w, &cpu).await?;
    state.depth = state.depth.saturating_sub(tally.acked);
    let drained = seconds < ctx.duration.as_secs_f64() - 0.05;
    Ok(Outcome {
        rate: tally.consumed as f64 / seconds,
        latency: percentiles(tally.receive_latencies),
        cpu_us_per_msg: per_message(cpu_us, tally.consumed),
        note: drained.then(|| format!("backlog drained after {seconds:.1} s")),
        ..Outcome::default()
    })
}

/// Deletes the workload 3 queue at the end of the whole run.
pub async fn drop_backlog<B: Broker>(b: &B, backlog: Option<Backlog>) {
    if let Some(state) = backlog {
        if let Err(e) = b.delete_queue(&state.queue).await {
            eprintln!("could not delete {}'s backlog queue: {e:#}", b.name());
        }
    }
}

/// Consumer settings for everything but workload 6.
fn consume_opts(ctx: &Ctx) -> ConsumeOpts {
    ConsumeOpts {
        poll_interval_ms: ctx.pg_poll_ms,
        ..ConsumeOpts::default()
    }
}

fn e2e_consumer(received: Option<Arc<AtomicU64>>, after_deadline: bool) -> ConsumeSpec {
    ConsumeSpec {
        wait: LONG_POLL,
        latency: Latency::EndToEnd,
        drain: None,
        after_deadline,
        received,
    }
}

/// Runs producers (batches of 100) and consumers together for the window;
/// the rate is what was consumed, the latency end to end (W4 and W6).
async fn produce_and_consume<B: Broker>(
    b: &B,
    ps: Vec<B::Producer>,
    cs: Vec<B::Consumer>,
    ctx: &Ctx,
) -> Result<Outcome> {
    let cpu = CpuMeter::start(&b.cpu_source());
    let w = Window::new(ctx.duration);
    let mut tasks = Tasks::new();
    for c in cs {
        spawn(&mut tasks, &w, consume(c, e2e_consumer(None, false), w.clone()));
    }
    for p in ps {
        spawn(&mut tasks, &w, produce(p, 100, w.clone()));
    }
    let (tally, seconds, cpu_us) = measure(&mut tasks, &w, &cpu).await?;
    Ok(Outcome {
        rate: tally.consumed as f64 / seconds,
        produced_rate: Some(tally.produced as f64 / seconds),
        latency: percentiles(tally.receive_latencies),
        cpu_us_per_msg: per_message(cpu_us, tally.consumed),
        ..Outcome::default()
    })
}

/// Workload 4: one queue, 4 producers and 4 consumers, starting empty.
async fn produce_consume<B: Broker>(b: &B, q: &Queue, ctx: &Ctx) -> Result<Outcome> {
    let ps = try_join_all((0..4).map(|_| b.producer(q, Link::Own))).await?;
    let cs = try_join_all((0..4).map(|_| b.consumer(q, Link::Own, consume_opts(ctx)))).await?;
    produce_and_consume(b, ps, cs, ctx).await
}

/// Workload 5: fixed offered load, 2 consumers.
async fn fixed_rate<B: Broker>(b: &B, q: &Queue, ctx: &Ctx) -> Result<Outcome> {
    let cs = try_join_all((0..2).map(|_| b.consumer(q, Link::Own, consume_opts(ctx)))).await?;
    let ps = open_loop_senders(b, q).await?;
    let received = Arc::new(AtomicU64::new(0));
    let cpu = CpuMeter::start(&b.cpu_source());
    let w = Window::new(ctx.duration);
    let mut consumers = Tasks::new();
    for c in cs {
        spawn(
            &mut consumers,
            &w,
            consume(c, e2e_consumer(Some(received.clone()), true), w.clone()),
        );
    }
    let offered = offer_load(ps, ctx.fixed_rate, &w, &cpu, || received.load(Ordering::Relaxed)).await;
    w.stop();
    let tally = join(&mut consumers).await?;
    let (sent, cpu_us) = offered?;
    let seconds = ctx.duration.as_secs_f64();
    Ok(Outcome {
        rate: sent as f64 / seconds,
        latency: percentiles(tally.receive_latencies),
        cpu_us_per_msg: per_message(cpu_us, tally.consumed),
        note: shortfall_note(sent, tally.consumed, ctx.fixed_rate, seconds),
        ..Outcome::default()
    })
}

/// Workload 6: 100 queues, each with its own producer and consumer.
async fn many_queues<B: Broker>(b: &B, ctx: &Ctx, name: &str) -> Result<Outcome> {
    let mut queues = Vec::with_capacity(100);
    let mut result = Ok(Outcome::default());
    for i in 0..100 {
        match b.create_queue(&format!("{name}-q{i}")).await {
            Ok(q) => queues.push(q),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if result.is_ok() {
        result = many_queues_measure(b, &queues, ctx).await;
    }
    b.end_run().await;
    for q in &queues {
        if let Err(e) = b.delete_queue(q).await {
            eprintln!("  could not delete queue {}: {e:#}", q.name);
        }
    }
    result
}

async fn many_queues_measure<B: Broker>(b: &B, queues: &[Queue], ctx: &Ctx) -> Result<Outcome> {
    let link = |i: usize| Link::Shared {
        slot: i,
        of: MANY_QUEUES_CONNECTIONS,
    };
    let opts = ConsumeOpts {
        poll_interval_ms: ctx.pg_poll_ms_many,
        ..ConsumeOpts::default()
    };
    let ps = try_join_all(queues.iter().enumerate().map(|(i, q)| b.producer(q, link(i)))).await?;
    let cs = try_join_all(
        queues
            .iter()
            .enumerate()
            .map(|(i, q)| b.consumer(q, link(i), opts)),
    )
    .await?;
    produce_and_consume(b, ps, cs, ctx).await
}
