//! TorchScript models on LibTorch through `tch` (feature `torch`).
//!
//! A TorchScript file carries no reliable signature, so the model's config.toml declares it;
//! inputs are passed to `forward` positionally in the declared order, and whatever `forward`
//! returns (a tensor, a tuple or list of tensors, or a dict of name to tensor) is matched to the
//! declared outputs. Inputs are copied into LibTorch-owned tensors and outputs copied out: the
//! copies keep every byte LibTorch touches owned by LibTorch, with no `unsafe` here.
//!
//! Threads: LibTorch's inter-op pool is one per process and can be sized only before it first
//! runs, so [`configure_process`] sizes it once at start-up. Its intra-op thread count is kept
//! per calling thread (OpenMP), so each model sets its own on the thread that runs it, before
//! every run.

mod convert;

use std::path::Path;

use tch::{CModule, IValue};

use super::{Backend, BackendError, NamedTensor, RuntimeThreads, Signature};

/// Triton's platform name for TorchScript models.
pub const PLATFORM: &str = "pytorch_libtorch";

/// Sets LibTorch's process-wide defaults from the server's flags: the inter-op pool size and
/// the intra-op threads of threads that have not run a model yet. Call once, at start-up,
/// before any model loads (LibTorch refuses to resize a pool that has started).
pub fn configure_process(threads: RuntimeThreads) -> Result<(), BackendError> {
    if let Some(n) = positive_i32(threads.inter_op)? {
        if tch::get_num_interop_threads() != n {
            tch::set_num_interop_threads(n);
        }
    }
    if let Some(n) = positive_i32(threads.intra_op)? {
        tch::set_num_threads(n);
    }
    Ok(())
}

/// One TorchScript model version.
pub struct TorchModel {
    /// In eval mode; `forward` takes `&self` and LibTorch allows concurrent calls.
    module: CModule,
    signatures: Vec<Signature>,
    /// Intra-op threads for this model's runs; `None` leaves the calling thread's setting.
    intra_op: Option<i32>,
}

impl TorchModel {
    /// Loads `path` (a `torch.jit.save` file) on CPU with `signature` from its config.toml.
    pub fn load(
        path: &Path,
        signature: Signature,
        threads: RuntimeThreads,
    ) -> Result<Self, BackendError> {
        let load_error = |message: String| BackendError::load(path, message);
        for spec in signature.inputs.iter().chain(&signature.outputs) {
            convert::kind(spec.dtype)
                .map_err(|err| load_error(format!("'{}': {err}", spec.name)))?;
        }
        let intra_op = positive_i32(threads.intra_op).map_err(|err| load_error(err.to_string()))?;
        let inter_op = positive_i32(threads.inter_op).map_err(|err| load_error(err.to_string()))?;
        if let Some(wanted) = inter_op {
            let process = tch::get_num_interop_threads();
            if wanted != process {
                tracing::warn!(
                    path = %path.display(),
                    wanted,
                    process,
                    "LibTorch's inter-op pool is shared by the whole process and sized once at \
                     start-up (--inter-op-threads); this model's inter_op_threads is not applied"
                );
            }
        }
        let mut module = CModule::load(path).map_err(|err| load_error(err.to_string()))?;
        module
            .f_set_eval()
            .map_err(|err| load_error(err.to_string()))?;
        Ok(Self {
            module,
            signatures: vec![signature],
            intra_op,
        })
    }
}

impl Backend for TorchModel {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    fn run(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        // forward() takes its arguments by position: the declared order, not the request's.
        let args = signature
            .inputs
            .iter()
            .map(|spec| {
                let (_, tensor) = inputs
                    .iter()
                    .find(|(name, _)| *name == spec.name)
                    .ok_or_else(|| {
                        BackendError::invalid_input(format!("missing input '{}'", spec.name))
                    })?;
                convert::to_torch(tensor)
                    .map(IValue::Tensor)
                    .map_err(|err| {
                        BackendError::invalid_input(format!("input '{}': {err}", spec.name))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(n) = self.intra_op {
            // A thread's first LibTorch call resets its count to the process default; reading
            // it first makes that happen before this model's count is set, not after.
            if tch::get_num_threads() != n {
                tch::set_num_threads(n);
            }
        }
        let returned = tch::no_grad(|| self.module.forward_is(&args))
            .map_err(|err| BackendError::runtime(format!("forward() failed: {err}")))?;
        let mut named = convert::named_outputs(returned, &signature.outputs)?;
        outputs
            .iter()
            .map(|name| {
                let index = named
                    .iter()
                    .position(|(declared, _)| declared == name)
                    .ok_or_else(|| {
                        BackendError::runtime(format!("forward() returned no output '{name}'"))
                    })?;
                let (name, tensor) = named.swap_remove(index);
                let spec = signature
                    .output(&name)
                    .ok_or_else(|| BackendError::runtime(format!("undeclared output '{name}'")))?;
                let tensor = convert::from_torch(&tensor, spec)?;
                Ok((name, tensor))
            })
            .collect()
    }
}

/// A thread count as LibTorch takes it; `None` for 0 (the runtime's choice).
fn positive_i32(threads: usize) -> Result<Option<i32>, BackendError> {
    if threads == 0 {
        return Ok(None);
    }
    i32::try_from(threads)
        .map(Some)
        .map_err(|_| BackendError::runtime(format!("{threads} threads is too many")))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    /// What per-model intra-op threads rely on: a count set on one thread holds there while
    /// another thread sets a different one.
    #[test]
    fn intra_op_threads_belong_to_the_calling_thread() {
        let barrier = Arc::new(Barrier::new(2));
        let threads: Vec<_> = [1, 3]
            .into_iter()
            .map(|n| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    if tch::get_num_threads() != n {
                        tch::set_num_threads(n);
                    }
                    barrier.wait();
                    let product =
                        tch::Tensor::ones([64, 64], (tch::Kind::Float, tch::Device::Cpu)).matmul(
                            &tch::Tensor::ones([64, 64], (tch::Kind::Float, tch::Device::Cpu)),
                        );
                    drop(product);
                    (n, tch::get_num_threads())
                })
            })
            .collect();
        for thread in threads {
            let (wanted, got) = thread.join().expect("the thread ran");
            assert_eq!(got, wanted);
        }
    }
}
