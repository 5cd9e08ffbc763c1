//! Function replies: any status and body give one verdict per message.
#![no_main]

use hopper::broker::verdict::{decide, Reply, Verdict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let status = 100 + u16::from_le_bytes([data[0], data[1]]) % 500;
    let ids: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
    let reply = Reply::Http { status, body: data[2..].to_vec(), retry_after: Some(u64::from(data[2])) };
    let verdicts = decide(&ids, &reply, 7);
    assert_eq!(verdicts.len(), ids.len());
    for v in verdicts {
        if let Verdict::Retry { delay_seconds } = v {
            assert!(delay_seconds <= 86_400);
        }
    }
});
