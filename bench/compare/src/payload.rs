//! The one message document every system carries, and the request bodies
//! built from it.
//!
//! Every message is `{"t":<send time, µs since the UNIX epoch>,"p":"xxxx…"}`
//! padded so the serialized document is exactly [`DOC_BYTES`] long. Bodies
//! are assembled by copying bytes rather than through `serde_json::Value`:
//! the client shares two cores with the server under test, so every cycle
//! it spends is one the server doesn't get.

use std::time::{SystemTime, UNIX_EPOCH};

/// Serialized size of every message document.
pub const DOC_BYTES: usize = 1024;

/// Wall-clock microseconds since the UNIX epoch: the unit of `t`.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Appends the document for send time `t`; with `escaped`, its quotes are
/// escaped so it can sit inside a JSON string (Hopper's `text` bodies).
/// The padding is sized on the unescaped form, so the message is 1 KiB in
/// every system.
pub fn write_doc(out: &mut Vec<u8>, t: u64, escaped: bool) {
    let digits = t.to_string();
    // {"t":  <digits>  ,"p":"  <pad>  "}
    let fixed = 5 + digits.len() + 6 + 2;
    let pad = DOC_BYTES.saturating_sub(fixed);
    let q: &[u8] = if escaped { b"\\\"" } else { b"\"" };
    out.push(b'{');
    out.extend_from_slice(q);
    out.push(b't');
    out.extend_from_slice(q);
    out.push(b':');
    out.extend_from_slice(digits.as_bytes());
    out.push(b',');
    out.extend_from_slice(q);
    out.push(b'p');
    out.extend_from_slice(q);
    out.push(b':');
    out.extend_from_slice(q);
    out.resize(out.len() + pad, b'x');
    out.extend_from_slice(q);
    out.push(b'}');
}

/// The plain document for send time `t`.
pub fn doc(t: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(DOC_BYTES);
    write_doc(&mut out, t, false);
    out
}

/// Hopper's single-send body: `{"body":"<doc>","content_type":"text"}`.
pub fn hopper_single(t: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(DOC_BYTES + 80);
    out.extend_from_slice(b"{\"body\":\"");
    write_doc(&mut out, t, true);
    out.extend_from_slice(b"\",\"content_type\":\"text\"}");
    out
}

/// Hopper's batch body: `{"messages":[{"body":"<doc>","content_type":"text"},…]}`.
pub fn hopper_batch(t: u64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * (DOC_BYTES + 80) + 16);
    out.extend_from_slice(b"{\"messages\":[");
    for i in 0..n {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"body\":\"");
        write_doc(&mut out, t, true);
        out.extend_from_slice(b"\",\"content_type\":\"text\"}");
    }
    out.extend_from_slice(b"]}");
    out
}

/// Reads `t` back from a received document without parsing it as JSON.
/// Documents arrive as sent (`{"t":…` first) except from pgmq, whose jsonb
/// output reorders keys and adds spaces (`{"p": "…", "t": …}`), so the key
/// is looked for at the front first and then from the back.
pub fn read_t(doc: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"t\":";
    let at = if doc.get(1..5) == Some(KEY) {
        1
    } else {
        doc.windows(KEY.len()).rposition(|w| w == KEY)?
    };
    let mut rest = &doc[at + KEY.len()..];
    while let [b' ', tail @ ..] = rest {
        rest = tail;
    }
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_is_one_kib_and_valid_json() {
        let d = doc(1_732_000_000_123_456);
        assert_eq!(d.len(), DOC_BYTES);
        let v: serde_json::Value = serde_json::from_slice(&d).expect("json");
        assert_eq!(v["t"], 1_732_000_000_123_456u64);
    }

    #[test]
    fn hopper_bodies_carry_the_doc_as_a_string() {
        #[derive(serde::Deserialize)]
        struct Msg {
            body: String,
        }
        #[derive(serde::Deserialize)]
        struct Batch {
            messages: Vec<Msg>,
        }
        let b: Batch = serde_json::from_slice(&hopper_batch(42, 3)).expect("json");
        assert_eq!(b.messages.len(), 3);
        assert_eq!(b.messages[0].body.len(), DOC_BYTES);
        assert_eq!(read_t(b.messages[2].body.as_bytes()), Some(42));
        let m: Msg = serde_json::from_slice(&hopper_single(7)).expect("json");
        assert_eq!(read_t(m.body.as_bytes()), Some(7));
    }

    #[test]
    fn reads_t_from_reordered_jsonb_text() {
        assert_eq!(
            read_t(br#"{"p": "xxxx", "t": 1732000000123456}"#),
            Some(1_732_000_000_123_456)
        );
        assert_eq!(read_t(b"{}"), None);
    }
}
