//! What a function's reply means for each message of a pushed batch.
//!
//! Rules (README "Writing a function"):
//! - A 2xx acks every message it does not retry; an empty or unparseable
//!   body acks all.
//! - A JSON reply may say `{"acks": [id], "retries": [{"id", "delay_seconds"?}],
//!   "ack_all": bool, "retry_all": {"delay_seconds"?}}`. The first word about
//!   a message wins (document order); a message-level word beats
//!   `ack_all`/`retry_all`; after one of those two the other is ignored.
//! - A non-2xx, a timeout or a connection error fails the batch: only ids in
//!   a parseable body's `acks` are acked (`ack_all` is ignored); every other
//!   message is retried.
//! - Retry delay: per-message `delay_seconds` > `retry_all.delay_seconds` >
//!   a 429's `Retry-After` > consumer `retry_delay` > 0.

use std::collections::HashMap;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::model::MAX_DELAY_SECONDS;

/// How the function answered.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An HTTP response: status, body, and `Retry-After` seconds if any.
    Http {
        status: u16,
        body: Vec<u8>,
        retry_after: Option<u64>,
    },
    /// Timeout or connection error: no response at all.
    NoResponse,
}

/// Whether a 2xx body says anything (an object with at least one of the
/// reply's keys); used to warn about replies that ack everything by accident.
pub fn body_is_a_reply(body: &[u8]) -> bool {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => ["acks", "retries", "ack_all", "retry_all"]
            .iter()
            .any(|k| map.contains_key(*k)),
        _ => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ack,
    Retry { delay_seconds: u64 },
}

/// A JSON object with its keys in document order.
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn delay_of(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_f64)
        .filter(|f| *f >= 0.0)
        .map(|f| (f as u64).min(MAX_DELAY_SECONDS))
}

/// What the reply body said, in the order it said it.
#[derive(Default, Debug)]
struct Said {
    /// message id -> Some(delay) for a retry, None for an ack; first wins.
    words: HashMap<String, Option<Option<u64>>>,
    ack_all: bool,
    /// Some(delay) when `retry_all` came before any `ack_all`.
    retry_all: Option<Option<u64>>,
    /// The explicit acks alone (what a failed batch still honours).
    acks: Vec<String>,
}

fn parse(body: &[u8]) -> Option<Said> {
    let Ordered(entries) = serde_json::from_slice(body).ok()?;
    let mut said = Said::default();
    let mut batch_word_seen = false;
    for (key, value) in entries {
        match key.as_str() {
            "acks" => {
                for id in value.as_array().into_iter().flatten().filter_map(Value::as_str) {
                    said.acks.push(id.to_owned());
                    said.words.entry(id.to_owned()).or_insert(None);
                }
            }
            "retries" => {
                for entry in value.as_array().into_iter().flatten() {
                    let (id, delay) = match entry {
                        Value::String(id) => (id.as_str(), None),
                        Value::Object(o) => match o.get("id").and_then(Value::as_str) {
                            Some(id) => (id, delay_of(o.get("delay_seconds"))),
                            None => continue,
                        },
                        _ => continue,
                    };
                    said.words.entry(id.to_owned()).or_insert(Some(delay));
                }
            }
            "ack_all" if !batch_word_seen && value.as_bool() == Some(true) => {
                said.ack_all = true;
                batch_word_seen = true;
            }
            "retry_all" if !batch_word_seen && !value.is_null() && value != Value::Bool(false) => {
                said.retry_all = Some(delay_of(value.get("delay_seconds")));
                batch_word_seen = true;
            }
            _ => {}
        }
    }
    Some(said)
}

