//! A model version served under its declared configuration: the signature clients see (the
//! declared one, which may narrow the file's), the shapes the runtime takes where a tensor is
//! declared with Triton's `reshape`, the largest batch a request may carry, and the class
//! labels of the classification extension.
//!
//! The decorator changes shapes only, never bytes: a reshaped tensor shares its data (a
//! region of a client's shared memory stays in place).

use std::sync::Arc;

use super::{Backend, BackendError, NamedTensor, OutputTarget, Signature};
use crate::tensor::Tensor;

/// What a model's configuration adds to its runtime.
#[derive(Debug, Clone, Default)]
pub struct Contract {
    /// The default signature as clients see it, in place of the runtime's.
    pub signature: Option<Signature>,
    /// The shape each input of `signature` takes in the runtime, where it differs.
    pub input_reshapes: Vec<(String, Reshape)>,
    /// The shape clients see of each output the runtime gives in another shape.
    pub output_reshapes: Vec<(String, Reshape)>,
    /// The largest first dimension a request may carry; `Some(0)`: the model has no batch
    /// dimension.
    pub max_batch_size: Option<usize>,
    /// One label per class, by output name.
    pub labels: Vec<(String, Arc<[String]>)>,
}

/// The shape a tensor takes on the other side of a `reshape`: `dims` after the batch
/// dimension (when `batched`), with at most one `-1`, whose size follows from the elements.
#[derive(Debug, Clone, PartialEq)]
pub struct Reshape {
    pub batched: bool,
    pub dims: Vec<i64>,
}

impl Reshape {
    /// The shape for a tensor of `shape`, keeping its batch dimension; `None` when its
    /// elements do not fill the target.
    pub fn apply(&self, shape: &[usize]) -> Option<Vec<usize>> {
        let (batch, rest) = match (self.batched, shape.split_first()) {
            (true, Some((&batch, rest))) => (Some(batch), rest),
            (true, None) => return None,
            (false, _) => (None, shape),
        };
        let elements: usize = rest.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
        let fixed: usize = self
            .dims
            .iter()
            .filter(|&&d| d >= 0)
            .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))?;
        let free = if !self.dims.contains(&-1) {
            // Every dimension is fixed: the elements must be exactly theirs.
            (elements == fixed).then_some(0)?
        } else if fixed == 0 {
            (elements == 0).then_some(0)?
        } else {
            elements.is_multiple_of(fixed).then(|| elements / fixed)?
        };
        let mut out = Vec::with_capacity(self.dims.len() + 1);
        out.extend(batch);
        for &d in &self.dims {
            out.push(usize::try_from(d).unwrap_or(free));
        }
        Some(out)
    }
}

impl Contract {
    /// Whether the contract changes nothing a runtime's own answers would say.
    pub fn is_empty(&self) -> bool {
        self.signature.is_none()
            && self.input_reshapes.is_empty()
            && self.output_reshapes.is_empty()
            && self.max_batch_size.is_none()
            && self.labels.is_empty()
    }

    /// `backend` under this contract; `backend` itself when the contract is empty.
    pub fn bind(self, backend: Arc<dyn Backend>) -> Arc<dyn Backend> {
        if self.is_empty() {
            return backend;
        }
        let mut signatures = backend.signatures().to_vec();
        if let (Some(first), Some(declared)) = (signatures.first_mut(), self.signature.clone()) {
            *first = declared;
        }
        Arc::new(Bound {
            inner: backend,
            signatures,
            contract: self,
        })
    }
}

/// A backend under its [`Contract`].
struct Bound {
    inner: Arc<dyn Backend>,
    /// The runtime's signatures, the first replaced by the declared one.
    signatures: Vec<Signature>,
    contract: Contract,
}

