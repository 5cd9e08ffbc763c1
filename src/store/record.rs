//! The fixed-size message record kept beside each body. Bodies live in their
//! own table so that a state change (lease, retry) rewrites 42 bytes, not
//! the body.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ContentType {
    #[default]
    Json,
    Text,
    Bytes,
}

impl ContentType {
    pub fn as_str(self) -> &'static str {
        match self {
            ContentType::Json => "json",
            ContentType::Text => "text",
            ContentType::Bytes => "bytes",
        }
    }

    fn to_byte(self) -> u8 {
        match self {
            ContentType::Json => 0,
            ContentType::Text => 1,
            ContentType::Bytes => 2,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(ContentType::Json),
            1 => Some(ContentType::Text),
            2 => Some(ContentType::Bytes),
            _ => None,
        }
    }
}

/// Everything the queue needs to know about a message except its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageRecord {
    /// The message id shown to clients (a UUID's 128 bits).
    pub id: u128,
    /// Publish time, wall clock, ms since the epoch. Retention counts from it.
    pub timestamp_ms: u64,
    /// When the message is (again) deliverable. For a leased message this is
    /// the lease deadline.
    pub visible_at_ms: u64,
    /// Deliveries so far.
    pub attempts: u32,
    /// Body size as the limits count it.
    pub size: u32,
    pub content_type: ContentType,
    /// Leased to a consumer until `visible_at_ms`.
    pub leased: bool,
}

impl MessageRecord {
    pub const ENCODED_LEN: usize = 16 + 8 + 8 + 4 + 4 + 1 + 1;

    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[0..16].copy_from_slice(&self.id.to_be_bytes());
        out[16..24].copy_from_slice(&self.timestamp_ms.to_be_bytes());
        out[24..32].copy_from_slice(&self.visible_at_ms.to_be_bytes());
        out[32..36].copy_from_slice(&self.attempts.to_be_bytes());
        out[36..40].copy_from_slice(&self.size.to_be_bytes());
        out[40] = self.content_type.to_byte();
        out[41] = u8::from(self.leased);
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != Self::ENCODED_LEN {
            return None;
        }
        let u64_at = |i: usize| u64::from_be_bytes(bytes[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap_or_default());
        Some(MessageRecord {
            id: u128::from_be_bytes(bytes[0..16].try_into().ok()?),
            timestamp_ms: u64_at(16),
            visible_at_ms: u64_at(24),
            attempts: u32_at(32),
            size: u32_at(36),
            content_type: ContentType::from_byte(bytes[40])?,
            leased: match bytes[41] {
                0 => false,
                1 => true,
                _ => return None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn record_roundtrips(id: u128, ts: u64, vis: u64, attempts: u32, size: u32, ct in 0u8..3, leased: bool) {
            let rec = MessageRecord {
                id, timestamp_ms: ts, visible_at_ms: vis, attempts, size,
                content_type: ContentType::from_byte(ct).unwrap(), leased,
            };
            prop_assert_eq!(MessageRecord::decode(&rec.encode()), Some(rec));
        }
    }

    #[test]
    fn rejects_wrong_length_and_bad_tags() {
        assert_eq!(MessageRecord::decode(&[0u8; 10]), None);
        let mut bytes = [0u8; MessageRecord::ENCODED_LEN];
        bytes[40] = 9;
        assert_eq!(MessageRecord::decode(&bytes), None);
    }
}
