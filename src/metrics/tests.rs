//! The exposition's names, labels and zero-started series, read from `Metrics::encode`.

use super::*;

#[test]
fn exposition_names_carry_prefix_units_and_total() {
    let metrics = Metrics::new();
    metrics.record_request(
        Protocol::KserveGrpc,
        Some((&Arc::from("m"), 2)),
        "ok",
        std::time::Duration::from_millis(3),
    );
    metrics.record_refusal(RefusalReason::Concurrency, Protocol::KserveHttp);
    metrics.record_model_event("m", ModelEvent::Loaded);
    metrics
        .model("m", 2)
        .observe_execution(std::time::Duration::from_micros(300), 8);
    metrics.set_queue_depths([("m", 2, 5)]);
    metrics.set_model_ready([("m", 2, true), ("m", 3, false)]);
    let text = metrics.encode();
    for expected in [
        "tensorport_requests_total{model=\"m\",version=\"2\",protocol=\"kserve-grpc\",outcome=\"ok\"} 1",
        "tensorport_refusals_total{reason=\"concurrency\",protocol=\"kserve-http\"} 1",
        "tensorport_model_loads_total{model=\"m\"} 1",
        "tensorport_batch_size_rows_bucket{le=\"8.0\",model=\"m\",version=\"2\"} 1",
        "tensorport_queue_depth_requests{model=\"m\",version=\"2\"} 5",
        "tensorport_request_duration_seconds_count{model=\"m\",protocol=\"kserve-grpc\",version=\"2\"} 1",
        "tensorport_inference_duration_seconds_sum",
        "tensorport_model_ready{model=\"m\",version=\"2\"} 1",
        "tensorport_model_ready{model=\"m\",version=\"3\"} 0",
        "\nprocess_resident_memory_bytes ",
        "\nprocess_virtual_memory_bytes ",
        "\nprocess_open_fds ",
        "\nprocess_max_fds ",
        "\nprocess_start_time_seconds ",
        "\nprocess_cpu_seconds_total ",
        "tensorport_build_info{version=\"",
    ] {
        assert!(text.contains(expected), "missing {expected} in:\n{text}");
    }
    assert_eq!(
        metrics.requests(Protocol::KserveGrpc, Some(("m", 2)), "ok"),
        1
    );
    assert_eq!(
        metrics.refusals(RefusalReason::Concurrency, Protocol::KserveHttp),
        1
    );
}

#[test]
fn a_models_counters_exist_at_zero_once_registered() {
    let metrics = Metrics::new();
    metrics.register_model("m");
    let text = metrics.encode();
    for name in ["model_loads", "model_unloads", "model_load_failures"] {
        let line = format!("tensorport_{name}_total{{model=\"m\"}} 0");
        assert!(text.contains(&line), "missing {line} in:\n{text}");
    }
}

#[test]
fn build_info_names_the_compiled_backends() {
    let text = Metrics::new().encode();
    let line = format!(
        "tensorport_build_info{{version=\"{}\",backends=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        crate::build_info::BACKENDS
    );
    assert!(text.contains(&line), "missing {line} in:\n{text}");
    assert!(crate::build_info::BACKENDS.starts_with("onnx"));
}

#[test]
fn queue_depths_forget_versions_that_went_away() {
    let metrics = Metrics::new();
    metrics.set_queue_depths([("a", 1, 1), ("b", 1, 2)]);
    metrics.set_queue_depths([("b", 1, 0)]);
    let text = metrics.encode();
    assert!(!text.contains("model=\"a\""), "{text}");
    assert!(text.contains("tensorport_queue_depth_requests{model=\"b\",version=\"1\"} 0"));
}
