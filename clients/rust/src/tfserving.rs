//! TF Serving over gRPC: `PredictionService.Predict` and `ModelService.GetModelStatus`.

use std::collections::HashMap;

use tonic::transport::Channel;

use crate::error::{ClientError, Result};
use crate::proto::tensorflow::serving::model_version_status::State;
use crate::proto::tensorflow::serving::{
    model_service_client::ModelServiceClient, model_spec::VersionChoice,
    prediction_service_client::PredictionServiceClient, GetModelStatusRequest, ModelSpec,
    PredictRequest,
};
use crate::proto::tensorflow::{tensor_shape_proto::Dim, TensorProto, TensorShapeProto};
use crate::tensor::{DataType, NamedTensor, Tensor};

/// One version's state as TF Serving reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionStatus {
    pub version: i64,
    /// AVAILABLE, LOADING, END, ...
    pub state: String,
    pub error_message: String,
}

/// A TF Serving gRPC client.
#[derive(Debug, Clone)]
pub struct TfServingClient {
    predict: PredictionServiceClient<Channel>,
    models: ModelServiceClient<Channel>,
}

fn model_spec(model: &str, version: Option<i64>) -> ModelSpec {
    ModelSpec {
        name: model.to_owned(),
        version_choice: version.map(VersionChoice::Version),
        ..Default::default()
    }
}

