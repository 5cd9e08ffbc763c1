//! Persistence: the redb layout, the per-queue message store, the catalog and
//! recovery. Nothing here knows about HTTP or actors; every call here blocks
//! on disk and must run off an actor thread (see `broker::queue`).

pub mod catalog;
pub mod error;
pub mod migrate;
pub mod queue_store;
pub mod record;

pub use catalog::Catalog;
pub use error::StoreError;
pub use queue_store::{CommitOutcome, QueueStore, RecordChunk, Recovered, StoreOp, UnloadedSummary};
pub use record::{ContentType, MessageRecord};

/// On-disk format of queue stores. Bump it with a step in `migrations/`.
pub const QUEUE_FORMAT_VERSION: u64 = 2;

/// On-disk format of the catalog. Bump it with a step in `migrations/`.
pub const CATALOG_FORMAT_VERSION: u64 = 1;

/// Page cache for one queue database. redb's default is 1 GiB per database,
/// far too much when a server opens one file per queue.
pub const QUEUE_CACHE_BYTES: usize = 32 * 1024 * 1024;
