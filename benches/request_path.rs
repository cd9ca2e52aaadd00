//! The batcher's gather (concatenating requests into one batch) and scatter (splitting the
//! outputs back), and the shared-memory registry lookup every shm tensor makes.
//!
//! `cargo bench --bench request_path`

// Set-up failures end the benchmark with their message.
#![allow(clippy::panic)]

use std::io::Write;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tensorport::backend::NamedTensor;
use tensorport::batcher::{gather, scatter};
use tensorport::shm::{Peer, ShmPolicy, ShmRegistry};
use tensorport::tensor::Tensor;

fn request(row: usize) -> Vec<NamedTensor> {
    let values: Vec<f32> = (0..row).map(|i| i as f32).collect();
    let tensor = Tensor::from_vec(vec![1, row], values).unwrap_or_else(|err| panic!("{err}"));
    vec![("features".to_owned(), tensor)]
}

fn gather_scatter(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch");
    // (requests, floats per row): the wide ranker's batch of 32, and 8 rows of 1 MiB.
    for (requests, row) in [(32usize, 256usize), (8, 1 << 18)] {
        let id = format!("{requests}x{}KiB", row * 4 / 1024);
        group.throughput(Throughput::Bytes((requests * row * 4) as u64));
        let inputs: Vec<Vec<NamedTensor>> = (0..requests).map(|_| request(row)).collect();
        group.bench_with_input(BenchmarkId::new("gather", &id), &inputs, |b, inputs| {
            b.iter(|| black_box(gather(inputs.clone()).map(|t| t.len())))
        });
        let merged = gather(inputs).unwrap_or_default();
        let rows = vec![1; requests];
        group.bench_with_input(BenchmarkId::new("scatter", &id), &merged, |b, merged| {
            b.iter(|| black_box(scatter(merged.clone(), &rows).map(|t| t.len())))
        });
    }
    group.finish();
}

/// A POSIX shared-memory object, removed on drop.
struct ShmObject(String);

impl ShmObject {
    fn create(key: &str, size: usize) -> Self {
        let fd = rustix::shm::open(
            key,
            rustix::shm::OFlags::CREATE | rustix::shm::OFlags::RDWR | rustix::shm::OFlags::TRUNC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap_or_else(|err| panic!("{err}"));
        let mut file = std::fs::File::from(fd);
        file.write_all(&vec![0u8; size])
            .unwrap_or_else(|err| panic!("{err}"));
        Self(key.to_owned())
    }
}

impl Drop for ShmObject {
    fn drop(&mut self) {
        let _ = rustix::shm::unlink(self.0.as_str());
    }
}

fn shm_lookup(c: &mut Criterion) {
    let registry = ShmRegistry::new(ShmPolicy::Local);
    let objects: Vec<ShmObject> = (0..16)
        .map(|i| {
            let key = format!("/tensorport-bench-lookup-{}-{i}", std::process::id());
            let object = ShmObject::create(&key, 4096);
            registry
                .register(&format!("region{i}"), &key, 0, 4096, Peer::Local)
                .unwrap_or_else(|err| panic!("{err}"));
            object
        })
        .collect();
    c.bench_function("shm_registry_get_and_view (16 regions)", |b| {
        b.iter(|| {
            let region = registry
                .get(black_box("region7"), Peer::Local)
                .unwrap_or_else(|err| panic!("{err}"));
            black_box(region.view(64, 1024).map(|v| v.len()))
        })
    });
    drop(registry);
    drop(objects);
}

criterion_group!(benches, gather_scatter, shm_lookup);
criterion_main!(benches);
