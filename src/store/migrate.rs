//! Runs the upgrade steps in `migrations/` (compiled in from there).

use redb::WriteTransaction;

use super::StoreError;

#[path = "../../migrations/queue_store/v2.rs"]
pub mod queue_store_v2;

/// Upgrades a queue store from `from` to `to`, one version at a time.
pub fn upgrade_queue_store(
    txn: &WriteTransaction,
    from: u64,
    to: u64,
    queue_id: &str,
) -> Result<(), StoreError> {
    for version in from + 1..=to {
        match version {
            2 => queue_store_v2::upgrade(txn, queue_id)?,
            _ => {
                return Err(StoreError::NoMigration { version });
            }
        }
    }
    Ok(())
}
