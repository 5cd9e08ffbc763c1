//! The registry: owner of the catalog, creator and finder of queue actors.
//!
//! Lookups (the hot path: every message request) read a shared index under
//! a read lock and never touch an actor. Changes (create, update, delete of
//! queues, consumers, functions) go through the registry actor one at a
//! time (`AtomicResponse`), write the catalog on the blocking pool, then
//! update the index and tell the queue actors.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use actix::prelude::*;
use serde_json::Value;

use super::lease::LeaseSigner;
use super::model::{
    iso_now, new_id, valid_queue_name, ConsumerRecord, ConsumerSettings, ConsumerSpec, FunctionRecord,
    QueueRecord, QueueSettings, TokenRecord,
};
use super::queue::{Configure, Drain, QueueActor, QueueConfig, QueueHandle, QueueLimits, Stop};
use super::BrokerError;
use crate::store::catalog::{CatalogChange, CatalogTable};
use crate::store::{Catalog, StoreError};

pub struct QueueEntry {
    pub record: QueueRecord,
    pub handle: QueueHandle,
}

/// The shared, read-mostly view of the catalog.
#[derive(Default)]
pub struct Index {
    pub queues: HashMap<String, QueueEntry>,
    names: HashMap<(String, String), String>,
    pub functions: HashMap<(String, String), FunctionRecord>,
    pub tokens: HashMap<String, TokenRecord>,
    /// token id -> last use (ms), not yet written to the catalog.
    pub token_use: HashMap<String, u64>,
}

impl Index {
    fn queue_by_name(&self, account: &str, name: &str) -> Option<&QueueEntry> {
        self.names
            .get(&(account.to_owned(), name.to_owned()))
            .and_then(|id| self.queues.get(id))
    }
}

/// What the HTTP front holds: the index for lookups, the actor for changes.
#[derive(Clone)]
pub struct RegistryHandle {
    pub addr: Addr<Registry>,
    pub index: Arc<RwLock<Index>>,
}

impl RegistryHandle {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        // A poisoned lock only means a panic elsewhere; the data is plain.
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The queue and its actor, if it exists in this account.
    pub fn queue(&self, account: &str, queue_id: &str) -> Result<(QueueRecord, QueueHandle), BrokerError> {
        let index = self.read();
        match index.queues.get(queue_id) {
            Some(e) if e.record.account == account => Ok((e.record.clone(), e.handle.clone())),
            _ => Err(BrokerError::QueueNotFound(queue_id.to_owned())),
        }
    }

    /// Queues of an account, sorted by creation then name, filtered by names.
    pub fn list_queues(&self, account: &str, names: &[String]) -> Vec<QueueRecord> {
        let index = self.read();
        let mut out: Vec<QueueRecord> = index
            .queues
            .values()
            .filter(|e| e.record.account == account)
            .filter(|e| names.is_empty() || names.contains(&e.record.queue_name))
            .map(|e| e.record.clone())
            .collect();
        out.sort_by(|a, b| (&a.created_on, &a.queue_name).cmp(&(&b.created_on, &b.queue_name)));
        out
    }

    pub fn function(&self, account: &str, name: &str) -> Option<FunctionRecord> {
        self.read()
            .functions
            .get(&(account.to_owned(), name.to_owned()))
            .cloned()
    }

