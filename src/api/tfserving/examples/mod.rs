//! `tf.Example` inputs of Classify, Regress and MultiInference, turned into a signature's
//! input tensors.
//!
//! Two ways in, chosen by the signature:
//! - **Features by name** (ONNX, TorchScript, any signature with named numeric inputs): each
//!   input is fed by the feature of the same name, one row per example: `float_list` to a
//!   float input, `int64_list` to an integer input, `bytes_list` to a string input. A feature
//!   of one value per example feeds an input of shape `[-1]` as `[n]`; `k` values per example
//!   feed `[n, k]`, and every example must then carry `k` values.
//! - **Serialized examples** (TensorFlow's classification and regression signatures): a
//!   signature whose only input is a string tensor that no feature is named after receives the
//!   examples themselves, serialized, one string per example, as TF Serving feeds them. A
//!   signature that declares the operation's method (a SavedModel's `method_name`) always does.
//!
//! Which signature: the one the request names; without a name, the model's default, unless the
//! default does not declare the operation's method and another signature does (a SavedModel
//! exported with `classification` / `regression` signatures beside a Predict `serving_default`),
//! which then answers.
//!
//! Context features (`example_list_with_context`) apply to every example; an example's own
//! feature of the same name wins.
//!
//! The set of examples and how it feeds a signature is in `set`, one input's values gathered
//! example by example in `column`, the run through a signature in `run`, and reading a
//! float output back one row per example (shared by Classify and Regress) in `rows`.

mod column;
mod rows;
mod run;
mod set;
#[cfg(test)]
mod tests;

pub use self::rows::float_rows;
pub use self::run::run;
pub use self::set::Examples;
