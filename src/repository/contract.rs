//! The declared configuration as a contract the model file must keep, as Triton holds a
//! `config.pbtxt` to it: every declared input and output exists in the file with the same
//! dtype and a compatible shape (after `reshape`), every input of the file is declared, and a
//! model that batches (`max_batch_size > 0`) has a dynamic first dimension. A contradiction is
//! a load error naming the tensor and the field. What is not declared is completed from the
//! file, unless `--strict-model-config` asks for everything to be declared; a `config.pbtxt`
//! that declares neither tensors nor `max_batch_size` gets Triton's completed
//! `max_batch_size` of [`AUTOCOMPLETED_MAX_BATCH_SIZE`] when the file batches.

use std::path::{Component, Path};
use std::sync::Arc;

use super::declared::{parse_dtype, DeclaredTensor};
use super::model_config::ModelConfig;
use super::repo_file::{read_text_inside, LABELS};
use crate::backend::contract::{Contract, Reshape};
use crate::backend::{Signature, TensorSpec};

/// The contract of a model with `config` whose runtime states `file` as its default
/// signature; `model_dir` holds its labels files.
pub fn contract(
    config: &ModelConfig,
    file: &Signature,
    model_dir: &Path,
    strict: bool,
) -> Result<Contract, String> {
    let source = if config.from_triton {
        "config.pbtxt"
    } else {
        "config.toml"
    };
    if strict && (config.input.is_empty() || config.output.is_empty()) {
        return Err(format!(
            "--strict-model-config is on, so the model's configuration must declare every \
             input and output (the model file's inputs: {}; outputs: {}); declare them in \
             config.pbtxt, or turn it off to complete them from the model file",
            file.input_names(),
            file.output_names()
        ));
    }
    let max_batch_size = match config.max_batch_size {
        None if config.from_triton && batchable(file) => Some(AUTOCOMPLETED_MAX_BATCH_SIZE),
        set => set,
    };
    let batched = max_batch_size.map(|max| max > 0);
    let mut contract = Contract {
        max_batch_size,
        ..Contract::default()
    };
    let inputs = tensors(source, "input", &config.input, &file.inputs, batched)?;
    if !config.input.is_empty() {
        if let Some(missing) = file
            .inputs
            .iter()
            .find(|spec| config.input.iter().all(|t| t.name != spec.name))
        {
            return Err(format!(
                "{source} does not declare input '{}' of the model file (declared: {}; the \
                 file's: {})",
                missing.name,
                names(&config.input),
                file.input_names()
            ));
        }
    }
    let outputs = tensors(source, "output", &config.output, &file.outputs, batched)?;
    for (declared, spec) in config.input.iter().zip(&inputs) {
        if let Some(reshape) = runtime_reshape(declared, batched) {
            contract.input_reshapes.push((spec.name.clone(), reshape));
        }
    }
    for (declared, spec) in config.output.iter().zip(&outputs) {
        if declared.reshape.is_some() {
            contract
                .output_reshapes
                .push((spec.name.clone(), client_reshape(spec, batched)));
        }
        if let Some(file_name) = &declared.label_filename {
            let labels = read_labels(model_dir, file_name)
                .map_err(|err| format!("{source} output '{}': label_filename {err}", spec.name))?;
            contract.labels.push((spec.name.clone(), labels));
        }
    }
    let declared = Signature {
        name: file.name.clone(),
        inputs,
        outputs,
    };
    if declared != *file {
        contract.signature = Some(declared);
    }
    Ok(contract)
}

/// What Triton completes an unset `max_batch_size` to, for a model whose file batches (its
/// `default-max-batch-size`), turning dynamic batching on with it (see `load`).
pub const AUTOCOMPLETED_MAX_BATCH_SIZE: usize = 4;

/// Whether every tensor of a signature starts with a dynamic dimension: a batch, to Triton.
fn batchable(signature: &Signature) -> bool {
    signature
        .inputs
        .iter()
        .chain(&signature.outputs)
        .all(|spec| spec.shape.first() == Some(&-1))
}

/// The specs clients see for one side of the signature: the declared tensors, each checked
/// against the file's, or the file's own where none is declared.
fn tensors(
    source: &str,
    side: &str,
    declared: &[DeclaredTensor],
    file: &[TensorSpec],
    batched: Option<bool>,
) -> Result<Vec<TensorSpec>, String> {
    if declared.is_empty() {
        if batched == Some(true) {
            if let Some(spec) = file.iter().find(|spec| spec.shape.first() != Some(&-1)) {
                return Err(not_batchable(source, side, spec));
            }
        }
        return Ok(file.to_vec());
    }
    declared
        .iter()
        .map(|tensor| checked(source, side, tensor, file, batched))
        .collect()
}