/// Decides ack or retry (with its delay) for each message id, in order.
pub fn decide(ids: &[String], reply: &Reply, consumer_retry_delay: u64) -> Vec<Verdict> {
    let (success, said, retry_after) = match reply {
        Reply::Http {
            status,
            body,
            retry_after,
        } => (
            (200..300).contains(status),
            parse(body),
            if *status == 429 { *retry_after } else { None },
        ),
        Reply::NoResponse => (false, None, None),
    };
    let retry_all_delay = said.as_ref().and_then(|s| s.retry_all.flatten());
    let delay = |own: Option<u64>| {
        own.or(retry_all_delay)
            .or(retry_after)
            .unwrap_or(consumer_retry_delay)
    };
    ids.iter()
        .map(|id| {
            let word = said.as_ref().and_then(|s| s.words.get(id).copied());
            if success {
                match (word, &said) {
                    (Some(None), _) => Verdict::Ack,
                    (Some(Some(d)), _) => Verdict::Retry {
                        delay_seconds: delay(d),
                    },
                    (None, Some(s)) if s.retry_all.is_some() => Verdict::Retry {
                        delay_seconds: delay(None),
                    },
                    _ => Verdict::Ack,
                }
            } else {
                let acked = said.as_ref().is_some_and(|s| s.acks.iter().any(|a| a == id));
                // On failure only an explicit ack that came first counts.
                match word {
                    Some(None) if acked => Verdict::Ack,
                    Some(Some(d)) => Verdict::Retry {
                        delay_seconds: delay(d),
                    },
                    _ => Verdict::Retry {
                        delay_seconds: delay(None),
                    },
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    fn http(status: u16, body: &str) -> Reply {
        Reply::Http {
            status,
            body: body.as_bytes().to_vec(),
            retry_after: None,
        }
    }

    const ACK: Verdict = Verdict::Ack;
    fn retry(d: u64) -> Verdict {
        Verdict::Retry { delay_seconds: d }
    }

    #[test]
    fn empty_or_unparseable_2xx_acks_all() {
        assert_eq!(decide(&ids(), &http(200, ""), 7), vec![ACK; 3]);
        assert_eq!(decide(&ids(), &http(204, "not json"), 7), vec![ACK; 3]);
        assert_eq!(decide(&ids(), &http(200, "[1,2]"), 7), vec![ACK; 3]);
    }

    #[test]
    fn explicit_words_and_defaults_on_success() {
        let r = http(
            200,
            r#"{"retries": [{"id": "b", "delay_seconds": 30}, {"id": "c"}]}"#,
        );
        assert_eq!(decide(&ids(), &r, 7), vec![ACK, retry(30), retry(7)]);
    }

    #[test]
    fn first_word_wins_in_document_order() {
        let r = http(200, r#"{"retries": [{"id": "a"}], "acks": ["a", "b"]}"#);
        assert_eq!(decide(&ids(), &r, 0), vec![retry(0), ACK, ACK]);
        let r = http(200, r#"{"acks": ["a"], "retries": [{"id": "a"}]}"#);
        assert_eq!(decide(&ids(), &r, 0)[0], ACK);
    }

    #[test]
    fn message_level_beats_batch_level_and_first_batch_word_wins() {
        let r = http(
            200,
            r#"{"retry_all": {"delay_seconds": 9}, "acks": ["a"], "ack_all": true}"#,
        );
        assert_eq!(decide(&ids(), &r, 1), vec![ACK, retry(9), retry(9)]);
        let r = http(
            200,
            r#"{"ack_all": true, "retry_all": {}, "retries": [{"id": "c"}]}"#,
        );
        assert_eq!(decide(&ids(), &r, 1), vec![ACK, ACK, retry(1)]);
        // per-message delay beats retry_all's
        let r = http(
            200,
            r#"{"retry_all": {"delay_seconds": 9}, "retries": [{"id": "a", "delay_seconds": 2}]}"#,
        );
        assert_eq!(decide(&ids(), &r, 1), vec![retry(2), retry(9), retry(9)]);
    }

    #[test]
    fn failure_retries_everything_not_explicitly_acked() {
        let r = http(500, r#"{"acks": ["b"], "ack_all": true}"#);
        assert_eq!(decide(&ids(), &r, 4), vec![retry(4), ACK, retry(4)]);
        assert_eq!(decide(&ids(), &Reply::NoResponse, 4), vec![retry(4); 3]);
        assert_eq!(decide(&ids(), &http(503, "oops"), 0), vec![retry(0); 3]);
    }

    #[test]
    fn retry_after_on_429_sits_between_retry_all_and_consumer_delay() {
        let r = Reply::Http {
            status: 429,
            body: Vec::new(),
            retry_after: Some(12),
        };
        assert_eq!(decide(&ids(), &r, 4), vec![retry(12); 3]);
        let r = Reply::Http {
            status: 429,
            body: br#"{"retry_all": {"delay_seconds": 3}, "retries": [{"id": "a", "delay_seconds": 1}]}"#
                .to_vec(),
            retry_after: Some(12),
        };
        assert_eq!(decide(&ids(), &r, 4), vec![retry(1), retry(3), retry(3)]);
        // Retry-After only counts on a 429
        let r = Reply::Http {
            status: 503,
            body: Vec::new(),
            retry_after: Some(12),
        };
        assert_eq!(decide(&ids(), &r, 4), vec![retry(4); 3]);
    }
}
