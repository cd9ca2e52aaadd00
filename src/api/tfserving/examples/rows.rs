//! An output read back one row per example, as Classify's scores and Regress's values are.

use crate::api::tfserving::error::TaskError;
use crate::error::Error;
use crate::tensor::{DataType, Tensor};

/// The values of an output as one `f32` per entry, checking it holds `rows` rows of `per_row`
/// values (a 1-D output is one value per row).
pub fn float_rows(name: &str, tensor: &Tensor, rows: usize) -> Result<(usize, Vec<f32>), Error> {
    let per_row = match tensor.shape() {
        [n] if *n == rows => 1,
        [n, k] if *n == rows => *k,
        shape => {
            return Err(TaskError::RowShape {
                output: name.to_owned(),
                shape: shape.to_vec(),
                rows,
            }
            .into())
        }
    };
    let values = match tensor.dtype() {
        DataType::F32 => tensor.view::<f32>().map(|v| v.to_vec()),
        DataType::F64 => tensor
            .view::<f64>()
            .map(|v| v.iter().map(|&x| x as f32).collect()),
        dtype => {
            return Err(TaskError::ValueDtype {
                output: name.to_owned(),
                dtype,
            }
            .into())
        }
    }
    .map_err(Error::from)?;
    Ok((per_row, values))
}