fn checked(
    source: &str,
    side: &str,
    tensor: &DeclaredTensor,
    file: &[TensorSpec],
    batched: Option<bool>,
) -> Result<TensorSpec, String> {
    let at = |message: String| format!("{source} {side} '{}': {message}", tensor.name);
    let spec = file
        .iter()
        .find(|spec| spec.name == tensor.name)
        .ok_or_else(|| {
            at(format!(
                "the model file has no {side} of that name (its {side}s: {})",
                spec_names(file)
            ))
        })?;
    let dtype = parse_dtype(&tensor.dtype)
        .ok_or_else(|| at(format!("unknown data_type {}", tensor.dtype)))?;
    if dtype != spec.dtype {
        return Err(at(format!(
            "data_type {} contradicts the model file, whose {side} is {}",
            dtype.kserve_name(),
            spec.dtype.kserve_name()
        )));
    }
    if batched == Some(true) && spec.shape.first() != Some(&-1) {
        return Err(not_batchable(source, side, spec));
    }
    let client = sizes(&tensor.shape);
    let runtime = tensor
        .reshape
        .as_deref()
        .map_or_else(|| client.clone(), sizes);
    let field = if tensor.reshape.is_some() {
        "reshape"
    } else {
        "dims"
    };
    if !spec.any_shape && !fits(&runtime, &spec.shape) {
        return Err(at(format!(
            "{field} {} contradicts the model file's shape {:?} (dimensions the file fixes must \
             be declared with the same size)",
            shown(&runtime, batched),
            spec.shape
        )));
    }
    if tensor.reshape.is_some() && !same_elements(&client, &runtime, batched) {
        return Err(at(format!(
            "dims {} and reshape {} hold different numbers of elements",
            shown(&client, batched),
            shown(&runtime, batched)
        )));
    }
    let symbols = tensor
        .shape
        .iter()
        .map(|dim| match dim {
            super::declared::DeclaredDim::Named(name) => name.clone(),
            super::declared::DeclaredDim::Size(_) => String::new(),
        })
        .collect();
    Ok(TensorSpec {
        name: tensor.name.clone(),
        dtype,
        shape: client,
        symbols,
        // The declaration binds clients to its shape, whatever the runtime would take.
        any_shape: false,
    })
}

fn not_batchable(source: &str, side: &str, spec: &TensorSpec) -> String {
    format!(
        "{source} {side} '{}': max_batch_size above 0 needs the model file's first dimension \
         to be dynamic (a batch), but the file's shape is {:?}; set max_batch_size: 0 and \
         declare the whole shape",
        spec.name, spec.shape
    )
}

/// Whether a declared shape agrees with the file's: the same rank, and each dimension the
/// file fixes declared with that size (the file's dynamic dimensions may be declared fixed).
fn fits(declared: &[i64], file: &[i64]) -> bool {
    declared.len() == file.len() && declared.iter().zip(file).all(|(&d, &f)| f == -1 || d == f)
}

/// Whether two shapes of one tensor can hold the same elements: equal products of their
/// fixed dimensions, and both dynamic or both fixed past the batch.
fn same_elements(a: &[i64], b: &[i64], batched: Option<bool>) -> bool {
    let skip = usize::from(batched == Some(true));
    let rest = |shape: &[i64]| -> (Option<i64>, bool) {
        let dims = shape.get(skip..).unwrap_or_default();
        let product = dims
            .iter()
            .filter(|&&d| d >= 0)
            .try_fold(1i64, |n, &d| n.checked_mul(d));
        (product, dims.contains(&-1))
    };
    let ((pa, free_a), (pb, free_b)) = (rest(a), rest(b));
    match (free_a, free_b) {
        (false, false) => pa.is_some() && pa == pb,
        // A free dimension on either side takes what the other side's elements leave.
        _ => pa.is_some() && pb.is_some(),
    }
}

/// The reshape from the clients' shape to the runtime's, for an input declared with one.
fn runtime_reshape(tensor: &DeclaredTensor, batched: Option<bool>) -> Option<Reshape> {
    let runtime = sizes(tensor.reshape.as_deref()?);
    Some(without_batch(runtime, batched))
}

/// The reshape from the runtime's shape back to the clients' (the declared dims).
fn client_reshape(spec: &TensorSpec, batched: Option<bool>) -> Reshape {
    without_batch(spec.shape.clone(), batched)
}

fn without_batch(shape: Vec<i64>, batched: Option<bool>) -> Reshape {
    let batched = batched == Some(true);
    let dims = if batched {
        shape.get(1..).unwrap_or_default().to_vec()
    } else {
        shape
    };
    Reshape { batched, dims }
}

fn sizes(dims: &[super::declared::DeclaredDim]) -> Vec<i64> {
    dims.iter()
        .map(|dim| match dim {
            super::declared::DeclaredDim::Size(size) => *size,
            super::declared::DeclaredDim::Named(_) => -1,
        })
        .collect()
}

/// A declared shape as the configuration writes it: without the batch dimension.
fn shown(shape: &[i64], batched: Option<bool>) -> String {
    let skip = usize::from(batched == Some(true));
    format!("{:?}", shape.get(skip..).unwrap_or_default())
}

fn names(declared: &[DeclaredTensor]) -> String {
    declared
        .iter()
        .map(|t| t.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn spec_names(specs: &[TensorSpec]) -> String {
    specs
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The labels of a `label_filename`: one per line, in the model's folder. Read as a regular
/// file within [`LABELS`] bytes that lies inside the folder, links followed: labels are
/// answered to every inference client, so a link out of the folder would hand them whatever
/// it points at.
fn read_labels(model_dir: &Path, file_name: &str) -> Result<Arc<[String]>, String> {
    let relative = Path::new(file_name);
    let inside = relative
        .components()
        .all(|part| matches!(part, Component::Normal(_)));
    if !inside || file_name.is_empty() {
        return Err(format!(
            "'{file_name}' must name a file inside the model's folder"
        ));
    }
    let text = read_text_inside(model_dir, relative, LABELS).map_err(|err| err.to_string())?;
    Ok(text.lines().map(str::to_owned).collect())
}

#[cfg(test)]
#[path = "contract_tests.rs"]
mod tests;
