//! The overload layers' one error enum, and how each transport spells it and every other
//! answer's outcome. Both go through [`ErrorKind::table`], the server's one status table.

use axum::http::{header, HeaderValue, Response, StatusCode};

use crate::error_kind::ErrorKind;
use crate::metrics::RefusalReason;
use crate::request::DeadlineError;

/// Why a layer answered a request itself instead of passing it on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("too many requests from this client; retry in {retry_after_s} s")]
    RateLimited { retry_after_s: u64 },
    #[error("the server is at its limit of {limit} requests in flight; retry later")]
    Overloaded { limit: usize },
    #[error(
        "the request would take {needed} bytes once decoded, more than the {left} bytes left \
         of the server's {total}-byte budget for requests in flight and answers being sent; \
         retry later or send less"
    )]
    MemoryExhausted { needed: u64, left: u64, total: u64 },
    #[error("the request's deadline passed before it was answered")]
    DeadlineExceeded,
    #[error(transparent)]
    BadDeadline(#[from] DeadlineError),
}

impl Refusal {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::RateLimited { .. } | Self::Overloaded { .. } | Self::MemoryExhausted { .. } => {
                ErrorKind::ResourceExhausted
            }
            Self::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            Self::BadDeadline(_) => ErrorKind::InvalidArgument,
        }
    }

    /// The reason it is counted under, when it is a refusal for overload.
    pub fn reason(&self) -> Option<RefusalReason> {
        match self {
            Self::RateLimited { .. } => Some(RefusalReason::RateLimit),
            Self::Overloaded { .. } => Some(RefusalReason::Concurrency),
            Self::MemoryExhausted { .. } => Some(RefusalReason::Memory),
            Self::DeadlineExceeded => Some(RefusalReason::Deadline),
            Self::BadDeadline(_) => None,
        }
    }

    /// Seconds a client should wait before retrying (`Retry-After`), for overload refusals.
    /// Whole seconds, as HTTP specifies, and never 0, which clients read as "at once".
    fn retry_after_s(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after_s } => Some((*retry_after_s).max(1)),
            Self::Overloaded { .. } | Self::MemoryExhausted { .. } => Some(1),
            Self::DeadlineExceeded | Self::BadDeadline(_) => None,
        }
    }
}

/// Put on every answer a layer gives itself, without reading the request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyUnread;

/// Put on a refusal's response so that the observing layer counts the right reason. Queue-full
/// and deadline answers from deeper down carry no marker; their status says which they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused(pub RefusalReason);

/// What became of a request, as the `outcome` label says it: the `error_type` of the error
/// table, `ok`, `cancelled`, or the name of an HTTP status the table has no row for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed(ErrorKind),
    /// An HTTP answer outside the error table, such as 405 or 413 from the router or the body
    /// limit, named for its status (`method_not_allowed`), not passed off as a table row.
    Rejected(&'static str),
    /// The client went away (or its own deadline ended the call) before the answer.
    Cancelled,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed(kind) => kind.table().error_type,
            Self::Rejected(name) => name,
            Self::Cancelled => "cancelled",
        }
    }

    /// The refusal reason of an answer that carries no marker: only the batcher refuses with
    /// these codes below the overload layers.
    pub fn implied_reason(self) -> Option<RefusalReason> {
        match self {
            Self::Failed(ErrorKind::ResourceExhausted) => Some(RefusalReason::QueueFull),
            Self::Failed(ErrorKind::DeadlineExceeded) => Some(RefusalReason::Deadline),
            _ => None,
        }
    }
}

/// How one transport spells answers. Implemented for the response body type of each server,
/// which is also how a generic layer knows which transport it serves.
pub trait Transport: Sized {
    /// Whether the server speaks gRPC (deadline header `grpc-timeout`, status in
    /// `grpc-status`) rather than HTTP.
    const GRPC: bool;

    /// The answer to a refused request.
    fn refusal(refusal: &Refusal) -> Response<Self>;

    /// The outcome an answer reports.
    fn outcome(response: &Response<Self>) -> Outcome;
}

impl Transport for axum::body::Body {
    const GRPC: bool = false;

