//! What this binary was built with: its version and the model formats compiled in, for
//! `--version`, `--help` and the `tensorport_build_info` metric.

macro_rules! backends {
    ($list:literal, $formats:literal) => {
        /// The backends compiled in, comma-separated.
        pub const BACKENDS: &str = $list;
        /// `--version`: the crate version and the backends.
        pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (backends: ", $list, ")");
        /// The one-line description `--help` starts with.
        pub const ABOUT: &str = concat!(
            "Serve ",
            $formats,
            " models over the TensorFlow Serving and KServe v2 APIs"
        );
    };
}

#[cfg(all(feature = "torch", feature = "tensorflow"))]
backends!(
    "onnx,torchscript,tensorflow",
    "ONNX, TorchScript and TensorFlow SavedModel"
);
#[cfg(all(feature = "torch", not(feature = "tensorflow")))]
backends!("onnx,torchscript", "ONNX and TorchScript");
#[cfg(all(not(feature = "torch"), feature = "tensorflow"))]
backends!("onnx,tensorflow", "ONNX and TensorFlow SavedModel");
#[cfg(all(not(feature = "torch"), not(feature = "tensorflow")))]
backends!("onnx", "ONNX");
