//! Tensors between the server's representation and TensorFlow's.
//!
//! Inputs are copied once into tensors TensorFlow allocates (the C API this crate exposes has
//! no tensor over foreign memory). Outputs are not copied: the TensorFlow tensor becomes the
//! owner of the `Bytes` the protocol encoders read. Strings that are not UTF-8 travel as
//! [`byte_strings`](super::byte_strings) says.

use bytes::Bytes;
use tensorflow::{FetchToken, SessionRunArgs, Tensor as TfTensor, TensorType};

use super::byte_strings;
use super::signatures::Endpoint;
use crate::backend::BackendError;
use crate::tensor::{DataType, Tensor, TensorData};

/// An input as TensorFlow takes it; fed by reference, so it must outlive the run.
pub enum Feed {
    Bool(TfTensor<bool>),
    U8(TfTensor<u8>),
    U16(TfTensor<u16>),
    U32(TfTensor<u32>),
    U64(TfTensor<u64>),
    I8(TfTensor<i8>),
    I16(TfTensor<i16>),
    I32(TfTensor<i32>),
    I64(TfTensor<i64>),
    F16(TfTensor<half::f16>),
    F32(TfTensor<f32>),
    F64(TfTensor<f64>),
    String(TfTensor<String>),
}

/// Builds a string tensor of `dims` from elements that are not all UTF-8.
pub type BinaryStrings<'a> = &'a dyn Fn(&[u64], &[Bytes]) -> Result<TfTensor<String>, String>;

impl Feed {
    /// Copies `tensor` into a TensorFlow tensor of the same type and shape; string tensors
    /// with bytes that are not UTF-8 are made by `binary`.
    pub fn new(tensor: &Tensor, binary: BinaryStrings<'_>) -> Result<Self, String> {
        let dims: Vec<u64> = tensor.shape().iter().map(|&d| d as u64).collect();
        Ok(match tensor.dtype() {
            DataType::Bool => Self::Bool(bools(&dims, dense(tensor))?),
            DataType::U8 => Self::U8(numbers(&dims, dense(tensor))),
            DataType::U16 => Self::U16(numbers(&dims, dense(tensor))),
            DataType::U32 => Self::U32(numbers(&dims, dense(tensor))),
            DataType::U64 => Self::U64(numbers(&dims, dense(tensor))),
            DataType::I8 => Self::I8(numbers(&dims, dense(tensor))),
            DataType::I16 => Self::I16(numbers(&dims, dense(tensor))),
            DataType::I32 => Self::I32(numbers(&dims, dense(tensor))),
            DataType::I64 => Self::I64(numbers(&dims, dense(tensor))),
            DataType::F16 => Self::F16(numbers(&dims, dense(tensor))),
            DataType::F32 => Self::F32(numbers(&dims, dense(tensor))),
            DataType::F64 => Self::F64(numbers(&dims, dense(tensor))),
            DataType::String => Self::String(strings(&dims, tensor, binary)?),
            DataType::BF16 => return Err("bfloat16 is not supported by TensorFlow models".into()),
        })
    }

    /// Adds this tensor to `args` as the value of `endpoint`.
    pub fn feed<'a>(&'a self, args: &mut SessionRunArgs<'a>, endpoint: &Endpoint) {
        let (op, index) = (&endpoint.operation, endpoint.index);
        match self {
            Self::Bool(t) => args.add_feed(op, index, t),
            Self::U8(t) => args.add_feed(op, index, t),
            Self::U16(t) => args.add_feed(op, index, t),
            Self::U32(t) => args.add_feed(op, index, t),
            Self::U64(t) => args.add_feed(op, index, t),
            Self::I8(t) => args.add_feed(op, index, t),
            Self::I16(t) => args.add_feed(op, index, t),
            Self::I32(t) => args.add_feed(op, index, t),
            Self::I64(t) => args.add_feed(op, index, t),
            Self::F16(t) => args.add_feed(op, index, t),
            Self::F32(t) => args.add_feed(op, index, t),
            Self::F64(t) => args.add_feed(op, index, t),
            Self::String(t) => args.add_feed(op, index, t),
        }
    }
}

fn dense(tensor: &Tensor) -> &[u8] {
    match tensor.data() {
        TensorData::Dense(bytes) => bytes,
        TensorData::Strings(_) => &[],
    }
}

/// A tensor of fixed-size elements with `bytes` (validated against the shape by `Tensor`).
fn numbers<T>(dims: &[u64], bytes: &[u8]) -> TfTensor<T>
where
    T: TensorType + bytemuck::Pod,
{
    let mut out = TfTensor::<T>::new(dims);
    // An empty tensor may have no buffer at all: only non-empty ones are written.
    if !bytes.is_empty() {
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(bytes);
    }
    out
}

