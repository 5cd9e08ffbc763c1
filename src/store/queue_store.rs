//! One redb database per queue.
//!
//! Layout (format version 1):
//! - `meta`:     `&str -> u64`   `format_version`, `next_seq` (high-water mark,
//!   so sequence numbers, and therefore lease ids, are never reused)
//! - `messages`: `u64 seq -> [u8; 42]` the `MessageRecord`
//! - `bodies`:   `u64 seq -> bytes` the body exactly as it will be delivered
//!
//! Keys are the arrival sequence, so inserts append at the right edge of the
//! B-tree.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::migrate::{queue_store_v2::IDENTITY, upgrade_queue_store};
use super::record::MessageRecord;
use super::{StoreError, QUEUE_CACHE_BYTES, QUEUE_FORMAT_VERSION as FORMAT_VERSION};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const MESSAGES: TableDefinition<u64, &[u8]> = TableDefinition::new("messages");
const BODIES: TableDefinition<u64, &[u8]> = TableDefinition::new("bodies");

const KEY_FORMAT: &str = "format_version";
const KEY_NEXT_SEQ: &str = "next_seq";

/// One change inside a group commit. Ops run in order, so a message inserted
/// earlier in the same commit can be read or updated later in it.
#[derive(Debug)]
pub enum StoreOp {
    Insert {
        seq: u64,
        record: MessageRecord,
        body: Vec<u8>,
    },
    Update {
        seq: u64,
        record: MessageRecord,
    },
    Delete {
        seq: u64,
    },
    /// Read a body; its result lands in `CommitOutcome::reads` in op order.
    Read {
        seq: u64,
    },
    DeleteAll,
}

#[derive(Debug)]
pub struct CommitOutcome {
    pub reads: Vec<Option<Vec<u8>>>,
    pub file_bytes: u64,
    pub duration: Duration,
}

/// What was on disk when the store was opened. Only part of a deep backlog
/// is read into memory: the first `resident_limit` never-delivered messages
/// in arrival order, plus every message that was ever delivered (it may hold
/// a lease a consumer will ack). The rest stays on disk, summarized in
/// `unloaded`, and is read in chunks (`read_records`) as consumers need it.
#[derive(Debug, Default)]
pub struct Recovered {
    pub records: Vec<(u64, MessageRecord)>,
    pub next_seq: u64,
    pub unloaded: UnloadedSummary,
    /// Delivered messages with `seq >= unloaded.from`: in `records`
    /// already, so a later chunk read must skip them.
    pub resident_above: Vec<u64>,
}

/// The part of the backlog left on disk at recovery: every message with
/// `seq >= from` that is not in `Recovered::records`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UnloadedSummary {
    pub from: u64,
    pub count: u64,
    pub bytes: u64,
    /// Publish time of the first of them (arrival order is publish order,
    /// barring wall-clock steps back).
    pub oldest_timestamp_ms: Option<u64>,
}

/// A chunk of records read back from disk, in seq order.
#[derive(Debug, Default)]
pub struct RecordChunk {
    pub records: Vec<(u64, MessageRecord)>,
    /// The first record after the chunk: its seq and publish time.
    pub next: Option<(u64, u64)>,
}

pub struct QueueStore {
    db: Database,
    path: PathBuf,
}

impl QueueStore {
    /// Opens (creating if needed) a queue's store, upgrading an older format,
    /// and reads back the records that belong in memory (see `Recovered`).
    pub fn open(
        path: &Path,
        queue_id: &str,
        resident_limit: usize,
    ) -> Result<(QueueStore, Recovered), StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let db = Database::builder()
            .set_cache_size(QUEUE_CACHE_BYTES)
            .create(path)
            .map_err(|source| StoreError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        let store = QueueStore {
            db,
            path: path.to_path_buf(),
        };
        store.ensure_format(queue_id)?;
        let recovered = store.load(resident_limit)?;
        Ok((store, recovered))
    }

