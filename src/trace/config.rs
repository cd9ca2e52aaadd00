//! Tracing as configured at start-up: Triton's `--trace-config` settings (`mode=opentelemetry`,
//! `rate=N`, `level=TIMESTAMPS`, `count=N`, `log-frequency=N`, `opentelemetry,url=...`,
//! `opentelemetry,resource=KEY=VALUE`, `opentelemetry,bsp_*=N`), over the standard
//! OpenTelemetry variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_TRACES_SAMPLER_ARG`, `OTEL_SERVICE_NAME`, and the
//! headers, timeout and TLS files that `env` reads).

use std::time::Duration;

use super::env::{self as otel, CollectorTls, OtlpHeaders};

/// Triton's default collector.
pub const DEFAULT_URL: &str = "http://localhost:4318/v1/traces";

/// Who the traces are for: Triton's own trace file (not written here) or an OpenTelemetry
/// collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceMode {
    Triton,
    OpenTelemetry,
}

impl TraceMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Triton => "triton",
            Self::OpenTelemetry => "opentelemetry",
        }
    }
}

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies, Triton's way.
    HttpProtobuf,
    Grpc,
}

/// Triton's trace levels: what a traced request records. `TIMESTAMPS` is its spans; `TENSORS`
/// is accepted and reported (tensors are not recorded). No level: nothing is traced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceLevel {
    pub timestamps: bool,
    pub tensors: bool,
}

impl TraceLevel {
    pub const OFF: Self = Self {
        timestamps: false,
        tensors: false,
    };

    pub fn is_on(self) -> bool {
        self.timestamps || self.tensors
    }

    /// As Triton lists it: `["OFF"]`, or the levels on.
    pub fn names(self) -> Vec<String> {
        let mut names = Vec::new();
        if self.timestamps {
            names.push("TIMESTAMPS".to_owned());
        }
        if self.tensors {
            names.push("TENSORS".to_owned());
        }
        if names.is_empty() {
            names.push("OFF".to_owned());
        }
        names
    }

    /// Adds the level `name` (OFF clears every level).
    pub fn add(&mut self, name: &str) -> Result<(), String> {
        match name.trim().to_ascii_uppercase().as_str() {
            "OFF" => *self = Self::OFF,
            "TIMESTAMPS" => self.timestamps = true,
            "TENSORS" => self.tensors = true,
            _ => {
                return Err(format!(
                    "unknown trace level '{name}'; the levels are OFF, TIMESTAMPS and TENSORS"
                ))
            }
        }
        Ok(())
    }
}

/// The sampling settings Triton's trace API reports and changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampling {
    pub level: TraceLevel,
    /// One request traced in every `rate` (0: none).
    pub rate: u32,
    /// Traces left to take; -1: no limit.
    pub count: i64,
    /// Triton's trace file rotation; reported, not used (there is no trace file).
    pub log_frequency: u32,
}

impl Default for Sampling {
    /// Triton's defaults: no level, 1 in 1000, no count limit.
    fn default() -> Self {
        Self {
            level: TraceLevel::OFF,
            rate: 1000,
            count: -1,
            log_frequency: 0,
        }
    }
}

/// The exporter's batch queue: Triton's `bsp_*` settings of its batch span processor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSettings {
    pub url: String,
    pub protocol: OtlpProtocol,
    /// Traces waiting for export; more are dropped and counted.
    pub max_queue: usize,
    /// Longest wait before a partial batch goes out.
    pub delay: Duration,
    /// Traces per export request.
    pub max_batch: usize,
    /// How long one export may take before its spans are dropped.
    pub timeout: Duration,
    /// Resource attributes (`service.name` and the operator's `resource=KEY=VALUE`).
    pub resource: Vec<(String, String)>,
    /// Headers sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: OtlpHeaders,
    /// The TLS files for an `https://` collector.
    pub tls: CollectorTls,
}

impl Default for ExportSettings {
    fn default() -> Self {
        Self {
            url: DEFAULT_URL.to_owned(),
            protocol: OtlpProtocol::HttpProtobuf,
            max_queue: 2048,
            delay: Duration::from_millis(500),
            max_batch: 512,
            timeout: Duration::from_secs(3),
            resource: Vec::new(),
            headers: OtlpHeaders::default(),
            tls: CollectorTls::default(),
        }
    }
}

/// Tracing as started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConfig {
    pub mode: TraceMode,
    pub sampling: Sampling,
    pub export: ExportSettings,
}

impl Default for TraceConfig {
    fn default() -> Self {
        Self {
            mode: TraceMode::Triton,
            sampling: Sampling::default(),
            export: ExportSettings::default(),
        }
    }
}

/// One `--trace-config` value: `[MODE,]KEY=VALUE`; several may be joined by `;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// `triton` or `opentelemetry` for a mode's own settings; `None` for global ones.
    pub section: Option<String>,
    pub key: String,
    pub value: String,
}

