//! The systems under test behind one interface, so each workload is written
//! once and every system runs exactly the same steps.

pub mod hopper;
pub mod pgmq;
pub mod rabbit;

use std::future::Future;
use std::time::Duration;

use anyhow::Result;

use crate::cpu::CpuSource;

/// A queue created for one run.
#[derive(Clone, Debug)]
pub struct Queue {
    /// The name the queue was created with.
    pub name: String,
    /// What the system addresses it by (Hopper's queue id; the name elsewhere).
    pub id: String,
}

/// How a producer or consumer reaches the server.
#[derive(Clone, Copy, Debug)]
pub enum Link {
    /// A connection of its own.
    Own,
    /// A channel on one of `of` connections shared within the run
    /// (RabbitMQ; systems without channels open their own connection).
    Shared { slot: usize, of: usize },
}

/// How a consumer takes messages.
#[derive(Clone, Copy, Debug)]
pub struct ConsumeOpts {
    /// Most messages one receive returns.
    pub batch: usize,
    /// RabbitMQ: unacked deliveries in flight per consumer.
    pub prefetch: u16,
    /// pgmq: how often `read_with_poll` looks again while a queue is empty.
    pub poll_interval_ms: u32,
}

impl Default for ConsumeOpts {
    fn default() -> Self {
        ConsumeOpts {
            batch: 100,
            prefetch: 200,
            poll_interval_ms: 1,
        }
    }
}

/// A message system under test.
pub trait Broker: Send + Sync + 'static {
    type Producer: Producer;
    type Consumer: Consumer;

    /// Name used in tables and progress lines.
    fn name(&self) -> &'static str;

    /// The server processes whose CPU time is charged to this system.
    fn cpu_source(&self) -> CpuSource;

    /// Creates a fresh durable queue. `name` is lowercase letters, digits
    /// and dashes; each system adapts it to its own naming rules.
    fn create_queue(&self, name: &str) -> impl Future<Output = Result<Queue>> + Send;

    fn delete_queue(&self, queue: &Queue) -> impl Future<Output = Result<()>> + Send;

    fn producer(&self, queue: &Queue, link: Link) -> impl Future<Output = Result<Self::Producer>> + Send;

    fn consumer(
        &self,
        queue: &Queue,
        link: Link,
        opts: ConsumeOpts,
    ) -> impl Future<Output = Result<Self::Consumer>> + Send;

    /// Adds `count` messages as fast as the system allows. Used only to
    /// prepare backlogs whose consumption is what gets measured, so each
    /// system may use its fastest path.
    fn fill(&self, queue: &Queue, count: u64) -> impl Future<Output = Result<()>> + Send;

    /// Whether the server itself can push a queue's messages to an HTTP
    /// function; without it, bridges consume and post them.
    fn has_push(&self) -> bool {
        false
    }

    /// Has the server push the queue's messages to `url` from now on.
    fn attach_push(&self, _queue: &Queue, _url: &str) -> impl Future<Output = Result<()>> + Send {
        async { anyhow::bail!("{} has no push delivery", self.name()) }
    }

    /// Something worth reporting about the run that just ended (e.g. how
    /// often the server pushed back); resets the count.
    fn take_note(&self) -> Option<String> {
        None
    }

    /// Releases what a run shared (RabbitMQ's pooled connections).
    fn end_run(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

pub trait Producer: Send + Sync + 'static {
    /// Sends `count` copies of the document stamped `t` (µs since the
    /// epoch) and returns once the system has made all of them durable.
    /// Takes `&self` so an open-loop sender can have several sends in
    /// flight on one connection (pipelined) instead of waiting its turn.
    fn send(&self, t: u64, count: usize) -> impl Future<Output = Result<()>> + Send;

    fn close(self) -> impl Future<Output = ()> + Send;
}

pub trait Consumer: Send + 'static {
    /// Takes up to the batch size of messages, waiting at most `wait` for
    /// the first; an empty result means none came. Returns the bodies.
    fn receive(&mut self, wait: Duration) -> impl Future<Output = Result<Vec<Vec<u8>>>> + Send;

    /// Acknowledges (deletes) everything the last `receive` returned.
    fn ack(&mut self) -> impl Future<Output = Result<()>> + Send;

    fn close(self) -> impl Future<Output = ()> + Send;
}