    pub fn functions(&self, account: &str) -> Vec<FunctionRecord> {
        let mut out: Vec<FunctionRecord> = self
            .read()
            .functions
            .values()
            .filter(|f| f.account == account)
            .cloned()
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Finds a token by the hash of its value, comparing every stored hash
    /// in constant time (no early exit on the first differing byte).
    pub fn token_by_hash(&self, hash: &str) -> Option<TokenRecord> {
        use subtle::ConstantTimeEq;
        let index = self.read();
        let mut found = None;
        for t in index.tokens.values() {
            if bool::from(t.hash.as_bytes().ct_eq(hash.as_bytes())) {
                found = Some(t.clone());
            }
        }
        found
    }

    /// Notes a token's use; the registry writes it down periodically.
    /// At most one write lock per token per second: the hot path only reads.
    pub fn touch_token(&self, id: &str) {
        let now = super::model::now_ms();
        if let Some(last) = self.read().token_use.get(id) {
            if now.saturating_sub(*last) < 1000 {
                return;
            }
        }
        let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
        index.token_use.insert(id.to_owned(), now);
    }

    /// Tokens with their latest use, for the tokens API.
    pub fn tokens(&self) -> Vec<TokenRecord> {
        let index = self.read();
        let mut out: Vec<TokenRecord> = index
            .tokens
            .values()
            .map(|t| {
                let mut t = t.clone();
                if let Some(ms) = index.token_use.get(&t.id) {
                    t.last_used_on = Some(super::model::iso_from_ms(*ms));
                }
                t
            })
            .collect();
        out.sort_by(|a, b| (&a.created_on, &a.name).cmp(&(&b.created_on, &b.name)));
        out
    }

    pub fn has_root_token(&self) -> bool {
        self.read().tokens.values().any(|t| t.root)
    }

    /// Queues still recovering, and queues whose store failed to open.
    pub fn recovery_report(&self) -> (Vec<String>, Vec<String>) {
        let index = self.read();
        let mut loading = Vec::new();
        let mut failed = Vec::new();
        for e in index.queues.values() {
            let name = format!("{}/{}", e.record.account, e.record.queue_name);
            match e.handle.recovery() {
                super::queue::Recovery::Loading => loading.push(name),
                super::queue::Recovery::Failed => failed.push(name),
                super::queue::Recovery::Ready => {}
            }
        }
        (loading, failed)
    }

    /// Every queue actor, for shutdown.
    pub fn all_handles(&self) -> Vec<QueueHandle> {
        self.read().queues.values().map(|e| e.handle.clone()).collect()
    }

    /// Answers every waiting long poll now (empty), ahead of a shutdown.
    pub async fn release_long_polls(&self) {
        for handle in self.all_handles() {
            let _ = handle.addr.send(super::queue::ReleaseLongPolls).await;
        }
    }

    /// Asks every queue to finish its pending commits.
    pub async fn drain_all(&self) {
        for handle in self.all_handles() {
            let _ = handle.addr.send(Drain).await;
        }
    }
}

pub struct Registry {
    /// This registry as the queue actors see it.
    handle: RegistryHandle,
    limits: QueueLimits,
    catalog: Arc<Catalog>,
    index: Arc<RwLock<Index>>,
    data_dir: PathBuf,
    signer: Arc<LeaseSigner>,
    arbiters: Vec<ArbiterHandle>,
    next_arbiter: usize,
}

impl Registry {
    /// Opens the catalog, starts an actor for every queue it lists and
    /// returns the handle the front uses.
    pub fn start(
        data_dir: PathBuf,
        queue_arbiters: Vec<ArbiterHandle>,
        limits: QueueLimits,
    ) -> Result<RegistryHandle, StoreError> {
        let catalog = Catalog::open(&data_dir)?;
        let signer = Arc::new(LeaseSigner::new(catalog.secret("lease_key")?));
        let queues: Vec<QueueRecord> = catalog.load_all(CatalogTable::Queues)?;
        let functions: Vec<FunctionRecord> = catalog.load_all(CatalogTable::Functions)?;
        let tokens: Vec<TokenRecord> = catalog.load_all(CatalogTable::Tokens)?;
        let index = Arc::new(RwLock::new(Index {
            functions: functions
                .into_iter()
                .map(|f| ((f.account.clone(), f.name.clone()), f))
                .collect(),
            tokens: tokens.into_iter().map(|t| (t.id.clone(), t)).collect(),
            ..Default::default()
        }));
        let catalog = Arc::new(catalog);
        let shared_index = index.clone();
        let addr = Registry::create(move |ctx| {
            let mut registry = Registry {
                handle: RegistryHandle {
                    addr: ctx.address(),
                    index: shared_index.clone(),
                },
                limits,
                catalog,
                index: shared_index,
                data_dir,
                signer,
                arbiters: queue_arbiters,
                next_arbiter: 0,
            };
            for record in queues {
                registry.launch(record);
            }
            registry
        });
        Ok(RegistryHandle { addr, index })
    }

