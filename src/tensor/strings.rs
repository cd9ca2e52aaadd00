//! The elements of a string tensor, and what decoding them costs.
//!
//! A string tensor holds either one `Bytes` handle per element, as the protobuf and JSON
//! decoders make them, or its elements in one buffer with an offset each. The second form is
//! what length-prefixed data (KServe's raw BYTES, the binary extension, a shared-memory window)
//! and ONNX Runtime's outputs already are, so it costs 8 bytes per element instead of a
//! 32-byte handle, and the elements' bytes are never copied: a million empty strings in 4 MB
//! of length prefixes take 8 MB of offsets, not 32 MB of handles.

use bytes::Bytes;

use super::DecodeError;

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

/// The elements of a string tensor, in row-major order.
#[derive(Debug, Clone)]
pub struct Strings(Repr);

#[derive(Debug, Clone)]
enum Repr {
    /// One handle per element.
    Handles(Vec<Bytes>),
    /// Element `i` is `buffer[offsets[i] + prefix..offsets[i + 1]]`: `prefix` is 4 when each
    /// element is preceded by its length (the KServe wire form), 0 when they are contiguous.
    /// The constructors check that every such range lies inside `buffer`.
    Packed {
        buffer: Bytes,
        offsets: Vec<usize>,
        prefix: usize,
    },
}

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
fn element_end(raw: &[u8], at: usize, element: usize) -> Result<usize, DecodeError> {
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

impl Strings {
    /// One element per handle.
    pub fn from_handles(handles: Vec<Bytes>) -> Self {
        Self(Repr::Handles(handles))
    }

    /// The elements of length-prefixed data (each a 4-byte little-endian length, then its
    /// bytes), which must hold exactly `count` of them. The elements stay in `raw`; only an
    /// offset per element is allocated, and only once the data is known to hold them.
    pub fn length_prefixed(raw: Bytes, count: usize) -> Result<Self, DecodeError> {
        PrefixedLayout::scan(&raw, count)?;
        let mut offsets = Vec::with_capacity(count + 1);
        let mut at = 0usize;
        for element in 0..count {
            offsets.push(at);
            // Walked again rather than trusted: a shared-memory window can change under us.
            at = element_end(&raw, at, element)?;
        }
        if at != raw.len() {
            return Err(DecodeError::BytesPastShape {
                count,
                extra: raw.len() - at,
            });
        }
        offsets.push(at);
        Ok(Self(Repr::Packed {
            buffer: raw,
            offsets,
            prefix: 4,
        }))
    }

    /// Elements laid end to end in `buffer`, element `i` starting at `starts[i]` and ending
    /// where the next starts (the last at the end of `buffer`), as ONNX Runtime returns them.
    pub fn contiguous(buffer: Bytes, mut starts: Vec<usize>) -> Result<Self, DecodeError> {
        let ordered = starts.windows(2).all(|pair| pair[0] <= pair[1]);
        if !ordered || starts.last().is_some_and(|&last| last > buffer.len()) {
            return Err(DecodeError::StringOffsetsOutOfOrder);
        }
        starts.push(buffer.len());
        Ok(Self(Repr::Packed {
            buffer,
            offsets: starts,
            prefix: 0,
        }))
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Handles(handles) => handles.len(),
            Repr::Packed { offsets, .. } => offsets.len().saturating_sub(1),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `index`.
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        match &self.0 {
            Repr::Handles(handles) => handles.get(index).map(|handle| &handle[..]),
            Repr::Packed {
                buffer,
                offsets,
                prefix,
            } => {
                let start = offsets.get(index)? + prefix;
                let end = *offsets.get(index + 1)?;
                buffer.get(start..end)
            }
        }
    }

    pub fn first(&self) -> Option<&[u8]> {
        self.get(0)
    }

    /// Element `index` as a handle sharing this tensor's buffer.
    pub fn get_shared(&self, index: usize) -> Option<Bytes> {
        match &self.0 {
            Repr::Handles(handles) => handles.get(index).cloned(),
            Repr::Packed {
                buffer,
                offsets,
                prefix,
            } => {
                let start = offsets.get(index)? + prefix;
                let end = *offsets.get(index + 1)?;
                (start <= end && end <= buffer.len()).then(|| buffer.slice(start..end))
            }
        }
    }

    pub fn iter(&self) -> Iter<'_> {
        self.range(0, self.len())
    }

    /// Elements `start..end` (clamped to the tensor).
    pub fn range(&self, start: usize, end: usize) -> Iter<'_> {
        let end = end.min(self.len());
        Iter {
            strings: self,
            next: start.min(end),
            end,
        }
    }

    /// Bytes of the elements themselves.
    pub fn payload_len(&self) -> usize {
        self.iter().map(<[u8]>::len).sum()
    }

    /// The elements in the length-prefixed wire form, when they are already held that way
    /// and nothing else is in between: then it costs no copy.
    pub fn as_length_prefixed(&self) -> Option<Bytes> {
        match &self.0 {
            Repr::Packed {
                buffer,
                offsets,
                prefix: 4,
            } => {
                let (&start, &end) = (offsets.first()?, offsets.last()?);
                (start <= end && end <= buffer.len()).then(|| buffer.slice(start..end))
            }
            _ => None,
        }
    }

    /// One handle per element, for encoders whose messages hold a list (a protobuf's
    /// `repeated bytes`): handles of the packed form share its buffer.
    pub fn to_vec(&self) -> Vec<Bytes> {
        match &self.0 {
            Repr::Handles(handles) => handles.clone(),
            Repr::Packed { .. } => (0..self.len())
                .map(|index| self.get_shared(index).unwrap_or_default())
                .collect(),
        }
    }

    /// The handles themselves, when the elements are held as handles.
    pub fn into_handles(self) -> Result<Vec<Bytes>, Self> {
        match self.0 {
            Repr::Handles(handles) => Ok(handles),
            packed => Err(Self(packed)),
        }
    }

    /// Elements `start..end` as a tensor's elements of their own: the packed form shares
    /// its buffer, so this copies an offset per element and no bytes.
    pub fn slice(&self, start: usize, end: usize) -> Self {
        let end = end.min(self.len());
        let start = start.min(end);
        match &self.0 {
            Repr::Handles(handles) => {
                Self::from_handles(handles.get(start..end).unwrap_or_default().to_vec())
            }
            Repr::Packed {
                buffer,
                offsets,
                prefix,
            } => Self(Repr::Packed {
                buffer: buffer.clone(),
                offsets: offsets.get(start..=end).unwrap_or_default().to_vec(),
                prefix: *prefix,
            }),
        }
    }

    /// Every part's elements, in order, as one: handles when every part holds handles (they
    /// are moved), else one contiguous buffer (the one copy of a merged batch).
    pub fn concat(parts: Vec<Self>) -> Self {
        if parts.iter().all(|part| matches!(part.0, Repr::Handles(_))) {
            let count = parts.iter().map(Self::len).sum();
            let mut handles = Vec::with_capacity(count);
            for part in parts {
                if let Repr::Handles(part) = part.0 {
                    handles.extend(part);
                }
            }
            return Self::from_handles(handles);
        }
        let count: usize = parts.iter().map(Self::len).sum();
        let payload: usize = parts.iter().map(Self::payload_len).sum();
        let mut buffer = Vec::with_capacity(payload);
        let mut offsets = Vec::with_capacity(count + 1);
        for element in parts.iter().flat_map(Self::iter) {
            offsets.push(buffer.len());
            buffer.extend_from_slice(element);
        }
        offsets.push(buffer.len());
        Self(Repr::Packed {
            buffer: Bytes::from(buffer),
            offsets,
            prefix: 0,
        })
    }
}

