//! `GET /v2/models[/{name}[/versions/{version}]]/stats`: Triton's statistics extension over
//! HTTP, the figures of `ModelStatistics` written as JSON.

use axum::extract::{Path, State};
use serde_json::{json, Value};

use super::support::{Reply, Shared};
use crate::api::http::response::json_response;
use crate::api::kserve::split_share::split_shares;
use crate::api::kserve::statistics::statistics;
use crate::error::Error;
use crate::infer::InferService;

fn stats_json(s: &InferService, name: Option<&str>, version: &str) -> Result<Value, Error> {
    let stats = statistics(s, name, version)?;
    let shares = split_shares(s, name);
    let duration = |d: &Option<crate::proto::inference::StatisticDuration>| {
        let d = d.unwrap_or_default();
        json!({ "count": d.count, "ns": d.ns })
    };
    let models: Vec<Value> = stats
        .model_stats
        .iter()
        .map(|m| {
            let i = m.inference_stats.unwrap_or_default();
            let mut entry = json!({
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
            });
            // Beyond Triton's figures: a model with a [traffic] split says how it went.
            if let Some(split) = shares.get(&(m.name.clone(), m.version.clone())) {
                entry["traffic_split"] = json!({
                    "requests": split.requests,
                    "share": split.share,
                    "weight": split.weight,
                });
            }
            entry
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
