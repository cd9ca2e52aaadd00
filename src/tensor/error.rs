use super::DataType;

/// Why client-supplied tensor data could not become a [`super::Tensor`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    #[error("input '{input}': {source}")]
    Input {
        input: String,
        #[source]
        source: Box<DecodeError>,
    },
    #[error("shape {shape:?} has more elements than can be addressed")]
    ShapeOverflow { shape: Vec<usize> },
    #[error("shape {shape:?} needs {bytes} bytes, more than the limit of {limit} bytes")]
    TooLarge {
        shape: Vec<usize>,
        bytes: usize,
        limit: usize,
    },
    #[error("dimension sizes must not be negative, got {0}")]
    NegativeDimension(i64),
    #[error("shape {shape:?} of {dtype} needs {expected} bytes of data but {actual} were sent")]
    ByteLengthMismatch {
        dtype: DataType,
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
    #[error("shape {shape:?} has {expected} elements but {actual} values were sent")]
    ElementCountMismatch {
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
    #[error("expected dtype {expected}, got {actual}")]
    DtypeMismatch {
        expected: DataType,
        actual: DataType,
    },
    #[error(
        "{count} BYTES elements need {count} 4-byte length prefixes, more than the {bytes} bytes of data can hold"
    )]
    BytesPrefixesPastData { count: usize, bytes: usize },
    #[error("BYTES data ends inside the 4-byte length prefix of element {element}")]
    BytesPrefixCut { element: usize },
    #[error("BYTES element {element} claims {len} bytes but only {remaining} remain")]
    BytesElementPastEnd {
        element: usize,
        len: usize,
        remaining: usize,
    },
    /// Found after the declared elements, before anything more is read.
    #[error(
        "the shape declares {count} BYTES elements but {extra} more bytes of data follow the last of them"
    )]
    BytesPastShape { count: usize, extra: usize },
    #[error("string element offsets are out of order or past their buffer")]
    StringOffsetsOutOfOrder,
    #[error("string tensors carry one value per element, not packed bytes")]
    StringNeedsElements,
    #[error("unsupported dtype {0}")]
    UnsupportedDtype(String),
    #[error("{0}")]
    Malformed(String),
}

impl DecodeError {
    /// Names the input the error belongs to.
    pub fn in_input(self, input: &str) -> Self {
        match self {
            already @ Self::Input { .. } => already,
            other => Self::Input {
                input: input.to_owned(),
                source: Box::new(other),
            },
        }
    }
}
