//! What an ensemble's scheduler costs per step, without the wire: examples/pipeline's
//! three-step ensemble (feature_transform -> ranker_mlp -> top_k, 10 candidates x 8 features)
//! through `InferService` in this process, beside each step model called the same way and
//! beside each step's backend run alone (the runtime and tensorport's tensor conversion,
//! nothing of the request path).
//!
//! `cargo bench --bench ensemble_steps` (needs `make venv` for ONNX Runtime).
//!
//! Every run is inline (a bound no run comes near), on one current-thread runtime, so the
//! figures are the request path's own work. The cells alternate within each round, each
//! cell's figure the median of its batches; the table gives each cell's median round. The
//! ensemble is set beside the same three steps sent as three requests in a row, each answer
//! handed to the next (what a client in this process would do without an ensemble): the
//! ratio of the two, per round, is what the scheduler costs over the request path it reuses
//! for every step.
//!
//! `PROFILE_CELL=ensemble` (or `chained`) runs only that cell, over and over, for `perf`.

// Set-up failures end the benchmark with their message.
#![allow(clippy::panic, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use tensorport::backend::NamedTensor;
use tensorport::infer::{Decoded, InferService, ModelTarget};
use tensorport::repository::VersionSelector;
use tensorport::tensor::{DecodeLimits, Tensor};

mod support;

use support::BenchResult;

const CANDIDATES: usize = 10;
const FEATURES: usize = 8;
const STEPS: [&str; 3] = ["feature_transform", "ranker_mlp", "top_k"];
const ENSEMBLE: &str = "ranking_pipeline";
const ROUNDS: usize = 5;
const BATCHES: usize = 15;
const PER_BATCH: u32 = 400;

fn main() -> BenchResult<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let onnx = support::onnx_runtime(root)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let infer = runtime.block_on(support::infer_service(
        &root.join("examples/pipeline"),
        onnx,
        // Every run inline: a bound no run comes near.
        Duration::from_secs(3600),
        DecodeLimits::default(),
    ))?;
    let inputs = runtime.block_on(step_inputs(&infer))?;

    if let Ok(cell) = std::env::var("PROFILE_CELL") {
        return runtime.block_on(profile(&infer, &cell, &inputs));
    }
    let rounds: Vec<Round> = (0..ROUNDS)
        .map(|_| measure(&runtime, &infer, &inputs))
        .collect();
    report(&rounds);
    Ok(())
}

/// One round's figures, in microseconds per call.
struct Round {
    /// Per step: (its backend run alone, it as a request).
    steps: Vec<(f64, f64)>,
    ensemble: f64,
    chained: f64,
}

fn measure(
    runtime: &tokio::runtime::Runtime,
    infer: &InferService,
    inputs: &[Vec<NamedTensor>],
) -> Round {
    let steps = STEPS
        .iter()
        .zip(inputs)
        .map(|(step, input)| {
            let alone = time(|| backend_run(infer, step, input));
            let whole = time(|| runtime.block_on(request(infer, step, input.clone())));
            (alone, whole)
        })
        .collect();
    let first = &inputs[0];
    Round {
        steps,
        ensemble: time(|| runtime.block_on(request(infer, ENSEMBLE, first.clone()))),
        chained: time(|| runtime.block_on(chained(infer, first.clone()))),
    }
}

/// The median round's figures, and the ratio of the two whole paths per round.
fn report(rounds: &[Round]) {
    let median_of = |pick: &dyn Fn(&Round) -> f64| median(rounds.iter().map(pick).collect());
    println!(
        "## The ensemble's scheduler per step, in process \
         (examples/pipeline, {CANDIDATES} x {FEATURES}, inline, median of {ROUNDS} rounds)\n"
    );
    println!("| path | backend runs alone, us | whole, us | whole less the runs, us |");
    println!("| --- | ---: | ---: | ---: |");
    let mut floors = 0.0;
    let mut plain = Vec::new();
    for (index, step) in STEPS.iter().enumerate() {
        let alone = median_of(&|round| round.steps[index].0);
        let whole = median_of(&|round| round.steps[index].1);
        floors += alone;
        plain.push(whole - alone);
        println!(
            "| {step}, as a request | {alone:.1} | {whole:.1} | {:.1} |",
            whole - alone
        );
    }
    let ensemble = median_of(&|round| round.ensemble);
    let chained = median_of(&|round| round.chained);
    println!(
        "| {ENSEMBLE}, the 3 steps as one request | {floors:.1} | {ensemble:.1} | {:.1} |",
        ensemble - floors
    );
    println!(
        "| the 3 steps as 3 requests in a row | {floors:.1} | {chained:.1} | {:.1} |\n",
        chained - floors
    );
    let per_round: Vec<String> = rounds
        .iter()
        .map(|round| format!("{:.2}x", round.ensemble / round.chained))
        .collect();
    println!(
        "A plain request's path costs {:.1} us over its run (median of the three steps). The \
         ensemble against the same steps as requests in a row, per round: {}.",
        median(plain),
        per_round.join(", ")
    );
}

