//! Messages as producers send them and consumers receive them: parsing,
//! limits, body encodings.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::Serialize;
use serde_json::Value;

use super::model::MAX_DELAY_SECONDS;
use super::BrokerError;
use crate::store::ContentType;

pub const MAX_MESSAGE_BYTES: usize = 128_000;
pub const MAX_BATCH_BYTES: usize = 256_000;
pub const MAX_BATCH_MESSAGES: usize = 100;

/// A validated message ready to be stored.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub content_type: ContentType,
    /// `json`: compact serialized JSON; `text`: UTF-8; `bytes`: decoded bytes.
    pub body: Vec<u8>,
    /// None: use the batch's, else the queue's default.
    pub delay_seconds: Option<u64>,
}

/// Parses a `delay_seconds` value: a whole number of seconds, 0 to 86400.
pub fn parse_delay(v: Option<&Value>) -> Result<Option<u64>, BrokerError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let n = v
                .as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                })
                .ok_or_else(|| {
                    BrokerError::InvalidDelay(format!(
                        "delay_seconds must be a whole number of seconds, got {v}"
                    ))
                })?;
            if n > MAX_DELAY_SECONDS {
                return Err(BrokerError::InvalidDelay(format!(
                    "delay_seconds must be between 0 and {MAX_DELAY_SECONDS}, got {n}"
                )));
            }
            Ok(Some(n))
        }
    }
}

/// Parses one message object `{body, content_type?, delay_seconds?}`.
pub fn parse_message(v: &Value, position: Option<usize>) -> Result<NewMessage, BrokerError> {
    let at = position.map(|i| format!(" (messages[{i}])")).unwrap_or_default();
    let obj = v
        .as_object()
        .ok_or_else(|| BrokerError::InvalidRequest(format!("a message must be a JSON object{at}")))?;
    let content_type = match obj.get("content_type") {
        None | Some(Value::Null) => ContentType::Json,
        Some(Value::String(s)) => match s.as_str() {
            "json" => ContentType::Json,
            "text" => ContentType::Text,
            "bytes" => ContentType::Bytes,
            "v8" => {
                return Err(BrokerError::InvalidMessage(format!(
                    "content_type \"v8\" is only available inside Workers; use json, text or bytes{at}"
                )))
            }
            other => {
                return Err(BrokerError::InvalidMessage(format!(
                    "content_type must be json, text or bytes, got {other:?}{at}"
                )))
            }
        },
        Some(other) => {
            return Err(BrokerError::InvalidMessage(format!(
                "content_type must be a string, got {other}{at}"
            )))
        }
    };
    let body = obj
        .get("body")
        .ok_or_else(|| BrokerError::InvalidRequest(format!("body is required{at}")))?;
    let body = match content_type {
        ContentType::Json => serde_json::to_vec(body)
            .map_err(|e| BrokerError::InvalidMessage(format!("body is not serializable JSON: {e}{at}")))?,
        ContentType::Text => body
            .as_str()
            .ok_or_else(|| {
                BrokerError::InvalidMessage(format!("a text message's body must be a string{at}"))
            })?
            .as_bytes()
            .to_vec(),
        ContentType::Bytes => {
            let s = body.as_str().ok_or_else(|| {
                BrokerError::InvalidMessage(format!("a bytes message's body must be a base64 string{at}"))
            })?;
            STANDARD.decode(s).map_err(|e| {
                BrokerError::InvalidMessage(format!("a bytes message's body must be base64: {e}{at}"))
            })?
        }
    };
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(BrokerError::MessageTooLarge {
            size: body.len(),
            limit: MAX_MESSAGE_BYTES,
        });
    }
    Ok(NewMessage {
        content_type,
        body,
        delay_seconds: parse_delay(obj.get("delay_seconds"))?,
    })
}