    fn ensure_format(&self, queue_id: &str) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            let found = meta.get(KEY_FORMAT)?.map(|v| v.value());
            match found {
                None => {
                    meta.insert(KEY_FORMAT, FORMAT_VERSION)?;
                    txn.open_table(IDENTITY)?.insert("queue_id", queue_id)?;
                }
                Some(v) if v > FORMAT_VERSION => {
                    return Err(StoreError::TooNew {
                        path: self.path.clone(),
                        found: v,
                        supported: FORMAT_VERSION,
                    })
                }
                Some(v) if v < FORMAT_VERSION => {
                    upgrade_queue_store(&txn, v, FORMAT_VERSION, queue_id)?;
                    meta.insert(KEY_FORMAT, FORMAT_VERSION)?;
                    tracing::info!(path = %self.path.display(), from = v, to = FORMAT_VERSION, "upgraded queue store format");
                }
                Some(_) => {
                    let identity = txn.open_table(IDENTITY)?;
                    let found = identity.get("queue_id")?.map(|v| v.value().to_owned());
                    if let Some(found) = found.filter(|f| f != queue_id) {
                        return Err(StoreError::WrongQueue {
                            path: self.path.clone(),
                            found,
                            expected: queue_id.to_owned(),
                        });
                    }
                }
            }
            txn.open_table(MESSAGES)?;
            txn.open_table(BODIES)?;
        }
        txn.commit()?;
        Ok(())
    }

    /// The store's format version (for inspect).
    pub fn format_version(&self) -> u64 {
        FORMAT_VERSION
    }

    fn load(&self, resident_limit: usize) -> Result<Recovered, StoreError> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let mut next_seq = meta.get(KEY_NEXT_SEQ)?.map(|v| v.value()).unwrap_or(0);
        let messages = txn.open_table(MESSAGES)?;
        let total = messages.len()? as usize;
        let mut recovered = Recovered {
            records: Vec::with_capacity(total.min(resident_limit)),
            ..Recovered::default()
        };
        let unloaded = &mut recovered.unloaded;
        let mut fresh_resident = 0usize;
        for entry in messages.iter()? {
            let (key, value) = entry?;
            let seq = key.value();
            let record = decode(seq, value.value())?;
            next_seq = next_seq.max(seq + 1);
            let delivered = record.attempts > 0 || record.leased;
            if unloaded.count == 0 && (delivered || fresh_resident < resident_limit) {
                fresh_resident += usize::from(!delivered);
                recovered.records.push((seq, record));
            } else if delivered {
                recovered.resident_above.push(seq);
                recovered.records.push((seq, record));
            } else {
                if unloaded.count == 0 {
                    unloaded.from = seq;
                    unloaded.oldest_timestamp_ms = Some(record.timestamp_ms);
                }
                unloaded.count += 1;
                unloaded.bytes += u64::from(record.size);
            }
        }
        recovered.next_seq = next_seq;
        Ok(recovered)
    }

    /// Reads up to `limit` records with `seq >= from` from the last
    /// committed state, plus the seq and publish time of the one after.
    /// A read transaction: it runs beside a commit without waiting for it.
    pub fn read_records(&self, from: u64, limit: usize) -> Result<RecordChunk, StoreError> {
        let txn = self.db.begin_read()?;
        let messages = txn.open_table(MESSAGES)?;
        let mut chunk = RecordChunk {
            records: Vec::with_capacity(limit),
            next: None,
        };
        for entry in messages.range(from..)? {
            let (key, value) = entry?;
            let seq = key.value();
            let record = decode(seq, value.value())?;
            if chunk.records.len() == limit {
                chunk.next = Some((seq, record.timestamp_ms));
                break;
            }
            chunk.records.push((seq, record));
        }
        Ok(chunk)
    }

    /// Runs `ops` in one write transaction and waits for its fsync. Blocks:
    /// call it from a blocking thread, never from an actor.
    pub fn commit(&self, ops: Vec<StoreOp>, next_seq: u64) -> Result<CommitOutcome, StoreError> {
        let started = Instant::now();
        let mut reads = Vec::new();
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)
            .map_err(|e| StoreError::Io(std::io::Error::other(e.to_string())))?;
        {
            let mut messages = txn.open_table(MESSAGES)?;
            let mut bodies = txn.open_table(BODIES)?;
            let mut meta = txn.open_table(META)?;
            let mut inserted = false;
            for op in ops {
                match op {
                    StoreOp::Insert { seq, record, body } => {
                        messages.insert(seq, record.encode().as_slice())?;
                        bodies.insert(seq, body.as_slice())?;
                        inserted = true;
                    }
                    StoreOp::Update { seq, record } => {
                        messages.insert(seq, record.encode().as_slice())?;
                    }
                    StoreOp::Delete { seq } => {
                        messages.remove(seq)?;
                        bodies.remove(seq)?;
                    }
                    StoreOp::Read { seq } => {
                        reads.push(bodies.get(seq)?.map(|v| v.value().to_vec()));
                    }
                    StoreOp::DeleteAll => {
                        messages.retain(|_, _| false)?;
                        bodies.retain(|_, _| false)?;
                    }
                }
            }
            if inserted {
                meta.insert(KEY_NEXT_SEQ, next_seq)?;
            }
        }
        txn.commit()?;
        let file_bytes = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        Ok(CommitOutcome {
            reads,
            file_bytes,
            duration: started.elapsed(),
        })
    }

    /// Reads bodies from the last committed state (peek). Missing ones are None.
    pub fn read_bodies(&self, seqs: &[u64]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let txn = self.db.begin_read()?;
        let bodies = txn.open_table(BODIES)?;
        seqs.iter()
            .map(|seq| Ok(bodies.get(*seq)?.map(|v| v.value().to_vec())))
            .collect()
    }

    pub fn file_bytes(&self) -> u64 {
        std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }
}

fn decode(seq: u64, bytes: &[u8]) -> Result<MessageRecord, StoreError> {
    MessageRecord::decode(bytes).ok_or(StoreError::Corrupt {
        table: "messages",
        key: seq.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ContentType;

    fn record(id: u128) -> MessageRecord {
        MessageRecord {
            id,
            timestamp_ms: 1,
            visible_at_ms: 2,
            attempts: 0,
            size: 3,
            content_type: ContentType::Text,
            leased: false,
        }
    }

    #[test]
    fn ops_apply_in_order_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.redb");
        {
            let (store, rec) = QueueStore::open(&path, "q", usize::MAX).unwrap();
            assert!(rec.records.is_empty());
            let out = store
                .commit(
                    vec![
                        StoreOp::Insert {
                            seq: 0,
                            record: record(10),
                            body: b"a".to_vec(),
                        },
                        StoreOp::Insert {
                            seq: 1,
                            record: record(11),
                            body: b"b".to_vec(),
                        },
                        StoreOp::Read { seq: 1 },
                        StoreOp::Delete { seq: 0 },
                        StoreOp::Read { seq: 0 },
                    ],
                    2,
                )
                .unwrap();
            assert_eq!(out.reads, vec![Some(b"b".to_vec()), None]);
        }
        let (store, rec) = QueueStore::open(&path, "q", usize::MAX).unwrap();
        assert_eq!(rec.records, vec![(1, record(11))]);
        assert_eq!(rec.next_seq, 2);
        store.commit(vec![StoreOp::DeleteAll], 2).unwrap();
        drop(store);
        let (_, rec) = QueueStore::open(&path, "q", usize::MAX).unwrap();
        assert!(rec.records.is_empty());
        assert_eq!(rec.next_seq, 2, "the high-water mark survives a purge");
    }
}
