//! The general path of the JSON tensor decoder: a serde visitor that walks tensor data once,
//! converting each leaf as it is read and checking the nesting as it goes (free for KServe's
//! flat `data`, rectangular for TF Serving). [`decode`](super::decode) takes it for whatever
//! the number scanner leaves (strings, literals, objects, anything it refuses), so that every
//! error is worded here.

use base64::Engine;
use bytes::Bytes;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::values::{Leaf, Values};
use crate::tensor::{checked_byte_len, DataType, DecodeError, DecodeLimits, Tensor};

/// Walks `json` at `depth` into `state`; the first failure is the one reported.
pub(super) fn walk(json: &RawValue, state: &mut State, depth: usize) -> Result<(), DecodeError> {
    let mut deserializer = serde_json::Deserializer::from_str(json.get());
    Level { state, depth }
        .deserialize(&mut deserializer)
        .map_err(|err| {
            state
                .error
                .take()
                .unwrap_or_else(|| DecodeError::Malformed(format!("invalid tensor JSON: {err}")))
        })
}

/// How the arrays may nest.
pub(super) enum Nesting {
    /// KServe: any nesting; only the element count matters. Elements past `max_leaves` are
    /// counted (for the error message) but not kept.
    Free { max_leaves: usize },
    /// TF Serving: the arrays form a rectangle. `rank` is fixed by the first leaf (or empty
    /// array); `dims[d]` by the first array at depth `d` to close.
    Rectangular {
        rank: Option<usize>,
        dims: Vec<Option<usize>>,
    },
}

impl Nesting {
    pub(super) fn rectangular() -> Self {
        Self::Rectangular {
            rank: None,
            dims: Vec::new(),
        }
    }
}

/// The decoder's state, shared by every level of the walk.
pub(super) struct State {
    pub(super) values: Values,
    nesting: Nesting,
    pub(super) leaves: usize,
    /// The first failure, kept here because serde's error type cannot carry it.
    error: Option<DecodeError>,
}

impl State {
    pub(super) fn new(dtype: DataType, capacity: usize, nesting: Nesting) -> Self {
        Self {
            values: Values::with_capacity(dtype, capacity),
            nesting,
            leaves: 0,
            error: None,
        }
    }

    fn fail<E: de::Error>(&mut self, err: DecodeError) -> E {
        let message = err.to_string();
        self.error = Some(err);
        E::custom(message)
    }

    /// An array opens at `depth`.
    pub(super) fn open(&mut self, depth: usize) -> Result<(), DecodeError> {
        match &self.nesting {
            Nesting::Rectangular {
                rank: Some(rank), ..
            } if depth >= *rank => Err(self.ragged()),
            _ => Ok(()),
        }
    }

    /// The array at `depth` has reached `len` elements so far.
    fn grow(&mut self, depth: usize, len: usize) -> Result<(), DecodeError> {
        match &self.nesting {
            Nesting::Rectangular { dims, .. }
                if dims.get(depth).copied().flatten().is_some_and(|d| len > d) =>
            {
                Err(self.ragged())
            }
            _ => Ok(()),
        }
    }

    /// The array at `depth` closes with `len` elements.
    pub(super) fn close(&mut self, depth: usize, len: usize) -> Result<(), DecodeError> {
        let Nesting::Rectangular { rank, dims } = &mut self.nesting else {
            return Ok(());
        };
        if dims.len() <= depth {
            dims.resize(depth + 1, None);
        }
        match dims.get(depth).copied().flatten() {
            Some(known) if known != len => return Err(self.ragged()),
            Some(_) => {}
            None => {
                if let Some(slot) = dims.get_mut(depth) {
                    *slot = Some(len);
                }
                // An empty array before any leaf fixes the rank: `[[], []]` is 2 x 0.
                if len == 0 && rank.is_none() {
                    *rank = Some(depth + 1);
                }
            }
        }
        Ok(())
    }

    /// A leaf (number, string, boolean, null or object) sits at `depth`.
    fn place_leaf(&mut self, depth: usize) -> Result<(), DecodeError> {
        self.leaves += 1;
        match &mut self.nesting {
            Nesting::Free { .. } => Ok(()),
            Nesting::Rectangular { rank, .. } => match *rank {
                None => {
                    *rank = Some(depth);
                    Ok(())
                }
                Some(r) if r == depth => Ok(()),
                Some(_) => Err(self.ragged()),
            },
        }
    }

