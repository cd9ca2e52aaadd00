//! A model's payload-logging settings: `[logging]` in its config.toml, or TF Serving's
//! `logging_config` in models.config, checked once into a [`PayloadLogConfig`].
//!
//! ```toml
//! [logging]
//! path = "/var/log/tensorport/ranker"   # a directory; files rotate by size
//! sample = 0.1                          # share of answered requests logged, in [0, 1]
//! format = "prediction_log"             # TFRecord of tensorflow.serving.PredictionLog, or "jsonl"
//! max_file_bytes = "256MiB"             # a file is closed and the next begun past this
//! shadow = true                         # also log [traffic.shadow] copies' answers
//! ```

use std::path::PathBuf;

use serde::Deserialize;

/// The largest file, unless `max_file_bytes` says otherwise.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 20;

/// `[logging]` as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggingTable {
    /// The directory the files go in.
    pub path: Option<PathBuf>,
    /// The share of answered requests logged (default: every one).
    #[serde(default = "every_request")]
    pub sample: f64,
    /// `prediction_log` (default) or `jsonl`.
    pub format: Option<String>,
    /// A size in bytes, or with KiB, MiB, GiB (`"256MiB"`); a bare number is bytes.
    pub max_file_bytes: Option<SizeText>,
    /// Whether a logged request's shadow copy is logged too, beside it (same `id`, origin
    /// `shadow`); off by default, so that `sample = 1.0` means one record per request.
    #[serde(default)]
    pub shadow: bool,
    /// TF Serving's `filename_prefix`: set from models.config, never from config.toml.
    #[serde(skip)]
    pub filename_prefix: Option<PathBuf>,
    /// The allowed folder a reload-config's `filename_prefix` was confined to; `None` for the
    /// operator's own models.config, whose prefix is taken as written.
    #[serde(skip)]
    pub prefix_root: Option<PathBuf>,
}

fn every_request() -> f64 {
    1.0
}

/// A size written as a number of bytes or as text with a unit.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SizeText {
    Bytes(u64),
    Text(String),
}

/// How records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// TFRecord files of `tensorflow.serving.PredictionLog`, as TF Serving's request logger
    /// writes them (`.tfrecord`).
    PredictionLog,
    /// One JSON object per line in KServe v2 form (`.jsonl`).
    Jsonl,
}

impl LogFormat {
    pub fn extension(self) -> &'static str {
        match self {
            Self::PredictionLog => "tfrecord",
            Self::Jsonl => "jsonl",
        }
    }
}

/// Where the files go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// config.toml's `path`: files `<dir>/<model>-<unix-ms>-<n>.<ext>`.
    Directory(PathBuf),
    /// models.config's `filename_prefix`: files `<prefix>.<unix-ms>-<n>.<ext>`, as TF Serving
    /// names them from the prefix.
    Prefix(PathBuf),
    /// A reload-config's `filename_prefix`, resolved under `root` (a folder the operator
    /// allows): files named as for `Prefix`, but no folder is ever made, and each time a file
    /// is opened the prefix's folder is checked again to lie under `root` (it may have been
    /// swapped for a symlink since the reload).
    ConfinedPrefix { prefix: PathBuf, root: PathBuf },
}

/// Checked settings: what a model's writer is started with. Two equal values mean a reload
/// keeps the writer it has.
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadLogConfig {
    pub destination: Destination,
    pub sample: f64,
    pub format: LogFormat,
    pub max_file_bytes: u64,
    /// Shadow copies of logged requests are logged as well.
    pub shadow: bool,
}