/// Reads one `--trace-config` value into its settings.
pub fn parse_entries(text: &str) -> Result<Vec<TraceEntry>, String> {
    let mut entries = Vec::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (section, setting) = match part.split_once(',') {
            Some((section, rest)) if !section.contains('=') => {
                (Some(section.trim().to_ascii_lowercase()), rest)
            }
            _ => (None, part),
        };
        let Some((key, value)) = setting.split_once('=') else {
            return Err(format!(
                "'{part}' is not [MODE,]KEY=VALUE (as mode=opentelemetry, rate=100, \
                 opentelemetry,url=localhost:4318/v1/traces)"
            ));
        };
        if let Some(section) = &section {
            if section != "triton" && section != "opentelemetry" {
                return Err(format!(
                    "unknown trace mode '{section}'; the modes are triton and opentelemetry"
                ));
            }
        }
        entries.push(TraceEntry {
            section,
            key: key.trim().to_ascii_lowercase().replace('_', "-"),
            value: value.trim().to_owned(),
        });
    }
    Ok(entries)
}

/// A collector address as Triton writes it (`host:port/v1/traces`, no scheme) or as a URL.
pub fn collector_url(text: &str) -> String {
    if text.contains("://") {
        text.to_owned()
    } else {
        format!("http://{text}")
    }
}

impl TraceConfig {
    /// The settings from `entries` (in order, later winning) over the OpenTelemetry
    /// variables that `env` reads.
    pub fn from_entries(
        entries: &[TraceEntry],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut config = Self::default();
        config.apply_env(&env)?;
        let mut level_given = false;
        for entry in entries {
            config.apply(entry, &mut level_given)?;
        }
        Ok(config)
    }

    fn apply_env(&mut self, env: &impl Fn(&str) -> Option<String>) -> Result<(), String> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if let Some((name, protocol)) = otel::either(env, otel::TRACES_PROTOCOL, otel::PROTOCOL) {
            self.export.protocol = match protocol.trim() {
                "http/protobuf" => OtlpProtocol::HttpProtobuf,
                "grpc" => OtlpProtocol::Grpc,
                other => {
                    return Err(format!(
                        "{name} '{other}': tensorport exports http/protobuf or grpc"
                    ))
                }
            };
        }
        let endpoint = var(otel::TRACES_ENDPOINT).map(|url| url.trim().to_owned());
        let base = var(otel::ENDPOINT).map(|base| {
            let base = base.trim().trim_end_matches('/');
            match self.export.protocol {
                // The gRPC service path is fixed; the base is the whole address.
                OtlpProtocol::Grpc => base.to_owned(),
                OtlpProtocol::HttpProtobuf => format!("{base}/v1/traces"),
            }
        });
        if let Some(url) = endpoint.or(base) {
            self.export.url = collector_url(&url);
            self.mode = TraceMode::OpenTelemetry;
        } else if self.export.protocol == OtlpProtocol::Grpc {
            self.export.url = "http://localhost:4317".to_owned();
        }
        if let Some(ratio) = var(otel::SAMPLER_ARG) {
            let ratio: f64 = ratio
                .trim()
                .parse()
                .ok()
                .filter(|r: &f64| (0.0..=1.0).contains(r))
                .ok_or_else(|| format!("{} '{ratio}' is not in [0, 1]", otel::SAMPLER_ARG))?;
            self.sampling.rate = rate_of_ratio(ratio);
        }
        if let Some(name) = var(otel::SERVICE_NAME) {
            self.export.resource.push(("service.name".to_owned(), name));
        }
        self.export.headers = otel::headers(env)?;
        self.export.tls = otel::tls(env)?;
        if let Some(timeout) = otel::timeout(env)? {
            self.export.timeout = timeout;
        }
        Ok(())
    }

    fn apply(&mut self, entry: &TraceEntry, level_given: &mut bool) -> Result<(), String> {
        let value = entry.value.as_str();
        let number = |what: &str| -> Result<u64, String> {
            value
                .parse()
                .map_err(|_| format!("trace setting {what} takes a whole number, got '{value}'"))
        };
        match (entry.section.as_deref(), entry.key.as_str()) {
            (None, "mode") => {
                self.mode = match value.to_ascii_lowercase().as_str() {
                    "triton" => TraceMode::Triton,
                    "opentelemetry" => TraceMode::OpenTelemetry,
                    _ => return Err(format!("unknown trace mode '{value}'")),
                }
            }
            (None, "rate") => {
                self.sampling.rate = u32::try_from(number("rate")?).unwrap_or(u32::MAX)
            }
            (None, "level") => {
                // Each `level=` adds a level, as Triton's repeated flags do.
                if !*level_given {
                    self.sampling.level = TraceLevel::OFF;
                    *level_given = true;
                }
                self.sampling.level.add(value)?;
            }
            (None, "count") => {
                self.sampling.count = value
                    .parse::<i64>()
                    .ok()
                    .filter(|c| *c >= -1)
                    .ok_or_else(|| format!("trace count takes -1 or more, got '{value}'"))?;
            }
            (None, "log-frequency") => {
                self.sampling.log_frequency =
                    u32::try_from(number("log-frequency")?).unwrap_or(u32::MAX)
            }
            (Some("triton"), "file") | (None, "file") => {}
            (Some("opentelemetry"), "url") => self.export.url = collector_url(value),
            (Some("opentelemetry"), "protocol") => {
                self.export.protocol = match value {
                    "http/protobuf" | "http" => OtlpProtocol::HttpProtobuf,
                    "grpc" => OtlpProtocol::Grpc,
                    _ => return Err(format!("unknown OTLP protocol '{value}'")),
                }
            }
            (Some("opentelemetry"), "resource") => {
                let Some((key, val)) = value.split_once('=') else {
                    return Err(format!("resource '{value}' is not KEY=VALUE"));
                };
                self.export.resource.push((key.to_owned(), val.to_owned()));
            }
            (Some("opentelemetry"), "bsp-max-queue-size") => {
                self.export.max_queue = usize::try_from(number("bsp_max_queue_size")?)
                    .unwrap_or(usize::MAX)
                    .clamp(1, 1 << 20);
            }
            (Some("opentelemetry"), "bsp-schedule-delay") => {
                self.export.delay = Duration::from_millis(number("bsp_schedule_delay")?.max(1));
            }
            (Some("opentelemetry"), "bsp-max-export-batch-size") => {
                self.export.max_batch = usize::try_from(number("bsp_max_export_batch_size")?)
                    .unwrap_or(usize::MAX)
                    .clamp(1, 1 << 16);
            }
            (section, key) => {
                let name = match section {
                    Some(section) => format!("{section},{key}"),
                    None => key.to_owned(),
                };
                return Err(format!("unknown trace setting '{name}'"));
            }
        }
        Ok(())
    }

    /// Whether spans are exported.
    pub fn exports(&self) -> bool {
        self.mode == TraceMode::OpenTelemetry
    }
}

