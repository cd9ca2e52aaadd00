//! W3C Trace Context (`traceparent`, `tracestate`): the ids a caller's trace continues from,
//! read from HTTP headers and gRPC metadata alike (both are HTTP headers here), and the ids
//! this server makes for its own spans.

use std::sync::atomic::{AtomicU64, Ordering};

use http::{HeaderMap, HeaderValue};

pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

/// The longest `tracestate` carried on (the W3C limit is 32 members of at most 256 bytes; a
/// longer header is dropped rather than cut, as the specification allows).
const MAX_TRACESTATE_LEN: usize = 512;

pub type TraceId = [u8; 16];
pub type SpanId = [u8; 8];

/// The caller's span a request's root span continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteParent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
}

/// The trace headers of a request, kept unparsed (shared with the request's header map, not
/// copied) until the request is sampled.
#[derive(Debug, Clone, Default)]
pub struct TraceHeaders {
    parent: Option<HeaderValue>,
    state: Option<HeaderValue>,
}

impl TraceHeaders {
    pub fn of(headers: &HeaderMap) -> Self {
        Self {
            parent: headers.get(TRACEPARENT).cloned(),
            state: headers.get(TRACESTATE).cloned(),
        }
    }

    /// The caller's span, when `traceparent` is well formed (an invalid one starts a new
    /// trace, as the specification asks).
    pub fn parent(&self) -> Option<RemoteParent> {
        parse_traceparent(self.parent.as_ref()?.as_bytes())
    }

    /// `tracestate`, passed on as the caller sent it; only with a valid `traceparent`.
    pub fn state(&self) -> String {
        let state = self.state.as_ref().filter(|_| self.parent().is_some());
        state
            .and_then(|value| value.to_str().ok())
            .filter(|text| text.len() <= MAX_TRACESTATE_LEN)
            .unwrap_or_default()
            .to_owned()
    }
}

/// `version-traceid-spanid-flags`, lower-case hex; an all-zero id is invalid, version `ff`
/// too. Later versions may append fields after the flags, which are ignored.
pub fn parse_traceparent(text: &[u8]) -> Option<RemoteParent> {
    if text.len() < 55 || (text.len() > 55 && (text[0..2] == *b"00" || text[55] != b'-')) {
        return None;
    }
    if text[2] != b'-' || text[35] != b'-' || text[52] != b'-' || text[0..2] == *b"ff" {
        return None;
    }
    let mut version = [0u8; 1];
    let mut flags = [0u8; 1];
    let mut trace_id = [0u8; 16];
    let mut span_id = [0u8; 8];
    decode_hex(&text[0..2], &mut version)?;
    decode_hex(&text[3..35], &mut trace_id)?;
    decode_hex(&text[36..52], &mut span_id)?;
    decode_hex(&text[53..55], &mut flags)?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(RemoteParent { trace_id, span_id })
}

fn decode_hex(text: &[u8], out: &mut [u8]) -> Option<()> {
    for (pair, byte) in text.chunks_exact(2).zip(out.iter_mut()) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(())
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Lower-case hex of `bytes`, as the access log and `traceparent` write ids.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

/// Makes span and trace ids: a counter run through SplitMix64, seeded from the clock and the
/// process id, so that ids are unique within the process and unlikely to repeat across
/// restarts, without a random-number crate or a lock.
#[derive(Debug)]
pub struct IdSource {
    next: AtomicU64,
}

impl Default for IdSource {
    fn default() -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let seed = (now.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32);
        Self {
            next: AtomicU64::new(seed),
        }
    }
}

impl IdSource {
    fn next(&self) -> u64 {
        let mut z = self
            .next
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn span_id(&self) -> SpanId {
        // Zero is the invalid id.
        let id = self.next().max(1);
        id.to_be_bytes()
    }

    pub fn trace_id(&self) -> TraceId {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.next().to_be_bytes());
        id[8..].copy_from_slice(&self.span_id());
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_gives_its_ids() {
        let parent =
            parse_traceparent(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
        assert_eq!(hex(&parent.trace_id), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(hex(&parent.span_id), "b7ad6b7169203331");
    }

    #[test]
    fn malformed_traceparents_start_a_new_trace() {
        for bad in [
            &b""[..],
            b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            b"00-00000000000000000000000000000000-b7ad6b7169203331-01",
            b"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            b"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            b"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            b"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert_eq!(
                parse_traceparent(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // A later version may add fields.
        assert!(
            parse_traceparent(b"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more")
                .is_some()
        );
    }

    #[test]
    fn ids_are_distinct_and_never_zero() {
        let ids = IdSource::default();
        let a = ids.trace_id();
        let b = ids.trace_id();
        assert_ne!(a, b);
        assert_ne!(ids.span_id(), [0; 8]);
    }
}
