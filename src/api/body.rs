//! Request bodies and path parameters: read with a limit, parse as JSON,
//! classify errors (malformed JSON vs a body of the wrong shape).

use actix_web::web;
use futures_util::StreamExt;
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::broker::model::valid_object_id;

/// Time allowed to receive a whole request body once its headers arrived.
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The largest request body accepted. A batch holds at most 256 KB of
/// message bodies; base64 and JSON escaping can inflate that several times.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// Reads the body, refusing more than `MAX_BODY_BYTES`, and parses it as a
/// JSON object. An empty body is an empty object (pull, purge and DELETE
/// requests often send none).
pub async fn json_object(payload: web::Payload) -> Result<Map<String, Value>, ApiError> {
    json_object_or(payload, |_| ApiError::BodyTooLarge(MAX_BODY_BYTES)).await
}

/// Like `json_object`, with the route's own error for an oversized body
/// (a single message over the cap is "message too large", not "batch").
pub async fn json_object_or(
    payload: web::Payload,
    too_large: impl Fn(usize) -> ApiError,
) -> Result<Map<String, Value>, ApiError> {
    parse_object(&read_body(payload, 0, too_large).await?)
}

/// Reads the whole body, refusing more than `MAX_BODY_BYTES` and giving up
/// after `BODY_TIMEOUT`. `expected` (the Content-Length, when known) sizes
/// the buffer once instead of growing it chunk by chunk.
pub async fn read_body(
    mut payload: web::Payload,
    expected: usize,
    too_large: impl Fn(usize) -> ApiError,
) -> Result<web::BytesMut, ApiError> {
    let read = async {
        let mut bytes = web::BytesMut::with_capacity(expected.min(MAX_BODY_BYTES));
        while let Some(chunk) = payload.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::InvalidBody(format!("could not read request body: {e}")))?;
            if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(too_large(bytes.len() + chunk.len()));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    tokio::time::timeout(BODY_TIMEOUT, read)
        .await
        .map_err(|_| ApiError::BodyTimeout(BODY_TIMEOUT.as_secs()))?
}

/// The request's Content-Length, or 0.
pub fn content_length(req: &actix_web::HttpRequest) -> usize {
    req.headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ApiError::InvalidBody(format!(
            "the request body must be a JSON object, got {}",
            kind(&other)
        ))),
        Err(e) => Err(ApiError::MalformedJson(format!(
            "the request body is not valid JSON: {e}"
        ))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub fn queue_id(raw: &str) -> Result<&str, ApiError> {
    if valid_object_id(raw) {
        Ok(raw)
    } else {
        Err(ApiError::MalformedQueueId(raw.to_owned()))
    }
}

/// An optional whole-number field within `range`; 10207 otherwise.
pub fn uint_in(
    obj: &Map<String, Value>,
    key: &str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Option<u64>, ApiError> {
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
                .ok_or_else(|| ApiError::InvalidBody(format!("{key} must be a whole number, got {v}")))?;
            if !range.contains(&n) {
                return Err(ApiError::InvalidBody(format!(
                    "{key} must be between {} and {}, got {n}",
                    range.start(),
                    range.end()
                )));
            }
            Ok(Some(n))
        }
    }
}

pub fn string_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(ApiError::InvalidBody(format!("{key} must be a string, got {v}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes at all: an object or a clean error, never a panic.
        #[test]
        fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_object(&bytes);
        }

        /// Arbitrary JSON-ish text shaped like messages, batches and acks.
        #[test]
        fn message_parsers_never_panic(text in "[\\[\\]{}\",:a-z0-9 .eE+-]{0,200}") {
            if let Ok(map) = parse_object(text.as_bytes()) {
                let v = Value::Object(map);
                let _ = crate::broker::message::parse_message(&v, None);
                let _ = crate::broker::message::parse_batch(&v);
                let _ = crate::broker::model::ConsumerSpec::from_request(&v, None);
                let _ = crate::broker::model::QueueSettings::default().patched(&v);
            }
        }
    }

    #[test]
    fn classifies_bodies() {
        assert!(parse_object(b"").unwrap().is_empty());
        assert!(matches!(
            parse_object(b"{\"a\":"),
            Err(ApiError::MalformedJson(_))
        ));
        assert!(matches!(parse_object(b"[1]"), Err(ApiError::InvalidBody(_))));
        assert!(matches!(
            parse_object(&[0xff, 0xfe]),
            Err(ApiError::MalformedJson(_))
        ));
    }
}
