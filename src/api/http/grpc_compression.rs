//! gzip on the gRPC port answers in kind: a reply is compressed only when its request was.
//!
//! Every gRPC C-core client (grpcio, `tritonclient.grpc`, perf_analyzer, the TF Serving C++
//! stubs) lists gzip in `grpc-accept-encoding` on every call, whatever its user asked for.
//! tonic compresses a reply whenever the client accepts gzip, so without this every answer to
//! those clients would be gzipped: CPU on both sides and a larger message for the small
//! tensors a ranking model returns. TF Serving and Triton answer uncompressed unless told
//! otherwise; a client that compresses its request (`compression=grpc.Compression.Gzip`,
//! `compression_algorithm="gzip"`) has said it wants gzip, and gets gzip back.

use http::header::HeaderValue;
use http::Request;

const ENCODING: &str = "grpc-encoding";
const ACCEPT_ENCODING: &str = "grpc-accept-encoding";

/// Whether a request's message is compressed, by its `grpc-encoding` header.
fn compressed(encoding: Option<&HeaderValue>) -> bool {
    encoding
        .and_then(|value| value.to_str().ok())
        .is_some_and(|name| !name.trim().eq_ignore_ascii_case("identity") && !name.is_empty())
}

/// Hides `grpc-accept-encoding` from the services when the request itself is not compressed,
/// so that the reply is not either.
pub fn reply_in_kind<B>(mut request: Request<B>) -> Request<B> {
    if !compressed(request.headers().get(ENCODING)) {
        request.headers_mut().remove(ACCEPT_ENCODING);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&'static str, &'static str)]) -> Request<()> {
        let mut request = Request::new(());
        for (name, value) in headers {
            request
                .headers_mut()
                .insert(*name, HeaderValue::from_static(value));
        }
        request
    }

    #[test]
    fn an_uncompressed_request_is_answered_uncompressed() {
        let plain = reply_in_kind(request(&[(ACCEPT_ENCODING, "identity,deflate,gzip")]));
        assert!(plain.headers().get(ACCEPT_ENCODING).is_none());
        let identity = reply_in_kind(request(&[
            (ENCODING, "identity"),
            (ACCEPT_ENCODING, "identity,deflate,gzip"),
        ]));
        assert!(identity.headers().get(ACCEPT_ENCODING).is_none());
    }

    #[test]
    fn a_gzipped_request_may_be_answered_with_gzip() {
        let gzipped = reply_in_kind(request(&[
            (ENCODING, "gzip"),
            (ACCEPT_ENCODING, "identity,deflate,gzip"),
        ]));
        assert_eq!(gzipped.headers()[ACCEPT_ENCODING], "identity,deflate,gzip");
    }
}
