//! The length-prefixed form of a string tensor (KServe's raw BYTES, the binary extension, a
//! shared-memory window): each element a 4-byte little-endian length, then its bytes. Its
//! prefixes are read without allocating, and what decoding it costs the server is priced
//! here, so that admission can charge for it before anything is built.

use crate::tensor::DecodeError;

/// Bytes one element of the packed form takes: its offset.
const OFFSET_BYTES: u64 = std::mem::size_of::<usize>() as u64;

/// What ONNX Runtime holds per string element of a tensor: a `std::string`, 32 bytes with
/// libstdc++, inside which strings of up to [`INLINE_STRING_BYTES`] live.
const RUNTIME_STRING_BYTES: u64 = 32;

/// The longest string a `std::string` holds without a heap copy (libstdc++).
const INLINE_STRING_BYTES: usize = 15;

/// The allocator's overhead on the heap copy of a longer string, at most: its 8-byte header
/// and the rounding of the block to 16 bytes, counting the copy's terminating NUL.
const HEAP_COPY_OVERHEAD: u64 = 24;

/// The length prefix an element takes in an encoded answer.
const PREFIX_BYTES: u64 = 4;

/// Charged per element decoded from length-prefixed data: its offset here and the runtime's
/// string for it, and as much again for an output that echoes it, whose encoded answer then
/// holds a length prefix per element twice (the encoding, and the response body it is
/// copied into). Measured with `echo_string` (scripts/raw_bytes_rss.py): 8 Mi empty elements
/// in 32 MiB grow the server by 77 bytes each, the body included.
pub const PREFIXED_ELEMENT_BYTES: u64 =
    2 * (OFFSET_BYTES + RUNTIME_STRING_BYTES) + 2 * PREFIX_BYTES;

/// Charged on top per element too long to live inside its `std::string`: the allocator's
/// overhead on the runtime's heap copy, and on an echoing output's.
pub const PREFIXED_LONG_ELEMENT_BYTES: u64 = 2 * HEAP_COPY_OVERHEAD;

/// Charged per byte of the elements' data: the runtime's copy, and an echoing output's four
/// (the runtime's, the buffer it is read into, the encoded answer and the response body). The
/// data itself stays where it arrived: in the request's body, charged at admission, or in the
/// client's shared memory. Measured: 1 Mi elements of 28 bytes in a shared-memory window grow
/// the server by 225 bytes each, against 276 charged.
pub const PREFIXED_PAYLOAD_COPIES: u64 = 5;

/// Length-prefixed data that holds exactly its declared number of elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixedLayout {
    /// Elements.
    pub count: usize,
    /// Elements longer than a `std::string` holds inline.
    pub long: usize,
    /// Bytes of the elements themselves, without their prefixes.
    pub payload: usize,
}

impl PrefixedLayout {
    /// Reads the length prefixes of `raw` without allocating: exactly `count` elements must
    /// fill it. The walk stops at the first element past `count`, so data that declares one
    /// element and sends millions is refused after reading two prefixes.
    pub fn scan(raw: &[u8], count: usize) -> Result<Self, DecodeError> {
        check_prefix_room(raw.len(), count)?;
        let mut at = 0usize;
        let mut long = 0usize;
        for element in 0..count {
            let end = element_end(raw, at, element)?;
            long += usize::from(end - at - 4 > INLINE_STRING_BYTES);
            at = end;
        }
        if at != raw.len() {
            return Err(DecodeError::BytesPastShape {
                count,
                extra: raw.len() - at,
            });
        }
        Ok(Self {
            count,
            long,
            // Every element took 4 bytes of prefix, and `count <= raw.len() / 4`.
            payload: raw.len() - count * 4,
        })
    }

    /// What decoding this data and running a model on it makes the server hold, beyond the
    /// data itself: see [`PREFIXED_ELEMENT_BYTES`], [`PREFIXED_LONG_ELEMENT_BYTES`] and
    /// [`PREFIXED_PAYLOAD_COPIES`].
    pub fn decoded_cost(&self) -> u64 {
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        wide(self.count)
            .saturating_mul(PREFIXED_ELEMENT_BYTES)
            .saturating_add(wide(self.long).saturating_mul(PREFIXED_LONG_ELEMENT_BYTES))
            .saturating_add(wide(self.payload).saturating_mul(PREFIXED_PAYLOAD_COPIES))
    }
}

