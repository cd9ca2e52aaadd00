//! The parameters of a KServe gRPC message (`map<string, InferParameter>`) as the transport-free
//! [`Params`], for `ModelInfer` and each tensor in it.

use std::collections::HashMap;

use crate::api::kserve::params::{Param, Params};
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::proto::inference::InferParameter;

/// A parameter without a value (no `parameter_choice`) is left out, as Triton leaves it.
pub(super) fn params(map: &HashMap<String, InferParameter>) -> Params {
    map.iter()
        .filter_map(|(key, value)| {
            let param = match value.parameter_choice.as_ref()? {
                ParameterChoice::BoolParam(b) => Param::Bool(*b),
                ParameterChoice::Int64Param(i) => Param::Int(*i),
                ParameterChoice::Uint64Param(u) => Param::Uint(*u),
                ParameterChoice::DoubleParam(d) => Param::Double(*d),
                ParameterChoice::StringParam(s) => Param::Str(s.clone()),
            };
            Some((key.clone(), param))
        })
        .collect()
}
