//! Persistence: the redb layout, the per-queue message store, the catalog and
//! recovery. Nothing here knows about HTTP or actors; every call here blocks
//! on disk and must run off an actor thread (see `broker::queue`).

pub mod catalog;
pub mod error;
pub mod queue_store;
pub mod record;

pub use catalog::Catalog;
pub use error::StoreError;
pub use queue_store::{CommitOutcome, QueueStore, Recovered, StoreOp};
pub use record::{ContentType, MessageRecord};

/// On-disk format version written into every store (catalog and queue
/// stores). Bump it with a migration step in `migrations/`.
pub const FORMAT_VERSION: u64 = 1;

/// Page cache for one queue database. redb's default is 1 GiB per database,
/// far too much when a server opens one file per queue.
pub const QUEUE_CACHE_BYTES: usize = 32 * 1024 * 1024;
