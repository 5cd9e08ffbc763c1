//! Messages as producers send them and consumers receive them: parsing,
//! limits, body encodings.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
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

/// A message as it arrives, borrowed from the request body: the fast path
/// for well-formed sends. Anything it does not handle exactly (a missing
/// or null body, an unknown content type, json with whitespace to strip,
/// a limit exceeded) goes to the `Value`-based parsers above, which also
/// word the errors.
#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(borrow)]
    body: Option<&'a RawValue>,
    #[serde(borrow)]
    content_type: Option<Cow<'a, str>>,
    delay_seconds: Option<Value>,
}

#[derive(Deserialize)]
struct WireBatch<'a> {
    #[serde(borrow)]
    messages: Vec<Object<WireMessage<'a>>>,
    delay_seconds: Option<Value>,
}

/// `T` read only from a JSON object: serde_json would also read a struct
/// from an array, which the API refuses. A map is only read from `{...}`.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapOnly<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for MapOnly<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(MapOnly(std::marker::PhantomData))
            .map(Object)
    }
}

fn fast_message(wire: WireMessage<'_>) -> Option<NewMessage> {
    let raw = wire.body?.get();
    let content_type = match wire.content_type.as_deref() {
        None | Some("json") => ContentType::Json,
        Some("text") => ContentType::Text,
        Some("bytes") => ContentType::Bytes,
        Some(_) => return None,
    };
    let body = match content_type {
        // Stored as it came when already compact: no parse, no re-encode.
        ContentType::Json if !raw.bytes().any(|b| b.is_ascii_whitespace()) => raw.as_bytes().to_vec(),
        ContentType::Json => return None,
        ContentType::Text => serde_json::from_str::<Cow<'_, str>>(raw)
            .ok()?
            .into_owned()
            .into_bytes(),
        ContentType::Bytes => STANDARD
            .decode(serde_json::from_str::<Cow<'_, str>>(raw).ok()?.as_bytes())
            .ok()?,
    };
    if body.len() > MAX_MESSAGE_BYTES {
        return None;
    }
    Some(NewMessage {
        content_type,
        body,
        delay_seconds: parse_delay(wire.delay_seconds.as_ref()).ok()?,
    })
}

/// `parse_message` for a well-formed body straight from its bytes; None
/// when the general parser must decide.
pub fn fast_parse_message(bytes: &[u8]) -> Option<NewMessage> {
    let Object(wire) = serde_json::from_slice(bytes).ok()?;
    fast_message(wire)
}

/// `parse_batch` for a well-formed body straight from its bytes; None when
/// the general parser must decide.
pub fn fast_parse_batch(bytes: &[u8]) -> Option<Vec<NewMessage>> {
    let Object(batch): Object<WireBatch<'_>> = serde_json::from_slice(bytes).ok()?;
    if batch.messages.is_empty() || batch.messages.len() > MAX_BATCH_MESSAGES {
        return None;
    }
    let batch_delay = parse_delay(batch.delay_seconds.as_ref()).ok()?;
    let mut total = 0usize;
    let mut out = Vec::with_capacity(batch.messages.len());
    // Each message is read once, straight into its borrowed fields.
    for Object(wire) in batch.messages {
        let mut msg = fast_message(wire)?;
        total += msg.body.len();
        msg.delay_seconds = msg.delay_seconds.or(batch_delay);
        out.push(msg);
    }
    (total <= MAX_BATCH_BYTES).then_some(out)
}

/// The backlog figures returned by metrics and inside send/pull replies.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct BacklogMetrics {
    pub backlog_count: u64,
    pub backlog_bytes: u64,
    pub oldest_message_timestamp_ms: u64,
}

/// A body as a pull or peek returns it: text plain, json and bytes base64.
/// Text was UTF-8 when it arrived, so it moves into the String uncopied.
pub fn encode_body(content_type: ContentType, body: Vec<u8>) -> String {
    match content_type {
        ContentType::Text => {
            String::from_utf8(body).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        }
        ContentType::Json | ContentType::Bytes => STANDARD.encode(body),
    }
}

/// A pulled or peeked message's `metadata`, as Cloudflare returns it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MessageMetadata {
    #[serde(rename = "CF-Content-Type")]
    content_type: &'static str,
    #[serde(rename = "CF-sourceMessageSource")]
    source: &'static str,
}

