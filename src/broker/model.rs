//! Catalog records (queues, consumers, functions, tokens) and the rules that
//! validate them. Request bodies arrive as JSON values and are checked here,
//! so every client (HTTP, config file) gets the same limits and messages.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::BrokerError;

pub const MAX_DELAY_SECONDS: u64 = 86_400;
pub const MIN_RETENTION_SECONDS: u64 = 60;
pub const MAX_RETENTION_SECONDS: u64 = 1_209_600;
pub const DEFAULT_RETENTION_SECONDS: u64 = 345_600;
pub const MAX_VISIBILITY_TIMEOUT_MS: u64 = 43_200_000;
pub const DEFAULT_VISIBILITY_TIMEOUT_MS: u64 = 30_000;

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// ISO-8601 UTC timestamp with microseconds, as Cloudflare renders them
/// (`2024-05-01T12:00:00.123456Z`).
pub fn iso_now() -> String {
    iso_from_ms(now_ms())
}

pub fn iso_from_ms(ms: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    );
    t.format(&format).unwrap_or_default()
}

pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

pub fn valid_queue_name(name: &str) -> bool {
    let b = name.as_bytes();
    let ok_inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
    let ok_edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(ok_inner)
        && b.first().is_some_and(ok_edge)
        && b.last().is_some_and(ok_edge)
}

pub fn valid_account_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

pub fn valid_object_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct QueueSettings {
    pub delivery_delay: u64,
    pub delivery_paused: bool,
    pub message_retention_period: u64,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            delivery_delay: 0,
            delivery_paused: false,
            message_retention_period: DEFAULT_RETENTION_SECONDS,
        }
    }
}

/// Reads an optional unsigned integer field, refusing other types.
fn uint_field(
    obj: &Map<String, Value>,
    key: &str,
    range: std::ops::RangeInclusive<u64>,
    err: fn(String) -> BrokerError,
) -> Result<Option<u64>, BrokerError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let n = v
                .as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                })
                .ok_or_else(|| err(format!("{key} must be a whole number, got {v}")))?;
            if !range.contains(&n) {
                return Err(err(format!(
                    "{key} must be between {} and {}, got {n}",
                    range.start(),
                    range.end()
                )));
            }
            Ok(Some(n))
        }
    }
}

fn as_object<'a>(
    v: &'a Value,
    what: &str,
    err: fn(String) -> BrokerError,
) -> Result<&'a Map<String, Value>, BrokerError> {
    v.as_object()
        .ok_or_else(|| err(format!("{what} must be a JSON object")))
}

impl QueueSettings {
    /// Applies the fields present in `patch` over `self`.
    pub fn patched(&self, patch: &Value) -> Result<QueueSettings, BrokerError> {
        let err = BrokerError::InvalidQueueSettings;
        if patch.is_null() {
            return Ok(self.clone());
        }
        let obj = as_object(patch, "settings", err)?;
        let mut out = self.clone();
        if let Some(d) = uint_field(obj, "delivery_delay", 0..=MAX_DELAY_SECONDS, err)? {
            out.delivery_delay = d;
        }
        if let Some(r) = uint_field(
            obj,
            "message_retention_period",
            MIN_RETENTION_SECONDS..=MAX_RETENTION_SECONDS,
            err,
        )? {
            out.message_retention_period = r;
        }
        match obj.get("delivery_paused") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => out.delivery_paused = *b,
            Some(v) => return Err(err(format!("delivery_paused must be true or false, got {v}"))),
        }
        Ok(out)
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerType {
    Worker,
    HttpPull,
}

impl ConsumerType {
    pub fn as_str(self) -> &'static str {
        match self {
            ConsumerType::Worker => "worker",
            ConsumerType::HttpPull => "http_pull",
        }
    }
}

/// Every consumer setting; which ones are shown depends on the type.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConsumerSettings {
    pub batch_size: u64,
    pub max_retries: u64,
    pub retry_delay: u64,
    pub max_wait_time_ms: u64,
    pub max_concurrency: Option<u64>,
    pub visibility_timeout_ms: u64,
}

impl ConsumerSettings {
    pub fn defaults(kind: ConsumerType) -> Self {
        ConsumerSettings {
            batch_size: match kind {
                ConsumerType::Worker => 10,
                ConsumerType::HttpPull => 5,
            },
            max_retries: 3,
            retry_delay: 0,
            max_wait_time_ms: 5000,
            max_concurrency: None,
            visibility_timeout_ms: DEFAULT_VISIBILITY_TIMEOUT_MS,
        }
    }