    fn write_index(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read_index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    fn queue_path(&self, queue_id: &str) -> PathBuf {
        self.data_dir.join("queues").join(format!("{queue_id}.redb"))
    }

    fn config_of(record: &QueueRecord) -> QueueConfig {
        QueueConfig {
            queue_id: record.queue_id.clone(),
            account: record.account.clone(),
            name: record.queue_name.clone(),
            settings: record.settings.clone(),
            consumer: record.consumer.clone(),
        }
    }

    /// Starts the actor for a queue record and indexes it.
    fn launch(&mut self, record: QueueRecord) -> QueueHandle {
        let arbiter = &self.arbiters[self.next_arbiter % self.arbiters.len()];
        self.next_arbiter += 1;
        let registry = self.handle.clone();
        let handle = QueueActor::launch(
            Self::config_of(&record),
            self.queue_path(&record.queue_id),
            self.signer.clone(),
            registry,
            self.limits,
            arbiter,
        );
        let mut index = self.write_index();
        index.names.insert(
            (record.account.clone(), record.queue_name.clone()),
            record.queue_id.clone(),
        );
        index.queues.insert(
            record.queue_id.clone(),
            QueueEntry {
                record,
                handle: handle.clone(),
            },
        );
        handle
    }

    /// Replaces a queue's record in the index and tells its actor.
    fn reindex(&mut self, record: QueueRecord) {
        let mut index = self.write_index();
        let Some(entry) = index.queues.get_mut(&record.queue_id) else {
            return;
        };
        let old_name = std::mem::replace(&mut entry.record, record.clone()).queue_name;
        entry.handle.addr.do_send(Configure(Self::config_of(&record)));
        if old_name != record.queue_name {
            index.names.remove(&(record.account.clone(), old_name));
            index.names.insert(
                (record.account.clone(), record.queue_name.clone()),
                record.queue_id.clone(),
            );
        }
    }

    fn new_queue_record(account: &str, name: &str, settings: QueueSettings) -> QueueRecord {
        let now = iso_now();
        QueueRecord {
            queue_id: new_id(),
            account: account.to_owned(),
            queue_name: name.to_owned(),
            created_on: now.clone(),
            modified_on: now,
            settings,
            consumer: None,
        }
    }

    /// Checks a consumer spec against the index; returns the dead-letter
    /// queue record to create, if it is missing.
    fn check_consumer(
        &self,
        queue: &QueueRecord,
        spec: &ConsumerSpec,
    ) -> Result<Option<QueueRecord>, BrokerError> {
        let index = self.read_index();
        if let Some(script) = &spec.script_name {
            if !index
                .functions
                .contains_key(&(queue.account.clone(), script.clone()))
            {
                return Err(BrokerError::FunctionMissing {
                    account: queue.account.clone(),
                    name: script.clone(),
                });
            }
        }
        match &spec.dead_letter_queue {
            Some(dlq) if *dlq == queue.queue_name => Err(BrokerError::InvalidConsumerSettings(
                "a queue cannot be its own dead_letter_queue".into(),
            )),
            Some(dlq) if index.queue_by_name(&queue.account, dlq).is_none() => Ok(Some(
                Self::new_queue_record(&queue.account, dlq, QueueSettings::default()),
            )),
            _ => Ok(None),
        }
    }

    /// Writes catalog changes on the blocking pool, then runs `apply` on
    /// the actor. The registry handles nothing else meanwhile.
    fn commit_then<T: 'static>(
        &self,
        changes: Vec<CatalogChange>,
        apply: impl FnOnce(&mut Registry, &mut Context<Registry>) -> Result<T, BrokerError> + 'static,
    ) -> AtomicResponse<Self, Result<T, BrokerError>> {
        let catalog = self.catalog.clone();
        let write = async move {
            tokio::task::spawn_blocking(move || catalog.apply(&changes))
                .await
                .unwrap_or(Err(StoreError::TaskAborted))
        };
        AtomicResponse::new(Box::pin(write.into_actor(self).map(move |result, act, ctx| {
            result.map_err(BrokerError::Store)?;
            apply(act, ctx)
        })))
    }
}

impl Actor for Registry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Token last-use times are written down in batches, not per request.
        ctx.run_interval(std::time::Duration::from_secs(30), |act, ctx| {
            act.persist_token_use(ctx)
        });
    }
}

