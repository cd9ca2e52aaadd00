//! The front of the HTTP application. The routes that carry nearly every request, KServe
//! inference and TF Serving's `/v1/models/...`, are recognised with a few string comparisons
//! and answered at once; every other request goes through the axum router.
//!
//! Why: routing through axum costs each request about ten allocations (the matched path, the
//! URL parameters and their percent-decoded copies, a clone of the route's boxed service, a
//! boxed handler future) and a walk of its route tree, several percent of the CPU time of a
//! small model's inference. The hot routes call the same functions the router's handlers
//! call, so both answer alike; a path they would have to percent-decode (any `%`), and every
//! path or method they do not match exactly, is left to the router, whose answer (a 404, a
//! 405 with `Allow`, another route) is then the only one.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use axum::routing::future::RouteFuture;
use axum::Router;
use futures::future::{BoxFuture, Either};
use tower::Service;

use super::http::body::read_payload;
use super::kserve;
use super::tfserving;
use super::AppState;
use crate::infer::InferService;
use crate::request::RequestContext;

/// The HTTP application: the hot routes in front of `router`.
#[derive(Clone)]
pub struct HotRoutes {
    infer: Arc<InferService>,
    router: Router,
}

impl HotRoutes {
    pub fn new(state: AppState, router: Router<AppState>) -> Self {
        Self {
            infer: state.infer.clone(),
            router: router.with_state(state),
        }
    }
}

/// A request the hot routes answer.
#[derive(Debug, PartialEq, Eq)]
enum Hot<'a> {
    /// `POST /v2/models/{model}[/versions/{version}]/infer`.
    KserveInfer {
        model: &'a str,
        version: Option<&'a str>,
    },
    /// Any method on `/v1/models/{rest}`, which `tfserving::rest` splits itself.
    TfServing { rest: &'a str },
}

/// The hot route `path` names for `method`, if any. Matches exactly what the router's
/// `/v2/models/{name}/infer`, `/v2/models/{name}/versions/{version}/infer` (POST) and
/// `/v1/models/{*rest}` (any method) match, less the paths with percent-escapes.
fn hot_route<'a>(method: &Method, path: &'a str) -> Option<Hot<'a>> {
    if path.contains('%') {
        return None;
    }
    if let Some(rest) = path.strip_prefix("/v1/models/") {
        return (!rest.is_empty()).then_some(Hot::TfServing { rest });
    }
    if method != Method::POST {
        return None;
    }
    let inner = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    let mut segments = inner.split('/');
    let segments = (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    );
    match segments {
        (Some(model), None, _, _) if !model.is_empty() => Some(Hot::KserveInfer {
            model,
            version: None,
        }),
        (Some(model), Some("versions"), Some(version), None)
            if !model.is_empty() && !version.is_empty() =>
        {
            Some(Hot::KserveInfer {
                model,
                version: Some(version),
            })
        }
        _ => None,
    }
}

impl Service<Request> for HotRoutes {
    type Response = Response;
    type Error = Infallible;
    type Future = Either<RouteFuture<Infallible>, BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The router is always ready, and so are the hot routes.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match hot_route(request.method(), request.uri().path()) {
            Some(Hot::KserveInfer { model, version }) => {
                let (model, version) = (model.to_owned(), version.unwrap_or("").to_owned());
                let infer = self.infer.clone();
                Either::Right(Box::pin(async move {
                    Ok(kserve::infer_request(&infer, model, version, request).await)
                }))
            }
            Some(Hot::TfServing { .. }) => {
                Either::Right(Box::pin(tf_serving(self.infer.clone(), request)))
            }
            None => Either::Left(self.router.call(request)),
        }
    }
}

/// A `/v1/models/...` request, answered as the router's handler answers it.
async fn tf_serving(infer: Arc<InferService>, request: Request) -> Result<Response, Infallible> {
    let (mut parts, body) = request.into_parts();
    let context = parts.extensions.remove::<Arc<RequestContext>>();
    Ok(match read_payload(body).await {
        Ok(body) => {
            tfserving::rest::answer(
                &infer,
                &parts.method,
                parts.uri.path(),
                context.as_deref(),
                &body,
            )
            .await
        }
        Err(refused) => axum::response::IntoResponse::into_response(refused),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infer<'a>(model: &'a str, version: Option<&'a str>) -> Option<Hot<'a>> {
        Some(Hot::KserveInfer { model, version })
    }

    #[test]
    fn kserve_inference_is_hot_for_post_only() {
        let post = Method::POST;
        assert_eq!(
            hot_route(&post, "/v2/models/ranker/infer"),
            infer("ranker", None)
        );
        assert_eq!(
            hot_route(&post, "/v2/models/ranker/versions/2/infer"),
            infer("ranker", Some("2"))
        );
        assert_eq!(hot_route(&Method::GET, "/v2/models/ranker/infer"), None);
    }

    #[test]
    fn anything_else_is_left_to_the_router() {
        let post = Method::POST;
        for path in [
            "/v2/models//infer",
            "/v2/models/infer",
            "/v2/models/ranker/infer/",
            "/v2/models/ranker/versions/infer",
            "/v2/models/ranker/versions//infer",
            "/v2/models/ranker/versions/2/3/infer",
            "/v2/models/ranker/other/2/infer",
            "/v2/models/my%20model/infer",
            "/v2/repository/models/ranker/load",
            "/v1/models/",
            "/v1/models/my%20model:predict",
            "/v2",
        ] {
            assert_eq!(hot_route(&post, path), None, "{path}");
        }
    }

    #[test]
    fn tf_serving_is_hot_for_every_method() {
        for method in [Method::GET, Method::POST, Method::DELETE] {
            assert_eq!(
                hot_route(&method, "/v1/models/ranker/versions/2:predict"),
                Some(Hot::TfServing {
                    rest: "ranker/versions/2:predict"
                })
            );
        }
    }
}
