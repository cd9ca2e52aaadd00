//! gRPC unary calls with prebuilt bodies. The codec passes bytes through: requests were
//! serialised before the run, and replies are only checked for their status, never decoded.

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

use crate::error::LoadgenError;

pub const KSERVE_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
pub const TFS_PREDICT: &str = "/tensorflow.serving.PredictionService/Predict";
pub const KSERVE_SERVER_LIVE: &str = "/inference.GRPCInferenceService/ServerLive";

/// Message bodies as they are: encoded once by the caller, not decoded on the way back.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Opens one HTTP/2 connection to `target` (HOST:PORT); every request is a stream on it.
pub async fn connect(target: &str) -> Result<Channel, LoadgenError> {
    let failed = |message: String| LoadgenError::Connect {
        target: target.to_owned(),
        message,
    };
    Endpoint::from_shared(format!("http://{target}"))
        .map_err(|err| failed(err.to_string()))?
        .tcp_nodelay(true)
        // Large tensors: windows big enough that flow control is not what is measured.
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(64 << 20))
        .connect()
        .await
        .map_err(|err| failed(err.to_string()))
}

/// Sends one of a fixed set of bodies to one method, over one or more connections.
#[derive(Clone)]
pub struct GrpcSender {
    connections: Arc<[tonic::client::Grpc<Channel>]>,
    path: PathAndQuery,
    bodies: Arc<[Bytes]>,
}

impl GrpcSender {
    /// `channels` must not be empty.
    pub fn new(channels: Vec<Channel>, path: &'static str, bodies: Vec<Bytes>) -> Self {
        Self {
            connections: channels
                .into_iter()
                .map(|channel| {
                    tonic::client::Grpc::new(channel)
                        .max_decoding_message_size(usize::MAX)
                        .max_encoding_message_size(usize::MAX)
                })
                .collect(),
            path: PathAndQuery::from_static(path),
            bodies: bodies.into(),
        }
    }

    /// One call with the body of `slot`, on connection `slot % N`; an error is named by its
    /// gRPC code.
    pub async fn send(&self, slot: usize) -> Result<(), String> {
        let Some(grpc) = self.connections.get(slot % self.connections.len().max(1)) else {
            return Err("client:no connection".to_owned());
        };
        let mut grpc = grpc.clone();
        grpc.ready().await.map_err(|_| "transport".to_owned())?;
        let body = self.bodies[slot % self.bodies.len()].clone();
        grpc.unary::<Bytes, Bytes, RawCodec>(Request::new(body), self.path.clone(), RawCodec)
            .await
            .map(drop)
            .map_err(|status| format!("grpc:{:?}", status.code()))
    }
}