impl Registry {
    fn persist_token_use(&mut self, ctx: &mut Context<Self>) {
        let changes: Vec<CatalogChange> = {
            let mut index = self.write_index();
            let used: Vec<(String, u64)> = index
                .token_use
                .iter()
                .filter(|(id, ms)| {
                    index.tokens.get(*id).and_then(|t| t.last_used_on.clone())
                        != Some(super::model::iso_from_ms(**ms))
                })
                .map(|(id, ms)| (id.clone(), *ms))
                .collect();
            used.into_iter()
                .filter_map(|(id, ms)| {
                    let token = index.tokens.get_mut(&id)?;
                    token.last_used_on = Some(super::model::iso_from_ms(ms));
                    Some(CatalogChange::put(CatalogTable::Tokens, &id, token))
                })
                .collect()
        };
        if changes.is_empty() {
            return;
        }
        let catalog = self.catalog.clone();
        let write = async move {
            if let Ok(Err(e)) = tokio::task::spawn_blocking(move || catalog.apply(&changes)).await {
                tracing::warn!(error = %e, "could not record token last-use times");
            }
        };
        ctx.spawn(write.into_actor(self));
    }
}

fn refuse<T: 'static>(err: BrokerError) -> AtomicResponse<Registry, Result<T, BrokerError>> {
    AtomicResponse::new(Box::pin(actix::fut::ready(Err(err))))
}

/// Answers once the registry actor is running (its timers are set up).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Started;

impl Handler<Started> for Registry {
    type Result = ();

    fn handle(&mut self, _: Started, _: &mut Context<Self>) {}
}

#[derive(Message)]
#[rtype(result = "Result<QueueRecord, BrokerError>")]
pub struct CreateQueue {
    pub account: String,
    pub name: String,
    pub settings: Value,
}

impl Handler<CreateQueue> for Registry {
    type Result = AtomicResponse<Self, Result<QueueRecord, BrokerError>>;

    fn handle(&mut self, msg: CreateQueue, _: &mut Context<Self>) -> Self::Result {
        if !valid_queue_name(&msg.name) {
            return refuse(BrokerError::InvalidQueueName(msg.name));
        }
        if self.read_index().queue_by_name(&msg.account, &msg.name).is_some() {
            return refuse(BrokerError::QueueNameTaken(msg.name));
        }
        let settings = match QueueSettings::default().patched(&msg.settings) {
            Ok(s) => s,
            Err(e) => return refuse(e),
        };
        let record = Self::new_queue_record(&msg.account, &msg.name, settings);
        let change = CatalogChange::put(CatalogTable::Queues, &record.queue_id, &record);
        self.commit_then(vec![change], move |act, _| {
            tracing::info!(account = %record.account, queue = %record.queue_name, queue_id = %record.queue_id, "queue created");
            act.launch(record.clone());
            Ok(record)
        })
    }
}

/// PUT (full: settings not given return to defaults) or PATCH.
#[derive(Message)]
#[rtype(result = "Result<QueueRecord, BrokerError>")]
pub struct UpdateQueue {
    pub account: String,
    pub queue_id: String,
    pub name: Option<String>,
    pub settings: Value,
    pub full: bool,
}

impl Handler<UpdateQueue> for Registry {
    type Result = AtomicResponse<Self, Result<QueueRecord, BrokerError>>;

