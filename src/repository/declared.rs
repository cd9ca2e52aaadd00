//! The parts of `config.toml` that describe the model rather than how it is served: its
//! signature (`[[input]]` / `[[output]]`, for formats whose files carry none, like TorchScript).
//! `[runtime]` is read in `runtime_config`.
//!
//! ```toml
//! [[input]]
//! name = "features"
//! dtype = "FP32"            # KServe / Triton names (FP32, INT64, ...) or float32, int64, ...
//! shape = ["batch", 16]     # sizes; -1 or a name for a dynamic dimension
//!
//! [[output]]
//! name = "score"
//! dtype = "FP32"
//! shape = ["batch", 1]
//! label_filename = "labels.txt"   # optional: class labels for the classification extension
//! ```

use std::collections::HashSet;

use serde::Deserialize;

use crate::backend::{Signature, TensorSpec, DEFAULT_SIGNATURE};
use crate::tensor::DataType;

/// One `[[input]]` or `[[output]]` table as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredTensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<DeclaredDim>,
    /// The shape the runtime takes (an input) or gives (an output) when it differs from
    /// `shape`, the one clients see: Triton's `reshape`, with the same elements.
    #[serde(default)]
    pub reshape: Option<Vec<DeclaredDim>>,
    /// A file in the model's folder with one class label per line, for the classification
    /// extension (an output only; Triton's `label_filename`).
    #[serde(default)]
    pub label_filename: Option<String>,
}

/// A dimension: a size, `-1` (dynamic), or a name (dynamic; equal names have equal sizes).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum DeclaredDim {
    Size(i64),
    Named(String),
}

/// What to write in config.toml so a model without a signature in its file can load; the
/// load error of such a model ends with it.
pub const SIGNATURE_HELP: &str = "declare the signature in the model's config.toml, one table \
per tensor in the order forward() takes and returns them, e.g. \
[[input]] name = \"features\", dtype = \"FP32\", shape = [\"batch\", 16] and \
[[output]] name = \"score\", dtype = \"FP32\", shape = [\"batch\", 1]";

/// The signature the tables declare, as clients see it; `None` unless both inputs and outputs
/// are declared. Errors name the table.
pub fn signature(
    inputs: &[DeclaredTensor],
    outputs: &[DeclaredTensor],
) -> Result<Option<Signature>, String> {
    declared_signature(inputs, outputs, Facing::Clients)
}

/// The signature the tables declare as the runtime takes it: each `reshape` in place of the
/// shape clients use.
pub fn runtime_signature(
    inputs: &[DeclaredTensor],
    outputs: &[DeclaredTensor],
) -> Result<Option<Signature>, String> {
    declared_signature(inputs, outputs, Facing::Runtime)
}

/// Which side of a `reshape` a signature describes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Facing {
    Clients,
    Runtime,
}

fn declared_signature(
    inputs: &[DeclaredTensor],
    outputs: &[DeclaredTensor],
    facing: Facing,
) -> Result<Option<Signature>, String> {
    if let Some(input) = inputs.iter().find(|t| t.label_filename.is_some()) {
        return Err(format!(
            "[[input]] '{}': label_filename belongs to an output",
            input.name
        ));
    }
    let inputs = specs("input", inputs, facing)?;
    let outputs = specs("output", outputs, facing)?;
    // One side alone is a partial declaration, completed from the model file where it has
    // a signature (see `contract`); it is no signature of its own.
    if inputs.is_empty() || outputs.is_empty() {
        return Ok(None);
    }
    Ok(Some(Signature {
        name: DEFAULT_SIGNATURE.to_owned(),
        inputs,
        outputs,
    }))
}

