//! TF Serving's `--monitoring_config_file` (a MonitoringConfig text proto): where the HTTP
//! port serves the exposition besides `/metrics`. TF Serving serves its metrics only where
//! this file says; tensorport always serves `/metrics`, and the file moves (or, with
//! `enable: false`, removes) the second path, TF Serving's `/monitoring/prometheus/metrics`.

use std::path::Path;

use super::error::ConfigError;
use crate::api::scrape::TF_SERVING_METRICS_PATH;
use crate::proto::tensorflow::serving::MonitoringConfig;
use crate::repository::{read_text_trusted, OPERATOR_FILE};
use crate::textproto;

const FLAG: &str = "monitoring-config-file";

/// The path TF Serving's scrapers are answered at: its default without a file, else the
/// file's (`None` when it turns Prometheus off).
pub fn tf_serving_metrics_path(file: Option<&Path>) -> Result<Option<String>, ConfigError> {
    let Some(file) = file else {
        return Ok(Some(TF_SERVING_METRICS_PATH.to_owned()));
    };
    let refuse = |why: String| ConfigError::PeerFile {
        flag: FLAG,
        path: file.to_path_buf(),
        why,
    };
    // A regular file within a cap: a FIFO or a device named here stops nothing.
    let text = read_text_trusted(file, OPERATOR_FILE).map_err(|err| refuse(err.to_string()))?;
    path_in(&text).map_err(refuse)
}

/// The path a MonitoringConfig's text gives, or why it gives none.
fn path_in(text: &str) -> Result<Option<String>, String> {
    let config: MonitoringConfig = textproto::parse("tensorflow.serving.MonitoringConfig", text)
        .map_err(|err| format!("not a MonitoringConfig text proto: {err}"))?;
    let prometheus = config.prometheus_config.unwrap_or_default();
    if !prometheus.enable {
        return Ok(None);
    }
    if prometheus.path.is_empty() {
        return Ok(Some(TF_SERVING_METRICS_PATH.to_owned()));
    }
    check_path(&prometheus.path).map_err(|why| format!("path \"{}\" {why}", prometheus.path))?;
    Ok(Some(prometheus.path))
}

/// A path the HTTP port can serve the exposition at without shadowing an API route.
fn check_path(path: &str) -> Result<(), &'static str> {
    const MAX_LEN: usize = 256;
    if !path.starts_with('/') || path == "/" {
        return Err("must start with / and name something");
    }
    if path.len() > MAX_LEN {
        return Err("is longer than 256 characters");
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '.' | '~');
    if !path.chars().all(plain) {
        return Err("may hold only letters, digits and / _ - . ~");
    }
    let segments: Vec<&str> = path[1..].split('/').collect();
    if segments
        .iter()
        .enumerate()
        .any(|(i, s)| matches!(*s, "." | "..") || (s.is_empty() && i + 1 < segments.len()))
    {
        return Err("has an empty, . or .. segment");
    }
    // The protocols own everything under /v1 and /v2; the probes keep their paths.
    let api = matches!(segments.first(), Some(&("v1" | "v2")));
    let taken = crate::server::rest_route_paths()
        .into_iter()
        .any(|route| route == path && route != "/metrics" && route != TF_SERVING_METRICS_PATH);
    if api || taken {
        return Err("is one of the API's own paths");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_moves_or_removes_tf_servings_path() -> Result<(), String> {
        assert_eq!(
            tf_serving_metrics_path(None).map_err(|e| e.to_string())?,
            Some(TF_SERVING_METRICS_PATH.to_owned())
        );
        let moved = "prometheus_config {\n  enable: true,\n  path: \"/my/metrics\"\n}\n";
        assert_eq!(path_in(moved)?, Some("/my/metrics".to_owned()));
        assert_eq!(
            path_in("prometheus_config { enable: true }")?,
            Some(TF_SERVING_METRICS_PATH.to_owned())
        );
        assert_eq!(
            path_in("prometheus_config { enable: false path: \"/x\" }")?,
            None
        );
        assert_eq!(path_in("")?, None);
        Ok(())
    }

    #[test]
    fn a_bad_file_says_what_is_wrong() {
        for (text, needle) in [
            ("prometheus_config { enable: true pth: \"/x\" }", "pth"),
            ("prometheus_config { enable: maybe }", "MonitoringConfig"),
            (
                "prometheus_config { enable: true path: \"metrics\" }",
                "must start with /",
            ),
            (
                "prometheus_config { enable: true path: \"/v2/health/ready\" }",
                "API's own",
            ),
            (
                "prometheus_config { enable: true path: \"/livez\" }",
                "API's own",
            ),
            (
                "prometheus_config { enable: true path: \"/a/{b}\" }",
                "only letters",
            ),
            (
                "prometheus_config { enable: true path: \"/a/../b\" }",
                ".. segment",
            ),
        ] {
            let err = path_in(text).err().unwrap_or_default();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn an_unreadable_file_is_named() {
        let file = Path::new("/nonexistent/monitoring.config");
        let err = tf_serving_metrics_path(Some(file))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("--monitoring-config-file"), "{err}");
        assert!(err.contains("/nonexistent/monitoring.config"), "{err}");
    }
}
