//! The tower layer that applies an [`Access`] policy in front of the routes, on both servers.

use std::marker::PhantomData;
use std::task::{Context, Poll};

use futures::future::{ready, Either, Ready};
use http::{header, HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service};

use super::access::{Access, Denied};

/// How a server's transport spells a refusal; implemented for the response body of each.
pub trait Refuse: Sized {
    fn refuse(denied: &Denied) -> Response<Self>;
}

impl Refuse for axum::body::Body {
    fn refuse(denied: &Denied) -> Response<Self> {
        let status = StatusCode::from_u16(denied.kind().table().http_status)
            .unwrap_or(StatusCode::FORBIDDEN);
        let body = serde_json::json!({ "error": denied.to_string() }).to_string();
        let mut response = Response::new(Self::from(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if status == StatusCode::UNAUTHORIZED {
            // RFC 6750: a 401 names the scheme the client should use.
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl Refuse for tonic::body::Body {
    fn refuse(denied: &Denied) -> Response<Self> {
        tonic::Status::new(denied.kind().table().grpc_code, denied.to_string()).into_http()
    }
}

/// Wraps a server's routes in [`Authenticate`].
pub struct AuthLayer<B> {
    access: Access,
    _body: PhantomData<fn() -> B>,
}

impl<B> AuthLayer<B> {
    pub fn new(access: Access) -> Self {
        Self {
            access,
            _body: PhantomData,
        }
    }
}

impl<B> Clone for AuthLayer<B> {
    fn clone(&self) -> Self {
        Self::new(self.access.clone())
    }
}

impl<S, B> Layer<S> for AuthLayer<B> {
    type Service = Authenticate<S, B>;

    fn layer(&self, inner: S) -> Self::Service {
        Authenticate {
            inner,
            access: self.access.clone(),
            _body: PhantomData,
        }
    }
}

/// Answers a request the policy refuses itself, without reading its body; passes the rest on.
pub struct Authenticate<S, B> {
    inner: S,
    access: Access,
    _body: PhantomData<fn() -> B>,
}

impl<S: Clone, B> Clone for Authenticate<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            access: self.access.clone(),
            _body: PhantomData,
        }
    }
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for Authenticate<S, B>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    B: Refuse,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Either<Ready<Result<Response<B>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        match self.access.check(request.headers(), request.uri().path()) {
            Ok(()) => Either::Right(self.inner.call(request)),
            Err(denied) => {
                tracing::debug!(path = request.uri().path(), reason = %denied, "refused");
                Either::Left(ready(Ok(B::refuse(&denied))))
            }
        }
    }
}