fn specs(
    table: &str,
    declared: &[DeclaredTensor],
    facing: Facing,
) -> Result<Vec<TensorSpec>, String> {
    let mut names = HashSet::new();
    declared
        .iter()
        .map(|tensor| {
            let at = |message: String| format!("[[{table}]] '{}': {message}", tensor.name);
            if tensor.name.is_empty() {
                return Err(format!("[[{table}]]: name must not be empty"));
            }
            if !names.insert(tensor.name.as_str()) {
                return Err(at("declared twice".into()));
            }
            let dtype = parse_dtype(&tensor.dtype).ok_or_else(|| {
                at(format!(
                    "unknown dtype \"{}\" (use FP32, INT64, ... or float32, int64, ...)",
                    tensor.dtype
                ))
            })?;
            let (shape, symbols) = dims(&tensor.shape).map_err(&at)?;
            let reshaped = tensor
                .reshape
                .as_deref()
                .map(dims)
                .transpose()
                .map_err(|err| at(format!("reshape: {err}")))?;
            let (shape, symbols) = match reshaped {
                Some(runtime) if facing == Facing::Runtime => runtime,
                _ => (shape, symbols),
            };
            Ok(TensorSpec {
                name: tensor.name.clone(),
                dtype,
                shape,
                symbols,
                any_shape: false,
            })
        })
        .collect()
}

/// Sizes (`-1` where dynamic) and the name of each named dimension.
fn dims(declared: &[DeclaredDim]) -> Result<(Vec<i64>, Vec<String>), String> {
    let mut shape = Vec::with_capacity(declared.len());
    let mut symbols = Vec::with_capacity(declared.len());
    for dim in declared {
        match dim {
            DeclaredDim::Size(size) if *size >= -1 => {
                shape.push(*size);
                symbols.push(String::new());
            }
            DeclaredDim::Size(size) => {
                return Err(format!("dimension {size} must be a size, -1 or a name"))
            }
            DeclaredDim::Named(symbol) if symbol.is_empty() => {
                return Err("a named dimension needs a name".into())
            }
            DeclaredDim::Named(symbol) => {
                shape.push(-1);
                symbols.push(symbol.clone());
            }
        }
    }
    Ok((shape, symbols))
}

/// A dtype by its KServe / Triton name (`FP32`, also `TYPE_FP32` as in Triton's model
/// configuration) or its lower-case name (`float32`).
pub fn parse_dtype(text: &str) -> Option<DataType> {
    let kserve = text.strip_prefix("TYPE_").unwrap_or(text);
    DataType::ALL
        .into_iter()
        .find(|dtype| dtype.name() == text || dtype.kserve_name() == kserve)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(name: &str, dtype: &str, shape: Vec<DeclaredDim>) -> DeclaredTensor {
        DeclaredTensor {
            name: name.into(),
            dtype: dtype.into(),
            shape,
            reshape: None,
            label_filename: None,
        }
    }

    #[test]
    fn named_dimensions_are_dynamic() -> Result<(), String> {
        let inputs = [tensor(
            "x",
            "TYPE_FP32",
            vec![DeclaredDim::Named("batch".into()), DeclaredDim::Size(16)],
        )];
        let outputs = [tensor("y", "int64", vec![DeclaredDim::Size(-1)])];
        let sig = signature(&inputs, &outputs)?.ok_or("a signature")?;
        assert_eq!(sig.inputs[0].dtype, DataType::F32);
        assert_eq!(sig.inputs[0].shape, vec![-1, 16]);
        assert_eq!(
            sig.inputs[0].symbols,
            vec!["batch".to_owned(), String::new()]
        );
        assert_eq!(sig.outputs[0].dtype, DataType::I64);
        Ok(())
    }

    #[test]
    fn refuses_what_it_cannot_mean() {
        let x = || tensor("x", "FP32", vec![DeclaredDim::Size(1)]);
        assert_eq!(signature(&[x()], &[]), Ok(None), "a partial declaration");
        let cases = [
            (vec![x(), x()], vec![x()], "declared twice"),
            (
                vec![tensor("x", "FP33", vec![])],
                vec![x()],
                "unknown dtype",
            ),
            (
                vec![tensor("x", "FP32", vec![DeclaredDim::Size(-2)])],
                vec![x()],
                "must be a size",
            ),
        ];
        for (inputs, outputs, needle) in cases {
            let err = signature(&inputs, &outputs).err().unwrap_or_default();
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }
}
