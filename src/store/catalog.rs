//! The catalog: one redb database for everything that is not a message:
//! queues (with their consumer), functions, tokens and server secrets.
//! Records are JSON; they are small and change rarely.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{de::DeserializeOwned, Serialize};

use super::{StoreError, CATALOG_FORMAT_VERSION as FORMAT_VERSION};

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// The catalog's record tables.
#[derive(Clone, Copy, Debug)]
pub enum CatalogTable {
    Queues,
    Functions,
    Tokens,
}

impl CatalogTable {
    fn definition(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        match self {
            CatalogTable::Queues => TableDefinition::new("queues"),
            CatalogTable::Functions => TableDefinition::new("functions"),
            CatalogTable::Tokens => TableDefinition::new("tokens"),
        }
    }

    const ALL: [CatalogTable; 3] = [
        CatalogTable::Queues,
        CatalogTable::Functions,
        CatalogTable::Tokens,
    ];
}

pub struct Catalog {
    db: Database,
    path: PathBuf,
}

impl Catalog {
    pub fn open(data_dir: &Path) -> Result<Catalog, StoreError> {
        std::fs::create_dir_all(data_dir)?;
        let path = data_dir.join("catalog.redb");
        let db = Database::builder()
            .set_cache_size(16 * 1024 * 1024)
            .create(&path)
            .map_err(|source| StoreError::Open {
                path: path.clone(),
                source,
            })?;
        let catalog = Catalog { db, path };
        catalog.ensure_format()?;
        Ok(catalog)
    }

    fn ensure_format(&self) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            let found = meta
                .get("format_version")?
                .and_then(|v| v.value().try_into().ok().map(u64::from_be_bytes));
            match found {
                None => {
                    meta.insert("format_version", FORMAT_VERSION.to_be_bytes().as_slice())?;
                }
                Some(v) if v > FORMAT_VERSION => {
                    return Err(StoreError::TooNew {
                        path: self.path.clone(),
                        found: v,
                        supported: FORMAT_VERSION,
                    })
                }
                Some(_) => {}
            }
            for table in CatalogTable::ALL {
                txn.open_table(table.definition())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// A server-wide secret, created on first use (lease id signing key).
    pub fn secret(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let txn = self.db.begin_write()?;
        let value = {
            let mut meta = txn.open_table(META)?;
            let existing = meta.get(name)?.map(|v| v.value().to_vec());
            match existing {
                Some(v) => v,
                None => {
                    let mut fresh = vec![0u8; 32];
                    getrandom::getrandom(&mut fresh)
                        .map_err(|e| StoreError::Io(std::io::Error::other(e.to_string())))?;
                    meta.insert(name, fresh.as_slice())?;
                    fresh
                }
            }
        };
        txn.commit()?;
        Ok(value)
    }

    pub fn load_all<T: DeserializeOwned>(&self, table: CatalogTable) -> Result<Vec<T>, StoreError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(table.definition())?;
        let mut out = Vec::new();
        for entry in t.iter()? {
            let (_, value) = entry?;
            out.push(serde_json::from_slice(value.value())?);
        }
        Ok(out)
    }

    /// Writes and deletes records in one durable transaction.
    pub fn apply(&self, changes: &[CatalogChange]) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        for change in changes {
            match change {
                CatalogChange::Put { table, key, json } => {
                    txn.open_table(table.definition())?
                        .insert(key.as_str(), json.as_slice())?;
                }
                CatalogChange::Delete { table, key } => {
                    txn.open_table(table.definition())?.remove(key.as_str())?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    }
}

/// One change to the catalog, applied with others in `Catalog::apply`.
#[derive(Debug, Clone)]
pub enum CatalogChange {
    Put {
        table: CatalogTable,
        key: String,
        json: Vec<u8>,
    },
    Delete {
        table: CatalogTable,
        key: String,
    },
}

impl CatalogChange {
    pub fn put(table: CatalogTable, key: impl Into<String>, value: &impl Serialize) -> Self {
        CatalogChange::Put {
            table,
            key: key.into(),
            // Serializing plain records cannot fail.
            json: serde_json::to_vec(value).unwrap_or_default(),
        }
    }

    pub fn delete(table: CatalogTable, key: impl Into<String>) -> Self {
        CatalogChange::Delete {
            table,
            key: key.into(),
        }
    }
}
