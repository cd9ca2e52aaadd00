//! The ONNX Runtime session options a model may set (config.toml's `[runtime]`, config.pbtxt's
//! `optimization` and `parameters`), and how they reach a session builder. Every option left
//! unset keeps ONNX Runtime's own default, so a model that sets nothing runs as before.

use std::path::PathBuf;

use ort::ep;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};

/// Which graph optimizations ONNX Runtime applies when it builds a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphOptimization {
    /// None: the graph runs as written.
    Disable,
    /// Semantics-preserving rewrites (constant folding, redundant nodes removed).
    Basic,
    /// Basic plus node fusions.
    Extended,
    /// Everything, layout changes included: ONNX Runtime's default.
    All,
}

impl GraphOptimization {
    /// The names config.toml spells the levels with, in order.
    pub const NAMES: [&'static str; 4] = ["disable", "basic", "extended", "all"];

    /// The level named as config.toml spells it.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "disable" => Some(Self::Disable),
            "basic" => Some(Self::Basic),
            "extended" => Some(Self::Extended),
            "all" => Some(Self::All),
            _ => None,
        }
    }

    fn level(self) -> GraphOptimizationLevel {
        match self {
            Self::Disable => GraphOptimizationLevel::Disable,
            Self::Basic => GraphOptimizationLevel::Level1,
            Self::Extended => GraphOptimizationLevel::Level2,
            Self::All => GraphOptimizationLevel::All,
        }
    }
}

/// Whether a session runs the graph's nodes one after another or independent ones at once
/// (on the inter-op threads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionMode {
    Sequential,
    Parallel,
}

impl ExecutionMode {
    /// The names config.toml spells the modes with.
    pub const NAMES: [&'static str; 2] = ["sequential", "parallel"];

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "sequential" => Some(Self::Sequential),
            "parallel" => Some(Self::Parallel),
            _ => None,
        }
    }
}

/// One model's session options; `None` everywhere (the default) is ONNX Runtime's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnnxSessionOptions {
    pub graph_optimization: Option<GraphOptimization>,
    /// Where ONNX Runtime writes the optimized graph when the session is created (replacing
    /// a file left there by an earlier load).
    pub optimized_model_file: Option<PathBuf>,
    pub memory_pattern: Option<bool>,
    /// The CPU execution provider's arena; off, every tensor is allocated and freed on its own
    /// (and the arena's bytes are not measured: there is no arena).
    pub cpu_arena: Option<bool>,
    /// Whether idle pool threads spin for a while before they sleep.
    pub intra_op_spinning: Option<bool>,
    pub inter_op_spinning: Option<bool>,
    pub execution_mode: Option<ExecutionMode>,
    /// Initializers (the weights) allocated outside the arena, with the plain allocator.
    pub device_allocator_for_initializers: Option<bool>,
}

impl OnnxSessionOptions {
    /// `builder` with every option that is set; an error names the option ONNX Runtime
    /// refused and says why.
    pub fn apply(&self, builder: SessionBuilder) -> Result<SessionBuilder, String> {
        let refused =
            |key: &'static str| move |err: ort::Error<SessionBuilder>| format!("{key}: {err}");
        let mut builder = builder;
        if let Some(level) = self.graph_optimization {
            builder = builder
                .with_optimization_level(level.level())
                .map_err(refused("graph_optimization"))?;
        }
        if let Some(path) = &self.optimized_model_file {
            builder = builder
                .with_optimized_model_path(path)
                .map_err(refused("optimized_model_file"))?;
        }
        if let Some(enable) = self.memory_pattern {
            builder = builder
                .with_memory_pattern(enable)
                .map_err(refused("memory_pattern"))?;
        }
        if let Some(enable) = self.cpu_arena {
            // Registering the CPU provider is how ort reaches Enable/DisableCpuMemArena; the
            // CPU provider is the one sessions run on either way.
            let cpu = ep::CPU::default()
                .with_arena_allocator(enable)
                .build()
                .error_on_failure();
            builder = builder
                .with_execution_providers([cpu])
                .map_err(refused("cpu_arena"))?;
        }
        if let Some(enable) = self.intra_op_spinning {
            builder = builder
                .with_intra_op_spinning(enable)
                .map_err(refused("intra_op_spinning"))?;
        }
        if let Some(enable) = self.inter_op_spinning {
            builder = builder
                .with_inter_op_spinning(enable)
                .map_err(refused("inter_op_spinning"))?;
        }
        if let Some(mode) = self.execution_mode {
            builder = builder
                .with_parallel_execution(mode == ExecutionMode::Parallel)
                .map_err(refused("execution_mode"))?;
        }
        if let Some(enable) = self.device_allocator_for_initializers {
            let value = if enable { "1" } else { "0" };
            builder = builder
                .with_config_entry("session.use_device_allocator_for_initializers", value)
                .map_err(refused("device_allocator_for_initializers"))?;
        }
        Ok(builder)
    }
}
