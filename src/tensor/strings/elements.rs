//! The elements of a string tensor: one `Bytes` handle each, or packed in one buffer with an
//! offset each (see the parent module for why), and the iterator over either form.

use bytes::Bytes;

use super::prefixed::{element_end, PrefixedLayout};
use crate::tensor::DecodeError;

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
