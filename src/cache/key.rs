//! A request's identity for the response cache: every byte that decides the answer, laid end
//! to end in one buffer that the store keeps beside the answer and compares in full on a hit.
//!
//! Building the key copies the inputs once, and the request then runs on tensors over that
//! copy: a shared-memory input the client rewrites while the model runs can change neither
//! the key nor what the model read, so a stored answer always belongs to its key.

use std::hash::{BuildHasher, Hasher};

use bytes::{BufMut, Bytes, BytesMut};

use crate::backend::NamedTensor;
use crate::tensor::{DecodeError, Strings, Tensor, TensorData};

/// Each input's data starts at a multiple of this in the key, so that the tensors over the
/// copy are aligned for every element type (the allocator aligns the buffer itself to 16).
const DATA_ALIGN: usize = 16;

/// What identifies one request to one loaded version.
pub struct KeyParts<'r> {
    pub model: &'r str,
    /// The load's own number ([`super::CacheScope`]): a reload of the same version number is
    /// another load, whose answers are never mixed with the old one's.
    pub load: u64,
    pub signature: usize,
    pub inputs: &'r [NamedTensor],
    /// The outputs the answer holds, in its order.
    pub outputs: &'r [String],
}

/// The serialised request and its hash under the store's keyed hasher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey {
    pub(super) hash: u64,
    pub(super) bytes: Bytes,
}

impl RequestKey {
    /// Bytes the key holds, charged to the cache with its answer.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// A key with a chosen hash, to force collisions in tests.
    #[cfg(test)]
    pub(super) fn with_hash(hash: u64, bytes: &[u8]) -> Self {
        Self {
            hash,
            bytes: Bytes::copy_from_slice(bytes),
        }
    }
}

/// Builds the key of `parts`, and the request's inputs again as tensors over the key's copy
/// of their bytes (in the order given), for the request to run on. `None` when the request
/// cannot be keyed (a string element longer than the 4-byte length prefix can say): it then
/// runs uncached.
pub fn build(
    parts: &KeyParts<'_>,
    hasher: &impl BuildHasher,
) -> Option<(RequestKey, Vec<NamedTensor>)> {
    let mut buffer = BytesMut::with_capacity(capacity(parts));
    put_str(&mut buffer, parts.model);
    buffer.put_u64_le(parts.load);
    buffer.put_u64_le(parts.signature as u64);
    buffer.put_u64_le(parts.inputs.len() as u64);
    // Sorted by name, so that the same inputs listed in another order are the same request.
    let mut order: Vec<usize> = (0..parts.inputs.len()).collect();
    order.sort_by(|&a, &b| parts.inputs[a].0.cmp(&parts.inputs[b].0));
    let mut ranges = vec![0..0; parts.inputs.len()];
    for &index in &order {
        let (name, tensor) = &parts.inputs[index];
        put_str(&mut buffer, name);
        put_str(&mut buffer, tensor.dtype().name());
        buffer.put_u64_le(tensor.shape().len() as u64);
        for &dim in tensor.shape() {
            buffer.put_u64_le(dim as u64);
        }
        let data_len = data_len(tensor);
        buffer.put_u64_le(data_len as u64);
        let padding = buffer.len().next_multiple_of(DATA_ALIGN) - buffer.len();
        buffer.put_bytes(0, padding);
        let start = buffer.len();
        match tensor.data() {
            TensorData::Dense(bytes) => buffer.put_slice(bytes),
            TensorData::Strings(strings) => {
                for element in strings.iter() {
                    buffer.put_u32_le(u32::try_from(element.len()).ok()?);
                    buffer.put_slice(element);
                }
            }
        }
        ranges[index] = start..buffer.len();
    }
    buffer.put_u64_le(parts.outputs.len() as u64);
    for output in parts.outputs {
        put_str(&mut buffer, output);
    }
    let bytes = buffer.freeze();
    let mut state = hasher.build_hasher();
    state.write(&bytes);
    let key = RequestKey {
        hash: state.finish(),
        bytes: bytes.clone(),
    };
    let mut inputs = Vec::with_capacity(parts.inputs.len());
    for ((name, tensor), range) in parts.inputs.iter().zip(ranges) {
        let data = bytes.slice(range);
        inputs.push((name.clone(), copy_over(tensor, data).ok()?));
    }
    Some((key, inputs))
}

/// A tensor like `tensor` over `data`, the key's copy of its elements.
fn copy_over(tensor: &Tensor, data: Bytes) -> Result<Tensor, DecodeError> {
    match tensor.data() {
        TensorData::Dense(_) => Tensor::dense(tensor.dtype(), tensor.shape().to_vec(), data),
        TensorData::Strings(strings) => Tensor::from_strings(
            tensor.shape().to_vec(),
            Strings::length_prefixed(data, strings.len())?,
        ),
    }
}

