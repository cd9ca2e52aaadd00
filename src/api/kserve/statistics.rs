//! Triton's statistics extension: the figures `ModelStatistics` answers over gRPC, which
//! `GET /v2/models[/{name}[/versions/{version}]]/stats` writes as JSON (`http/statistics.rs`),
//! the same figures in both.

use crate::error::Error;
use crate::infer::InferService;
use crate::proto::inference as pb;
use crate::repository::{RepositoryError, VersionSelector, VersionState};

/// Statistics of one model (`name`, optionally one version) or of every model.
pub fn statistics(
    service: &InferService,
    name: Option<&str>,
    version: &str,
) -> Result<pb::ModelStatisticsResponse, Error> {
    let selector = VersionSelector::from_kserve(version)?;
    let snapshot = service.repository().snapshot();
    if let (Some(name), VersionSelector::Label(label)) = (name, &selector) {
        // An unknown label is a bad request, as everywhere else, not an empty answer.
        snapshot
            .model(name)?
            .resolve(&VersionSelector::Label(label.clone()))?;
    }
    let records: Vec<_> = match name {
        Some(name) if !name.is_empty() => vec![snapshot.model(name)?],
        _ => snapshot.models().collect(),
    };
    let mut model_stats = Vec::new();
    for record in records {
        for (v, state) in &record.versions {
            let VersionState::Available(model) = state else {
                continue;
            };
            if !record.selects(&selector, *v) {
                continue;
            }
            let s = &model.stats;
            let compute = s.compute();
            let duration = |d: &crate::stats::Duration64| {
                let (count, ns) = d.get();
                Some(pb::StatisticDuration { count, ns })
            };
            use std::sync::atomic::Ordering::Relaxed;
            model_stats.push(pb::ModelStatistics {
                name: record.name.clone(),
                version: v.to_string(),
                last_inference: s.last_inference_ms.load(Relaxed),
                inference_count: s.inference_count.load(Relaxed),
                execution_count: s.execution_count.load(Relaxed),
                inference_stats: Some(pb::InferStatistics {
                    success: duration(&s.success),
                    fail: duration(&s.fail),
                    queue: duration(&s.queue),
                    compute_input: Some(pb::StatisticDuration {
                        count: compute.count,
                        ns: compute.input_ns,
                    }),
                    compute_infer: Some(pb::StatisticDuration {
                        count: compute.count,
                        ns: compute.infer_ns,
                    }),
                    compute_output: Some(pb::StatisticDuration {
                        count: compute.count,
                        ns: compute.output_ns,
                    }),
                    cache_hit: duration(&s.cache_hit),
                    cache_miss: duration(&s.cache_miss),
                }),
                batch_stats: s
                    .batches()
                    .into_iter()
                    .map(|(batch_size, times)| {
                        let phase = |ns| {
                            Some(pb::StatisticDuration {
                                count: times.count,
                                ns,
                            })
                        };
                        pb::InferBatchStatistics {
                            batch_size,
                            compute_input: phase(times.input_ns),
                            compute_infer: phase(times.infer_ns),
                            compute_output: phase(times.output_ns),
                        }
                    })
                    .collect(),
                ..Default::default()
            });
        }
    }
    if let (Some(name), VersionSelector::Specific(version), true) =
        (name, selector, model_stats.is_empty())
    {
        return Err(RepositoryError::VersionNotFound {
            model: name.to_owned(),
            version,
        }
        .into());
    }
    Ok(pb::ModelStatisticsResponse { model_stats })
}