impl Bound {
    /// The runtime's signature behind `signature`, and whether the reshapes apply to it
    /// (they are declared for the default signature only).
    fn runtime_signature(&self, signature: &Signature) -> Result<(&Signature, bool), BackendError> {
        let index = self
            .signatures
            .iter()
            .position(|sig| sig.name == signature.name)
            .ok_or_else(|| {
                BackendError::Runtime(format!("no signature '{}'", signature.name).into())
            })?;
        let runtime = self.inner.signatures().get(index).ok_or_else(|| {
            BackendError::Runtime(format!("no signature '{}'", signature.name).into())
        })?;
        Ok((runtime, index == 0))
    }
}

fn reshape_all(
    tensors: Vec<NamedTensor>,
    reshapes: &[(String, Reshape)],
    error: impl Fn(String) -> BackendError,
) -> Result<Vec<NamedTensor>, BackendError> {
    if reshapes.is_empty() {
        return Ok(tensors);
    }
    tensors
        .into_iter()
        .map(|(name, tensor)| {
            let Some((_, reshape)) = reshapes.iter().find(|(n, _)| *n == name) else {
                return Ok((name, tensor));
            };
            let reshaped = reshaped(tensor, reshape).map_err(|shape| {
                error(format!(
                    "'{name}' of shape {shape:?} does not fill the reshape {:?}",
                    reshape.dims
                ))
            })?;
            Ok((name, reshaped))
        })
        .collect()
}

fn reshaped(tensor: Tensor, reshape: &Reshape) -> Result<Tensor, Vec<usize>> {
    let shape = tensor.shape().to_vec();
    let target = reshape.apply(&shape).ok_or_else(|| shape.clone())?;
    tensor.reshaped(target).map_err(|_| shape)
}

impl Backend for Bound {
    fn platform(&self) -> &'static str {
        self.inner.platform()
    }

    fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    fn signature_method(&self, signature: &str) -> Option<&str> {
        self.inner.signature_method(signature)
    }

    fn held_bytes(&self) -> Option<u64> {
        self.inner.held_bytes()
    }

    fn max_batch_size(&self) -> Option<usize> {
        self.contract.max_batch_size
    }

    fn labels(&self, output: &str) -> Option<Arc<[String]>> {
        self.contract
            .labels
            .iter()
            .find(|(name, _)| name == output)
            .map(|(_, labels)| labels.clone())
    }

    fn run(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        self.run_into(signature, inputs, outputs, &[])
    }

    fn run_into(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
        targets: &[OutputTarget],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        let (runtime, declared) = self.runtime_signature(signature)?;
        if !declared {
            return self.inner.run_into(runtime, inputs, outputs, targets);
        }
        let inputs = reshape_all(inputs, &self.contract.input_reshapes, |message| {
            BackendError::InvalidInput(message.into())
        })?;
        let answers = self.inner.run_into(runtime, inputs, outputs, targets)?;
        reshape_all(answers, &self.contract.output_reshapes, |message| {
            BackendError::Runtime(format!("the model's output {message}").into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reshape(batched: bool, dims: &[i64]) -> Reshape {
        Reshape {
            batched,
            dims: dims.to_vec(),
        }
    }

    #[test]
    fn keeps_the_batch_and_fills_the_free_dimension() {
        assert_eq!(reshape(true, &[]).apply(&[4, 1]), Some(vec![4]));
        assert_eq!(reshape(true, &[1]).apply(&[4]), Some(vec![4, 1]));
        assert_eq!(reshape(true, &[2, -1]).apply(&[3, 8]), Some(vec![3, 2, 4]));
        assert_eq!(reshape(false, &[1, 2, 3]).apply(&[6]), Some(vec![1, 2, 3]));
        assert_eq!(reshape(true, &[-1, 4]).apply(&[0, 8]), Some(vec![0, 2, 4]));
    }

    #[test]
    fn refuses_elements_that_do_not_fit() {
        assert_eq!(reshape(true, &[3]).apply(&[2, 4]), None);
        assert_eq!(reshape(true, &[3, -1]).apply(&[2, 4]), None);
        assert_eq!(reshape(true, &[2]).apply(&[]), None);
        assert_eq!(reshape(false, &[i64::MAX]).apply(&[2]), None);
        assert_eq!(reshape(true, &[2, 2]).apply(&[1, 3]), None);
    }
}