impl PayloadLogConfig {
    /// Checks `table`; `parse_size` reads a size written with a unit.
    pub fn from_table(
        table: &LoggingTable,
        parse_size: impl Fn(&str) -> Result<u64, String>,
    ) -> Result<Self, String> {
        let destination = match (&table.path, &table.filename_prefix) {
            (_, Some(prefix)) if !prefix.as_os_str().is_empty() => match &table.prefix_root {
                Some(root) => Destination::ConfinedPrefix {
                    prefix: prefix.clone(),
                    root: root.clone(),
                },
                None => Destination::Prefix(prefix.clone()),
            },
            (Some(path), _) if !path.as_os_str().is_empty() => Destination::Directory(path.clone()),
            _ => return Err("[logging]: path must name the directory the logs go in".into()),
        };
        if !(0.0..=1.0).contains(&table.sample) {
            return Err(format!(
                "[logging]: sample must be between 0 and 1, got {}",
                table.sample
            ));
        }
        let format = match table.format.as_deref() {
            None | Some("prediction_log") => LogFormat::PredictionLog,
            Some("jsonl") => LogFormat::Jsonl,
            Some(other) => {
                return Err(format!(
                    "[logging]: format '{other}' is unknown (use \"prediction_log\" or \"jsonl\")"
                ))
            }
        };
        let max_file_bytes = match &table.max_file_bytes {
            None => DEFAULT_MAX_FILE_BYTES,
            Some(SizeText::Bytes(0)) => {
                return Err("[logging]: max_file_bytes must be above 0".into())
            }
            Some(SizeText::Bytes(bytes)) => *bytes,
            Some(SizeText::Text(text)) => {
                parse_size(text).map_err(|err| format!("[logging]: max_file_bytes {err}"))?
            }
        };
        Ok(Self {
            destination,
            sample: table.sample,
            format,
            max_file_bytes,
            shadow: table.shadow,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> LoggingTable {
        toml::from_str(text).unwrap()
    }

    fn size(text: &str) -> Result<u64, String> {
        match text {
            "1MiB" => Ok(1 << 20),
            _ => Err(format!("'{text}' is not a size")),
        }
    }

    #[test]
    fn a_full_table_is_read() {
        let config = PayloadLogConfig::from_table(
            &table(
                "path = \"/logs\"\nsample = 0.25\nformat = \"jsonl\"\nmax_file_bytes = \"1MiB\"",
            ),
            size,
        )
        .unwrap();
        assert_eq!(config.destination, Destination::Directory("/logs".into()));
        assert_eq!(config.sample, 0.25);
        assert_eq!(config.format, LogFormat::Jsonl);
        assert_eq!(config.max_file_bytes, 1 << 20);
        assert!(!config.shadow);
        let defaults = PayloadLogConfig::from_table(&table("path = \"/logs\""), size).unwrap();
        assert_eq!(defaults.sample, 1.0);
        assert_eq!(defaults.format, LogFormat::PredictionLog);
        assert_eq!(defaults.max_file_bytes, DEFAULT_MAX_FILE_BYTES);
        let shadow = PayloadLogConfig::from_table(&table("path = \"/l\"\nshadow = true"), size);
        assert!(shadow.unwrap().shadow);
    }

    #[test]
    fn bad_tables_are_refused_with_the_field_named() {
        let refused = |text: &str| PayloadLogConfig::from_table(&table(text), size).unwrap_err();
        assert!(refused("sample = 0.5").contains("path"));
        assert!(refused("path = \"/l\"\nsample = 1.5").contains("sample"));
        assert!(refused("path = \"/l\"\nsample = -0.1").contains("sample"));
        assert!(refused("path = \"/l\"\nformat = \"csv\"").contains("format 'csv'"));
        assert!(refused("path = \"/l\"\nmax_file_bytes = \"lots\"").contains("max_file_bytes"));
        assert!(refused("path = \"/l\"\nmax_file_bytes = 0").contains("max_file_bytes"));
        assert!(toml::from_str::<LoggingTable>("paht = \"/l\"").is_err());
    }

    #[test]
    fn a_filename_prefix_wins_over_a_path() {
        let mut from_tfs = table("sample = 0.5");
        from_tfs.filename_prefix = Some("/tmp/logs/ranker".into());
        let config = PayloadLogConfig::from_table(&from_tfs, size).unwrap();
        assert_eq!(
            config.destination,
            Destination::Prefix("/tmp/logs/ranker".into())
        );
        from_tfs.prefix_root = Some("/tmp/logs".into());
        let config = PayloadLogConfig::from_table(&from_tfs, size).unwrap();
        assert_eq!(
            config.destination,
            Destination::ConfinedPrefix {
                prefix: "/tmp/logs/ranker".into(),
                root: "/tmp/logs".into()
            }
        );
    }
}