fn bools(dims: &[u64], bytes: &[u8]) -> Result<TfTensor<bool>, String> {
    let values: &[bool] = bytemuck::checked::try_cast_slice(bytes)
        .map_err(|_| "booleans must be bytes of 0 or 1".to_owned())?;
    let mut out = TfTensor::<bool>::new(dims);
    if !values.is_empty() {
        out.copy_from_slice(values);
    }
    Ok(out)
}

fn strings(
    dims: &[u64],
    tensor: &Tensor,
    binary: BinaryStrings<'_>,
) -> Result<TfTensor<String>, String> {
    let elements = tensor.string_elements().unwrap_or_default();
    if elements.is_empty() {
        // The crate cannot build an empty string tensor (it would allocate zero bytes).
        return Err("an empty string tensor cannot be passed to a TensorFlow model".into());
    }
    let text: Option<Vec<String>> = elements
        .iter()
        .map(|bytes| std::str::from_utf8(bytes).ok().map(str::to_owned))
        .collect();
    let Some(values) = text else {
        // One handle per element: the binary path builds TensorFlow's strings from a list.
        return binary(dims, &elements.to_vec());
    };
    TfTensor::<String>::new(dims)
        .with_values(&values)
        .map_err(|status| status.to_string())
}

/// Takes output `token` of a finished run as a server tensor of `dtype`.
pub fn fetch(
    args: &mut SessionRunArgs<'_>,
    token: FetchToken,
    dtype: DataType,
) -> Result<Tensor, BackendError> {
    match dtype {
        DataType::Bool => dense_output::<bool>(args, token, dtype),
        DataType::U8 => dense_output::<u8>(args, token, dtype),
        DataType::U16 => dense_output::<u16>(args, token, dtype),
        DataType::U32 => dense_output::<u32>(args, token, dtype),
        DataType::U64 => dense_output::<u64>(args, token, dtype),
        DataType::I8 => dense_output::<i8>(args, token, dtype),
        DataType::I16 => dense_output::<i16>(args, token, dtype),
        DataType::I32 => dense_output::<i32>(args, token, dtype),
        DataType::I64 => dense_output::<i64>(args, token, dtype),
        DataType::F16 => dense_output::<half::f16>(args, token, dtype),
        DataType::F32 => dense_output::<f32>(args, token, dtype),
        DataType::F64 => dense_output::<f64>(args, token, dtype),
        DataType::String => string_output(args, token),
        DataType::BF16 => Err(BackendError::runtime(
            "bfloat16 outputs are not supported".into(),
        )),
    }
}

fn fetched<T: TensorType>(
    args: &mut SessionRunArgs<'_>,
    token: FetchToken,
) -> Result<(TfTensor<T>, Vec<usize>, usize), BackendError> {
    let tensor = args
        .fetch::<T>(token)
        .map_err(|status| BackendError::runtime(status.to_string()))?;
    let shape: Vec<usize> = tensor.dims().iter().map(|&d| d as usize).collect();
    let count = crate::tensor::element_count(&shape)
        .map_err(|err| BackendError::runtime(err.to_string()))?;
    Ok((tensor, shape, count))
}

fn dense_output<T>(
    args: &mut SessionRunArgs<'_>,
    token: FetchToken,
    dtype: DataType,
) -> Result<Tensor, BackendError>
where
    T: TensorType + bytemuck::NoUninit,
    TfTensor<T>: Send,
{
    let (tensor, shape, count) = fetched::<T>(args, token)?;
    // An empty tensor may have no buffer: it is not read.
    let bytes = if count == 0 {
        Bytes::new()
    } else {
        Bytes::from_owner(Output(tensor))
    };
    Tensor::dense(dtype, shape, bytes).map_err(|err| BackendError::runtime(err.to_string()))
}

/// A string output, fetched base64-encoded (always ASCII, so the crate can read it).
fn string_output(args: &mut SessionRunArgs<'_>, token: FetchToken) -> Result<Tensor, BackendError> {
    let (tensor, shape, count) = fetched::<String>(args, token)?;
    let strings = if count == 0 {
        Vec::new()
    } else {
        tensor
            .iter()
            .map(|text| byte_strings::decode_element(text))
            .collect::<Result<Vec<_>, _>>()?
    };
    Tensor::strings(shape, strings).map_err(|err| BackendError::runtime(err.to_string()))
}

/// A TensorFlow output tensor as the owner of its bytes.
struct Output<T: TensorType>(TfTensor<T>);

impl<T: TensorType + bytemuck::NoUninit> AsRef<[u8]> for Output<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}
