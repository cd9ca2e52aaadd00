use crate::tensor::DataType;

/// The signature name TF Serving clients use when they name none.
pub const DEFAULT_SIGNATURE: &str = "serving_default";

/// One input or output of a signature.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: DataType,
    /// Dimension sizes, `-1` where the size is dynamic.
    pub shape: Vec<i64>,
    /// The name of each dynamic dimension where the model gives one (`"batch"`), else empty.
    /// Two dimensions with the same name have the same size in a run.
    pub symbols: Vec<String>,
    /// The runtime checks this input's shape itself and takes any (a TensorFlow feed that is
    /// no placeholder, or whose rank is unknown): `shape` is then what the model states, not a
    /// limit. An empty `shape` then means the rank is unknown.
    pub any_shape: bool,
}

impl TensorSpec {
    /// A spec without dimension names.
    pub fn new(name: impl Into<String>, dtype: DataType, shape: Vec<i64>) -> Self {
        let symbols = vec![String::new(); shape.len()];
        Self {
            name: name.into(),
            dtype,
            shape,
            symbols,
            any_shape: false,
        }
    }

    /// Whether a tensor of `shape` fits this spec (same rank, equal fixed dimensions; any, for
    /// an input whose runtime checks shapes itself).
    pub fn accepts_shape(&self, shape: &[usize]) -> bool {
        if self.any_shape {
            return true;
        }
        self.shape.len() == shape.len()
            && self
                .shape
                .iter()
                .zip(shape)
                .all(|(&want, &got)| want < 0 || usize::try_from(want).is_ok_and(|w| w == got))
    }

    /// The spec's shape with dynamic dimensions written as `-1`, for messages.
    pub fn shape_text(&self) -> String {
        format!("{:?}", self.shape)
    }
}

/// A callable entry point of a model: named, typed inputs and outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub name: String,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

impl Signature {
    pub fn input(&self, name: &str) -> Option<&TensorSpec> {
        self.inputs.iter().find(|spec| spec.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&TensorSpec> {
        self.outputs.iter().find(|spec| spec.name == name)
    }

    pub fn input_names(&self) -> String {
        names(&self.inputs)
    }

    pub fn output_names(&self) -> String {
        names(&self.outputs)
    }
}

fn names(specs: &[TensorSpec]) -> String {
    specs
        .iter()
        .map(|spec| spec.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_dims_accept_any_size() {
        let spec = TensorSpec::new("x", DataType::F32, vec![-1, 16]);
        assert!(spec.accepts_shape(&[3, 16]));
        assert!(spec.accepts_shape(&[0, 16]));
        assert!(!spec.accepts_shape(&[3, 15]));
        assert!(!spec.accepts_shape(&[16]));
    }
}
