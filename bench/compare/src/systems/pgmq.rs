//! pgmq (message queues as PostgreSQL tables) over tokio-postgres, with
//! synchronous_commit=on so a committed send is fsynced.

use std::error::Error as StdError;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::{BufMut, BytesMut};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};
use tokio_postgres::{Client, NoTls, Statement};

use super::{Broker, ConsumeOpts, Consumer, Link, Producer, Queue};
use crate::cpu::CpuSource;
use crate::payload;

/// Visibility timeout (seconds) of a read: far longer than any batch takes.
const VT_SECONDS: i32 = 60;
/// Rows per INSERT while filling a backlog.
const FILL_CHUNK: u64 = 100_000;

/// JSON text passed to or read from a `json`/`jsonb` value as is, so the
/// load generator never builds or walks a `serde_json::Value`.
#[derive(Debug)]
struct RawJson<'a>(&'a [u8]);

impl ToSql for RawJson<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        if *ty == Type::JSONB {
            out.put_u8(1); // jsonb binary format version
        }
        out.extend_from_slice(self.0);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }

    tokio_postgres::types::to_sql_checked!();
}

struct JsonText(Vec<u8>);

impl<'a> FromSql<'a> for JsonText {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        let text = if *ty == Type::JSONB {
            raw.get(1..).unwrap_or_default()
        } else {
            raw
        };
        Ok(JsonText(text.to_vec()))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }
}

pub struct Pgmq {
    conninfo: String,
    control: Client,
}

async fn connect(conninfo: &str) -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .with_context(|| format!("connecting to PostgreSQL ({conninfo})"))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("postgres connection: {e}");
        }
    });
    Ok(client)
}

impl Pgmq {
    pub async fn connect(conninfo: &str) -> Result<Pgmq> {
        let control = connect(conninfo).await?;
        control
            .query_one("SELECT 'pgmq.read'::regproc", &[])
            .await
            .context("pgmq is not installed in this database (run bench/peers/peers.sh start)")?;
        Ok(Pgmq {
            conninfo: conninfo.to_owned(),
            control,
        })
    }
}

/// pgmq names become table names (`pgmq.q_<name>`), so dashes become
/// underscores.
fn table_safe(name: &str) -> String {
    name.replace('-', "_")
}

impl Broker for Pgmq {
    type Producer = PgmqProducer;
    type Consumer = PgmqConsumer;

    fn name(&self) -> &'static str {
        "pgmq"
    }

    fn cpu_source(&self) -> CpuSource {
        CpuSource::Comm("postgres")
    }

    async fn create_queue(&self, name: &str) -> Result<Queue> {
        let id = table_safe(name);
        self.control.execute("SELECT pgmq.create($1)", &[&id]).await?;
        Ok(Queue {
            name: name.to_owned(),
            id,
        })
    }

    async fn delete_queue(&self, queue: &Queue) -> Result<()> {
        self.control
            .execute("SELECT pgmq.drop_queue($1)", &[&queue.id])
            .await?;
        Ok(())
    }

    async fn producer(&self, queue: &Queue, _link: Link) -> Result<PgmqProducer> {
        // Every producer is a connection (a backend process) of its own.
        let client = connect(&self.conninfo).await?;
        let one = client.prepare("SELECT * FROM pgmq.send($1, $2::jsonb)").await?;
        let batch = client
            .prepare("SELECT * FROM pgmq.send_batch($1, $2::jsonb[])")
            .await?;
        Ok(PgmqProducer {
            client,
            one,
            batch,
            queue: queue.id.clone(),
        })
    }

    async fn consumer(&self, queue: &Queue, _link: Link, opts: ConsumeOpts) -> Result<PgmqConsumer> {
        let client = connect(&self.conninfo).await?;
        let read = client
            .prepare("SELECT msg_id, message FROM pgmq.read($1, $2, $3)")
            .await?;
        let poll = client
            .prepare("SELECT msg_id, message FROM pgmq.read_with_poll($1, $2, $3, $4, $5)")
            .await?;
        let delete = client
            .prepare("SELECT * FROM pgmq.delete($1, $2::bigint[])")
            .await?;
        Ok(PgmqConsumer {
            client,
            read,
            poll,
            delete,
            queue: queue.id.clone(),
            opts,
            ids: Vec::new(),
        })
    }

    async fn fill(&self, queue: &Queue, count: u64) -> Result<()> {
        // Server-side: only the consumption of this backlog is measured.
        let doc = payload::doc(payload::now_us());
        let sql = format!(
            "INSERT INTO pgmq.q_{} (vt, message) \
             SELECT clock_timestamp(), $1::jsonb FROM generate_series(1, $2::int)",
            queue.id
        );
        let mut left = count;
        while left > 0 {
            let n = left.min(FILL_CHUNK);
            self.control.execute(&sql, &[&RawJson(&doc), &(n as i32)]).await?;
            left -= n;
        }
        // What autovacuum would soon do: fresh statistics for the planner.
        self.control
            .batch_execute(&format!("ANALYZE pgmq.q_{}", queue.id))
            .await?;
        Ok(())
    }
}

pub struct PgmqProducer {
    client: Client,
    one: Statement,
    batch: Statement,
    queue: String,
}

impl Producer for PgmqProducer {
    async fn send(&self, t: u64, count: usize) -> Result<()> {
        let doc = payload::doc(t);
        if count == 1 {
            self.client
                .query(&self.one, &[&self.queue, &RawJson(&doc)])
                .await?;
        } else {
            let docs: Vec<RawJson> = (0..count).map(|_| RawJson(&doc)).collect();
            self.client.query(&self.batch, &[&self.queue, &docs]).await?;
        }
        Ok(())
    }

    async fn close(self) {}
}

pub struct PgmqConsumer {
    client: Client,
    read: Statement,
    poll: Statement,
    delete: Statement,
    queue: String,
    opts: ConsumeOpts,
    /// Messages received and not yet deleted.
    ids: Vec<i64>,
}

impl Consumer for PgmqConsumer {
    async fn receive(&mut self, wait: Duration) -> Result<Vec<Vec<u8>>> {
        let qty = self.opts.batch as i32;
        let rows = if wait.is_zero() {
            self.client
                .query(&self.read, &[&self.queue, &VT_SECONDS, &qty])
                .await?
        } else {
            // read_with_poll waits in whole seconds.
            let seconds = wait.as_secs_f64().ceil().max(1.0) as i32;
            let interval = self.opts.poll_interval_ms as i32;
            self.client
                .query(&self.poll, &[&self.queue, &VT_SECONDS, &qty, &seconds, &interval])
                .await?
        };
        self.ids.clear();
        let mut bodies = Vec::with_capacity(rows.len());
        for row in rows {
            self.ids.push(row.try_get(0)?);
            let JsonText(body) = row.try_get(1)?;
            bodies.push(body);
        }
        Ok(bodies)
    }

    async fn ack(&mut self) -> Result<()> {
        if !self.ids.is_empty() {
            self.client.query(&self.delete, &[&self.queue, &self.ids]).await?;
            self.ids.clear();
        }
        Ok(())
    }

    async fn close(self) {}
}

impl Pgmq {
    /// The server's version string, for the report.
    pub async fn server_version(&self) -> Option<String> {
        let row = self.control.query_one("SHOW server_version", &[]).await.ok()?;
        row.try_get(0).ok()
    }
}