    fn refusal(refusal: &Refusal) -> Response<Self> {
        let row = refusal.kind().table();
        let body = serde_json::json!({ "error": refusal.to_string() }).to_string();
        let mut response = Response::new(Self::from(body));
        *response.status_mut() =
            StatusCode::from_u16(row.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        mark(&mut response, refusal);
        response
    }

    fn outcome(response: &Response<Self>) -> Outcome {
        let status = response.status();
        if status.is_success() || status.is_redirection() || status.is_informational() {
            return Outcome::Ok;
        }
        let kind = ErrorKind::ALL
            .into_iter()
            .find(|kind| kind.table().http_status == status.as_u16());
        match kind {
            Some(kind) => Outcome::Failed(kind),
            None if status.is_client_error() => Outcome::Rejected(client_error_name(status)),
            None => Outcome::Failed(ErrorKind::Internal),
        }
    }
}

/// The outcome name of a 4xx status outside the error table.
fn client_error_name(status: StatusCode) -> &'static str {
    match status {
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_ACCEPTABLE => "not_acceptable",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::LENGTH_REQUIRED => "length_required",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::URI_TOO_LONG => "uri_too_long",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "unprocessable_entity",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "headers_too_large",
        _ => "client_error",
    }
}

impl Transport for tonic::body::Body {
    const GRPC: bool = true;

    fn refusal(refusal: &Refusal) -> Response<Self> {
        let status = tonic::Status::new(refusal.kind().table().grpc_code, refusal.to_string());
        let mut response = status.into_http::<Self>();
        mark(&mut response, refusal);
        response
    }

    fn outcome(response: &Response<Self>) -> Outcome {
        // A handler's error is a trailers-only answer, its status in the headers; a success
        // puts `grpc-status: 0` in the trailers, so no header means OK.
        let code = response
            .headers()
            .get("grpc-status")
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.parse::<i32>().ok())
            .map_or(tonic::Code::Ok, tonic::Code::from_i32);
        match code {
            tonic::Code::Ok => Outcome::Ok,
            tonic::Code::Cancelled => Outcome::Cancelled,
            code => Outcome::Failed(
                ErrorKind::ALL
                    .into_iter()
                    .find(|kind| kind.table().grpc_code == code)
                    .unwrap_or(match code {
                        tonic::Code::OutOfRange | tonic::Code::FailedPrecondition => {
                            ErrorKind::InvalidArgument
                        }
                        _ => ErrorKind::Internal,
                    }),
            ),
        }
    }
}

/// Adds `Retry-After` and the markers. gRPC clients ignore the header, but it costs nothing
/// and proxies in front of the server may read it.
fn mark<B>(response: &mut Response<B>, refusal: &Refusal) {
    response.extensions_mut().insert(BodyUnread);
    if let Some(seconds) = refusal.retry_after_s() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if let Some(reason) = refusal.reason() {
        response.extensions_mut().insert(Refused(reason));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_refusals_are_429_with_retry_after_and_marked() {
        let response = axum::body::Body::refusal(&Refusal::Overloaded { limit: 4 });
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(
            response.extensions().get::<Refused>(),
            Some(&Refused(RefusalReason::Concurrency))
        );
        assert_eq!(
            axum::body::Body::outcome(&response),
            Outcome::Failed(ErrorKind::ResourceExhausted)
        );
    }

    #[test]
    fn grpc_refusals_are_resource_exhausted_in_the_headers() {
        let response = tonic::body::Body::refusal(&Refusal::RateLimited { retry_after_s: 0 });
        assert_eq!(response.headers()["grpc-status"], "8");
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(
            tonic::body::Body::outcome(&response),
            Outcome::Failed(ErrorKind::ResourceExhausted)
        );
        let late = tonic::body::Body::refusal(&Refusal::DeadlineExceeded);
        assert_eq!(late.headers()["grpc-status"], "4");
        assert!(late.headers().get(header::RETRY_AFTER).is_none());
    }

    #[test]
    fn unmarked_answers_imply_the_batcher_s_reasons() {
        assert_eq!(
            Outcome::Failed(ErrorKind::ResourceExhausted).implied_reason(),
            Some(RefusalReason::QueueFull)
        );
        assert_eq!(
            Outcome::Failed(ErrorKind::DeadlineExceeded).implied_reason(),
            Some(RefusalReason::Deadline)
        );
        assert_eq!(Outcome::Ok.implied_reason(), None);
    }
}
