//! Element types a tensor can hold: the intersection of what the protocols carry and what the
//! runtimes execute.

use std::fmt;

/// A tensor element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
    /// Variable-length byte strings (TF `DT_STRING`, KServe `BYTES`).
    String,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        Self::Bool,
        Self::U8,
        Self::U16,
        Self::U32,
        Self::U64,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::F16,
        Self::BF16,
        Self::F32,
        Self::F64,
        Self::String,
    ];

    /// Bytes per element of the packed little-endian layout; `None` for strings.
    pub const fn size(self) -> Option<usize> {
        match self {
            Self::Bool | Self::U8 | Self::I8 => Some(1),
            Self::U16 | Self::I16 | Self::F16 | Self::BF16 => Some(2),
            Self::U32 | Self::I32 | Self::F32 => Some(4),
            Self::U64 | Self::I64 | Self::F64 => Some(8),
            Self::String => None,
        }
    }

    /// The KServe v2 / Triton name (`FP32`, `BYTES`, ...).
    pub const fn kserve_name(self) -> &'static str {
        match self {
            Self::Bool => "BOOL",
            Self::U8 => "UINT8",
            Self::U16 => "UINT16",
            Self::U32 => "UINT32",
            Self::U64 => "UINT64",
            Self::I8 => "INT8",
            Self::I16 => "INT16",
            Self::I32 => "INT32",
            Self::I64 => "INT64",
            Self::F16 => "FP16",
            Self::BF16 => "BF16",
            Self::F32 => "FP32",
            Self::F64 => "FP64",
            Self::String => "BYTES",
        }
    }

    /// A short lower-case name used in error messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Bool => "bool",
            Self::U8 => "uint8",
            Self::U16 => "uint16",
            Self::U32 => "uint32",
            Self::U64 => "uint64",
            Self::I8 => "int8",
            Self::I16 => "int16",
            Self::I32 => "int32",
            Self::I64 => "int64",
            Self::F16 => "float16",
            Self::BF16 => "bfloat16",
            Self::F32 => "float32",
            Self::F64 => "float64",
            Self::String => "string",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