static NO_STRINGS: Strings = Strings(Repr::Handles(Vec::new()));

/// No elements, so that `tensor.string_elements().unwrap_or_default()` reads as it would for
/// a slice.
impl Default for &Strings {
    fn default() -> Self {
        &NO_STRINGS
    }
}

impl From<Vec<Bytes>> for Strings {
    fn from(handles: Vec<Bytes>) -> Self {
        Self::from_handles(handles)
    }
}

/// Equal when the elements are, however each side holds them.
impl PartialEq for Strings {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<T: AsRef<[u8]>> PartialEq<[T]> for Strings {
    fn eq(&self, other: &[T]) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().map(AsRef::as_ref))
    }
}

impl<T: AsRef<[u8]>, const N: usize> PartialEq<[T; N]> for Strings {
    fn eq(&self, other: &[T; N]) -> bool {
        *self == other[..]
    }
}

impl<T: AsRef<[u8]>, const N: usize> PartialEq<[T; N]> for &Strings {
    fn eq(&self, other: &[T; N]) -> bool {
        **self == other[..]
    }
}

impl<'s> IntoIterator for &'s Strings {
    type Item = &'s [u8];
    type IntoIter = Iter<'s>;

    fn into_iter(self) -> Iter<'s> {
        self.iter()
    }
}

