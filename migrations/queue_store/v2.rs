//! Queue store format 1 -> 2: record which queue the store belongs to.

use redb::{TableDefinition, WriteTransaction};

use crate::store::StoreError;

pub const IDENTITY: TableDefinition<&str, &str> = TableDefinition::new("identity");

pub fn upgrade(txn: &WriteTransaction, queue_id: &str) -> Result<(), StoreError> {
    let mut identity = txn.open_table(IDENTITY)?;
    identity.insert("queue_id", queue_id)?;
    Ok(())
}
