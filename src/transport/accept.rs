//! The accept loop of one listener: `accept`, then a slot under the connection cap before
//! the connection is served, with failed accepts retried after a growing pause.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::connection::{self, Accepted, App};
use super::drain::stopped;
use super::endpoint::Endpoint;
use super::stream::StreamExecutor;
use super::wire::Wire;

/// The pause after a failed accept, doubling while accepts keep failing.
///
/// Running out of descriptors (`EMFILE`, `ENFILE`) or kernel memory makes `accept` fail at
/// once, again and again, while the connection stays in the backlog: retried without a pause
/// that is a loop that burns a core and starves the connections that could free descriptors.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    pub const FIRST: Duration = Duration::from_millis(5);
    pub const MAX: Duration = Duration::from_secs(1);

    pub fn new() -> Self {
        Self { next: Self::FIRST }
    }

    /// The pause to take after a failure.
    pub fn failed(&mut self) -> Duration {
        let pause = self.next;
        self.next = self.next.saturating_mul(2).min(Self::MAX);
        pause
    }

    /// An accept succeeded: the next failure pauses briefly again.
    pub fn succeeded(&mut self) {
        self.next = Self::FIRST;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

/// Errors that concern one connection (the client gave up before it was accepted); the next
/// accept may well succeed, so they are no reason to pause.
fn concerns_one_connection(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

pub async fn run<W: Wire, S: App<W>>(
    listener: TcpListener,
    app: S,
    endpoint: Endpoint,
    mut stop: watch::Receiver<bool>,
) {
    let executor = StreamExecutor::new(
        endpoint.settings.send_timeout,
        endpoint.send_timeouts.streams.clone(),
    );
    let builder = Arc::new(connection::builder::<W>(&endpoint.settings, executor));
    let (alive, mut all_ended) = mpsc::channel::<()>(1);
    let mut backoff = Backoff::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff.succeeded();
                accepted
            }
            Err(err) if concerns_one_connection(&err) => continue,
            Err(err) => {
                let pause = backoff.failed();
                tracing::warn!(
                    error = %err,
                    pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                    "cannot accept connections; pausing before the next try"
                );
                tokio::select! {
                    () = tokio::time::sleep(pause) => continue,
                    () = stopped(&mut stop) => break,
                }
            }
        };
        // At the cap, this connection waits, unserved, for one to close, and the listener
        // accepts no more: the others wait in the kernel's listen backlog, holding no
        // descriptor. (Taking the slot before `accept` instead would leave each listener
        // holding one slot while it waits, shrinking a cap the ports share.)
        let permit = tokio::select! {
            permit = endpoint.pools.connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = stopped(&mut stop) => break,
        };
        // Small requests and answers go out at once rather than waiting for more to send.
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection::run::<W, S>(Accepted {
            stream,
            peer,
            app: app.clone(),
            endpoint: endpoint.clone(),
            builder: builder.clone(),
            stop: stop.clone(),
            permit,
            alive: alive.clone(),
        }));
    }
    // Closing the listener refuses new connections; those open drain (see `drain`).
    drop(listener);
    drop(alive);
    let _ = all_ended.recv().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_start_again_after_a_success() {
        let mut backoff = Backoff::new();
        let pauses: Vec<Duration> = (0..10).map(|_| backoff.failed()).collect();
        assert_eq!(pauses[0], Backoff::FIRST);
        assert_eq!(pauses[1], Backoff::FIRST * 2);
        assert!(pauses.windows(2).all(|pair| pair[1] >= pair[0]));
        assert_eq!(pauses[9], Backoff::MAX);
        // However long failures go on, the loop never waits longer than the cap between
        // tries, and never retries without a pause.
        assert!(pauses
            .iter()
            .all(|p| *p >= Backoff::FIRST && *p <= Backoff::MAX));
        backoff.succeeded();
        assert_eq!(backoff.failed(), Backoff::FIRST);
    }

    #[test]
    fn running_out_of_descriptors_pauses_but_a_vanished_client_does_not() {
        let emfile = io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
        let enfile = io::Error::from_raw_os_error(rustix::io::Errno::NFILE.raw_os_error());
        let aborted = io::Error::from(io::ErrorKind::ConnectionAborted);
        assert!(!concerns_one_connection(&emfile));
        assert!(!concerns_one_connection(&enfile));
        assert!(concerns_one_connection(&aborted));
    }
}
