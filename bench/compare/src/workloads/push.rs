//! Workload 7: delivery to an HTTP function. Hopper pushes by itself;
//! for RabbitMQ and pgmq, bridge tasks consume and post.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::future::try_join_all;

use super::harness::{
    join, offer_load, open_loop_senders, per_message, shortfall_note, spawn, Tally, Tasks, Window, LONG_POLL,
};
use super::{consume_opts, thousands, Ctx, Outcome, FILL_SETTLE};
use crate::cpu::CpuMeter;
use crate::sink;
use crate::stats::percentiles;
use crate::systems::{Broker, Consumer, Link, Queue};

/// Bridge tasks for systems without push: what a user would write to feed
/// an HTTP function from RabbitMQ or pgmq.
const BRIDGES: usize = 4;

/// Receives a batch, posts it to the function in Hopper's push shape, and
/// acks it once the function answered 200.
async fn bridge<C: Consumer>(
    mut c: C,
    index: usize,
    http: reqwest::Client,
    url: String,
    queue: String,
    w: Arc<Window>,
) -> Result<Tally> {
    let mut tally = Tally::default();
    let result = async {
        let mut batch = 0u64;
        while !w.stopped() {
            let bodies = c.receive(LONG_POLL).await?;
            if bodies.is_empty() {
                continue;
            }
            batch += 1;
            let body = sink::push_body(&queue, (index as u64) << 40 | batch, &bodies)?;
            let resp = http
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .context("posting to the function")?;
            if !resp.status().is_success() {
                bail!("function answered {}", resp.status());
            }
            c.ack().await?;
            tally.acked += bodies.len() as u64;
        }
        anyhow::Ok(())
    }
    .await;
    c.close().await;
    result.map(|()| tally)
}

/// Consumers for the bridges, or none when the server pushes by itself.
async fn bridge_consumers<B: Broker>(b: &B, q: &Queue, ctx: &Ctx) -> Result<Vec<B::Consumer>> {
    if b.has_push() {
        return Ok(Vec::new());
    }
    try_join_all((0..BRIDGES).map(|_| b.consumer(q, Link::Own, consume_opts(ctx)))).await
}

/// Starts delivery to the function: the server's own push, or the bridges.
async fn start_push<B: Broker>(
    b: &B,
    q: &Queue,
    ctx: &Ctx,
    url: &str,
    consumers: Vec<B::Consumer>,
    w: &Arc<Window>,
) -> Result<Tasks> {
    let mut bridges = Tasks::new();
    if b.has_push() {
        b.attach_push(q, url).await?;
    }
    for (i, c) in consumers.into_iter().enumerate() {
        let task = bridge(c, i, ctx.http.clone(), url.to_owned(), q.name.clone(), w.clone());
        spawn(&mut bridges, w, task);
    }
    Ok(bridges)
}

/// Workload 7a: deliver a backlog to the function as fast as possible.
pub(super) async fn push_drain<B: Broker>(b: &B, q: &Queue, ctx: &Ctx) -> Result<Outcome> {
    let url = ctx.sink.begin(&q.name);
    b.fill(q, ctx.push_backlog).await.context("filling the backlog")?;
    let _ = b.take_note(); // the fill's backpressure isn't the measured run's
    tokio::time::sleep(FILL_SETTLE).await;
    let consumers = bridge_consumers(b, q, ctx).await?;
    // The drain can take far longer than --duration on a slow system.
    let limit = Duration::from_secs(300).max(ctx.duration * 10);
    let cpu = CpuMeter::start(&b.cpu_source());
    let w = Window::new(limit);
    let mut bridges = start_push(b, q, ctx, &url, consumers, &w).await?;
    while ctx.sink.received() < ctx.push_backlog && w.open() && !w.stopped() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = w.start.elapsed().as_secs_f64();
    let cpu_us = cpu.used_us();
    let delivered = ctx.sink.received();
    w.stop();
    join(&mut bridges).await?;
    if delivered < ctx.push_backlog {
        bail!(
            "delivered {} of {} in {seconds:.0} s",
            thousands(delivered),
            thousands(ctx.push_backlog)
        );
    }
    Ok(Outcome {
        rate: delivered as f64 / seconds,
        cpu_us_per_msg: per_message(cpu_us, delivered),
        ..Outcome::default()
    })
}

/// Workload 7b: latency to the function at a fixed offered load.
pub(super) async fn push_latency<B: Broker>(b: &B, q: &Queue, ctx: &Ctx) -> Result<Outcome> {
    let url = ctx.sink.begin(&q.name);
    let consumers = bridge_consumers(b, q, ctx).await?;
    let ps = open_loop_senders(b, q).await?;
    let cpu = CpuMeter::start(&b.cpu_source());
    let w = Window::new(ctx.duration);
    let mut bridges = start_push(b, q, ctx, &url, consumers, &w).await?;
    let offered = offer_load(ps, ctx.push_rate, &w, &cpu, || ctx.sink.received()).await;
    w.stop();
    join(&mut bridges).await?;
    let (sent, cpu_us) = offered?;
    let delivered = ctx.sink.received();
    let seconds = ctx.duration.as_secs_f64();
    Ok(Outcome {
        rate: sent as f64 / seconds,
        latency: percentiles(ctx.sink.take_latencies()),
        cpu_us_per_msg: per_message(cpu_us, delivered),
        note: shortfall_note(sent, delivered, ctx.push_rate, seconds),
        ..Outcome::default()
    })
}
