//! Lease ids and refs: arbitrary text is never accepted unless it is a
//! genuine id, and genuine ids round-trip.
#![no_main]

use hopper::broker::lease::LeaseSigner;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let signer = LeaseSigner::new(b"fuzzing key".to_vec());
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some((seq, attempt)) = signer.parse_lease("q", text) {
            // only a genuine id parses: it must be exactly what we would issue
            assert_eq!(signer.lease_id("q", seq, attempt), text);
        }
        let _ = signer.parse_ref("q", text);
    }
    if data.len() >= 12 {
        let seq = u64::from_le_bytes(data[..8].try_into().unwrap());
        let attempt = u32::from_le_bytes(data[8..12].try_into().unwrap());
        let id = signer.lease_id("q", seq, attempt);
        assert_eq!(signer.parse_lease("q", &id), Some((seq, attempt)));
        assert_eq!(signer.parse_lease("other", &id), None);
    }
});