    pub fn patched(&self, patch: &Value) -> Result<ConsumerSettings, BrokerError> {
        let err = BrokerError::InvalidConsumerSettings;
        if patch.is_null() {
            return Ok(self.clone());
        }
        let obj = as_object(patch, "settings", err)?;
        let mut out = self.clone();
        if let Some(v) = uint_field(obj, "batch_size", 1..=100, err)? {
            out.batch_size = v;
        }
        if let Some(v) = uint_field(obj, "max_retries", 0..=100, err)? {
            out.max_retries = v;
        }
        if let Some(v) = uint_field(obj, "retry_delay", 0..=MAX_DELAY_SECONDS, err)? {
            out.retry_delay = v;
        }
        if let Some(v) = uint_field(obj, "max_wait_time_ms", 0..=60_000, err)? {
            out.max_wait_time_ms = v;
        }
        if obj.contains_key("max_concurrency") {
            out.max_concurrency = uint_field(obj, "max_concurrency", 1..=250, err)?;
        }
        if let Some(v) = uint_field(obj, "visibility_timeout_ms", 1..=MAX_VISIBILITY_TIMEOUT_MS, err)? {
            out.visibility_timeout_ms = v;
        }
        Ok(out)
    }

    /// How many times a message may be delivered before it is dead-lettered.
    pub fn max_deliveries(&self) -> u32 {
        (self.max_retries + 1) as u32
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub consumer_id: String,
    pub created_on: String,
    #[serde(rename = "type")]
    pub kind: ConsumerType,
    pub script_name: Option<String>,
    pub dead_letter_queue: Option<String>,
    pub settings: ConsumerSettings,
}

impl ConsumerRecord {
    /// The Consumer object of the API.
    pub fn to_api(&self, queue_id: &str, queue_name: &str) -> Value {
        let s = &self.settings;
        let settings = match self.kind {
            ConsumerType::HttpPull => serde_json::json!({
                "batch_size": s.batch_size,
                "max_retries": s.max_retries,
                "retry_delay": s.retry_delay,
                "visibility_timeout_ms": s.visibility_timeout_ms,
            }),
            ConsumerType::Worker => serde_json::json!({
                "batch_size": s.batch_size,
                "max_retries": s.max_retries,
                "max_wait_time_ms": s.max_wait_time_ms,
                "max_concurrency": s.max_concurrency,
                "retry_delay": s.retry_delay,
            }),
        };
        let mut v = serde_json::json!({
            "consumer_id": self.consumer_id,
            "created_on": self.created_on,
            "queue_id": queue_id,
            "queue_name": queue_name,
            "type": self.kind.as_str(),
            "settings": settings,
            "dead_letter_queue": self.dead_letter_queue.clone().unwrap_or_default(),
        });
        if let (ConsumerType::Worker, Some(script)) = (self.kind, &self.script_name) {
            v["script_name"] = Value::String(script.clone());
            v["script"] = Value::String(script.clone());
        }
        v
    }
}

/// A consumer as a request describes it, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerSpec {
    pub kind: ConsumerType,
    pub script_name: Option<String>,
    pub dead_letter_queue: Option<String>,
    pub settings_patch: Value,
}