    fn handle(&mut self, msg: UpdateQueue, _: &mut Context<Self>) -> Self::Result {
        let current = {
            let index = self.read_index();
            match index.queues.get(&msg.queue_id) {
                Some(e) if e.record.account == msg.account => e.record.clone(),
                _ => return refuse(BrokerError::QueueNotFound(msg.queue_id)),
            }
        };
        let mut record = current.clone();
        if let Some(name) = msg.name {
            if name != current.queue_name {
                if !valid_queue_name(&name) {
                    return refuse(BrokerError::InvalidQueueName(name));
                }
                if self.read_index().queue_by_name(&msg.account, &name).is_some() {
                    return refuse(BrokerError::QueueNameTaken(name));
                }
                record.queue_name = name;
            }
        }
        let base = if msg.full {
            QueueSettings::default()
        } else {
            current.settings.clone()
        };
        record.settings = match base.patched(&msg.settings) {
            Ok(s) => s,
            Err(e) => return refuse(e),
        };
        record.modified_on = iso_now();
        let change = CatalogChange::put(CatalogTable::Queues, &record.queue_id, &record);
        self.commit_then(vec![change], move |act, _| {
            act.reindex(record.clone());
            Ok(record)
        })
    }
}

#[derive(Message)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct DeleteQueue {
    pub account: String,
    pub queue_id: String,
}

impl Handler<DeleteQueue> for Registry {
    type Result = AtomicResponse<Self, Result<(), BrokerError>>;

    fn handle(&mut self, msg: DeleteQueue, _: &mut Context<Self>) -> Self::Result {
        match self.read_index().queues.get(&msg.queue_id) {
            Some(e) if e.record.account == msg.account => {}
            _ => return refuse(BrokerError::QueueNotFound(msg.queue_id)),
        }
        let change = CatalogChange::delete(CatalogTable::Queues, &msg.queue_id);
        self.commit_then(vec![change], move |act, _| {
            let entry = {
                let mut index = act.write_index();
                let entry = index.queues.remove(&msg.queue_id);
                if let Some(e) = &entry {
                    index.names.remove(&(e.record.account.clone(), e.record.queue_name.clone()));
                }
                entry
            };
            if let Some(entry) = entry {
                entry.handle.addr.do_send(Stop);
                let path = act.queue_path(&msg.queue_id);
                // The actor may still hold the file open; unlinking is fine.
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!(path = %path.display(), error = %e, "could not remove deleted queue's store");
                }
                tracing::info!(queue = %entry.record.queue_name, queue_id = %msg.queue_id, "queue deleted");
            }
            Ok(())
        })
    }
}

#[derive(Message)]
#[rtype(result = "Result<ConsumerRecord, BrokerError>")]
pub struct CreateConsumer {
    pub account: String,
    pub queue_id: String,
    pub body: Value,
}

impl Handler<CreateConsumer> for Registry {
    type Result = AtomicResponse<Self, Result<ConsumerRecord, BrokerError>>;

    fn handle(&mut self, msg: CreateConsumer, _: &mut Context<Self>) -> Self::Result {
        let queue = match self.read_index().queues.get(&msg.queue_id) {
            Some(e) if e.record.account == msg.account => e.record.clone(),
            _ => return refuse(BrokerError::QueueNotFound(msg.queue_id)),
        };
        if queue.consumer.is_some() {
            return refuse(BrokerError::ConsumerExists(queue.queue_name));
        }
        let spec = match ConsumerSpec::from_request(&msg.body, None) {
            Ok(s) => s,
            Err(e) => return refuse(e),
        };
        let settings = match ConsumerSettings::defaults(spec.kind).patched(&spec.settings_patch) {
            Ok(s) => s,
            Err(e) => return refuse(e),
        };
        let new_dlq = match self.check_consumer(&queue, &spec) {
            Ok(d) => d,
            Err(e) => return refuse(e),
        };
        let consumer = ConsumerRecord {
            consumer_id: new_id(),
            created_on: iso_now(),
            kind: spec.kind,
            script_name: spec.script_name,
            dead_letter_queue: spec.dead_letter_queue,
            settings,
        };
        self.save_consumer(queue, Some(consumer.clone()), new_dlq, consumer)
    }
}

