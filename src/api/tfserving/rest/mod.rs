//! TF Serving's REST API under `/v1/models/...`.
//!
//! axum cannot route `{name}:predict` (one parameter per segment), so everything under
//! `/v1/models/` arrives here and `crate::rest_target` splits the path itself. This file is
//! the dispatcher; each operation is in its own file below it (`status`, `metadata`,
//! `predict/`, `examples` for `:classify` and `:regress`), and the one thing they share,
//! reading a path's version, is the `path` leaf, so that no operation imports the dispatcher.

mod examples;
mod metadata;
mod path;
mod predict;
mod status;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Extension;

use self::examples::Verb;
use self::metadata::metadata;
use self::path::{version_selector, RestTarget, VERBS};
use self::predict::predict;
use self::status::status;
use crate::api::http::body::Payload;
use crate::api::http::response::RestError;
use crate::api::http::route_table::Routes;
use crate::api::AppState;
use crate::infer::InferService;
use crate::request::RequestContext;
use crate::rest_target::tf_serving_rest;
pub use crate::rest_target::SERVED_PATHS;
use crate::wire_error::PredictBodyError;

/// The `/v1` routes, waiting for their state.
pub fn routes() -> Routes<AppState> {
    Routes::new().dispatch("/v1/models/{*rest}", any(dispatch), SERVED_PATHS)
}

/// The router's handler for `/v1/models/{*rest}`. The path is read from the URI through
/// [`tf_serving_rest`], not from axum's decoded parameter, so that it is decoded exactly as the
/// auth layer decoded it when it chose the request's API group.
async fn dispatch(
    State(infer): State<Arc<InferService>>,
    method: Method,
    uri: Uri,
    context: Option<Extension<Arc<RequestContext>>>,
    Payload(body): Payload,
) -> Response {
    let context = context.as_ref().map(|Extension(context)| context.as_ref());
    answer(&infer, &method, uri.path(), context, &body).await
}

/// Answers `method` on `path` (a `/v1/models/...` path as the request spelled it) with `body`.
pub(crate) async fn answer(
    infer: &InferService,
    method: &Method,
    path: &str,
    context: Option<&RequestContext>,
    body: &Bytes,
) -> Response {
    let rest = match tf_serving_rest(path) {
        Some(Ok(rest)) => rest,
        Some(Err(undecodable)) => {
            return RestError::with_status(StatusCode::BAD_REQUEST, undecodable.to_string())
                .into_response()
        }
        None => return RestError::not_found_path(path).into_response(),
    };
    let rest = rest.as_ref();
    let target = RestTarget::parse(rest);
    if let (Some(context), Some(target)) = (context, &target) {
        context.name_model(target.model());
    }
    let result = match (target, method) {
        (Some(RestTarget::Status { model, version }), &Method::GET) => {
            status(infer, model, version)
        }
        (Some(RestTarget::Metadata { model, version }), &Method::GET) => {
            metadata(infer, model, version, context).await
        }
        (
            Some(RestTarget::Verb {
                model,
                version,
                verb: "predict",
            }),
            &Method::POST,
        ) => predict(infer, context, model, version, body).await,
        (
            Some(RestTarget::Verb {
                model,
                version,
                verb: verb @ ("classify" | "regress"),
            }),
            &Method::POST,
        ) => {
            let verb = if verb == "classify" {
                Verb::Classify
            } else {
                Verb::Regress
            };
            match version_selector(version) {
                Ok(version) => examples::answer(infer, context, model, version, verb, body).await,
                Err(err) => Err(err),
            }
        }
        (Some(RestTarget::Verb { verb, .. }), &Method::POST) => {
            Err(PredictBodyError::UnknownVerb((*verb).to_owned()).into())
        }
        // Only the verbs TF Serving defines name a resource; another is no endpoint at all.
        (Some(RestTarget::Verb { verb, .. }), _) if !VERBS.contains(&verb) => {
            return RestError::not_found_path(&format!("/v1/models/{rest}")).into_response()
        }
        (Some(target), _) => {
            let allow = match target {
                RestTarget::Verb { .. } => "POST",
                RestTarget::Status { .. } | RestTarget::Metadata { .. } => "GET",
            };
            return RestError::method_not_allowed(method, &format!("/v1/models/{rest}"), allow)
                .into_response();
        }
        (None, _) => {
            return RestError::not_found_path(&format!("/v1/models/{rest}")).into_response()
        }
    };
    match result {
        Ok(response) => response,
        Err(err) => RestError::from(err).into_response(),
    }
}
