//! RabbitMQ over AMQP 0-9-1 (lapin on tokio): durable classic queues,
//! persistent messages, publisher confirms and manual acks.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::publisher_confirm::PublisherConfirm;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;

use super::{Broker, ConsumeOpts, Consumer, Link, Producer, Queue};
use crate::cpu::CpuSource;
use crate::payload;

/// Publishes in flight per channel while filling a backlog.
const FILL_WINDOW: usize = 2000;
/// Channels publishing at once while filling a backlog.
const FILL_CHANNELS: usize = 8;
/// A push consumer has no "is the queue empty right now?": when asked not
/// to wait, give deliveries this long to arrive before calling it empty.
const MIN_WAIT: Duration = Duration::from_millis(200);

pub struct Rabbit {
    url: String,
    /// Declares and deletes queues.
    control: Channel,
    _control_conn: Connection,
    /// Connections shared by `Link::Shared` producers and consumers of a run.
    pool: Mutex<Vec<Connection>>,
}

async fn connect(url: &str) -> Result<Connection> {
    let props = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio);
    Connection::connect(url, props)
        .await
        .with_context(|| format!("connecting to RabbitMQ at {url}"))
}

fn persistent() -> BasicProperties {
    // delivery_mode 2: written to disk before the confirm on a durable queue.
    BasicProperties::default().with_delivery_mode(2)
}

/// Where a producer's or consumer's channel lives.
enum Conn {
    Own(Connection),
    Shared,
}

impl Rabbit {
    pub async fn connect(url: &str) -> Result<Rabbit> {
        let conn = connect(url).await?;
        let control = conn.create_channel().await?;
        Ok(Rabbit {
            url: url.to_owned(),
            control,
            _control_conn: conn,
            pool: Mutex::new(Vec::new()),
        })
    }

    /// Opens a channel on its own connection or on a pooled one.
    async fn channel(&self, link: Link) -> Result<(Channel, Conn)> {
        match link {
            Link::Own => {
                let conn = connect(&self.url).await?;
                Ok((conn.create_channel().await?, Conn::Own(conn)))
            }
            Link::Shared { slot, of } => {
                let mut pool = self.pool.lock().await;
                while pool.len() < of.max(1) {
                    pool.push(connect(&self.url).await?);
                }
                let conn = &pool[slot % pool.len()];
                Ok((conn.create_channel().await?, Conn::Shared))
            }
        }
    }
}

async fn close(channel: &Channel, conn: Conn) {
    let _ = channel.close(200, "done").await;
    if let Conn::Own(conn) = conn {
        let _ = conn.close(200, "done").await;
    }
}

async fn await_confirms(confirms: Vec<PublisherConfirm>) -> Result<()> {
    for confirm in confirms {
        if !confirm.await?.is_ack() {
            bail!("RabbitMQ nacked a publish");
        }
    }
    Ok(())
}

impl Broker for Rabbit {
    type Producer = RabbitProducer;
    type Consumer = RabbitConsumer;

