//! Request bodies: any bytes must parse to a value or a clean error, and
//! every body parser built on them must refuse bad input without panicking.
#![no_main]

use hopper::api::body::parse_object;
use hopper::broker::message::{parse_batch, parse_message};
use hopper::broker::model::{ConsumerSettings, ConsumerSpec, ConsumerType, QueueSettings};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if let Ok(map) = parse_object(data) {
        let v = Value::Object(map);
        let _ = parse_message(&v, None);
        let _ = parse_batch(&v);
        let _ = ConsumerSpec::from_request(&v, None);
        let _ = QueueSettings::default().patched(&v);
        let _ = ConsumerSettings::defaults(ConsumerType::HttpPull).patched(&v);
    }
});