/// Refuses a count whose prefixes alone would not fit in `len` bytes, before anything is
/// allocated for it.
fn check_prefix_room(len: usize, count: usize) -> Result<(), DecodeError> {
    if count > len / 4 {
        return Err(DecodeError::BytesPrefixesPastData { count, bytes: len });
    }
    Ok(())
}

/// Where element `element`, whose prefix starts at `at`, ends.
pub(super) fn element_end(raw: &[u8], at: usize, element: usize) -> Result<usize, DecodeError> {
    let header = raw
        .get(at..)
        .and_then(|rest| rest.first_chunk::<4>())
        .ok_or(DecodeError::BytesPrefixCut { element })?;
    let len = u32::from_le_bytes(*header) as usize;
    let start = at + 4;
    start
        .checked_add(len)
        .filter(|&end| end <= raw.len())
        .ok_or(DecodeError::BytesElementPastEnd {
            element,
            len,
            remaining: raw.len() - start,
        })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::tensor::Strings;

    fn prefixed(elements: &[&[u8]]) -> Bytes {
        let mut raw = Vec::new();
        for element in elements {
            raw.extend_from_slice(&(element.len() as u32).to_le_bytes());
            raw.extend_from_slice(element);
        }
        Bytes::from(raw)
    }

    #[test]
    fn the_scan_stops_at_the_first_element_past_the_declared_count() {
        // Millions of empty elements where one is declared: the error says how much follows
        // the one, which is known after reading a single prefix.
        let raw = vec![0u8; 32 << 20];
        assert_eq!(
            PrefixedLayout::scan(&raw, 1),
            Err(DecodeError::BytesPastShape {
                count: 1,
                extra: (32 << 20) - 4
            })
        );
        assert!(matches!(
            Strings::length_prefixed(Bytes::from(raw), 1),
            Err(DecodeError::BytesPastShape { count: 1, .. })
        ));
    }

    #[test]
    fn malformed_prefixes_are_refused() {
        let truncated = [5, 0, 0, 0, b'a'];
        assert_eq!(
            PrefixedLayout::scan(&truncated, 1),
            Err(DecodeError::BytesElementPastEnd {
                element: 0,
                len: 5,
                remaining: 1
            })
        );
        let cut = [0, 0, 0, 0, 1, 0];
        assert!(matches!(
            PrefixedLayout::scan(&cut, 1),
            Err(DecodeError::BytesPastShape { .. })
        ));
        let short = [2, 0, 0, 0, b'a', b'b', 0, 0];
        assert_eq!(
            PrefixedLayout::scan(&short, 2),
            Err(DecodeError::BytesPrefixCut { element: 1 })
        );
        assert_eq!(
            PrefixedLayout::scan(&[0, 0, 0, 0], 1_000_000_000),
            Err(DecodeError::BytesPrefixesPastData {
                count: 1_000_000_000,
                bytes: 4
            })
        );
        let huge_len = [0xff, 0xff, 0xff, 0xff];
        assert!(PrefixedLayout::scan(&huge_len, 1).is_err());
    }

    #[test]
    fn the_cost_counts_elements_long_ones_and_payload() -> Result<(), DecodeError> {
        let long = [7u8; 16];
        let raw = prefixed(&[b"abcd", b"", &long, &long[..15]]);
        let layout = PrefixedLayout::scan(&raw, 4)?;
        assert_eq!(
            layout,
            PrefixedLayout {
                count: 4,
                long: 1,
                payload: 35
            }
        );
        assert_eq!(
            layout.decoded_cost(),
            4 * PREFIXED_ELEMENT_BYTES + PREFIXED_LONG_ELEMENT_BYTES + 35 * PREFIXED_PAYLOAD_COPIES
        );
        Ok(())
    }
}