impl ConsumerSpec {
    pub fn from_request(body: &Value, existing: Option<&ConsumerRecord>) -> Result<Self, BrokerError> {
        let err = BrokerError::InvalidConsumerSettings;
        let obj = as_object(body, "the request body", err)?;
        let kind = match obj.get("type").and_then(Value::as_str) {
            Some("worker") => ConsumerType::Worker,
            Some("http_pull") => ConsumerType::HttpPull,
            Some(other) => {
                return Err(err(format!(
                    "type must be \"worker\" or \"http_pull\", got {other:?}"
                )))
            }
            None => match existing {
                Some(c) => c.kind,
                None => return Err(err("type is required: \"worker\" or \"http_pull\"".into())),
            },
        };
        let script_name = obj
            .get("script_name")
            .or_else(|| obj.get("script"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .or_else(|| existing.and_then(|c| c.script_name.clone()));
        if kind == ConsumerType::Worker && script_name.is_none() {
            return Err(err(
                "a worker consumer needs script_name: the function to deliver to".into(),
            ));
        }
        let dead_letter_queue = match obj.get("dead_letter_queue") {
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => {
                if !valid_queue_name(s) {
                    return Err(err(format!("dead_letter_queue {s:?} is not a valid queue name")));
                }
                Some(s.clone())
            }
            Some(Value::Null) => None,
            None => existing.and_then(|c| c.dead_letter_queue.clone()),
            Some(v) => return Err(err(format!("dead_letter_queue must be a queue name, got {v}"))),
        };
        Ok(ConsumerSpec {
            kind,
            script_name: if kind == ConsumerType::Worker {
                script_name
            } else {
                None
            },
            dead_letter_queue,
            settings_patch: obj.get("settings").cloned().unwrap_or(Value::Null),
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct QueueRecord {
    pub queue_id: String,
    pub account: String,
    pub queue_name: String,
    pub created_on: String,
    pub modified_on: String,
    pub settings: QueueSettings,
    pub consumer: Option<ConsumerRecord>,
}

impl QueueRecord {
    /// The Queue object of the API.
    pub fn to_api(&self) -> Value {
        let consumers: Vec<Value> = self
            .consumer
            .iter()
            .map(|c| c.to_api(&self.queue_id, &self.queue_name))
            .collect();
        serde_json::json!({
            "queue_id": self.queue_id,
            "queue_name": self.queue_name,
            "created_on": self.created_on,
            "modified_on": self.modified_on,
            "producers": [],
            "producers_total_count": 0,
            "consumers_total_count": consumers.len(),
            "consumers": consumers,
            "settings": self.settings,
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FunctionRecord {
    pub account: String,
    pub name: String,
    pub url: String,
    pub timeout_ms: u64,
    pub secret: Option<String>,
    pub created_on: String,
    pub modified_on: String,
}

impl FunctionRecord {
    /// The API view: the secret itself is never shown.
    pub fn to_api(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "url": self.url,
            "timeout_ms": self.timeout_ms,
            "has_secret": self.secret.is_some(),
            "created_on": self.created_on,
            "modified_on": self.modified_on,
        })
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    QueuesRead,
    QueuesWrite,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: String,
    pub name: String,
    /// Hex SHA-256 of the token value; the value itself is never stored.
    pub hash: String,
    pub scopes: Vec<Scope>,
    /// None: every account.
    pub accounts: Option<Vec<String>>,
    pub created_on: String,
    #[serde(default)]
    pub root: bool,
    #[serde(default)]
    pub last_used_on: Option<String>,
    /// Declared in the config file (re-applied at every start).
    #[serde(default)]
    pub from_config: bool,
}

impl TokenRecord {
    /// The API view: never the value, never the hash.
    pub fn to_api(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "name": self.name,
            "scopes": self.scopes,
            "accounts": self.accounts,
            "created_on": self.created_on,
            "last_used_on": self.last_used_on,
            "root": self.root,
            "from_config": self.from_config,
        })
    }

    pub fn full_access(&self) -> bool {
        self.accounts.is_none()
            && self.scopes.contains(&Scope::QueuesRead)
            && self.scopes.contains(&Scope::QueuesWrite)
    }
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "queues_read" => Some(Scope::QueuesRead),
            "queues_write" => Some(Scope::QueuesWrite),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::QueuesRead => "queues_read",
            Scope::QueuesWrite => "queues_write",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn queue_names() {
        for ok in ["a", "abc", "a-b", "a1", &"a".repeat(63)] {
            assert!(valid_queue_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!valid_queue_name(bad), "{bad}");
        }
    }

    #[test]
    fn settings_ranges() {
        let s = QueueSettings::default();
        assert!(s.patched(&json!({"delivery_delay": 86401})).is_err());
        assert!(s.patched(&json!({"message_retention_period": 59})).is_err());
        assert!(s.patched(&json!({"delivery_paused": "yes"})).is_err());
        let p = s
            .patched(&json!({"delivery_delay": 5, "delivery_paused": true}))
            .unwrap();
        assert_eq!(
            (p.delivery_delay, p.delivery_paused, p.message_retention_period),
            (5, true, 345_600)
        );
        let c = ConsumerSettings::defaults(ConsumerType::HttpPull);
        assert!(c.patched(&json!({"batch_size": 0})).is_err());
        assert!(c.patched(&json!({"batch_size": 101})).is_err());
        assert!(c.patched(&json!({"max_concurrency": 251})).is_err());
        assert!(c.patched(&json!({"visibility_timeout_ms": 43_200_001})).is_err());
        assert_eq!(c.patched(&json!({"max_retries": 0})).unwrap().max_deliveries(), 1);
    }
}
