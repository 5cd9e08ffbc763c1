//! Applies the config file at start: the file is the desired state. What it
//! declares is created or brought up to date; what it does not declare is
//! left alone; nothing is written when nothing differs, so a restart with
//! the same file changes nothing.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::api::auth::hash_token;
use crate::broker::model::{iso_now, ConsumerSettings, ConsumerType, Scope, TokenRecord};
use crate::broker::registry::{
    CreateConsumer, CreateQueue, PutFunction, PutToken, UpdateConsumer, UpdateQueue,
};
use crate::broker::{BrokerError, RegistryHandle};
use crate::config::file::{ConsumerDecl, LoadedConfig, QueueDecl};

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
}

fn mailbox(_: actix::MailboxError) -> BrokerError {
    BrokerError::ActorUnavailable("registry".into())
}

/// A config token's id is derived from its name, so it stays stable.
fn token_id(name: &str) -> String {
    hex::encode(Sha256::digest(format!("config-token:{name}").as_bytes()))[..32].to_owned()
}

fn queue_settings(q: &QueueDecl) -> Value {
    let mut s = Map::new();
    if let Some(v) = q.delivery_delay {
        s.insert("delivery_delay".into(), json!(v.0));
    }
    if let Some(v) = q.message_retention_period {
        s.insert("message_retention_period".into(), json!(v.0));
    }
    if let Some(v) = q.delivery_paused {
        s.insert("delivery_paused".into(), json!(v));
    }
    Value::Object(s)
}

/// The consumer request body a declaration stands for (wrangler names to API names).
fn consumer_body(c: &ConsumerDecl) -> Value {
    let mut settings = Map::new();
    let mut put = |k: &str, v: Option<u64>| {
        if let Some(v) = v {
            settings.insert(k.into(), json!(v));
        }
    };
    put("batch_size", c.max_batch_size.map(|v| v.0));
    put("max_wait_time_ms", c.max_batch_timeout.map(|v| v.0 * 1000));
    put("max_retries", c.max_retries.map(|v| v.0));
    put("retry_delay", c.retry_delay.map(|v| v.0));
    put("max_concurrency", c.max_concurrency.map(|v| v.0));
    put("visibility_timeout_ms", c.visibility_timeout_ms.map(|v| v.0));
    json!({
        "type": c.kind.as_str(),
        "script_name": c.script_name.as_ref().map(|s| s.as_str()),
        "dead_letter_queue": c.dead_letter_queue.as_ref().map(|s| s.as_str()).unwrap_or(""),
        "settings": settings,
    })
}