    fn name(&self) -> &'static str {
        "RabbitMQ"
    }

    fn cpu_source(&self) -> CpuSource {
        CpuSource::Comm("beam.smp")
    }

    async fn create_queue(&self, name: &str) -> Result<Queue> {
        let options = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        self.control
            .queue_declare(name, options, FieldTable::default())
            .await?;
        Ok(Queue {
            name: name.to_owned(),
            id: name.to_owned(),
        })
    }

    async fn delete_queue(&self, queue: &Queue) -> Result<()> {
        self.control
            .queue_delete(&queue.id, QueueDeleteOptions::default())
            .await?;
        Ok(())
    }

    async fn producer(&self, queue: &Queue, link: Link) -> Result<RabbitProducer> {
        let (channel, conn) = self.channel(link).await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(RabbitProducer {
            channel,
            conn,
            queue: queue.id.clone(),
        })
    }

    async fn consumer(&self, queue: &Queue, link: Link, opts: ConsumeOpts) -> Result<RabbitConsumer> {
        let (channel, conn) = self.channel(link).await?;
        channel
            .basic_qos(opts.prefetch, BasicQosOptions::default())
            .await?;
        let stream = channel
            .basic_consume(
                &queue.id,
                &format!("c-{}", uuid::Uuid::new_v4().simple()),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(RabbitConsumer {
            channel,
            conn,
            stream,
            batch: opts.batch,
            last_tag: None,
        })
    }

    async fn fill(&self, queue: &Queue, count: u64) -> Result<()> {
        // Pipelined: a window of publishes in flight per channel, confirms
        // awaited per window, a few channels at once.
        let conn = connect(&self.url).await?;
        let doc = payload::doc(payload::now_us());
        let per_channel = count.div_ceil(FILL_CHANNELS as u64);
        let mut tasks = tokio::task::JoinSet::new();
        let mut left = count;
        for _ in 0..FILL_CHANNELS {
            let mine = per_channel.min(left);
            left -= mine;
            let channel = conn.create_channel().await?;
            channel.confirm_select(ConfirmSelectOptions::default()).await?;
            let (queue, doc) = (queue.id.clone(), doc.clone());
            tasks.spawn(async move {
                let mut sent = 0u64;
                while sent < mine {
                    let window = (mine - sent).min(FILL_WINDOW as u64) as usize;
                    let mut confirms = Vec::with_capacity(window);
                    for _ in 0..window {
                        confirms.push(
                            channel
                                .basic_publish("", &queue, BasicPublishOptions::default(), &doc, persistent())
                                .await?,
                        );
                    }
                    await_confirms(confirms).await?;
                    sent += window as u64;
                }
                let _ = channel.close(200, "done").await;
                anyhow::Ok(())
            });
        }
        let mut result = Ok(());
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done.map_err(anyhow::Error::from).and_then(|r| r) {
                result = Err(e);
            }
        }
        let _ = conn.close(200, "done").await;
        result
    }

    async fn end_run(&self) {
        let conns: Vec<Connection> = std::mem::take(&mut *self.pool.lock().await);
        for conn in conns {
            let _ = conn.close(200, "done").await;
        }
    }
}

pub struct RabbitProducer {
    channel: Channel,
    conn: Conn,
    queue: String,
}

impl Producer for RabbitProducer {
    async fn send(&self, t: u64, count: usize) -> Result<()> {
        // Publish the whole batch, then wait for every confirm: a confirm
        // for a persistent message on a durable queue comes after fsync.
        let doc = payload::doc(t);
        let mut confirms = Vec::with_capacity(count);
        for _ in 0..count {
            confirms.push(
                self.channel
                    .basic_publish(
                        "",
                        &self.queue,
                        BasicPublishOptions::default(),
                        &doc,
                        persistent(),
                    )
                    .await?,
            );
        }
        await_confirms(confirms).await
    }

    async fn close(self) {
        close(&self.channel, self.conn).await;
    }
}

pub struct RabbitConsumer {
    channel: Channel,
    conn: Conn,
    stream: lapin::Consumer,
    batch: usize,
    /// Delivery tag of the last message received and not yet acked.
    last_tag: Option<u64>,
}

impl Consumer for RabbitConsumer {
    async fn receive(&mut self, wait: Duration) -> Result<Vec<Vec<u8>>> {
        // Wait for the first delivery, then take whatever else has already
        // arrived (up to the batch size) without waiting for more.
        let first = match tokio::time::timeout(wait.max(MIN_WAIT), self.stream.next()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(None) => bail!("RabbitMQ cancelled the consumer"),
            Ok(Some(delivery)) => delivery?,
        };
        let mut bodies = Vec::with_capacity(self.batch);
        self.last_tag = Some(first.delivery_tag);
        bodies.push(first.data);
        while bodies.len() < self.batch {
            match self.stream.next().now_or_never() {
                Some(Some(delivery)) => {
                    let delivery = delivery?;
                    self.last_tag = Some(delivery.delivery_tag);
                    bodies.push(delivery.data);
                }
                Some(None) | None => break,
            }
        }
        Ok(bodies)
    }

    async fn ack(&mut self) -> Result<()> {
        if let Some(tag) = self.last_tag.take() {
            self.channel
                .basic_ack(tag, BasicAckOptions { multiple: true })
                .await?;
        }
        Ok(())
    }

    async fn close(self) {
        // Unacked deliveries go back to the queue when the channel closes.
        close(&self.channel, self.conn).await;
    }
}
