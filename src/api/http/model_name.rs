//! Names the model of a model-scoped KServe route (`/v2/models/{name}/...`,
//! `/v2/repository/models/{name}/...`) in the request's context, for the access log: the
//! router has already read the name out of the path, so every route with a `{name}` segment
//! is covered however its handler goes on (readiness, statistics and repository calls do not
//! resolve a version through `InferService`, which names the model for the others).

use std::sync::Arc;

use axum::extract::{RawPathParams, Request};
use axum::middleware::Next;
use axum::response::Response;

use crate::request::RequestContext;

/// The path parameter that names a model in every model-scoped route template.
const MODEL_PARAM: &str = "name";

/// Layered on the KServe routes with `route_layer`, so it runs after routing has matched.
pub async fn name_model(params: RawPathParams, request: Request, next: Next) -> Response {
    if let Some(context) = request.extensions().get::<Arc<RequestContext>>() {
        if let Some((_, name)) = params.iter().find(|(key, _)| *key == MODEL_PARAM) {
            context.name_model(name);
        }
    }
    next.run(request).await
}
