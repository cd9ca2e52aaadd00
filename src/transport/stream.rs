//! The send timeout of one HTTP/2 stream: an answer the client takes none of for the send
//! timeout is reset (RST_STREAM), its memory freed and its charge given back.
//!
//! hyper serves each stream in a task of its own, spawned through the executor it is given.
//! [`StreamExecutor`] runs that task beside the stream's [`StreamClock`]; the answer's body
//! ([`super::send::Sending`]) finds the clock through a task-local (it is created inside the
//! task, and hyper gives no other way to reach a stream's task from its body) and starts it
//! whenever it hands hyper a piece, stopping it when hyper asks for the next. When the clock
//! has run for the send timeout, the task is dropped: h2 then resets the stream, and drops
//! the bytes it still held for it. Over HTTP/1 there is no stream to reset; a socket that
//! takes nothing closes its connection instead (see [`super::activity`]).
//!
//! The clock only writes down when it started. The watcher takes no timer until the answer's
//! first piece is handed out (most streams end in the same poll, and never need one); from
//! then on it sleeps until the earliest moment the timeout could run out and reads the clock
//! then, so a stream costs one wake-up per send timeout while it lasts, and nothing once it
//! has ended.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::task::AtomicWaker;
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

tokio::task_local! {
    static CLOCK: Arc<StreamClock>;
}

/// The clock of the stream whose task runs this, if it is an HTTP/2 stream's.
pub fn current_clock() -> Option<Arc<StreamClock>> {
    CLOCK.try_with(Arc::clone).ok()
}

/// Since when the stream's answer has waited for the client to take what it was handed.
#[derive(Debug)]
pub struct StreamClock {
    base: Instant,
    /// Nanoseconds from `base` to the start of the wait, plus one; 0 while not waiting.
    since: AtomicU64,
    /// Whether the watcher waits, timer-less, for the first wait to start.
    parked: AtomicBool,
    watcher: AtomicWaker,
}

impl StreamClock {
    fn new() -> Self {
        Self {
            base: Instant::now(),
            since: AtomicU64::new(0),
            parked: AtomicBool::new(false),
            watcher: AtomicWaker::new(),
        }
    }

    /// The answer has handed hyper bytes that the client has yet to make room for.
    pub fn waiting(&self) {
        let nanos = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        // SeqCst here and in `started`: each side writes one flag and reads the other's, and
        // at least one of them must see the other's write.
        self.since.store(nanos.saturating_add(1), Ordering::SeqCst);
        if self.parked.swap(false, Ordering::SeqCst) {
            self.watcher.wake();
        }
    }

    /// hyper asked for more: the client took what it was handed.
    pub fn resumed(&self) {
        self.since.store(0, Ordering::Relaxed);
    }

    fn waiting_since(&self) -> Option<Instant> {
        match self.since.load(Ordering::SeqCst) {
            0 => None,
            nanos => Some(self.base + Duration::from_nanos(nanos - 1)),
        }
    }

    /// Resolves once the clock has first started.
    async fn started(&self) {
        std::future::poll_fn(|cx| {
            if self.waiting_since().is_some() {
                return Poll::Ready(());
            }
            self.watcher.register(cx.waker());
            self.parked.store(true, Ordering::SeqCst);
            // Started between the first look and the parking: no wake may be coming.
            if self.waiting_since().is_some() {
                self.parked.store(false, Ordering::SeqCst);
                return Poll::Ready(());
            }
            Poll::Pending
        })
        .await;
    }

    /// Resolves once the clock has run for `timeout` without a stop.
    async fn stalled(&self, timeout: Duration) {
        self.started().await;
        loop {
            let now = Instant::now();
            let wake = match self.waiting_since() {
                Some(since) if now >= since + timeout => return,
                Some(since) => since + timeout,
                // A wait may start while this sleeps: waking within `timeout` keeps its
                // deadline exact.
                None => now + timeout,
            };
            tokio::time::sleep_until(wake).await;
        }
    }
}

/// Spawns hyper's HTTP/2 stream tasks, each beside its clock.
#[derive(Clone)]
pub struct StreamExecutor {
    send_timeout: Duration,
    /// Streams reset for the send timeout.
    resets: Counter,
}

impl StreamExecutor {
    pub fn new(send_timeout: Duration, resets: Counter) -> Self {
        Self {
            send_timeout,
            resets,
        }
    }
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        let clock = Arc::new(StreamClock::new());
        let timeout = self.send_timeout;
        let resets = self.resets.clone();
        tokio::spawn(async move {
            let served = CLOCK.scope(clock.clone(), stream);
            tokio::select! {
                biased;
                () = served => {}
                () = clock.stalled(timeout) => {
                    // Dropping the task resets the stream.
                    resets.inc();
                    tracing::debug!(
                        timeout_secs = timeout.as_secs(),
                        "reset an HTTP/2 stream whose answer the client took none of"
                    );
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_clock_runs_only_while_the_answer_waits_for_the_client() {
        let clock = StreamClock::new();
        let stalled = clock.stalled(Duration::from_secs(5));
        tokio::pin!(stalled);
        // Not waiting (the model is running): no timeout, however long.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(futures::poll!(&mut stalled).is_pending());
        clock.waiting();
        tokio::time::sleep(Duration::from_secs(4)).await;
        clock.resumed();
        clock.waiting();
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(futures::poll!(&mut stalled).is_pending());
        stalled.await;
        assert!(clock.waiting_since().is_some());
    }

    #[tokio::test]
    async fn a_stream_task_sees_its_clock() {
        let executor = StreamExecutor::new(Duration::from_secs(60), Counter::default());
        let (seen, saw) = tokio::sync::oneshot::channel();
        hyper::rt::Executor::execute(&executor, async move {
            let _ = seen.send(current_clock().is_some());
        });
        assert_eq!(saw.await.ok(), Some(true));
        assert!(current_clock().is_none());
    }
}