    fn push<E: de::Error>(&mut self, depth: usize, leaf: Leaf<'_>) -> Result<(), E> {
        if let Err(err) = self.place_leaf(depth) {
            return Err(self.fail(err));
        }
        if let Nesting::Free { max_leaves } = self.nesting {
            if self.leaves > max_leaves {
                return Ok(());
            }
        }
        match self.values.push(leaf) {
            Ok(()) => Ok(()),
            Err(err) => Err(self.fail(err)),
        }
    }

    fn ragged(&self) -> DecodeError {
        let shape = match &self.nesting {
            Nesting::Rectangular { rank, dims } => {
                let known = rank.unwrap_or(dims.len());
                let dims: Vec<String> = (0..known)
                    .map(|d| match dims.get(d).copied().flatten() {
                        Some(n) => n.to_string(),
                        None => "_".to_owned(),
                    })
                    .collect();
                format!("[{}]", dims.join(", "))
            }
            Nesting::Free { .. } => "[]".to_owned(),
        };
        DecodeError::Malformed(format!(
            "the JSON arrays are ragged or nested unevenly: every list must have the same length at each depth (expected shape {shape})"
        ))
    }

    /// The tensor, with the shape the arrays had.
    pub(super) fn finish(self, limits: &DecodeLimits) -> Result<Tensor, DecodeError> {
        let Nesting::Rectangular { rank, dims } = self.nesting else {
            return Err(DecodeError::Malformed("no shape was inferred".into()));
        };
        let shape: Vec<usize> = dims
            .into_iter()
            .take(rank.unwrap_or(0))
            .map(Option::unwrap_or_default)
            .collect();
        checked_byte_len(self.values.dtype(), &shape, limits)?;
        self.values.into_tensor(shape)
    }
}

/// One level of the walk: the value at `depth` (0 is the value handed to [`walk`]).
struct Level<'s> {
    state: &'s mut State,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Level<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Level<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a tensor element or an array of them")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Level { state, depth } = self;
        if let Err(err) = state.open(depth) {
            return Err(state.fail(err));
        }
        let mut len = 0usize;
        while seq
            .next_element_seed(Level {
                state: &mut *state,
                depth: depth + 1,
            })?
            .is_some()
        {
            len += 1;
            if let Err(err) = state.grow(depth, len) {
                return Err(state.fail(err));
            }
        }
        match state.close(depth, len) {
            Ok(()) => Ok(()),
            Err(err) => Err(state.fail(err)),
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.state.push(self.depth, Leaf::Bool(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.state.push(self.depth, Leaf::U64(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.state.push(self.depth, Leaf::I64(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.state.push(self.depth, Leaf::F64(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.state.push(self.depth, Leaf::Str(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.state.push(self.depth, Leaf::Null)
    }

    /// An object is a leaf: `{"b64": "..."}` for a string tensor, a type error otherwise.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Level { state, depth } = self;
        if state.values.dtype() != DataType::String {
            return state.push(depth, Leaf::Object);
        }
        let first = map.next_key::<String>()?;
        if first.as_deref() != Some("b64") {
            return state.push(depth, Leaf::Object);
        }
        let encoded = map.next_value::<&RawValue>()?;
        if map.next_key::<de::IgnoredAny>()?.is_some() {
            return state.push(depth, Leaf::Object);
        }
        let bytes = match base64_leaf(encoded) {
            Ok(bytes) => bytes,
            Err(err) => return Err(state.fail(err)),
        };
        state.push(depth, Leaf::Binary(bytes))
    }
}

fn base64_leaf(encoded: &RawValue) -> Result<Bytes, DecodeError> {
    let text: String = serde_json::from_str(encoded.get())
        .map_err(|_| DecodeError::Malformed("\"b64\" must be a string".into()))?;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(Bytes::from)
        .map_err(|err| DecodeError::Malformed(format!("invalid base64 in \"b64\": {err}")))
}
