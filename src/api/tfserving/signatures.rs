//! A model's signatures as TF `SignatureDef`s, as both metadata calls return them (REST
//! `GET .../metadata` and gRPC `GetModelMetadata`).

use std::collections::HashMap;

use super::methods::PREDICT_METHOD;
use crate::backend::{Signature, TensorSpec};
use crate::proto::tensorflow::{tensor_info, SignatureDef, TensorInfo};
use crate::repository::LoadedModel;
use crate::tensor::tensor_proto;

/// A model's signatures as TF `SignatureDef`s keyed by name, with the method each declares
/// (Predict where the model format records none).
pub fn signature_defs(model: &LoadedModel) -> HashMap<String, SignatureDef> {
    let backend = &model.backend;
    backend
        .signatures()
        .iter()
        .map(|sig| {
            let method = backend
                .signature_method(&sig.name)
                .unwrap_or(PREDICT_METHOD);
            (sig.name.clone(), signature_def(sig, method))
        })
        .collect()
}

fn signature_def(sig: &Signature, method: &str) -> SignatureDef {
    let infos = |specs: &[TensorSpec]| {
        specs
            .iter()
            .map(|spec| {
                let mut shape = tensor_proto::shape_proto(spec.shape.iter().copied());
                // An open input without dimensions is one whose rank is unknown.
                shape.unknown_rank = spec.any_shape && spec.shape.is_empty();
                let info = TensorInfo {
                    encoding: Some(tensor_info::Encoding::Name(spec.name.clone())),
                    dtype: tensor_proto::tf_dtype(spec.dtype) as i32,
                    tensor_shape: Some(shape),
                };
                (spec.name.clone(), info)
            })
            .collect()
    };
    SignatureDef {
        inputs: infos(&sig.inputs),
        outputs: infos(&sig.outputs),
        method_name: method.to_owned(),
        defaults: HashMap::new(),
    }
}
