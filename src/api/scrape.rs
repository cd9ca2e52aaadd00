//! `GET /metrics`: samples what is cheaper to read at scrape time than to track (queue depths,
//! shared memory, process memory), then encodes every metric: as OpenMetrics for scrapers that
//! ask for it (Prometheus does), else as Prometheus' classic text format, which `promtool` and
//! older tools read. Triton's and TF Serving's names for the same figures follow tensorport's
//! own (`crate::metrics`' `peers`), unless `--peer-metric-names=false`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::api::http::route_table::Routes;
use crate::api::AppState;
use crate::infer::InferService;
use crate::metrics::{CacheFigures, VersionFigures};
use crate::repository::VersionState;

const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// TF Serving's path for the same exposition (its `--monitoring_config_file` default), so
/// that scrape configs written for TF Serving keep working.
pub const TF_SERVING_METRICS_PATH: &str = "/monitoring/prometheus/metrics";

/// `/metrics`, and the exposition again at `tf_serving_path`: TF Serving's default path, the
/// one a `--monitoring-config-file` names (checked at start-up), or none.
pub fn routes(tf_serving_path: Option<&str>) -> Routes<AppState> {
    let routes = Routes::new().route("/metrics", get(metrics));
    match tf_serving_path {
        None | Some("/metrics") => routes,
        Some(TF_SERVING_METRICS_PATH) => routes.route(TF_SERVING_METRICS_PATH, get(metrics)),
        Some(path) => routes.operator_route(path, get(metrics)),
    }
}

async fn metrics(State(infer): State<Arc<InferService>>, headers: HeaderMap) -> Response {
    let metrics = infer.metrics();
    let (regions, bytes) = infer.shm().usage();
    metrics.set_shared_memory(regions, bytes);
    metrics.set_model_memory(infer.repository().resident_memory());
    if let Some(cache) = infer.repository().response_cache() {
        let usage = cache.store().usage();
        metrics.set_response_cache(CacheFigures {
            capacity_bytes: cache.store().capacity(),
            entries: usage.entries,
            bytes: usage.bytes,
            evictions: usage.evictions,
            insert_refused: usage.refused,
        });
    }
    let snapshot = infer.repository().snapshot();
    metrics.set_model_ready(snapshot.models().flat_map(|model| {
        model.versions.iter().map(|(version, state)| {
            let serving = matches!(state, VersionState::Available(_));
            (model.name.as_str(), *version, serving)
        })
    }));
    let loaded: Vec<_> = snapshot
        .models()
        .flat_map(|model| {
            model.versions.values().filter_map(|state| match state {
                VersionState::Available(loaded) => Some((loaded, loaded.batcher.queue_depth())),
                _ => None,
            })
        })
        .collect();
    metrics.set_queue_depths(
        loaded
            .iter()
            .map(|(model, waiting)| (&*model.name, model.version, *waiting)),
    );
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    let own = metrics.encode();
    let versions = loaded.iter().map(|(model, waiting)| VersionFigures {
        model: &model.name,
        version: model.version,
        stats: &model.stats,
        pending: *waiting,
        cached: model.response_cache.is_some(),
    });
    let peers = metrics.peer_exposition(&own, versions, openmetrics);
    let (body, content_type) = if openmetrics {
        // OpenMetrics ends with `# EOF`; the peers' families go before it.
        let head = own.strip_suffix("# EOF\n").unwrap_or(&own);
        (format!("{head}{peers}# EOF\n"), OPENMETRICS)
    } else {
        let mut body = classic_text(&own);
        body.push_str(&peers);
        (body, CLASSIC)
    };
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Rewrites the OpenMetrics exposition into the classic text format: a counter's family is
/// named with its `_total` suffix there (OpenMetrics names it without), and `# UNIT` and
/// `# EOF` do not exist.
fn classic_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_get_their_total_name_and_openmetrics_lines_go() {
        let open = "# HELP a_requests Requests.\n# TYPE a_requests counter\n\
                    a_requests_total{x=\"1\"} 3\n# HELP a_wait_seconds Wait.\n\
                    # TYPE a_wait_seconds gauge\n# UNIT a_wait_seconds seconds\n\
                    a_wait_seconds 0.5\n# EOF\n";
        assert_eq!(
            classic_text(open),
            "# HELP a_requests_total Requests.\n# TYPE a_requests_total counter\n\
             a_requests_total{x=\"1\"} 3\n# HELP a_wait_seconds Wait.\n\
             # TYPE a_wait_seconds gauge\na_wait_seconds 0.5\n"
        );
    }
}