/// Parses a batch `{messages: [...], delay_seconds?}`; applies the batch
/// delay to messages without their own.
pub fn parse_batch(v: &Value) -> Result<Vec<NewMessage>, BrokerError> {
    let obj = v
        .as_object()
        .ok_or_else(|| BrokerError::InvalidRequest("the request body must be a JSON object".into()))?;
    let list = obj.get("messages").and_then(Value::as_array).ok_or_else(|| {
        BrokerError::InvalidRequest(
            "messages is required: an array of {body, content_type?, delay_seconds?}".into(),
        )
    })?;
    if list.len() > MAX_BATCH_MESSAGES {
        return Err(BrokerError::TooManyMessages {
            count: list.len(),
            limit: MAX_BATCH_MESSAGES,
        });
    }
    if list.is_empty() {
        return Err(BrokerError::InvalidRequest(
            "messages must hold at least one message".into(),
        ));
    }
    let batch_delay = parse_delay(obj.get("delay_seconds"))?;
    let mut out = Vec::with_capacity(list.len());
    let mut total = 0usize;
    for (i, m) in list.iter().enumerate() {
        let mut msg = parse_message(m, Some(i))?;
        total += msg.body.len();
        msg.delay_seconds = msg.delay_seconds.or(batch_delay);
        out.push(msg);
    }
    if total > MAX_BATCH_BYTES {
        return Err(BrokerError::BatchTooLarge {
            size: total,
            limit: MAX_BATCH_BYTES,
        });
    }
    Ok(out)
}

/// The backlog figures returned by metrics and inside send/pull replies.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct BacklogMetrics {
    pub backlog_count: u64,
    pub backlog_bytes: u64,
    pub oldest_message_timestamp_ms: u64,
}

/// A body as a pull or peek returns it: text plain, json and bytes base64.
pub fn encode_body(content_type: ContentType, body: &[u8]) -> String {
    match content_type {
        ContentType::Text => String::from_utf8_lossy(body).into_owned(),
        ContentType::Json | ContentType::Bytes => STANDARD.encode(body),
    }
}

pub fn message_metadata(content_type: ContentType) -> Value {
    serde_json::json!({
        "CF-Content-Type": content_type.as_str(),
        "CF-sourceMessageSource": "api",
    })
}

pub fn format_message_id(id: u128) -> String {
    format!("{id:032x}")
}

#[derive(Debug, Clone, Serialize)]
pub struct PulledMessage {
    pub id: String,
    pub timestamp_ms: u64,
    pub attempts: u32,
    pub body: String,
    pub metadata: Value,
    pub lease_id: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeekedMessage {
    pub id: String,
    pub timestamp_ms: u64,
    pub attempts: u32,
    pub body: String,
    pub metadata: Value,
    #[serde(rename = "ref")]
    pub message_ref: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes_count_as_the_spec_says() {
        let m = parse_message(&json!({"body": {"a": 1}}), None).unwrap();
        assert_eq!(m.body, br#"{"a":1}"#);
        let m = parse_message(&json!({"body": "héllo", "content_type": "text"}), None).unwrap();
        assert_eq!(m.body.len(), 6);
        let m = parse_message(&json!({"body": "AAEC", "content_type": "bytes"}), None).unwrap();
        assert_eq!(m.body, vec![0, 1, 2]);
        let big = "x".repeat(MAX_MESSAGE_BYTES + 1);
        assert!(matches!(
            parse_message(&json!({"body": big, "content_type": "text"}), None),
            Err(BrokerError::MessageTooLarge { .. })
        ));
    }

    #[test]
    fn batch_rules() {
        let one = json!({"body": "x".repeat(100_000), "content_type": "text"});
        assert!(matches!(
            parse_batch(&json!({"messages": [one, one, one]})),
            Err(BrokerError::BatchTooLarge { .. })
        ));
        let many: Vec<Value> = (0..101).map(|i| json!({"body": i})).collect();
        assert!(matches!(
            parse_batch(&json!({"messages": many})),
            Err(BrokerError::TooManyMessages { .. })
        ));
        let b = parse_batch(
            &json!({"delay_seconds": 5, "messages": [{"body": 1}, {"body": 2, "delay_seconds": 0}]}),
        )
        .unwrap();
        assert_eq!(b[0].delay_seconds, Some(5));
        assert_eq!(b[1].delay_seconds, Some(0));
        assert!(matches!(
            parse_delay(Some(&json!(86401))),
            Err(BrokerError::InvalidDelay(_))
        ));
        assert!(matches!(
            parse_delay(Some(&json!(-1))),
            Err(BrokerError::InvalidDelay(_))
        ));
        assert!(parse_message(&json!({"body": 1, "content_type": "v8"}), None).is_err());
    }
}
