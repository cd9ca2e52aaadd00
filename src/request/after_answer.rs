//! What a request carries for its model's rollout: the values of the headers some model's
//! split is sticky on ([`StickyHeaders`] names them), and the signal that its answer has been
//! handed to the transport, which work queued behind the answer (a shadow copy) waits for.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::oneshot;

/// The answer's header (and gRPC metadata) naming the model version that served.
pub const MODEL_VERSION_HEADER: &str = "x-tensorport-model-version";

/// The header names the models' splits are sticky on, replaced by the repository on every
/// poll and read by the outermost layer for each request. Empty (the common case) means a
/// request copies nothing.
#[derive(Debug, Default)]
pub struct StickyHeaders {
    names: RwLock<Arc<[HeaderName]>>,
}

impl StickyHeaders {
    pub fn set(&self, mut names: Vec<HeaderName>) {
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup();
        *self.names.write().unwrap_or_else(PoisonError::into_inner) = names.into();
    }

    /// The values `headers` has for the sticky names: shared with the request, not copied.
    pub fn capture(&self, headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
        let names = self
            .names
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        names
            .iter()
            .filter_map(|name| Some((name.clone(), headers.get(name)?.clone())))
            .collect()
    }
}

/// Released once the answer is handed to the transport; see [`AnswerSent::wait`].
pub struct AnswerSent(Option<oneshot::Receiver<()>>);

impl AnswerSent {
    /// Released at once: a request without an observing layer has no later moment.
    pub fn now() -> Self {
        Self(None)
    }

    /// Waits for the answer to be handed over (or for the request to end without one: either
    /// way the primary is done with the moment).
    pub async fn wait(self) {
        if let Some(receiver) = self.0 {
            let _ = receiver.await;
        }
    }
}

/// The sender side, held by the request's context.
#[derive(Debug, Default)]
pub(super) struct AnswerSignal(Mutex<Option<oneshot::Sender<()>>>);

impl AnswerSignal {
    pub(super) fn subscribe(&self) -> AnswerSent {
        let (sender, receiver) = oneshot::channel();
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        AnswerSent(Some(receiver))
    }

    pub(super) fn release(&self) {
        let sender = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(sender) = sender {
            let _ = sender.send(());
        }
    }
}
