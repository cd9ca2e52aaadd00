//! Layers 3 to 5 of the stack (rate limit, admission, deadline) composed as one layer, and the
//! type of the services it builds. A leaf of its own because both the stack (in `overload.rs`)
//! and the per-message admission of streams ([`super::stream`]) wrap their routes in it.

use std::marker::PhantomData;

use governor::middleware::NoOpMiddleware;
use tower::{Layer, ServiceBuilder};
use tower_governor::governor::Governor;

use super::bypass::Optional;
use super::deadline::{Deadline, DeadlineLayer};
use super::rate::{self, ClientKeys};
use super::refusal::Transport;
use super::shed::{Limit, Shed, ShedLayer};

type Admitted<S, B> = Shed<Deadline<S, B>, B>;
/// Layers 3 to 5 around the routes.
pub type Protected<S, B> =
    Optional<Governor<ClientKeys, NoOpMiddleware, Admitted<S, B>, B>, Admitted<S, B>>;

/// Layers 3 to 5 as one layer: the rate limit (when configured), then admission, then the
/// deadline.
pub(super) struct Protection<B> {
    limit: Limit,
    rate: Option<rate::Config>,
    _body: PhantomData<fn() -> B>,
}

impl<B> Protection<B> {
    pub(super) fn new(limit: Limit, rate: Option<rate::Config>) -> Self {
        Self {
            limit,
            rate,
            _body: PhantomData,
        }
    }
}

impl<S, B: Transport + 'static> Layer<S> for Protection<B> {
    type Service = Protected<S, B>;

    fn layer(&self, routes: S) -> Self::Service {
        let admitted = ServiceBuilder::new()
            .layer(ShedLayer::new(self.limit.clone()))
            .layer(DeadlineLayer::default())
            .service(routes);
        match &self.rate {
            Some(config) => Optional::On(rate::layer::<B>(config).layer(admitted)),
            None => Optional::Off(admitted),
        }
    }
}