/// Bytes of `tensor`'s data in the key: dense bytes as they are, strings length-prefixed.
fn data_len(tensor: &Tensor) -> usize {
    match tensor.data() {
        TensorData::Dense(bytes) => bytes.len(),
        TensorData::Strings(strings) => strings.payload_len() + 4 * strings.len(),
    }
}

/// The key's length, so that the buffer is allocated once: the inputs are already in memory,
/// so this is at most a small multiple of what the request already holds.
fn capacity(parts: &KeyParts<'_>) -> usize {
    let header = 8 + parts.model.len() + 24 + 8;
    let inputs: usize = parts
        .inputs
        .iter()
        .map(|(name, tensor)| {
            8 + name.len()
                + 8
                + tensor.dtype().name().len()
                + 8
                + 8 * tensor.shape().len()
                + 8
                + DATA_ALIGN
                + data_len(tensor)
        })
        .sum();
    let outputs: usize = parts.outputs.iter().map(|name| 8 + name.len()).sum();
    header + inputs + outputs
}

fn put_str(buffer: &mut BytesMut, text: &str) {
    buffer.put_u64_le(text.len() as u64);
    buffer.put_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::RandomState;

    use super::*;

    fn key_of(inputs: &[NamedTensor], outputs: &[&str], load: u64) -> RequestKey {
        let outputs: Vec<String> = outputs.iter().map(|s| (*s).to_owned()).collect();
        let parts = KeyParts {
            model: "m",
            load,
            signature: 0,
            inputs,
            outputs: &outputs,
        };
        // One fixed hasher state, so equal keys hash equally across calls.
        match build(&parts, &FIXED) {
            Some((key, _)) => key,
            None => panic!("unkeyable"),
        }
    }

    static FIXED: std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher> =
        std::hash::BuildHasherDefault::new();

    fn floats(name: &str, values: Vec<f32>) -> NamedTensor {
        let len = values.len();
        match Tensor::from_vec(vec![len], values) {
            Ok(tensor) => (name.to_owned(), tensor),
            Err(err) => panic!("{err}"),
        }
    }

    #[test]
    fn every_part_of_the_request_changes_the_key() {
        let base = key_of(&[floats("x", vec![1.0, 2.0])], &["y"], 1);
        assert_eq!(base, key_of(&[floats("x", vec![1.0, 2.0])], &["y"], 1));
        assert_ne!(base, key_of(&[floats("x", vec![1.0, 3.0])], &["y"], 1));
        assert_ne!(base, key_of(&[floats("z", vec![1.0, 2.0])], &["y"], 1));
        assert_ne!(base, key_of(&[floats("x", vec![1.0, 2.0])], &["z"], 1));
        assert_ne!(base, key_of(&[floats("x", vec![1.0, 2.0])], &[], 1));
        assert_ne!(base, key_of(&[floats("x", vec![1.0, 2.0])], &["y"], 2));
        // Same bytes, another shape or dtype.
        let reshaped = match Tensor::from_vec(vec![1, 2], vec![1.0f32, 2.0]) {
            Ok(tensor) => ("x".to_owned(), tensor),
            Err(err) => panic!("{err}"),
        };
        assert_ne!(base, key_of(&[reshaped], &["y"], 1));
        let ints = match Tensor::from_vec(vec![2], vec![1.0f32.to_bits(), 2.0f32.to_bits()]) {
            Ok(tensor) => ("x".to_owned(), tensor),
            Err(err) => panic!("{err}"),
        };
        assert_ne!(base, key_of(&[ints], &["y"], 1));
    }

    #[test]
    fn the_order_inputs_are_listed_in_does_not_matter() {
        let a = floats("a", vec![1.0]);
        let b = floats("b", vec![2.0]);
        assert_eq!(
            key_of(&[a.clone(), b.clone()], &["y"], 1),
            key_of(&[b, a], &["y"], 1)
        );
    }

    #[test]
    fn inputs_come_back_over_the_keys_copy_and_aligned() -> Result<(), DecodeError> {
        let strings = Tensor::strings(
            vec![2],
            vec![Bytes::from_static(b"ab"), Bytes::from_static(b"")],
        )?;
        let inputs = vec![
            floats("x", vec![1.0, 2.0, 3.0]),
            ("s".to_owned(), strings.clone()),
        ];
        let outputs = vec!["y".to_owned()];
        let parts = KeyParts {
            model: "m",
            load: 1,
            signature: 0,
            inputs: &inputs,
            outputs: &outputs,
        };
        let Some((key, copies)) = build(&parts, &RandomState::new()) else {
            panic!("unkeyable");
        };
        assert_eq!(copies, inputs);
        let range = key.bytes.as_ptr() as usize..key.bytes.as_ptr() as usize + key.len();
        for (_, tensor) in &copies {
            if let Some(bytes) = tensor.bytes() {
                assert!(range.contains(&(bytes.as_ptr() as usize)));
                assert_eq!(tensor.misaligned_bytes(), 0);
            }
        }
        Ok(())
    }
}
