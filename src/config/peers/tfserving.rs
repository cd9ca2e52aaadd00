//! TF Serving's flags whose values need translating (the `code` rows of
//! tensorflow_model_server_flags.txt), and TF Serving's defaults: gRPC on 8500, no REST API
//! unless `--rest_api_port` names a port, and the model folder polled every second. The
//! files TF Serving reads at start (monitoring, SSL, platform) go to the flags that read them, where an
//! empty name means no file, as in TF Serving.

use super::super::error::ConfigError;
use super::command::Given;
use super::translated::Translated;

/// The flags this file applies.
pub const TRANSLATED: &[&str] = &[
    "port",
    "rest_api_port",
    "tensorflow_session_parallelism",
    "version",
    "enable_serialization_as_tensor_content",
    "monitoring_config_file",
    "ssl_config_file",
    "platform_config_file",
];

pub fn apply(given: &Given, out: &mut Translated) -> Result<(), ConfigError> {
    out.peer_default("grpc-port", Some("8500"));
    out.peer_default("disable-rest", None);
    out.peer_default("model-poll-secs", Some("1"));
    // Port 0 turns that API off in TF Serving (here, 0 would pick a free port).
    match given.last("port") {
        Some("0") => {
            out.unset("grpc-port");
            out.switch("disable-grpc");
        }
        Some(port) => out.set("grpc-port", port),
        None => {}
    }
    match given.last("rest_api_port") {
        Some("0") => out.switch("disable-rest"),
        Some(port) => {
            out.set("rest-port", port);
            out.unset("disable-rest");
        }
        None => {}
    }
    // One number for both pools, unless they are given their own.
    if let Some(threads) = given.last("tensorflow_session_parallelism") {
        for pool in ["intra-op-threads", "inter-op-threads"] {
            if !out.is_set(pool) {
                out.set(pool, threads);
            }
        }
    }
    if given.bool("enable_serialization_as_tensor_content") == Some(true) {
        out.switch("predict-response-tensor-content");
    }
    for (peer, ours) in [
        ("monitoring_config_file", "monitoring-config-file"),
        ("ssl_config_file", "ssl-config-file"),
        ("platform_config_file", "platform-config-file"),
    ] {
        if let Some(file) = given.last(peer).filter(|file| !file.is_empty()) {
            out.set(ours, file);
        }
    }
    single_model_beside_a_list(given, out);
    out.show_version = given.contains("version");
    Ok(())
}

/// TF Serving serves the `--model_config_file` list when one is given and ignores
/// `--model_name` / `--model_base_path` (its Docker image always passes both, so a user who adds
/// a model list keeps them on the line): here too, with a warning naming them.
fn single_model_beside_a_list(given: &Given, out: &mut Translated) {
    if given.last("model_config_file").is_none_or(str::is_empty) {
        return;
    }
    for (peer, ours) in [
        ("model_name", "model-name"),
        ("model_base_path", "model-base-path"),
    ] {
        if given.contains(peer) {
            out.unset(ours);
            out.not_applied(
                peer,
                "--model_config_file names the models served, and this single-model flag is \
                 ignored beside it, as TF Serving ignores it",
            );
        }
    }
}
