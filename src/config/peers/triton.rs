//! Triton's flags whose values need translating (the `code` rows of tritonserver_flags.txt),
//! and Triton's defaults: HTTP on 8000, gRPC on 8001, metrics on 8002, strict readiness, and
//! model control mode `none` (every model loads at start; the repository is not polled; the
//! load and unload APIs are refused).

use super::super::error::ConfigError;
use super::command::Given;
use super::translated::{refuse, Translated};

/// The flags this file applies.
pub const TRANSLATED: &[&str] = &[
    "help",
    "model-store",
    "model-repository",
    "exit-on-error",
    "disable-auto-complete-config",
    "strict-readiness",
    "model-control-mode",
    "repository-poll-secs",
    "load-model",
    "allow-http",
    "http-address",
    "allow-grpc",
    "grpc-address",
    "grpc-keepalive-time",
    "grpc-keepalive-timeout",
    "log-verbose",
    "log-info",
    "log-warning",
    "log-error",
    "allow-metrics",
    "metrics-address",
    "cache-config",
    "response-cache-byte-size",
    "trace-config",
    "trace-level",
    "trace-rate",
    "trace-count",
    "trace-log-frequency",
];

/// Triton's `--repository-poll-secs` default.
const POLL_SECS: &str = "15";

pub fn apply(given: &Given, out: &mut Translated) -> Result<(), ConfigError> {
    out.peer_default("rest-port", Some("8000"));
    out.peer_default("grpc-port", Some("8001"));
    out.peer_default("metrics-port", Some("8002"));
    out.peer_default("readiness", Some("all"));
    repository(given, out)?;
    model_control(given, out)?;
    listeners(given, out)?;
    keepalive(given, out);
    logging(given, out)?;
    response_cache(given, out);
    tracing(given, out);
    if given.contains("disable-auto-complete-config") {
        out.set("strict-model-config", "true");
    }
    if let Some(strict) = given.bool("strict-readiness") {
        out.set("readiness", if strict { "all" } else { "any" });
    }
    if given.bool("exit-on-error") == Some(true) {
        out.not_applied(
            "exit-on-error",
            "a model that fails to load does not stop the server: it is reported unavailable \
             (and the server unready, with --strict-readiness)",
        );
    }
    Ok(())
}

/// The response cache: `--cache-config local,size=N` (given once per setting; the local
/// cache has only `size`) passes through, our flag checks it; Triton's older
/// `--response-cache-byte-size N` is the same local cache (0: none).
fn response_cache(given: &Given, out: &mut Translated) {
    if let Some(config) = given.all("cache-config").last() {
        out.set("cache-config", config.clone());
        return;
    }
    match given.last("response-cache-byte-size") {
        Some(size) if size.trim() != "0" => {
            out.set("cache-config", format!("local,size={}", size.trim()));
        }
        _ => {}
    }
}

/// Tracing: every `--trace-config` value passes through, joined into one of ours (`;` between
/// settings), after Triton's older `--trace-level/rate/count/log-frequency` spelt as the same
/// settings, so that `--trace-config` wins where both are given, as in Triton.
fn tracing(given: &Given, out: &mut Translated) {
    let older = [
        ("trace-level", "level"),
        ("trace-rate", "rate"),
        ("trace-count", "count"),
        ("trace-log-frequency", "log-frequency"),
    ];
    let mut settings: Vec<String> = older
        .iter()
        .flat_map(|(flag, key)| given.all(flag).iter().map(move |v| format!("{key}={v}")))
        .collect();
    settings.extend(given.all("trace-config").iter().cloned());
    if !settings.is_empty() {
        out.set("trace-config", settings.join(";"));
    }
}

/// One model repository: tensorport serves one root, so a second, different one is refused.
fn repository(given: &Given, out: &mut Translated) -> Result<(), ConfigError> {
    let mut roots: Vec<&String> = given
        .all("model-repository")
        .iter()
        .chain(given.all("model-store"))
        .collect();
    roots.dedup();
    match roots.as_slice() {
        [] => Ok(()),
        [root] => {
            out.set("model-dir", root.as_str());
            Ok(())
        }
        _ => Err(refuse(
            "model-repository",
            "tensorport serves one model repository; give it once (several roots: one \
             server for each, or link the model folders into one repository)",
        )),
    }
}

