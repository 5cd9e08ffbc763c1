//! Lease ids and message refs: opaque, tamper-evident tokens.
//!
//! A lease id carries (sequence number, attempt) and an HMAC over them and
//! the queue id, keyed by a server secret kept in the catalog. A forged or
//! altered id fails the MAC and can never ack another message; one from
//! another queue fails too. Sequence numbers are never reused in a queue, so
//! a lease id names one delivery of one message forever.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

const TAG_LEASE: u8 = 1;
const TAG_REF: u8 = 2;
const MAC_LEN: usize = 16;
const LEN: usize = 1 + 8 + 4 + MAC_LEN;

pub struct LeaseSigner {
    key: Vec<u8>,
}

impl LeaseSigner {
    pub fn new(key: Vec<u8>) -> Self {
        LeaseSigner { key }
    }

    fn mac(&self, tag: u8, queue_id: &str, seq: u64, attempt: u32) -> [u8; MAC_LEN] {
        // HMAC accepts keys of any length, so `new_from_slice` cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        mac.update(&[tag]);
        mac.update(queue_id.as_bytes());
        mac.update(&seq.to_be_bytes());
        mac.update(&attempt.to_be_bytes());
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&full[..MAC_LEN]);
        out
    }

    fn encode(&self, tag: u8, queue_id: &str, seq: u64, attempt: u32) -> String {
        let mut raw = [0u8; LEN];
        raw[0] = tag;
        raw[1..9].copy_from_slice(&seq.to_be_bytes());
        raw[9..13].copy_from_slice(&attempt.to_be_bytes());
        raw[13..].copy_from_slice(&self.mac(tag, queue_id, seq, attempt));
        URL_SAFE_NO_PAD.encode(raw)
    }

    fn decode(&self, tag: u8, queue_id: &str, text: &str) -> Option<(u64, u32)> {
        if text.len() > 64 {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(text).ok()?;
        if raw.len() != LEN || raw[0] != tag {
            return None;
        }
        let seq = u64::from_be_bytes(raw[1..9].try_into().ok()?);
        let attempt = u32::from_be_bytes(raw[9..13].try_into().ok()?);
        let expected = self.mac(tag, queue_id, seq, attempt);
        let ok: bool = subtle::ConstantTimeEq::ct_eq(&expected[..], &raw[13..]).into();
        ok.then_some((seq, attempt))
    }

    pub fn lease_id(&self, queue_id: &str, seq: u64, attempt: u32) -> String {
        self.encode(TAG_LEASE, queue_id, seq, attempt)
    }

    /// Returns (sequence, attempt) when the id is genuine for this queue.
    pub fn parse_lease(&self, queue_id: &str, lease_id: &str) -> Option<(u64, u32)> {
        self.decode(TAG_LEASE, queue_id, lease_id)
    }

    pub fn message_ref(&self, queue_id: &str, seq: u64) -> String {
        self.encode(TAG_REF, queue_id, seq, 0)
    }

    pub fn parse_ref(&self, queue_id: &str, r: &str) -> Option<u64> {
        self.decode(TAG_REF, queue_id, r).map(|(seq, _)| seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn genuine_ids_roundtrip_and_altered_ones_fail(seq: u64, attempt: u32, flip in 0usize..LEN, bit in 0u8..8) {
            let s = LeaseSigner::new(b"k".to_vec());
            let id = s.lease_id("q1", seq, attempt);
            prop_assert_eq!(s.parse_lease("q1", &id), Some((seq, attempt)));
            prop_assert_eq!(s.parse_lease("q2", &id), None);
            prop_assert_eq!(s.parse_ref("q1", &id), None);
            let mut raw = URL_SAFE_NO_PAD.decode(&id).unwrap();
            raw[flip] ^= 1 << bit;
            prop_assert_eq!(s.parse_lease("q1", &URL_SAFE_NO_PAD.encode(raw)), None);
        }
    }

    #[test]
    fn garbage_is_rejected() {
        let s = LeaseSigner::new(b"k".to_vec());
        for g in ["", "abc", "!!!!", &"A".repeat(500)] {
            assert_eq!(s.parse_lease("q", g), None);
        }
    }
}
