//! Config files: any text is a config or an error naming the problem.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = hopper::config::file::parse(text, "fuzz.toml");
    }
});