/// `--model-control-mode`: none loads everything at start and never polls; poll polls every
/// `--repository-poll-secs`; explicit loads the `--load-model` models at start and the others
/// only on the load API. Only explicit lets clients load and unload: in the other two, Triton
/// refuses both (UNAVAILABLE), so an operator who chose them has fixed what is served.
fn model_control(given: &Given, out: &mut Translated) -> Result<(), ConfigError> {
    let mode = given
        .last("model-control-mode")
        .unwrap_or("none")
        .to_ascii_lowercase();
    match mode.as_str() {
        "none" if given.contains("model-control-mode") => {
            out.set("model-poll-secs", "0");
            out.set("model-control-api", "false");
        }
        "none" => {
            out.peer_default("model-poll-secs", Some("0"));
            out.peer_default("model-control-api", Some("false"));
        }
        "poll" => {
            out.set(
                "model-poll-secs",
                given.last("repository-poll-secs").unwrap_or(POLL_SECS),
            );
            out.set("model-control-api", "false");
        }
        "explicit" => {
            out.set("model-poll-secs", "0");
            out.set("model-control-api", "true");
            let names = given.all("load-model");
            if names.iter().any(|name| name == "*") {
                if names.len() > 1 {
                    return Err(refuse(
                        "load-model",
                        "'*' loads every model and must be the only --load-model",
                    ));
                }
            } else {
                out.set("startup-models", names.join(","));
            }
        }
        _ => {
            return Err(refuse(
                "model-control-mode",
                "must be none, poll or explicit",
            ))
        }
    }
    Ok(())
}

/// `--allow-http/grpc/metrics=false` turn a port off; the three addresses must agree, since
/// tensorport listens on one address for every port.
fn listeners(given: &Given, out: &mut Translated) -> Result<(), ConfigError> {
    if given.bool("allow-http") == Some(false) {
        out.unset("rest-port");
        out.switch("disable-rest");
    }
    if given.bool("allow-grpc") == Some(false) {
        out.unset("grpc-port");
        out.switch("disable-grpc");
    }
    if given.bool("allow-metrics") == Some(false) {
        out.unset("metrics-port");
    }
    let mut addresses: Vec<&str> = ["http-address", "grpc-address", "metrics-address"]
        .iter()
        .filter_map(|flag| given.last(flag))
        .collect();
    addresses.dedup();
    match addresses.as_slice() {
        [] => Ok(()),
        [address] => {
            out.set("host", *address);
            Ok(())
        }
        _ => Err(refuse(
            "http-address",
            "tensorport listens on one address for all its ports (--host): give \
             --http-address, --grpc-address and --metrics-address the same address",
        )),
    }
}

/// gRPC keep-alive in milliseconds, as HTTP/2 keep-alive in whole seconds (rounded up).
fn keepalive(given: &Given, out: &mut Translated) {
    let secs = |flag: &str| {
        let ms: i64 = given.last(flag)?.parse().ok()?;
        Some(u64::try_from(ms).unwrap_or(0).div_ceil(1000))
    };
    if let Some(interval) = secs("grpc-keepalive-time") {
        out.set("http2-keepalive-interval-secs", interval.to_string());
    }
    if let Some(timeout) = secs("grpc-keepalive-timeout") {
        out.set("http2-keepalive-timeout-secs", timeout.max(1).to_string());
    }
}

/// `--log-verbose N` (N >= 1: debug) and `--log-info/warning/error=false` as one log level.
fn logging(given: &Given, out: &mut Translated) -> Result<(), ConfigError> {
    let flags = ["log-verbose", "log-info", "log-warning", "log-error"];
    if !flags.iter().any(|flag| given.contains(flag)) {
        return Ok(());
    }
    // Triton takes true/false for the verbose level as well as a number.
    let verbose = match given.last("log-verbose").map(str::to_ascii_lowercase) {
        Some(level) if level == "true" => 1,
        Some(level) if level == "false" => 0,
        Some(level) => level
            .trim()
            .parse::<i64>()
            .map_err(|_| refuse("log-verbose", "must be a number (0: off) or true/false"))?,
        None => 0,
    };
    let on = |flag: &str| given.bool(flag) != Some(false);
    let level = if verbose >= 1 {
        "debug"
    } else if on("log-info") {
        "info"
    } else if on("log-warning") {
        "warn"
    } else if on("log-error") {
        "error"
    } else {
        "off"
    };
    out.set("log-level", level);
    Ok(())
}
