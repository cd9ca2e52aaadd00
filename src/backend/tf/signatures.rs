//! A SavedModel's signature defs as the server's [`Signature`]s, with the graph endpoints each
//! input and output name stands for.

use std::collections::HashMap;

use tensorflow::{DataType as TfType, Graph, MetaGraphDef, Operation, SignatureDef, TensorInfo};

use crate::backend::{Signature, TensorSpec, DEFAULT_SIGNATURE};
use crate::tensor::DataType;

/// A graph endpoint: an operation's output.
#[derive(Clone)]
pub struct Endpoint {
    pub operation: Operation,
    pub index: i32,
}

/// The endpoints of one signature, by input and output name, and its method.
pub struct Binding {
    pub inputs: HashMap<String, Endpoint>,
    /// String outputs are replaced at load by the encoder that fetches them (see
    /// `byte_strings`).
    pub outputs: HashMap<String, Endpoint>,
    /// The signature def's `method_name` (`tensorflow/serving/predict`, `.../classify`, ...).
    pub method: String,
}

/// What [`read`] found in a SavedModel.
pub struct Found {
    /// Signatures with their endpoints, the default first.
    pub served: Vec<(Signature, Binding)>,
    pub skipped: Vec<Skipped>,
}

/// A signature the server cannot serve, and why (logged at load).
pub struct Skipped {
    pub signature: String,
    pub reason: String,
}

/// Every servable signature of `meta`: `serving_default` first (the default a request without
/// a signature name gets), then the others by name. Signatures whose names start with `__`
/// are TensorFlow's own (`__saved_model_init_op`) and are left out silently; ones with a
/// tensor the server cannot carry are left out and reported.
pub fn read(meta: &MetaGraphDef, graph: &Graph) -> Result<Found, String> {
    let mut names: Vec<&String> = meta
        .signatures()
        .keys()
        .filter(|name| !name.starts_with("__"))
        .collect();
    names.sort_by_key(|name| (name.as_str() != DEFAULT_SIGNATURE, name.as_str()));
    let mut served = Vec::new();
    let mut skipped = Vec::new();
    for name in names {
        let Some(def) = meta.signatures().get(name) else {
            continue;
        };
        match signature(name, def, graph)? {
            Ok(pair) => served.push(pair),
            Err(reason) => skipped.push(Skipped {
                signature: name.clone(),
                reason,
            }),
        }
    }
    Ok(Found { served, skipped })
}

/// The signature, or (inner error) why it cannot be served; the outer error is a broken
/// model: a signature naming an operation the graph does not have.
type Reading = Result<Result<(Signature, Binding), String>, String>;

fn signature(name: &str, def: &SignatureDef, graph: &Graph) -> Reading {
    let (inputs, input_endpoints) = match tensors(def.inputs(), graph, true)? {
        Ok(pair) => pair,
        Err(reason) => return Ok(Err(format!("input {reason}"))),
    };
    let (outputs, output_endpoints) = match tensors(def.outputs(), graph, false)? {
        Ok(pair) => pair,
        Err(reason) => return Ok(Err(format!("output {reason}"))),
    };
    Ok(Ok((
        Signature {
            name: name.to_owned(),
            inputs,
            outputs,
        },
        Binding {
            inputs: input_endpoints,
            outputs: output_endpoints,
            method: def.method_name().to_owned(),
        },
    )))
}

type Tensors = (Vec<TensorSpec>, HashMap<String, Endpoint>);

/// Specs sorted by name (a signature def is a map), and their endpoints.
fn tensors(
    infos: &HashMap<String, TensorInfo>,
    graph: &Graph,
    feeds: bool,
) -> Result<Result<Tensors, String>, String> {
    let mut names: Vec<&String> = infos.keys().collect();
    names.sort();
    let mut specs = Vec::with_capacity(names.len());
    let mut endpoints = HashMap::with_capacity(names.len());
    for name in names {
        let Some(info) = infos.get(name) else {
            continue;
        };
        let Some(dtype) = data_type(info.dtype()) else {
            return Ok(Err(format!(
                "'{name}' has unsupported type {}",
                info.dtype()
            )));
        };
        let shape: Vec<i64> = match info.shape().dims() {
            Some(dims) => (0..dims).map(|i| info.shape()[i].unwrap_or(-1)).collect(),
            None => Vec::new(),
        };
        let operation = graph
            .operation_by_name_required(&info.name().name)
            .map_err(|err| format!("tensor '{name}': {err}"))?;
        let mut spec = TensorSpec::new(name.clone(), dtype, shape);
        if feeds {
            spec.any_shape = feed_takes_any_shape(graph, &operation, info);
        }
        specs.push(spec);
        endpoints.insert(
            name.clone(),
            Endpoint {
                operation,
                index: info.name().index,
            },
        );
    }
    Ok(Ok((specs, endpoints)))
}

/// The server's type for a TensorFlow type, where it has one.
pub fn data_type(dtype: TfType) -> Option<DataType> {
    Some(match dtype {
        TfType::Bool => DataType::Bool,
        TfType::UInt8 => DataType::U8,
        TfType::UInt16 => DataType::U16,
        TfType::UInt32 => DataType::U32,
        TfType::UInt64 => DataType::U64,
        TfType::Int8 => DataType::I8,
        TfType::Int16 => DataType::I16,
        TfType::Int32 => DataType::I32,
        TfType::Int64 => DataType::I64,
        TfType::Half => DataType::F16,
        TfType::Float => DataType::F32,
        TfType::Double => DataType::F64,
        TfType::String => DataType::String,
        _ => return None,
    })
}

/// Whether TensorFlow itself leaves the shape of a fed input open, as TF Serving relies on:
/// a signature input whose rank is unknown (no `tensor_shape`, as in TF Serving's own
/// `saved_model_half_plus_three`), a placeholder whose graph shape has no rank, or a feed
/// that is no placeholder at all (TF checks a fed tensor's shape only against a placeholder's;
/// `half_plus_two`'s `x` is the output of an example parser, fed rows of scalars in TF
/// Serving's own REST example). Such an input takes any shape here too, and the runtime's
/// operations refuse what they cannot compute.
fn feed_takes_any_shape(graph: &Graph, operation: &Operation, info: &TensorInfo) -> bool {
    let is_placeholder = matches!(
        operation.op_type().as_deref(),
        Ok("Placeholder" | "PlaceholderWithDefault")
    );
    if !is_placeholder {
        return true;
    }
    if info.shape().dims().is_none() || info.shape().dims() == Some(0) {
        let endpoint = tensorflow::Output {
            operation: operation.clone(),
            index: info.name().index,
        };
        return graph
            .tensor_shape(endpoint)
            .map_or(true, |shape| shape.dims().is_none());
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_the_types_the_server_carries() {
        assert_eq!(data_type(TfType::Float), Some(DataType::F32));
        assert_eq!(data_type(TfType::Int64), Some(DataType::I64));
        assert_eq!(data_type(TfType::UInt64), Some(DataType::U64));
        assert_eq!(data_type(TfType::String), Some(DataType::String));
        assert_eq!(data_type(TfType::Bool), Some(DataType::Bool));
        assert_eq!(data_type(TfType::Complex64), None);
        assert_eq!(data_type(TfType::BFloat16), None);
    }
}
