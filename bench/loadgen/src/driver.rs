//! Issuing the load on one thread: closed loop (N workers, each sending its next request when
//! the last returns) or open loop (one request every 1/R s, whatever the replies do).
//!
//! Only requests sent after the warm-up are measured. Requests still in flight when the run
//! ends are abandoned and counted as `unfinished`, not as latencies.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::task::{JoinSet, LocalSet};
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::config::{Config, Load};
use crate::error::LoadgenError;
use crate::sender::Sender;

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Latency of successful requests, in nanoseconds.
    pub latency: Histogram<u64>,
    /// Failed requests by kind.
    pub errors: BTreeMap<String, u64>,
    /// Measured requests still in flight at the end.
    pub unfinished: u64,
    /// The measured window.
    pub window: Duration,
}

impl Stats {
    fn new(window: Duration) -> Result<Self, LoadgenError> {
        // 1 ns to 100 s at 3 significant digits.
        let latency = Histogram::new_with_bounds(1, 100_000_000_000, 3)
            .map_err(|err| LoadgenError::Config(format!("latency histogram: {err}")))?;
        Ok(Self {
            latency,
            errors: BTreeMap::new(),
            unfinished: 0,
            window,
        })
    }

    fn record(&mut self, result: Result<(), String>, latency: Duration) {
        match result {
            Ok(()) => self
                .latency
                .saturating_record(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX)),
            Err(kind) => *self.errors.entry(kind).or_default() += 1,
        }
    }
}

/// The run's time marks.
#[derive(Debug, Clone, Copy)]
struct Clock {
    start: Instant,
    measure_from: Instant,
    end: Instant,
}

/// Runs the load of `config` through `sender` and returns what was measured.
pub async fn drive(sender: Sender, config: &Config) -> Result<Stats, LoadgenError> {
    let start = Instant::now();
    let measure_from = start + config.warmup();
    let clock = Clock {
        start,
        measure_from,
        end: measure_from + config.measured(),
    };
    let stats = Rc::new(RefCell::new(Stats::new(config.measured())?));
    let sender = Rc::new(sender);
    let local = LocalSet::new();
    local
        .run_until(async {
            match config.load() {
                Load::Closed { concurrency } => closed(&sender, concurrency, clock, &stats).await,
                Load::Open { rate } => {
                    open(&sender, rate, config.max_in_flight, clock, &stats).await
                }
            }
        })
        .await;
    let stats = stats.borrow().clone();
    Ok(stats)
}

async fn closed(sender: &Rc<Sender>, concurrency: usize, clock: Clock, stats: &Rc<RefCell<Stats>>) {
    let mut workers = JoinSet::new();
    for slot in 0..concurrency {
        let sender = sender.clone();
        let stats = stats.clone();
        workers.spawn_local(async move {
            loop {
                let sent = Instant::now();
                if sent >= clock.end {
                    break;
                }
                let result = timeout_at(clock.end, sender.send(slot)).await;
                let measured = sent >= clock.measure_from;
                match result {
                    Ok(result) if measured => stats.borrow_mut().record(result, sent.elapsed()),
                    Ok(_) => {}
                    Err(_) => {
                        if measured {
                            stats.borrow_mut().unfinished += 1;
                        }
                        break;
                    }
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
}

async fn open(
    sender: &Rc<Sender>,
    rate: f64,
    max_in_flight: usize,
    clock: Clock,
    stats: &Rc<RefCell<Stats>>,
) {
    let mut requests = JoinSet::new();
    let in_flight = Rc::new(Cell::new(0usize));
    for index in 0u64.. {
        // From the start, not from the previous send: lateness does not accumulate.
        let scheduled = clock.start + Duration::from_secs_f64(index as f64 / rate);
        if scheduled >= clock.end {
            break;
        }
        sleep_until(scheduled).await;
        while requests.try_join_next().is_some() {}
        let measured = scheduled >= clock.measure_from;
        if in_flight.get() >= max_in_flight {
            if measured {
                stats
                    .borrow_mut()
                    .record(Err("client:backlog".into()), Duration::ZERO);
            }
            continue;
        }
        in_flight.set(in_flight.get() + 1);
        let sender = sender.clone();
        let stats = stats.clone();
        let in_flight = in_flight.clone();
        let slot = usize::try_from(index).unwrap_or_default();
        requests.spawn_local(async move {
            let result = timeout_at(clock.end, sender.send(slot)).await;
            in_flight.set(in_flight.get() - 1);
            if !measured {
                return;
            }
            // Latency from the scheduled send, so time the request spent waiting to be
            // sent (the client or server falling behind) is charged to it.
            match result {
                Ok(result) => stats.borrow_mut().record(result, scheduled.elapsed()),
                Err(_) => stats.borrow_mut().unfinished += 1,
            }
        });
    }
    while requests.join_next().await.is_some() {}
}