fn to_proto(tensor: &Tensor) -> Result<TensorProto> {
    let shape = TensorShapeProto {
        dim: tensor
            .shape()
            .iter()
            .map(|&size| Dim {
                size,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut proto = TensorProto {
        dtype: tensor.datatype().tf() as i32,
        tensor_shape: Some(shape),
        ..Default::default()
    };
    match tensor.datatype() {
        DataType::Bytes => proto.string_val = tensor.to_strings()?,
        // Sharing the buffer: the request serialises straight from the tensor's bytes.
        _ => proto.tensor_content = tensor.raw().clone(),
    }
    Ok(proto)
}

fn from_proto(proto: TensorProto) -> Result<Tensor> {
    let datatype = DataType::from_tf(proto.dtype)
        .ok_or_else(|| ClientError::Response(format!("unsupported TF dtype {}", proto.dtype)))?;
    let shape: Vec<i64> = proto
        .tensor_shape
        .map(|s| s.dim.into_iter().map(|d| d.size).collect())
        .unwrap_or_default();
    if datatype == DataType::Bytes {
        return Tensor::from_strings(shape, &proto.string_val);
    }
    if !proto.tensor_content.is_empty() {
        return Tensor::from_raw(datatype, shape, proto.tensor_content);
    }
    // The typed fields, as TF Serving (and tensorport by default) answer.
    match datatype {
        DataType::F32 => Tensor::new(shape, &proto.float_val),
        DataType::F64 => Tensor::new(shape, &proto.double_val),
        DataType::I32 => Tensor::new(shape, &proto.int_val),
        DataType::I16 => narrow::<i16>(datatype, shape, &proto.int_val),
        DataType::I8 => narrow::<i8>(datatype, shape, &proto.int_val),
        DataType::U16 => narrow::<u16>(datatype, shape, &proto.int_val),
        DataType::U8 => narrow::<u8>(datatype, shape, &proto.int_val),
        DataType::I64 => Tensor::new(shape, &proto.int64_val),
        DataType::U32 => Tensor::new(shape, &proto.uint32_val),
        DataType::U64 => Tensor::new(shape, &proto.uint64_val),
        DataType::Bool => Tensor::from_bools(shape, &proto.bool_val),
        DataType::F16 | DataType::Bf16 => {
            // half_val holds the 16-bit patterns in int32s; the truncation is the decoding.
            let bytes: Vec<u8> = proto
                .half_val
                .iter()
                .flat_map(|&bits| (bits as u16).to_le_bytes())
                .collect();
            Tensor::from_raw(datatype, shape, bytes.into())
        }
        other => Err(ClientError::Response(format!(
            "{} output without tensor_content",
            other.name()
        ))),
    }
}

/// An `int_val` field as a narrower integer type, refusing values that do not fit.
fn narrow<T>(datatype: DataType, shape: Vec<i64>, values: &[i32]) -> Result<Tensor>
where
    T: crate::tensor::Element + TryFrom<i32>,
{
    let converted = values
        .iter()
        .map(|&v| {
            T::try_from(v).map_err(|_| {
                ClientError::Response(format!("{} value {v} is out of range", datatype.name()))
            })
        })
        .collect::<Result<Vec<T>>>()?;
    Tensor::new(shape, &converted)
}

impl TfServingClient {
    /// Connects to `endpoint`, such as `http://127.0.0.1:8500`.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self> {
        let channel = Channel::from_shared(endpoint.into())
            .map_err(|err| ClientError::Response(format!("bad endpoint: {err}")))?
            .connect()
            .await?;
        Ok(Self::new(channel))
    }

    pub fn new(channel: Channel) -> Self {
        Self {
            predict: PredictionServiceClient::new(channel.clone())
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
            models: ModelServiceClient::new(channel),
        }
    }

    /// Predict with the default signature; `version` None is the newest.
    pub async fn predict(
        &mut self,
        model: &str,
        version: Option<i64>,
        inputs: &[(&str, &Tensor)],
    ) -> Result<Vec<NamedTensor>> {
        let request = PredictRequest {
            model_spec: Some(model_spec(model, version)),
            inputs: inputs
                .iter()
                .map(|(name, t)| Ok(((*name).to_owned(), to_proto(t)?)))
                .collect::<Result<HashMap<_, _>>>()?,
            ..Default::default()
        };
        let response = self.predict.predict(request).await?.into_inner();
        let mut outputs: Vec<NamedTensor> = response
            .outputs
            .into_iter()
            .map(|(name, proto)| Ok((name, from_proto(proto)?)))
            .collect::<Result<_>>()?;
        // The wire carries a map; sort for a stable order.
        outputs.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(outputs)
    }

    pub async fn model_status(
        &mut self,
        model: &str,
        version: Option<i64>,
    ) -> Result<Vec<VersionStatus>> {
        let response = self
            .models
            .get_model_status(GetModelStatusRequest {
                model_spec: Some(model_spec(model, version)),
            })
            .await?
            .into_inner();
        Ok(response
            .model_version_status
            .into_iter()
            .map(|row| VersionStatus {
                version: row.version,
                state: State::try_from(row.state)
                    .map(|s| s.as_str_name().to_owned())
                    .unwrap_or_else(|_| row.state.to_string()),
                error_message: row.status.map(|s| s.error_message).unwrap_or_default(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::tensorflow::DataType as TfType;

    fn typed(dtype: TfType, fill: impl FnOnce(&mut TensorProto)) -> Result<Tensor> {
        let mut proto = TensorProto {
            dtype: dtype as i32,
            tensor_shape: Some(TensorShapeProto {
                dim: vec![Dim {
                    size: 2,
                    name: String::new(),
                }],
                unknown_rank: false,
            }),
            ..Default::default()
        };
        fill(&mut proto);
        from_proto(proto)
    }

    #[test]
    fn every_typed_field_the_server_answers_in_decodes() -> Result<()> {
        let bytes = typed(TfType::DtUint8, |p| p.int_val = vec![200, 7])?;
        assert_eq!(bytes.to_vec::<u8>()?, [200, 7]);
        let shorts = typed(TfType::DtInt16, |p| p.int_val = vec![-300, 4])?;
        assert_eq!(shorts.to_vec::<i16>()?, [-300, 4]);
        let words = typed(TfType::DtUint32, |p| p.uint32_val = vec![1, u32::MAX])?;
        assert_eq!(words.to_vec::<u32>()?, [1, u32::MAX]);
        // float16 1.0 is the bit pattern 0x3c00.
        let halves = typed(TfType::DtHalf, |p| p.half_val = vec![0x3c00, 0])?;
        assert_eq!(&halves.raw()[..], &[0x00, 0x3c, 0, 0]);
        assert!(typed(TfType::DtInt8, |p| p.int_val = vec![300, 0]).is_err());
        Ok(())
    }
}
