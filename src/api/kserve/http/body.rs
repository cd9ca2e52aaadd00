//! The KServe v2 JSON infer request as serde structs, read in one pass over the body.
//!
//! Members whose type errors the protocol words itself (and tensor `data`, which is decoded
//! later straight into its buffer, once the datatype and shape are known) stay borrowed raw
//! text; nothing of the body is copied or built into a `serde_json::Value` tree.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// `POST /v2/models/{name}[/versions/{version}]/infer`, as sent.
#[derive(Deserialize)]
pub struct InferBody<'a> {
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub parameters: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub inputs: Option<Inputs<'a>>,
    #[serde(borrow, default)]
    pub outputs: Option<&'a RawValue>,
}

/// One entry of `inputs`.
#[derive(Deserialize)]
pub struct InputBody<'a> {
    #[serde(borrow, default)]
    pub name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub datatype: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub shape: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub parameters: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub data: Option<&'a RawValue>,
}

/// `inputs`: a list, or something else, which the adapter refuses with its own message.
pub enum Inputs<'a> {
    List(Vec<Entry<'a>>),
    NotAList,
}

/// An entry of the `inputs` list: an object, or something else.
pub enum Entry<'a> {
    Object(InputBody<'a>),
    NotAnObject,
}

impl<'de: 'a, 'a> Deserialize<'de> for Inputs<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Shape::<Inputs<'a>>::default())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Entry<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Shape::<Entry<'a>>::default())
    }
}

/// A visitor that accepts one JSON shape (a list for `Inputs`, an object for `Entry`) and
/// turns any other value into the "wrong shape" variant instead of failing the whole body.
struct Shape<T>(std::marker::PhantomData<T>);

impl<T> Default for Shape<T> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

/// What each target does with a list, an object, or anything else.
trait Shaped<'de>: Sized {
    const EXPECTING: &'static str;
    fn other() -> Self;
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Self, A::Error>;
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
}

impl<'de: 'a, 'a> Shaped<'de> for Inputs<'a> {
    const EXPECTING: &'static str = "a list of inputs";

    fn other() -> Self {
        Self::NotAList
    }

    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(entry) = seq.next_element::<Entry<'a>>()? {
            entries.push(entry);
        }
        Ok(Self::List(entries))
    }

    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        drain_map(map).map(|()| Self::NotAList)
    }
}

impl<'de: 'a, 'a> Shaped<'de> for Entry<'a> {
    const EXPECTING: &'static str = "an input object";

    fn other() -> Self {
        Self::NotAnObject
    }

    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::NotAnObject)
    }

    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        InputBody::deserialize(de::value::MapAccessDeserializer::new(map)).map(Self::Object)
    }
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

impl<'de, T: Shaped<'de>> Visitor<'de> for Shape<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::from_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::from_map(map)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<T, E> {
        Ok(T::other())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<T, E> {
        Ok(T::other())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<T, E> {
        Ok(T::other())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<T, E> {
        Ok(T::other())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<T, E> {
        Ok(T::other())
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::other())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_keeps_data_as_text() -> Result<(), serde_json::Error> {
        let body = br#"{"id": "a", "inputs": [{"name": "x", "shape": [2], "datatype": "FP32",
            "data": [1.5, 2]}, 7], "extra": {"ignored": true}}"#;
        let parsed: InferBody = serde_json::from_slice(body)?;
        let Some(Inputs::List(entries)) = parsed.inputs else {
            panic!("inputs is a list")
        };
        let Some(Entry::Object(first)) = entries.first() else {
            panic!("the first input is an object")
        };
        assert_eq!(first.data.map(RawValue::get), Some("[1.5, 2]"));
        assert!(matches!(entries.get(1), Some(Entry::NotAnObject)));
        Ok(())
    }

    #[test]
    fn wrong_shapes_are_values_not_errors() -> Result<(), serde_json::Error> {
        let parsed: InferBody = serde_json::from_slice(br#"{"inputs": {"x": 1}}"#)?;
        assert!(matches!(parsed.inputs, Some(Inputs::NotAList)));
        Ok(())
    }
}
