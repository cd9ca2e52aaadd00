//! The floor: the same model and batch through ONNX Runtime in this process, no server.
//! Same library (`libonnxruntime.so` from the wheel the server loads), same binding, same
//! thread settings as the server's defaults, so the difference is the server's own cost.

use std::borrow::Cow;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use ort::environment::Environment;
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, Tensor};

use crate::config::Config;
use crate::error::LoadgenError;
use crate::payload::InputData;

/// A session and its inputs, built once; each send is one `Session::run`.
#[derive(Clone)]
pub struct FloorSender {
    /// Runs are synchronous and the generator is single-threaded, so the borrow never
    /// overlaps: extra "concurrency" on the floor only queues.
    session: Rc<RefCell<Session>>,
    inputs: Rc<Vec<(String, DynValue)>>,
    _env: Environment,
}

impl FloorSender {
    pub fn new(config: &Config, data: &[InputData<'_>]) -> Result<Self, LoadgenError> {
        let runtime = |err: ort::Error| LoadgenError::Runtime(err.to_string());
        let library = config.ort_library.as_deref().ok_or_else(|| {
            LoadgenError::Config("--protocol floor needs --ort-library or ORT_DYLIB_PATH".into())
        })?;
        let model = config
            .model_file
            .as_deref()
            .ok_or_else(|| LoadgenError::Config("--protocol floor needs --model-file".into()))?;
        let env = ort::init_from(library)
            .map_err(|err| LoadgenError::Runtime(format!("{}: {err}", library.display())))?
            .with_name("tensorport-loadgen")
            .with_telemetry(false)
            .build()
            .map_err(runtime)?;
        let session = open(&env, model, config).map_err(runtime)?;
        let inputs = data
            .iter()
            .map(|input| {
                let shape: Vec<i64> = input.shape.iter().map(|&d| d as i64).collect();
                let tensor = Tensor::from_array((shape, input.values.clone())).map_err(runtime)?;
                Ok((input.spec.name.clone(), tensor.into_dyn()))
            })
            .collect::<Result<Vec<_>, LoadgenError>>()?;
        Ok(Self {
            session: Rc::new(RefCell::new(session)),
            inputs: Rc::new(inputs),
            _env: env,
        })
    }

    pub fn send(&self) -> Result<(), String> {
        let values: Vec<(Cow<'_, str>, SessionInputValue<'_>)> = self
            .inputs
            .iter()
            .map(|(name, value)| (Cow::Borrowed(name.as_str()), SessionInputValue::from(value)))
            .collect();
        let mut session = self.session.borrow_mut();
        session
            .run(values)
            .map(drop)
            .map_err(|_| "runtime".to_owned())
    }
}

fn open(env: &Environment, model: &Path, config: &Config) -> ort::Result<Session> {
    let mut builder = Session::builder(env)?;
    if config.intra_threads > 0 {
        builder = builder.with_intra_threads(config.intra_threads)?;
    }
    if config.inter_threads > 0 {
        builder = builder.with_inter_threads(config.inter_threads)?;
    }
    builder.commit_from_file(model)
}
