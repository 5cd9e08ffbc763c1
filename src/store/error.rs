use std::path::PathBuf;

/// Errors of the storage layer. The API maps them to HTTP codes in
/// `api::error`, and nowhere else.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open store {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: redb::DatabaseError,
    },
    #[error("store {path} has format version {found}; this server reads up to {supported}: upgrade Hopper")]
    TooNew {
        path: PathBuf,
        found: u64,
        supported: u64,
    },
    #[error("no migration step to format version {version}")]
    NoMigration { version: u64 },
    #[error("store {path} belongs to queue {found}, not {expected}: was it restored to the wrong place?")]
    WrongQueue {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("corrupt record in table {table} at key {key}")]
    Corrupt { table: &'static str, key: String },
    #[error("storage transaction failed: {0}")]
    Transaction(#[from] redb::TransactionError),
    #[error("storage table error: {0}")]
    Table(#[from] redb::TableError),
    #[error("storage error: {0}")]
    Storage(#[from] redb::StorageError),
    #[error("storage commit failed: {0}")]
    Commit(#[from] redb::CommitError),
    #[error("filesystem error: {0}")]
    Io(#[from] std::io::Error),
    #[error("catalog record is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("storage task stopped before finishing")]
    TaskAborted,
    #[error("store {path} is damaged: the storage engine failed while reading it ({detail}); restore it from a backup or move it aside")]
    Damaged { path: PathBuf, detail: String },
}

impl StoreError {
    /// Errors that retrying cannot fix: the file needs a person.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            StoreError::TooNew { .. }
                | StoreError::WrongQueue { .. }
                | StoreError::Damaged { .. }
                | StoreError::Corrupt { .. }
                | StoreError::NoMigration { .. }
                | StoreError::Open {
                    source: redb::DatabaseError::UpgradeRequired(_),
                    ..
                }
        ) || matches!(
            self,
            StoreError::Storage(redb::StorageError::Corrupted(_))
                | StoreError::Open {
                    source: redb::DatabaseError::Storage(redb::StorageError::Corrupted(_)),
                    ..
                }
        )
    }

    /// True when the underlying failure is a full disk, which the API reports
    /// as 507 rather than as an internal error.
    pub fn is_disk_full(&self) -> bool {
        let io = match self {
            StoreError::Io(e) => Some(e),
            StoreError::Storage(redb::StorageError::Io(e)) => Some(e),
            StoreError::Commit(redb::CommitError::Storage(redb::StorageError::Io(e))) => Some(e),
            _ => None,
        };
        io.and_then(|e| e.raw_os_error()) == Some(28) // ENOSPC
    }
}
