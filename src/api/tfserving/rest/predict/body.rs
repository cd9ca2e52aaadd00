//! The TF Serving REST predict body as sent: its envelope read in one pass, tensor data kept
//! as borrowed text until the signature says what each input should be.

use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// A predict request as sent, read in one pass: tensor data stays borrowed text until the
/// signature says what each input should be.
#[derive(serde::Deserialize)]
pub struct PredictBody<'a> {
    #[serde(borrow, default)]
    pub signature_name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub instances: Option<Instances<'a>>,
    #[serde(borrow, default)]
    pub inputs: Option<&'a RawValue>,
}

/// `instances` as sent: its rows as unparsed text, read in the same pass as the envelope, or
/// something other than a list, which the adapter refuses with its own message.
pub enum Instances<'a> {
    List(Vec<&'a RawValue>),
    NotAList,
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Instances<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(InstancesVisitor(std::marker::PhantomData))
    }
}

struct InstancesVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for InstancesVisitor<'a> {
    type Value = Instances<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of instances")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut rows = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(row) = seq.next_element::<&'a RawValue>()? {
            rows.push(row);
        }
        Ok(Instances::List(rows))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Instances::NotAList)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Instances::NotAList)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Instances::NotAList)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Instances::NotAList)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Instances::NotAList)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Instances::NotAList)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Instances::NotAList)
    }
}