pub fn message_metadata(content_type: ContentType) -> MessageMetadata {
    MessageMetadata {
        content_type: content_type.as_str(),
        source: "api",
    }
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
    pub metadata: MessageMetadata,
    pub lease_id: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeekedMessage {
    pub id: String,
    pub timestamp_ms: u64,
    pub attempts: u32,
    pub body: String,
    pub metadata: MessageMetadata,
    #[serde(rename = "ref")]
    pub message_ref: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
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

    fn same(fast: &NewMessage, slow: &NewMessage) -> bool {
        let body_equal = match fast.content_type {
            ContentType::Json => {
                serde_json::from_slice::<Value>(&fast.body).ok()
                    == serde_json::from_slice::<Value>(&slow.body).ok()
            }
            _ => fast.body == slow.body,
        };
        fast.content_type == slow.content_type && fast.delay_seconds == slow.delay_seconds && body_equal
    }

    fn message_json() -> impl Strategy<Value = String> {
        let body = prop_oneof![
            "[a-zA-Z0-9 é\\\"]{0,12}".prop_map(|s| Value::String(s).to_string()),
            Just("AAEC".to_string()).prop_map(|s| format!("{s:?}")),
            any::<i64>().prop_map(|n| n.to_string()),
            Just("1e2".to_string()),
            Just("{\"a\": [1, 2]}".to_string()),
            Just("{\"a\":[1,2.5,null,true]}".to_string()),
            Just("null".to_string()),
            Just("[1,\"x\"]".to_string()),
        ];
        let content_type = prop_oneof![
            Just(None),
            Just(Some("\"json\"")),
            Just(Some("\"text\"")),
            Just(Some("\"bytes\"")),
            Just(Some("\"v8\"")),
            Just(Some("null")),
            Just(Some("3")),
        ];
        let delay = prop_oneof![
            Just(None),
            Just(Some("5")),
            Just(Some("5.0")),
            Just(Some("-1")),
            Just(Some("\"5\"")),
            Just(Some("86401"))
        ];
        (proptest::option::of(body), content_type, delay).prop_map(|(body, ct, delay)| {
            let mut fields = Vec::new();
            if let Some(b) = body {
                fields.push(format!("\"body\":{b}"));
            }
            if let Some(c) = ct {
                fields.push(format!("\"content_type\": {c}"));
            }
            if let Some(d) = delay {
                fields.push(format!("\"delay_seconds\":{d}"));
            }
            format!("{{{}}}", fields.join(","))
        })
    }

    proptest::proptest! {
        /// Whenever the fast path accepts a body, the general parser accepts
        /// it too and means the same messages.
        #[test]
        fn the_fast_path_agrees_with_the_general_parser(
            messages in proptest::collection::vec(message_json(), 0..4),
            batch_delay in prop_oneof![Just(String::new()), Just(",\"delay_seconds\":3".to_string()), Just(",\"delay_seconds\":[3]".to_string())],
        ) {
            for m in &messages {
                if let Some(fast) = fast_parse_message(m.as_bytes()) {
                    let slow = parse_message(&serde_json::from_str(m).unwrap(), None);
                    proptest::prop_assert!(slow.as_ref().is_ok_and(|slow| same(&fast, slow)), "{} -> {:?} vs {:?}", m, fast, slow);
                }
            }
            let batch = format!("{{\"messages\":[{}]{batch_delay}}}", messages.join(","));
            if let Some(fast) = fast_parse_batch(batch.as_bytes()) {
                let slow = parse_batch(&serde_json::from_str(&batch).unwrap());
                proptest::prop_assert!(slow.as_ref().is_ok_and(|slow| slow.len() == fast.len() && fast.iter().zip(slow).all(|(f, s)| same(f, s))), "{}", batch);
            }
        }
    }

    #[test]
    fn the_fast_path_leaves_arrays_and_odd_bodies_to_the_general_parser() {
        assert!(fast_parse_message(br#"["x", "text"]"#).is_none());
        assert!(fast_parse_batch(br#"{"messages": [["x", "text"]]}"#).is_none());
        assert!(fast_parse_batch(br#"[[{"body": 1}]]"#).is_none());
        assert!(
            fast_parse_message(br#"{"body": {"a": 1}}"#).is_none(),
            "whitespace to compact"
        );
        let m = fast_parse_message(br#"{"body":{"a":1},"content_type":"json"}"#).unwrap();
        assert_eq!(m.body, br#"{"a":1}"#);
        let m = fast_parse_message(br#"{"body":"h\u00e9","content_type":"text"}"#).unwrap();
        assert_eq!(m.body, "hé".as_bytes());
    }
}