impl Registry {
    fn save_consumer<T: 'static>(
        &mut self,
        mut queue: QueueRecord,
        consumer: Option<ConsumerRecord>,
        new_dlq: Option<QueueRecord>,
        answer: T,
    ) -> AtomicResponse<Self, Result<T, BrokerError>> {
        queue.consumer = consumer;
        queue.modified_on = iso_now();
        let mut changes = vec![CatalogChange::put(CatalogTable::Queues, &queue.queue_id, &queue)];
        if let Some(dlq) = &new_dlq {
            changes.push(CatalogChange::put(CatalogTable::Queues, &dlq.queue_id, dlq));
        }
        self.commit_then(changes, move |act, _| {
            if let Some(dlq) = new_dlq {
                tracing::info!(queue = %dlq.queue_name, "dead-letter queue created");
                act.launch(dlq);
            }
            act.reindex(queue);
            Ok(answer)
        })
    }
}

#[derive(Message)]
#[rtype(result = "Result<ConsumerRecord, BrokerError>")]
pub struct UpdateConsumer {
    pub account: String,
    pub queue_id: String,
    pub consumer_id: String,
    pub body: Value,
}

impl Handler<UpdateConsumer> for Registry {
    type Result = AtomicResponse<Self, Result<ConsumerRecord, BrokerError>>;

    fn handle(&mut self, msg: UpdateConsumer, _: &mut Context<Self>) -> Self::Result {
        let queue = match self.read_index().queues.get(&msg.queue_id) {
            Some(e) if e.record.account == msg.account => e.record.clone(),
            _ => return refuse(BrokerError::QueueNotFound(msg.queue_id)),
        };
        let existing = match &queue.consumer {
            Some(c) if c.consumer_id == msg.consumer_id => c.clone(),
            _ => return refuse(BrokerError::ConsumerNotFound(msg.consumer_id)),
        };
        let spec = match ConsumerSpec::from_request(&msg.body, Some(&existing)) {
            Ok(s) => s,
            Err(e) => return refuse(e),
        };
        // PUT replaces the settings: what is not given returns to default.
        let settings = match ConsumerSettings::defaults(spec.kind).patched(&spec.settings_patch) {
            Ok(s) => s,
            Err(e) => return refuse(e),
        };
        let new_dlq = match self.check_consumer(&queue, &spec) {
            Ok(d) => d,
            Err(e) => return refuse(e),
        };
        let consumer = ConsumerRecord {
            kind: spec.kind,
            script_name: spec.script_name,
            dead_letter_queue: spec.dead_letter_queue,
            settings,
            ..existing
        };
        self.save_consumer(queue, Some(consumer.clone()), new_dlq, consumer)
    }
}

#[derive(Message)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct DeleteConsumer {
    pub account: String,
    pub queue_id: String,
    pub consumer_id: String,
}

impl Handler<DeleteConsumer> for Registry {
    type Result = AtomicResponse<Self, Result<(), BrokerError>>;

    fn handle(&mut self, msg: DeleteConsumer, _: &mut Context<Self>) -> Self::Result {
        let queue = match self.read_index().queues.get(&msg.queue_id) {
            Some(e) if e.record.account == msg.account => e.record.clone(),
            _ => return refuse(BrokerError::QueueNotFound(msg.queue_id)),
        };
        match &queue.consumer {
            Some(c) if c.consumer_id == msg.consumer_id => {}
            _ => return refuse(BrokerError::ConsumerNotFound(msg.consumer_id)),
        }
        self.save_consumer(queue, None, None, ())
    }
}

/// Finds the dead-letter queue by name, creating it if it was deleted.
#[derive(Message)]
#[rtype(result = "Result<QueueHandle, BrokerError>")]
pub struct ResolveDeadLetterQueue {
    pub account: String,
    pub name: String,
}

impl Handler<ResolveDeadLetterQueue> for Registry {
    type Result = AtomicResponse<Self, Result<QueueHandle, BrokerError>>;

