//! The method names a TF Serving signature declares (a SavedModel's `method_name`), which
//! pick the signature an operation calls and the tasks a MultiInference may ask for.

/// TF Serving's method name for predict signatures.
pub const PREDICT_METHOD: &str = "tensorflow/serving/predict";
/// TF Serving's method name for classification signatures.
pub const CLASSIFY_METHOD: &str = "tensorflow/serving/classify";
/// TF Serving's method name for regression signatures.
pub const REGRESS_METHOD: &str = "tensorflow/serving/regress";