/// Triton's 1-in-N rate for a sampling ratio (0: none).
fn rate_of_ratio(ratio: f64) -> u32 {
    if ratio <= 0.0 {
        0
    } else {
        (1.0 / ratio).round().clamp(1.0, f64::from(u32::MAX)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(values: &[&str], env: &[(&str, &str)]) -> Result<TraceConfig, String> {
        let mut entries = Vec::new();
        for value in values {
            entries.extend(parse_entries(value)?);
        }
        TraceConfig::from_entries(&entries, |name| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn tritons_spellings_set_mode_rate_level_and_collector() {
        let c = config(
            &[
                "mode=opentelemetry",
                "rate=100",
                "level=TIMESTAMPS",
                "opentelemetry,url=collector:4318/v1/traces",
                "opentelemetry,resource=service.name=ranker",
            ],
            &[],
        )
        .unwrap();
        assert!(c.exports());
        assert_eq!(c.sampling.rate, 100);
        assert!(c.sampling.level.timestamps);
        assert_eq!(c.export.url, "http://collector:4318/v1/traces");
        assert_eq!(
            c.export.resource,
            [("service.name".to_owned(), "ranker".to_owned())]
        );
    }

    #[test]
    fn nothing_is_traced_without_a_level() {
        let c = config(&["mode=opentelemetry"], &[]).unwrap();
        assert!(!c.sampling.level.is_on());
        let c = config(&["level=TIMESTAMPS", "level=OFF"], &[]).unwrap();
        assert_eq!(c.sampling.level.names(), ["OFF"]);
    }

    #[test]
    fn the_standard_variables_give_endpoint_protocol_and_ratio() {
        let c = config(
            &["level=TIMESTAMPS"],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318/"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
            ],
        )
        .unwrap();
        assert_eq!(c.export.url, "http://otel:4318/v1/traces");
        assert_eq!(c.sampling.rate, 100);
        assert!(c.exports());
        let c = config(
            &[],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
        )
        .unwrap();
        assert_eq!(c.export.url, "http://otel:4317");
        assert_eq!(c.export.protocol, OtlpProtocol::Grpc);
        // The flag wins over the variable.
        let c = config(&["rate=5"], &[("OTEL_TRACES_SAMPLER_ARG", "1.0")]).unwrap();
        assert_eq!(c.sampling.rate, 5);
    }

    #[test]
    fn mistakes_are_named() {
        assert!(config(&["rate=lots"], &[]).unwrap_err().contains("rate"));
        assert!(config(&["colour=red"], &[]).unwrap_err().contains("colour"));
        assert!(config(&["level=LOUD"], &[]).unwrap_err().contains("LOUD"));
        assert!(config(&["zipkin,url=x"], &[])
            .unwrap_err()
            .contains("zipkin"));
        assert!(config(&["rate"], &[]).is_err());
    }
}
