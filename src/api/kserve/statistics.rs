//! Triton's statistics extension: `ModelStatistics` over gRPC and
//! `GET /v2/models[/{name}[/versions/{version}]]/stats` over HTTP, the same figures in both.

use axum::extract::{Path, State};
use serde_json::{json, Value};

use super::http::{Reply, Shared};
use crate::api::http::response::json_response;
use crate::error::Error;
use crate::infer::InferService;
use crate::proto::inference as pb;
use crate::repository::{VersionSelector, VersionState};

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
                    cache_hit: Some(pb::StatisticDuration::default()),
                    cache_miss: Some(pb::StatisticDuration::default()),
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
        return Err(Error::VersionNotFound {
            model: name.to_owned(),
            version,
        });
    }
    Ok(pb::ModelStatisticsResponse { model_stats })
}

pub(super) fn stats_json(
    s: &InferService,
    name: Option<&str>,
    version: &str,
) -> Result<Value, Error> {
    let stats = statistics(s, name, version)?;
    let duration = |d: &Option<crate::proto::inference::StatisticDuration>| {
        let d = d.unwrap_or_default();
        json!({ "count": d.count, "ns": d.ns })
    };
    let models: Vec<Value> = stats
        .model_stats
        .iter()
        .map(|m| {
            let i = m.inference_stats.unwrap_or_default();
            json!({
                "name": m.name,
                "version": m.version,
                "last_inference": m.last_inference,
                "inference_count": m.inference_count,
                "execution_count": m.execution_count,
                "inference_stats": {
                    "success": duration(&i.success),
                    "fail": duration(&i.fail),
                    "queue": duration(&i.queue),
                    "compute_input": duration(&i.compute_input),
                    "compute_infer": duration(&i.compute_infer),
                    "compute_output": duration(&i.compute_output),
                    "cache_hit": duration(&i.cache_hit),
                    "cache_miss": duration(&i.cache_miss),
                },
                "batch_stats": m.batch_stats.iter().map(|b| json!({
                    "batch_size": b.batch_size,
                    "compute_input": duration(&b.compute_input),
                    "compute_infer": duration(&b.compute_infer),
                    "compute_output": duration(&b.compute_output),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({ "model_stats": models }))
}

pub(super) async fn all_stats(State(s): Shared) -> Reply {
    Ok(json_response(&stats_json(&s, None, "")?))
}

pub(super) async fn stats(State(s): Shared, Path(name): Path<String>) -> Reply {
    Ok(json_response(&stats_json(&s, Some(&name), "")?))
}

pub(super) async fn stats_version(
    State(s): Shared,
    Path((name, version)): Path<(String, String)>,
) -> Reply {
    Ok(json_response(&stats_json(&s, Some(&name), &version)?))
}