/// Checks what only the running server can check (functions that consumers
/// name), before anything is written: a bad file changes nothing.
fn precheck(registry: &RegistryHandle, config: &LoadedConfig) -> Result<(), BrokerError> {
    let mut problems = Vec::new();
    for q in &config.file.queues {
        let q = q.get_ref();
        for c in &q.consumers {
            let line = crate::config::file::line_of(&config.text, c.span().start);
            let Some(script) = &c.get_ref().script_name else {
                continue;
            };
            let declared = config
                .file
                .functions
                .iter()
                .any(|f| f.account.as_str() == q.account.as_str() && f.name.as_str() == script.as_str());
            if !declared && registry.function(q.account.as_str(), script.as_str()).is_none() {
                problems.push(format!(
                    "line {line}: queue {:?}'s consumer names function {:?}, which is neither declared in [[functions]] nor registered in account {}",
                    q.name.as_str(),
                    script.as_str(),
                    q.account.as_str()
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(BrokerError::InvalidRequest(format!(
            "{}: {}",
            config.path,
            problems.join("; ")
        )))
    }
}

/// Every setting spelled out, for an update that must not reset any.
fn full_settings(s: &ConsumerSettings) -> Value {
    json!({
        "batch_size": s.batch_size,
        "max_retries": s.max_retries,
        "retry_delay": s.retry_delay,
        "max_wait_time_ms": s.max_wait_time_ms,
        "max_concurrency": s.max_concurrency,
        "visibility_timeout_ms": s.visibility_timeout_ms,
    })
}

pub async fn apply(registry: &RegistryHandle, config: &LoadedConfig) -> Result<Applied, BrokerError> {
    precheck(registry, config)?;
    let mut applied = Applied::default();
    let file = &config.file;

    for (decl, value) in file.tokens.iter().zip(&config.token_values) {
        let id = token_id(&decl.name);
        let scopes: Vec<Scope> = decl
            .scopes
            .iter()
            .filter_map(|s| Scope::parse(s.as_str()))
            .collect();
        let accounts = decl
            .accounts
            .as_ref()
            .map(|a| a.iter().map(|x| x.as_str().to_owned()).collect::<Vec<_>>());
        let existing = registry.tokens().into_iter().find(|t| t.id == id);
        let wanted = TokenRecord {
            id: id.clone(),
            name: decl.name.clone(),
            hash: hash_token(value),
            scopes,
            accounts,
            created_on: existing
                .as_ref()
                .map(|t| t.created_on.clone())
                .unwrap_or_else(iso_now),
            root: false,
            last_used_on: existing.as_ref().and_then(|t| t.last_used_on.clone()),
            from_config: true,
        };
        match &existing {
            Some(t)
                if t.hash == wanted.hash
                    && t.scopes == wanted.scopes
                    && t.accounts == wanted.accounts
                    && t.name == wanted.name =>
            {
                applied.unchanged += 1;
                continue;
            }
            Some(_) => applied.updated += 1,
            None => applied.created += 1,
        }
        registry.addr.send(PutToken(wanted)).await.map_err(mailbox)??;
    }

    for (decl, secret) in file.functions.iter().zip(&config.function_secrets) {
        let timeout_ms = decl.timeout_ms.map(|t| t.0).unwrap_or(30_000);
        match registry.function(decl.account.as_str(), decl.name.as_str()) {
            Some(f) if f.url == decl.url.as_str() && f.timeout_ms == timeout_ms && f.secret == *secret => {
                applied.unchanged += 1;
                continue;
            }
            Some(_) => applied.updated += 1,
            None => applied.created += 1,
        }
        registry
            .addr
            .send(PutFunction {
                account: decl.account.as_str().to_owned(),
                name: decl.name.as_str().to_owned(),
                url: decl.url.as_str().to_owned(),
                timeout_ms,
                secret: secret.clone(),
            })
            .await
            .map_err(mailbox)??;
    }

    for q in &file.queues {
        let q = q.get_ref();
        let account = q.account.as_str().to_owned();
        let name = q.name.as_str().to_owned();
        let settings = queue_settings(q);
        let existing = registry
            .list_queues(&account, std::slice::from_ref(&name))
            .into_iter()
            .next();
        let record = match existing {
            None => {
                applied.created += 1;
                registry
                    .addr
                    .send(CreateQueue {
                        account: account.clone(),
                        name: name.clone(),
                        settings,
                    })
                    .await
                    .map_err(mailbox)??
            }
            Some(record) => {
                if record.settings.patched(&settings)? == record.settings {
                    applied.unchanged += 1;
                    record
                } else {
                    applied.updated += 1;
                    registry
                        .addr
                        .send(UpdateQueue {
                            account: account.clone(),
                            queue_id: record.queue_id.clone(),
                            name: None,
                            settings,
                            full: false,
                        })
                        .await
                        .map_err(mailbox)??
                }
            }
        };
        let Some(decl) = q.consumers.first().map(|c| c.get_ref()) else {
            continue;
        };
        let mut body = consumer_body(decl);
        let kind = if decl.kind.as_str() == "worker" {
            ConsumerType::Worker
        } else {
            ConsumerType::HttpPull
        };
        // Fields the file does not declare keep their current values.
        let base = match &record.consumer {
            Some(c) if c.kind == kind => c.settings.clone(),
            _ => ConsumerSettings::defaults(kind),
        };
        let wanted_settings = base.patched(&body["settings"])?;
        body["settings"] = full_settings(&wanted_settings);
        let wanted_script = decl.script_name.as_ref().map(|s| s.as_str().to_owned());
        let wanted_dlq = decl.dead_letter_queue.as_ref().map(|s| s.as_str().to_owned());
        match &record.consumer {
            Some(c)
                if c.kind == kind
                    && c.settings == wanted_settings
                    && (kind == ConsumerType::HttpPull || c.script_name == wanted_script)
                    && c.dead_letter_queue == wanted_dlq =>
            {
                applied.unchanged += 1;
            }
            Some(c) => {
                applied.updated += 1;
                registry
                    .addr
                    .send(UpdateConsumer {
                        account: account.clone(),
                        queue_id: record.queue_id.clone(),
                        consumer_id: c.consumer_id.clone(),
                        body,
                    })
                    .await
                    .map_err(mailbox)??;
            }
            None => {
                applied.created += 1;
                registry
                    .addr
                    .send(CreateConsumer {
                        account: account.clone(),
                        queue_id: record.queue_id.clone(),
                        body,
                    })
                    .await
                    .map_err(mailbox)??;
            }
        }
    }
    Ok(applied)
}
