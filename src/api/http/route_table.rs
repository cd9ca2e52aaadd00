//! A router that remembers the path of every route it is given.
//!
//! axum cannot list a router's routes, yet the OpenAPI document (`openapi/tensorport.yaml`)
//! must name every path the HTTP port serves. Building the routes through [`Routes`] keeps a
//! listing next to the router, and `tests/openapi_routes.rs` compares that listing with the
//! document, so a route added without a spec entry fails the tests.

use axum::routing::MethodRouter;
use axum::Router;

/// An axum [`Router`] plus the path templates (in OpenAPI / axum `{param}` syntax) it serves.
pub struct Routes<S> {
    router: Router<S>,
    paths: Vec<&'static str>,
}

impl<S> Default for Routes<S>
where
    S: Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Routes<S>
where
    S: Clone + Send + Sync + 'static,
{
    pub fn new() -> Self {
        Self {
            router: Router::new(),
            paths: Vec::new(),
        }
    }

    /// [`Router::route`], recording `path`.
    pub fn route(mut self, path: &'static str, handler: MethodRouter<S>) -> Self {
        self.router = self.router.route(path, handler);
        self.paths.push(path);
        self
    }

    /// [`Router::route`] at a path the operator chose (checked at start-up), left out of the
    /// listing: it is no part of the API the OpenAPI document describes.
    pub fn operator_route(mut self, path: &str, handler: MethodRouter<S>) -> Self {
        self.router = self.router.route(path, handler);
        self
    }

    /// A catch-all route whose handler splits the path itself (axum cannot route
    /// `{name}:predict`). `served` lists the path templates the handler answers; they, not
    /// the catch-all, go into the listing.
    pub fn dispatch(
        mut self,
        catch_all: &'static str,
        handler: MethodRouter<S>,
        served: &[&'static str],
    ) -> Self {
        self.router = self.router.route(catch_all, handler);
        self.paths.extend_from_slice(served);
        self
    }

    /// [`Router::route_layer`]: `layer` wraps every route added so far, after routing.
    pub fn route_layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<axum::routing::Route> + Clone + Send + Sync + 'static,
        L::Service: tower::Service<axum::extract::Request> + Clone + Send + Sync + 'static,
        <L::Service as tower::Service<axum::extract::Request>>::Response:
            axum::response::IntoResponse + 'static,
        <L::Service as tower::Service<axum::extract::Request>>::Error:
            Into<std::convert::Infallible> + 'static,
        <L::Service as tower::Service<axum::extract::Request>>::Future: Send + 'static,
    {
        self.router = self.router.route_layer(layer);
        self
    }

    /// [`Router::merge`], keeping both listings.
    pub fn merge(mut self, other: Routes<S>) -> Self {
        self.router = self.router.merge(other.router);
        self.paths.extend(other.paths);
        self
    }

    /// The path templates served, in the order they were added.
    pub fn paths(&self) -> &[&'static str] {
        &self.paths
    }

    pub fn into_router(self) -> Router<S> {
        self.router
    }
}