    fn handle(&mut self, msg: ResolveDeadLetterQueue, _: &mut Context<Self>) -> Self::Result {
        if let Some(e) = self.read_index().queue_by_name(&msg.account, &msg.name) {
            let handle = e.handle.clone();
            return AtomicResponse::new(Box::pin(actix::fut::ready(Ok(handle))));
        }
        let record = Self::new_queue_record(&msg.account, &msg.name, QueueSettings::default());
        let change = CatalogChange::put(CatalogTable::Queues, &record.queue_id, &record);
        self.commit_then(vec![change], move |act, _| {
            tracing::info!(queue = %record.queue_name, "dead-letter queue created on demand");
            Ok(act.launch(record))
        })
    }
}

#[derive(Message)]
#[rtype(result = "Result<FunctionRecord, BrokerError>")]
pub struct PutFunction {
    pub account: String,
    pub name: String,
    pub url: String,
    pub timeout_ms: u64,
    pub secret: Option<String>,
}

impl Handler<PutFunction> for Registry {
    type Result = AtomicResponse<Self, Result<FunctionRecord, BrokerError>>;

    fn handle(&mut self, msg: PutFunction, _: &mut Context<Self>) -> Self::Result {
        let key = (msg.account.clone(), msg.name.clone());
        let now = iso_now();
        let created_on = self
            .read_index()
            .functions
            .get(&key)
            .map(|f| f.created_on.clone())
            .unwrap_or_else(|| now.clone());
        let record = FunctionRecord {
            account: msg.account,
            name: msg.name,
            url: msg.url,
            timeout_ms: msg.timeout_ms,
            secret: msg.secret,
            created_on,
            modified_on: now,
        };
        let change = CatalogChange::put(CatalogTable::Functions, format!("{}/{}", key.0, key.1), &record);
        self.commit_then(vec![change], move |act, _| {
            act.write_index().functions.insert(key, record.clone());
            Ok(record)
        })
    }
}

#[derive(Message)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct DeleteFunction {
    pub account: String,
    pub name: String,
}

impl Handler<DeleteFunction> for Registry {
    type Result = AtomicResponse<Self, Result<(), BrokerError>>;

    fn handle(&mut self, msg: DeleteFunction, _: &mut Context<Self>) -> Self::Result {
        let key = (msg.account.clone(), msg.name.clone());
        if !self.read_index().functions.contains_key(&key) {
            return refuse(BrokerError::FunctionNotFound(msg.name));
        }
        let change = CatalogChange::delete(CatalogTable::Functions, format!("{}/{}", key.0, key.1));
        self.commit_then(vec![change], move |act, _| {
            act.write_index().functions.remove(&key);
            Ok(())
        })
    }
}

#[derive(Message)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct DeleteToken {
    pub id: String,
}

impl Handler<DeleteToken> for Registry {
    type Result = AtomicResponse<Self, Result<(), BrokerError>>;

    fn handle(&mut self, msg: DeleteToken, _: &mut Context<Self>) -> Self::Result {
        match self.read_index().tokens.get(&msg.id) {
            None => return refuse(BrokerError::TokenNotFound(msg.id)),
            Some(t) if t.root => {
                return refuse(BrokerError::InvalidRequest(
                    "the root token cannot be revoked through the API; delete <data-dir>/root-token and its catalog entry offline, or use HOPPER_ROOT_TOKEN".into(),
                ))
            }
            Some(_) => {}
        }
        let change = CatalogChange::delete(CatalogTable::Tokens, &msg.id);
        self.commit_then(vec![change], move |act, _| {
            let mut index = act.write_index();
            index.tokens.remove(&msg.id);
            index.token_use.remove(&msg.id);
            Ok(())
        })
    }
}

#[derive(Message)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct PutToken(pub TokenRecord);

impl Handler<PutToken> for Registry {
    type Result = AtomicResponse<Self, Result<(), BrokerError>>;

    fn handle(&mut self, msg: PutToken, _: &mut Context<Self>) -> Self::Result {
        let token = msg.0;
        let change = CatalogChange::put(CatalogTable::Tokens, &token.id, &token);
        self.commit_then(vec![change], move |act, _| {
            act.write_index().tokens.insert(token.id.clone(), token);
            Ok(())
        })
    }
}
