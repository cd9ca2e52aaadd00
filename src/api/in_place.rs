//! The unary gRPC calls that carry large tensors, KServe `ModelInfer` and TF Serving
//! `Predict`, decoded from the body as the transport received it, in front of tonic's routes.
//!
//! Why: tonic's unary path copies every request body into its own message buffer before
//! decoding it, whatever the body is. For a ranking request that is a megabyte of candidate
//! features copied on the network thread, and the copy lands the tensor bytes wherever that
//! buffer's start puts them, usually misaligned, so that a typed view copies them once more
//! on the way to the runtime. The transport has already read the whole body into one buffer,
//! placed so that the first tensor (a raw input, or a `tensor_content`) is aligned
//! (`transport::placement`); decoding the message from that buffer keeps the input bytes
//! where they are, from the socket to the runtime (the message types hold `bytes` fields as
//! views of the buffer they were decoded from).
//!
//! Only a call tonic would answer the same way is taken here: one of those two methods, an
//! uncompressed message read in full, one whole message in the body, no larger than the
//! port's limit, and a protobuf that decodes. Every other call, and every body that fails one
//! of those checks, goes to tonic's routes with the same bytes, so its answer (and error) is
//! tonic's own. The answer is framed as tonic frames a unary answer: `application/grpc`, the
//! message with its prefix, then `grpc-status: 0` in the trailers; an error is tonic's
//! trailers-only answer.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use futures::future::{BoxFuture, Either};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use prost::Message;
use tonic::body::Body;
use tonic::service::Routes;
use tonic::Status;

use super::kserve::grpc::KserveGrpc;
use super::tfserving::grpc::TfServingGrpc;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceService;
use crate::proto::inference::ModelInferRequest;
use crate::proto::tensorflow::serving::prediction_service_server::PredictionService;
use crate::proto::tensorflow::serving::PredictRequest;

const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
const PREDICT: &str = "/tensorflow.serving.PredictionService/Predict";

/// gRPC's prefix of a message: a compression flag and a 4-byte big-endian length.
const PREFIX: usize = 5;

/// tonic's routes, with `ModelInfer` and `Predict` calls answered in front of them.
#[derive(Clone)]
pub struct InPlaceUnary {
    kserve: KserveGrpc,
    tfserving: TfServingGrpc,
    /// The port's message limit, as tonic's `max_decoding_message_size`.
    limit: usize,
    routes: Routes,
}

impl InPlaceUnary {
    pub fn new(kserve: KserveGrpc, tfserving: TfServingGrpc, limit: usize, routes: Routes) -> Self {
        Self {
            kserve,
            tfserving,
            limit,
            routes,
        }
    }
}

/// Whether `request` is a call this front may take: `ModelInfer` or `Predict`, an
/// uncompressed gRPC message whose body the transport has read in full.
fn takes(request: &Request<Body>) -> bool {
    let headers = request.headers();
    let is = |name: &str, allowed: &[&str]| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| allowed.contains(&value))
    };
    [MODEL_INFER, PREDICT].contains(&request.uri().path())
        && is(
            "content-type",
            &["application/grpc", "application/grpc+proto"],
        )
        && (headers.get("grpc-encoding").is_none() || is("grpc-encoding", &["identity"]))
        && request.body().size_hint().exact().is_some()
}

/// The one message of `body`, decoded in place, if `body` is exactly one uncompressed message
/// of at most `limit` bytes that decodes.
fn decode<M: Message + Default>(body: &Bytes, limit: usize) -> Option<M> {
    let (prefix, message) = body.split_first_chunk::<PREFIX>()?;
    let [0, len @ ..] = *prefix else {
        return None;
    };
    let len = usize::try_from(u32::from_be_bytes(len)).ok()?;
    if len != message.len() || len > limit {
        return None;
    }
    M::decode(body.slice(PREFIX..)).ok()
}

/// `message` framed as a unary gRPC answer.
fn answer(message: impl Message, headers: HeaderMap) -> Result<Response<Body>, Status> {
    let len = message.encoded_len();
    let framed_len = u32::try_from(len).map_err(|_| {
        Status::resource_exhausted(format!(
            "the answer of {len} bytes is larger than a gRPC message can be (4 GiB)"
        ))
    })?;
    let mut framed = BytesMut::with_capacity(PREFIX.saturating_add(len));
    framed.put_u8(0);
    framed.put_u32(framed_len);
    message
        .encode(&mut framed)
        .map_err(|err| Status::internal(format!("the answer could not be encoded: {err}")))?;
    let mut response = Response::new(Body::new(OneMessage {
        message: Some(framed.freeze()),
        trailers: Some(ok_trailers()),
    }));
    *response.version_mut() = http::Version::HTTP_2;
    *response.headers_mut() = headers;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    Ok(response)
}

fn ok_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    trailers
}

/// The body of a unary answer: its message, then its trailers.
struct OneMessage {
    message: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl http_body::Body for OneMessage {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let frame = match self.message.take() {
            Some(message) => Some(Frame::data(message)),
            None => self.trailers.take().map(Frame::trailers),
        };
        Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.message.is_none() && self.trailers.is_none()
    }

    /// No upper bound, as tonic's own answers have none: an exact size would have hyper send
    /// a `content-length`, which gRPC answers do not carry, and after which a client such as
    /// curl stops reading before the trailers that hold `grpc-status`.
    fn size_hint(&self) -> SizeHint {
        let mut hint = SizeHint::new();
        hint.set_lower(self.message.as_ref().map_or(0, |m| m.len() as u64));
        hint
    }
}

