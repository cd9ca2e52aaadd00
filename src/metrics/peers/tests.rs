//! The peers' families as a scrape writes them, from figures recorded the way the server
//! records them.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::metrics::Metrics;
use crate::request::Protocol;
use crate::stats::ModelStats;

/// A version that answered two requests of 4 and 1 rows in one batch of 5 rows.
fn served(stats: &ModelStats) {
    for took in [Duration::from_micros(1_500), Duration::from_micros(2_500)] {
        stats.success.record(took);
        stats.queue.record(Duration::from_micros(200));
    }
    stats.record_execution(5);
    stats.record_compute(
        5,
        Duration::from_micros(10),
        Duration::from_micros(900),
        Duration::from_micros(30),
    );
}

fn scrape(metrics: &Metrics, stats: &ModelStats, openmetrics: bool) -> String {
    scrape_cached(metrics, stats, openmetrics, false)
}

fn scrape_cached(metrics: &Metrics, stats: &ModelStats, openmetrics: bool, cached: bool) -> String {
    let own = metrics.encode();
    let versions = [VersionFigures {
        model: "ranker",
        version: 2,
        stats,
        pending: 3,
        cached,
    }];
    metrics.peer_exposition(&own, versions, openmetrics)
}

fn record(metrics: &Metrics, protocol: Protocol, outcome: &'static str, micros: u64) {
    metrics.record_request(
        protocol,
        Some((&Arc::from("ranker"), 2)),
        outcome,
        Duration::from_micros(micros),
    );
}

#[test]
fn tritons_cache_families_are_written_for_cached_versions_only() {
    let metrics = Metrics::new();
    let stats = ModelStats::default();
    stats.record_cache_hit(1, Duration::from_micros(70));
    stats.record_cache_hit(1, Duration::from_micros(30));
    stats.cache_miss.record(Duration::from_micros(250));
    assert!(!scrape(&metrics, &stats, false).contains("nv_cache_"));
    let text = scrape_cached(&metrics, &stats, false, true);
    let at = |family: &str| format!("{family}{{model=\"ranker\",version=\"2\"}}");
    for expected in [
        "# TYPE nv_cache_num_hits_per_model counter".to_owned(),
        format!("{} 2", at("nv_cache_num_hits_per_model")),
        format!("{} 1", at("nv_cache_num_misses_per_model")),
        format!("{} 100", at("nv_cache_hit_duration_per_model")),
        format!("{} 250", at("nv_cache_miss_duration_per_model")),
    ] {
        assert!(
            text.lines().any(|line| line == expected),
            "{expected}\n{text}"
        );
    }
}

#[test]
fn tritons_families_read_the_versions_statistics() {
    let metrics = Metrics::new();
    let stats = ModelStats::default();
    served(&stats);
    record(&metrics, Protocol::KserveHttp, "ok", 1_500);
    record(&metrics, Protocol::KserveHttp, "invalid_argument", 40);
    record(&metrics, Protocol::KserveGrpc, "resource_exhausted", 40);
    record(&metrics, Protocol::TfServingGrpc, "resource_exhausted", 40);
    record(&metrics, Protocol::KserveGrpc, "cancelled", 40);
    let text = scrape(&metrics, &stats, false);
    let at = |family: &str| format!("{family}{{model=\"ranker\",version=\"2\"}}");
    for expected in [
        "# TYPE nv_inference_request_success counter".to_owned(),
        format!("{} 2", at("nv_inference_request_success")),
        format!("{} 5", at("nv_inference_count")),
        format!("{} 1", at("nv_inference_exec_count")),
        format!("{} 3", at("nv_inference_pending_request_count")),
        "# TYPE nv_inference_pending_request_count gauge".to_owned(),
        format!("{} 4000", at("nv_inference_request_duration_us")),
        format!("{} 400", at("nv_inference_queue_duration_us")),
        format!("{} 10", at("nv_inference_compute_input_duration_us")),
        format!("{} 900", at("nv_inference_compute_infer_duration_us")),
        format!("{} 30", at("nv_inference_compute_output_duration_us")),
        "nv_inference_request_failure{model=\"ranker\",reason=\"OTHER\",version=\"2\"} 1"
            .to_owned(),
        "nv_inference_request_failure{model=\"ranker\",reason=\"BACKEND\",version=\"2\"} 0"
            .to_owned(),
        "nv_inference_request_failure{model=\"ranker\",reason=\"CANCELED\",version=\"2\"} 1"
            .to_owned(),
        "nv_inference_request_failure{model=\"ranker\",reason=\"REJECTED\",version=\"2\"} 2"
            .to_owned(),
    ] {
        assert!(
            text.lines().any(|line| line == expected),
            "{expected}\n{text}"
        );
    }
}