/// Only `cell` (`ensemble` or `chained`), over and over, for a profiler to sample.
async fn profile(infer: &InferService, cell: &str, inputs: &[Vec<NamedTensor>]) -> BenchResult<()> {
    for _ in 0..200_000 {
        if cell == "ensemble" {
            request(infer, ENSEMBLE, inputs[0].clone()).await?;
        } else {
            chained(infer, inputs[0].clone()).await?;
        }
    }
    Ok(())
}

/// Each step's input: the ensemble's request for the first, and the step before's answer
/// for the others, as the ensemble hands them on.
async fn step_inputs(infer: &InferService) -> BenchResult<Vec<Vec<NamedTensor>>> {
    let values: Vec<f32> = (0..CANDIDATES * FEATURES)
        .map(|i| (i % 17) as f32 / 17.0)
        .collect();
    let raw = Tensor::from_vec(vec![1, CANDIDATES, FEATURES], values)?;
    let mut inputs = vec![vec![("raw".to_owned(), raw)]];
    for (step, next) in STEPS.iter().zip(["features", "scores"]) {
        let last = inputs.last().cloned().unwrap_or_default();
        let outputs = request(infer, step, last).await?;
        let tensor = outputs
            .into_iter()
            .next()
            .map(|(_, tensor)| tensor)
            .ok_or("a step answered nothing")?;
        inputs.push(vec![(next.to_owned(), tensor)]);
    }
    Ok(inputs)
}

/// One request to `model` through the service, as a protocol adapter makes it.
async fn request(
    infer: &InferService,
    model: &str,
    mut inputs: Vec<NamedTensor>,
) -> BenchResult<Vec<NamedTensor>> {
    if model == ENSEMBLE {
        inputs[0].0 = "RAW_FEATURES".to_owned();
    }
    let target = ModelTarget {
        model,
        version: VersionSelector::Latest,
        signature: "",
    };
    let prepared = infer
        .prepare(target, None, |_| {
            Ok(Decoded {
                inputs,
                ..Decoded::default()
            })
        })
        .await?;
    Ok(infer.run(prepared).await?.outputs)
}

/// The three steps as three requests, each answer handed to the next, as a client in this
/// process would chain them without an ensemble.
async fn chained(infer: &InferService, first: Vec<NamedTensor>) -> BenchResult<()> {
    let mut inputs = first;
    for (step, next) in STEPS.iter().zip(["features", "scores", ""]) {
        let outputs = request(infer, step, inputs).await?;
        let tensor = outputs
            .into_iter()
            .next()
            .map(|(_, t)| t)
            .ok_or("no answer")?;
        inputs = vec![(next.to_owned(), tensor)];
    }
    Ok(())
}

/// `model`'s backend run alone on `inputs`, every output returned.
fn backend_run(infer: &InferService, model: &str, inputs: &[NamedTensor]) -> BenchResult<()> {
    let loaded = infer.resolve(model, VersionSelector::Latest)?;
    let signature = &loaded.backend.signatures()[0];
    let outputs: Vec<String> = signature.outputs.iter().map(|o| o.name.clone()).collect();
    loaded
        .backend
        .run(signature, inputs.to_vec(), &outputs)
        .map(drop)
        .map_err(Into::into)
}

/// The median time of one call, in microseconds, over [`BATCHES`] batches of [`PER_BATCH`]
/// calls.
fn time<T>(mut call: impl FnMut() -> BenchResult<T>) -> f64 {
    for _ in 0..PER_BATCH {
        call().unwrap_or_else(|err| panic!("{err}"));
    }
    let batches = (0..BATCHES)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..PER_BATCH {
                call().unwrap_or_else(|err| panic!("{err}"));
            }
            started.elapsed().as_secs_f64() * 1e6 / f64::from(PER_BATCH)
        })
        .collect();
    median(batches)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or_default()
}