/// The elements of a [`Strings`], in order.
#[derive(Debug, Clone)]
pub struct Iter<'s> {
    strings: &'s Strings,
    next: usize,
    end: usize,
}

impl<'s> Iterator for Iter<'s> {
    type Item = &'s [u8];

    fn next(&mut self) -> Option<&'s [u8]> {
        if self.next >= self.end {
            return None;
        }
        let index = self.next;
        self.next += 1;
        // The constructors proved every element in range; an empty one would only stand in
        // for a broken invariant rather than end the iteration early.
        Some(self.strings.get(index).unwrap_or_default())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.next;
        (left, Some(left))
    }

    fn nth(&mut self, n: usize) -> Option<&'s [u8]> {
        self.next = self.next.saturating_add(n).min(self.end);
        self.next()
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixed(elements: &[&[u8]]) -> Bytes {
        let mut raw = Vec::new();
        for element in elements {
            raw.extend_from_slice(&(element.len() as u32).to_le_bytes());
            raw.extend_from_slice(element);
        }
        Bytes::from(raw)
    }

    #[test]
    fn length_prefixed_elements_stay_in_the_buffer() -> Result<(), DecodeError> {
        let raw = prefixed(&[b"ab", b"", &[0, 255]]);
        let strings = Strings::length_prefixed(raw.clone(), 3)?;
        assert_eq!(strings, [&b"ab"[..], b"", &[0, 255]]);
        let first = strings.get_shared(0).unwrap_or_default();
        assert_eq!(first.as_ptr(), raw[4..].as_ptr());
        // Already in the wire form: encoding it back is the same buffer.
        assert_eq!(
            strings.as_length_prefixed().map(|b| b.as_ptr()),
            Some(raw.as_ptr())
        );
        assert_eq!(strings.payload_len(), 4);
        Ok(())
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
    fn the_offsets_are_allocated_once_for_the_declared_count() -> Result<(), DecodeError> {
        let count = 10_000;
        let raw = Bytes::from(vec![0u8; 4 * count]);
        let strings = Strings::length_prefixed(raw, count)?;
        let Repr::Packed { offsets, .. } = &strings.0 else {
            panic!("packed");
        };
        // One allocation of exactly count + 1 offsets, never grown by doubling.
        assert_eq!(offsets.capacity(), count + 1);
        assert_eq!(strings.len(), count);
        Ok(())
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

    #[test]
    fn contiguous_elements_slice_and_concatenate() -> Result<(), DecodeError> {
        let packed = Strings::contiguous(Bytes::from_static(b"abcde"), vec![0, 2, 2])?;
        assert_eq!(packed, [&b"ab"[..], b"", b"cde"]);
        assert_eq!(packed.slice(1, 3), [&b""[..], b"cde"]);
        assert_eq!(packed.range(2, 10).collect::<Vec<_>>(), [b"cde"]);
        let handles = Strings::from_handles(vec![Bytes::from_static(b"x")]);
        let merged = Strings::concat(vec![handles.clone(), packed.clone()]);
        assert_eq!(merged, [&b"x"[..], b"ab", b"", b"cde"]);
        assert!(Strings::concat(vec![handles.clone(), handles])
            .into_handles()
            .is_ok());
        assert_eq!(packed.to_vec(), vec![&b"ab"[..], b"", b"cde"]);
        assert!(Strings::contiguous(Bytes::from_static(b"ab"), vec![1, 0]).is_err());
        assert!(Strings::contiguous(Bytes::from_static(b"ab"), vec![3]).is_err());
        Ok(())
    }
}