#[test]
fn tf_servings_families_sum_its_apis_requests() {
    let metrics = Metrics::new();
    let stats = ModelStats::default();
    record(&metrics, Protocol::TfServingRest, "ok", 700);
    record(&metrics, Protocol::TfServingRest, "ok", 30_000);
    record(&metrics, Protocol::TfServingGrpc, "not_found", 70);
    record(&metrics, Protocol::TfServingGrpc, "payload_too_large", 70);
    // KServe's requests are not TF Serving's.
    record(&metrics, Protocol::KserveHttp, "ok", 700);
    metrics
        .model("ranker", 2)
        .observe_execution(Duration::from_micros(300), 4);
    let text = scrape(&metrics, &stats, false);
    let count = ":tensorflow:serving:request_count";
    let latency = ":tensorflow:serving:request_latency";
    let rest = "model_name=\"ranker\",entrypoint=\"REST\"";
    for expected in [
        format!("# TYPE {count} counter"),
        format!("{count}{{model_name=\"ranker\",status=\"OK\"}} 2"),
        format!("{count}{{model_name=\"ranker\",status=\"NOT_FOUND\"}} 1"),
        format!("{count}{{model_name=\"ranker\",status=\"UNKNOWN\"}} 1"),
        format!("# TYPE {latency} histogram"),
        format!("{latency}_bucket{{{rest},le=\"500\"}} 0"),
        format!("{latency}_bucket{{{rest},le=\"1000\"}} 1"),
        format!("{latency}_bucket{{{rest},le=\"50000\"}} 2"),
        format!("{latency}_bucket{{{rest},le=\"+Inf\"}} 2"),
        format!("{latency}_sum{{{rest}}} 30700"),
        format!("{latency}_count{{{rest}}} 2"),
        ":tensorflow:serving:runtime_latency_count{model_name=\"ranker\"} 1".to_owned(),
        ":tensorflow:serving:runtime_latency_sum{model_name=\"ranker\"} 300".to_owned(),
    ] {
        assert!(
            text.lines().any(|line| line == expected),
            "{expected}\n{text}"
        );
    }
    // Only TF Serving's protocols: the KServe request is in no TF Serving series.
    assert!(!text.contains("kserve"), "{text}");
    let inf = text
        .lines()
        .position(|l| l.contains("le=\"+Inf\""))
        .unwrap_or(0);
    let last_bound = text.lines().position(|l| l.contains("le=\"10000000\""));
    assert!(
        last_bound.is_some_and(|at| at < inf),
        "+Inf comes last\n{text}"
    );
}

#[test]
fn openmetrics_declares_the_peers_counters_unknown_and_names_stay() {
    let metrics = Metrics::new();
    let stats = ModelStats::default();
    served(&stats);
    let text = scrape(&metrics, &stats, true);
    assert!(
        text.contains("# TYPE nv_inference_count unknown\n"),
        "{text}"
    );
    assert!(
        text.contains("\nnv_inference_count{model=\"ranker\",version=\"2\"} 5\n"),
        "{text}"
    );
    assert!(!text.contains("_total"), "{text}");
}

#[test]
fn turned_off_they_are_left_out() {
    let metrics = Metrics::new().without_peer_names();
    let stats = ModelStats::default();
    served(&stats);
    assert_eq!(scrape(&metrics, &stats, false), "");
}

#[test]
fn own_samples_read_back_with_escapes() {
    let text = "# TYPE tensorport_requests counter\n\
                tensorport_requests_total{model=\"a\\\"b\\\\c\",version=\"1\",protocol=\"p\",outcome=\"ok\"} 7\n\
                tensorport_requests_total{model=\"\",protocol=\"p\",outcome=\"ok\"} 1\n\
                tensorport_requests_total{model=\"broken} 1\n\
                tensorport_other_total 3\n";
    let samples = own::Samples::read(text);
    let read: Vec<(String, f64)> = samples
        .named("tensorport_requests_total")
        .map(|s| (s.label("model").to_owned(), s.value))
        .collect();
    assert_eq!(
        read,
        vec![("a\"b\\c".to_owned(), 7.0), (String::new(), 1.0)]
    );
}