impl tower::Service<Request<Body>> for InPlaceUnary {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<
        <Routes as tower::Service<Request<Body>>>::Future,
        BoxFuture<'static, Result<Response<Body>, Infallible>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower::Service::<Request<Body>>::poll_ready(&mut self.routes, cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if !takes(&request) {
            return Either::Left(self.routes.call(request));
        }
        // The routes were made ready for this call; the clone left behind is ready too
        // (tonic's routes always are).
        let clone = self.routes.clone();
        let routes = std::mem::replace(&mut self.routes, clone);
        let front = self.clone();
        Either::Right(Box::pin(async move { front.answer(request, routes).await }))
    }
}

impl InPlaceUnary {
    /// Answers a call [`takes`] accepted, or passes it to `routes` when its body is not one
    /// whole message that decodes.
    async fn answer(
        self,
        request: Request<Body>,
        mut routes: Routes,
    ) -> Result<Response<Body>, Infallible> {
        let (parts, body) = request.into_parts();
        // Read in full already: this takes the transport's one buffer, not a copy.
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                let status = Status::cancelled("the request message could not be read");
                return Ok(status.into_http());
            }
        };
        let answered = if parts.uri.path() == PREDICT {
            let Some(message) = decode::<PredictRequest>(&body, self.limit) else {
                return tower::Service::call(&mut routes, to_tonic(parts, body)).await;
            };
            let request = tonic::Request::from_http(Request::from_parts(parts, message));
            PredictionService::predict(&self.tfserving, request)
                .await
                .and_then(framed)
        } else {
            let Some(message) = decode::<ModelInferRequest>(&body, self.limit) else {
                return tower::Service::call(&mut routes, to_tonic(parts, body)).await;
            };
            let request = tonic::Request::from_http(Request::from_parts(parts, message));
            GrpcInferenceService::model_infer(&self.kserve, request)
                .await
                .and_then(framed)
        };
        Ok(answered.unwrap_or_else(Status::into_http))
    }
}

/// The request rebuilt around the body it came with, for tonic to answer.
fn to_tonic(parts: http::request::Parts, body: Bytes) -> Request<Body> {
    Request::from_parts(parts, Body::new(http_body_util::Full::new(body)))
}

/// A service's answer framed as a unary gRPC answer.
fn framed<M: Message>(response: tonic::Response<M>) -> Result<Response<Body>, Status> {
    let (metadata, message, _) = response.into_parts();
    answer(message, metadata.into_headers())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(flag: u8, message: &[u8]) -> Bytes {
        let mut body = vec![flag];
        body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        body.extend_from_slice(message);
        body.into()
    }

    #[test]
    fn only_one_whole_uncompressed_message_within_the_limit_is_decoded_here() {
        let message = ModelInferRequest {
            model_name: "ranker".into(),
            raw_input_contents: vec![Bytes::from_static(&[1, 2, 3, 4])],
            ..Default::default()
        }
        .encode_to_vec();
        let body = framed(0, &message);
        let decoded: ModelInferRequest = decode(&body, 1 << 20).unwrap();
        assert_eq!(decoded.model_name, "ranker");
        // The input is a view of the body, not a copy.
        let raw = &decoded.raw_input_contents[0];
        let inside = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
        assert!(inside.contains(&(raw.as_ptr() as usize)));

        assert!(
            decode::<ModelInferRequest>(&framed(1, &message), 1 << 20).is_none(),
            "compressed"
        );
        assert!(
            decode::<ModelInferRequest>(&body, message.len() - 1).is_none(),
            "over the limit"
        );
        assert!(
            decode::<ModelInferRequest>(&body.slice(..body.len() - 1), 1 << 20).is_none(),
            "cut short"
        );
        let mut two = body.to_vec();
        two.extend_from_slice(&body);
        assert!(
            decode::<ModelInferRequest>(&two.into(), 1 << 20).is_none(),
            "two messages"
        );
        assert!(
            decode::<ModelInferRequest>(&framed(0, &[0xff, 0xff]), 1 << 20).is_none(),
            "not protobuf"
        );
        assert!(
            decode::<ModelInferRequest>(&Bytes::from_static(&[0, 0]), 1 << 20).is_none(),
            "no prefix"
        );
    }

    #[test]
    fn a_predict_input_is_a_view_of_the_body_too() {
        let tensor = crate::proto::tensorflow::TensorProto {
            tensor_content: Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]),
            ..Default::default()
        };
        let message = PredictRequest {
            inputs: [("x".to_owned(), tensor)].into_iter().collect(),
            ..Default::default()
        }
        .encode_to_vec();
        let body = framed(0, &message);
        let decoded: PredictRequest = decode(&body, 1 << 20).unwrap();
        let content = &decoded.inputs["x"].tensor_content;
        assert_eq!(&content[..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let inside = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
        assert!(inside.contains(&(content.as_ptr() as usize)));
    }

    #[test]
    fn an_answer_is_the_message_then_grpc_status_0() {
        let response = answer(
            ModelInferRequest {
                id: "x".into(),
                ..Default::default()
            },
            HeaderMap::new(),
        )
        .unwrap();
        assert_eq!(response.headers()["content-type"], "application/grpc");
        assert_eq!(
            response.body().size_hint().upper(),
            None,
            "no content-length"
        );
        let collected = futures::executor::block_on(response.into_body().collect()).unwrap();
        let trailers = collected.trailers().cloned().unwrap();
        assert_eq!(trailers["grpc-status"], "0");
        let bytes = collected.to_bytes();
        assert_eq!(bytes[0], 0);
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, bytes.len() - PREFIX);
        assert_eq!(ModelInferRequest::decode(&bytes[PREFIX..]).unwrap().id, "x");
    }
}
