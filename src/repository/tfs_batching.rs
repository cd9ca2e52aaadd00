//! TF Serving's `--enable_batching` and `--batching_parameters_file`, mapped onto the
//! server-wide batching defaults (what a model without batching settings of its own runs with).
//!
//! | BatchingParameters field | here | why |
//! | --- | --- | --- |
//! | `max_batch_size` (default 1000) | `max_batch_size` | the same: most rows in one run |
//! | `batch_timeout_micros` (default 0) | `max_queue_delay_us` | the same wait for a batch to fill |
//! | `max_enqueued_batches` (default 10) | `max_queue_size` = it × `max_batch_size` | the queue here counts requests, each at least one row, so this admits at least as much as TF Serving |
//! | `num_batch_threads` | instances per model version | batches of one version that run at once, each on an instance of its own (a copy of the session); TF Serving shares its threads among models, so start-up says what this comes to |
//! | `allowed_batch_sizes` | `preferred_batch_sizes` | a batch is cut at these sizes; it is not padded up to them |
//! | `enable_large_batch_splitting: true` with `max_execution_batch_size` (default: `max_batch_size`) | `split_rows` | a request with more rows is cut into pieces of at most that many, which free instances run at once; no batch runs more rows; the last of `allowed_batch_sizes` must then equal it, as TF Serving requires |
//! | `thread_pool_name`, `pad_variable_length_inputs`, `max_execution_batch_size` without splitting | not applied | named once in a warning |

use std::path::{Path, PathBuf};

use crate::batcher::{BatchSettings, MAX_QUEUE_SIZE};
use crate::proto::tensorflow::serving::BatchingParameters;
use crate::textproto;

use super::repo_file::{read_text_trusted, RepoFileError, OPERATOR_FILE};
use super::MAX_INSTANCES;

/// TF Serving's defaults for fields a batching file leaves out.
const DEFAULT_MAX_BATCH_SIZE: i64 = 1000;
const DEFAULT_MAX_ENQUEUED_BATCHES: i64 = 10;

/// The batching defaults and instance count a batching file describes.
#[derive(Debug, Clone, PartialEq)]
pub struct TfsBatching {
    pub settings: BatchSettings,
    /// From `num_batch_threads`; `None` leaves `--instances` in charge.
    pub instances: Option<usize>,
    /// Fields set in the file that this server does not apply.
    pub ignored: Vec<&'static str>,
    /// Values lowered to this server's limits, for start-up to log.
    pub capped: Vec<Capped>,
}

/// A value of the file, or one derived from it, lowered to a limit of this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capped {
    /// The field, or what was derived from fields (`max_enqueued_batches × max_batch_size`).
    pub field: &'static str,
    /// As the file gives it (or the product, when it overflows: `None`).
    pub given: Option<u64>,
    pub applied: usize,
    /// The limit's name.
    pub limit: &'static str,
}

/// Why the batching file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TfsBatchingError {
    /// Not a regular file, over the cap, or unreadable; the error names the file.
    #[error("--batching-parameters-file: {0}")]
    Read(#[source] RepoFileError),
    #[error("--batching-parameters-file: {path} is not a BatchingParameters text proto: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: textproto::TextProtoError,
    },
    #[error("--batching-parameters-file: {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl TfsBatching {
    /// TF Serving's defaults, as `--enable_batching` without a file gives them.
    pub fn defaults() -> Self {
        Self::from_parameters(BatchingParameters::default()).unwrap_or(Self {
            settings: BatchSettings::default(),
            instances: None,
            ignored: Vec::new(),
            capped: Vec::new(),
        })
    }

    /// Reads and maps `path`.
    pub fn read(path: &Path) -> Result<Self, TfsBatchingError> {
        let text = read_text_trusted(path, OPERATOR_FILE).map_err(TfsBatchingError::Read)?;
        let parameters =
            textproto::parse::<BatchingParameters>("tensorflow.serving.BatchingParameters", &text)
                .map_err(|source| TfsBatchingError::Parse {
                    path: path.to_path_buf(),
                    source,
                })?;
        Self::from_parameters(parameters).map_err(|message| TfsBatchingError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    /// The mapping of the table above (also for the `batching_parameters` of a
    /// `--platform-config-file`).
    pub fn from_parameters(p: BatchingParameters) -> Result<Self, String> {
        let positive = |field: &str, value: i64| {
            usize::try_from(value)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("{field} must be positive, not {value}"))
        };
        let max_batch_size = positive(
            "max_batch_size",
            p.max_batch_size.unwrap_or(DEFAULT_MAX_BATCH_SIZE),
        )?;
        let batch_timeout_micros = u64::try_from(p.batch_timeout_micros.unwrap_or(0))
            .map_err(|_| "batch_timeout_micros must not be negative".to_owned())?;
        let enqueued = positive(
            "max_enqueued_batches",
            p.max_enqueued_batches
                .unwrap_or(DEFAULT_MAX_ENQUEUED_BATCHES),
        )?;
        let mut capped = Vec::new();
        let queue = enqueued.checked_mul(max_batch_size);
        let max_queue_size = queue.unwrap_or(MAX_QUEUE_SIZE).min(MAX_QUEUE_SIZE);
        if queue != Some(max_queue_size) {
            capped.push(Capped {
                field: "max_enqueued_batches × max_batch_size (requests a queue holds)",
                given: queue.map(|q| q as u64),
                applied: max_queue_size,
                limit: "the most requests a model version's queue holds",
            });
        }
        let threads = p
            .num_batch_threads
            .map(|n| positive("num_batch_threads", n))
            .transpose()?;
        let instances = threads.map(|n| n.min(MAX_INSTANCES));
        if let (Some(given), Some(applied)) = (threads, instances) {
            if given != applied {
                capped.push(Capped {
                    field: "num_batch_threads",
                    given: Some(given as u64),
                    applied,
                    limit: "the most instances of a model version",
                });
            }
        }
        let allowed = p
            .allowed_batch_sizes
            .iter()
            .map(|&size| positive("allowed_batch_sizes", size))
            .collect::<Result<Vec<_>, _>>()?;
        if !allowed.windows(2).all(|w| w[0] < w[1]) {
            return Err("allowed_batch_sizes must increase".into());
        }
        let splitting = p.enable_large_batch_splitting.unwrap_or(false);
        let split_rows = match (splitting, p.max_execution_batch_size) {
            (true, Some(size)) => positive("max_execution_batch_size", size)?,
            (true, None) => max_batch_size,
            (false, _) => 0,
        };
        if split_rows > max_batch_size {
            return Err(format!(
                "max_execution_batch_size ({split_rows}) must not exceed max_batch_size \
                 ({max_batch_size})"
            ));
        }
        let (last_name, last_size) = if splitting {
            ("max_execution_batch_size", split_rows)
        } else {
            ("max_batch_size", max_batch_size)
        };
        if allowed.last().is_some_and(|&last| last != last_size) {
            return Err(format!(
                "the last of allowed_batch_sizes must equal {last_name} ({last_size}), \
                 as TF Serving requires"
            ));
        }
        let mut ignored = Vec::new();
        if p.thread_pool_name.as_deref().is_some_and(|n| !n.is_empty()) {
            ignored.push("thread_pool_name");
        }
        if p.pad_variable_length_inputs {
            ignored.push("pad_variable_length_inputs");
        }
        if !splitting && p.max_execution_batch_size.is_some() {
            ignored.push("max_execution_batch_size (it applies with enable_large_batch_splitting)");
        }
        let settings = BatchSettings {
            max_batch_size,
            max_queue_delay_us: batch_timeout_micros,
            preferred_batch_sizes: allowed,
            max_queue_size,
            split_rows,
        };
        settings.validate().map_err(|err| err.to_string())?;
        Ok(Self {
            settings,
            instances,
            ignored,
            capped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TfsBatching, String> {
        let p =
            textproto::parse::<BatchingParameters>("tensorflow.serving.BatchingParameters", text)
                .map_err(|e| e.to_string())?;
        TfsBatching::from_parameters(p)
    }

    #[test]
    fn fields_map_onto_the_batching_settings() -> Result<(), String> {
        let mapped = parse(
            "max_batch_size { value: 8 }\nbatch_timeout_micros { value: 500 }\n\
             max_enqueued_batches { value: 4 }\nnum_batch_threads { value: 2 }\n\
             allowed_batch_sizes: 4\nallowed_batch_sizes: 8\npad_variable_length_inputs: true\n",
        )?;
        assert_eq!(
            mapped.settings,
            BatchSettings {
                max_batch_size: 8,
                max_queue_delay_us: 500,
                preferred_batch_sizes: vec![4, 8],
                max_queue_size: 32,
                split_rows: 0,
            }
        );
        assert_eq!(mapped.instances, Some(2));
        assert_eq!(mapped.ignored, vec!["pad_variable_length_inputs"]);
        Ok(())
    }

    #[test]
    fn large_batch_splitting_sets_the_split_size() -> Result<(), String> {
        let mapped = parse(
            "max_batch_size { value: 1024 }\nenable_large_batch_splitting { value: true }\n\
             max_execution_batch_size { value: 256 }\nallowed_batch_sizes: 128\n\
             allowed_batch_sizes: 256\n",
        )?;
        assert_eq!(mapped.settings.split_rows, 256);
        assert_eq!(mapped.settings.max_batch_size, 1024);
        assert_eq!(mapped.settings.preferred_batch_sizes, vec![128, 256]);
        assert!(mapped.ignored.is_empty(), "{:?}", mapped.ignored);
        // Without a size, batches split at max_batch_size: only larger requests are cut.
        let default_size =
            parse("max_batch_size { value: 64 }\nenable_large_batch_splitting { value: true }\n")?;
        assert_eq!(default_size.settings.split_rows, 64);
        // A size without splitting is named, not applied.
        let unused = parse("max_execution_batch_size { value: 32 }")?;
        assert_eq!(unused.settings.split_rows, 0);
        assert_eq!(unused.ignored.len(), 1);
        assert!(unused.ignored[0].starts_with("max_execution_batch_size"));
        Ok(())
    }

    /// The batching parameters TF Serving's own test of large-batch splitting uses
    /// (tensorflow/serving, tensorflow_serving/servables/tensorflow/
    /// saved_model_bundle_factory_test.cc, `Batching`: a request of 3 rows runs as batches of
    /// at most 2), with its capitalised booleans.
    #[test]
    fn tf_servings_own_splitting_parameters_split_at_the_execution_size() -> Result<(), String> {
        let mapped = parse(
            "max_batch_size { value: 4 }\n    enable_large_batch_splitting { value: True }\n    \
             max_execution_batch_size { value: 2 }",
        )?;
        assert_eq!(mapped.settings.split_rows, 2);
        assert_eq!(mapped.settings.max_batch_size, 4);
        let off = parse(
            "max_batch_size { value: 4 }\n    enable_large_batch_splitting { value: False }",
        )?;
        assert_eq!(off.settings.split_rows, 0);
        assert!(off.ignored.is_empty(), "{:?}", off.ignored);
        Ok(())
    }

    #[test]
    fn an_empty_file_gives_tf_servings_defaults() -> Result<(), String> {
        let mapped = parse("")?;
        assert_eq!(mapped.settings.max_batch_size, 1000);
        assert_eq!(mapped.settings.max_queue_size, 10_000);
        assert_eq!(mapped.instances, None);
        assert_eq!(TfsBatching::defaults(), mapped);
        Ok(())
    }

    #[test]
    fn values_past_the_limits_are_capped_and_said() -> Result<(), String> {
        let mapped = parse(
            "max_batch_size { value: 1000 }\nmax_enqueued_batches { value: 1000000 }\n\
             num_batch_threads { value: 500 }\n",
        )?;
        assert_eq!(mapped.settings.max_queue_size, MAX_QUEUE_SIZE);
        assert_eq!(mapped.instances, Some(MAX_INSTANCES));
        let said: Vec<(Option<u64>, usize)> =
            mapped.capped.iter().map(|c| (c.given, c.applied)).collect();
        assert_eq!(
            said,
            vec![
                (Some(1_000_000_000), MAX_QUEUE_SIZE),
                (Some(500), MAX_INSTANCES)
            ]
        );
        let overflowing = parse(&format!(
            "max_batch_size {{ value: {} }}\nmax_enqueued_batches {{ value: {} }}\n",
            1u64 << 40,
            1u64 << 40
        ))?;
        assert_eq!(overflowing.capped.first().map(|c| c.given), Some(None));
        assert!(parse("num_batch_threads { value: 4 }")?.capped.is_empty());
        Ok(())
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        for (text, needle) in [
            (
                "max_batch_size { value: 0 }",
                "max_batch_size must be positive",
            ),
            ("batch_timeout_micros { value: -1 }", "must not be negative"),
            (
                "max_batch_size { value: 8 } allowed_batch_sizes: 4",
                "must equal max_batch_size",
            ),
            (
                "max_batch_size { value: 8 } allowed_batch_sizes: 8 allowed_batch_sizes: 4",
                "must increase",
            ),
            ("max_batch_sise { value: 8 }", "max_batch_sise"),
            (
                "max_batch_size { value: 8 } enable_large_batch_splitting { value: true } \
                 max_execution_batch_size { value: 16 }",
                "must not exceed max_batch_size",
            ),
            (
                "max_batch_size { value: 8 } enable_large_batch_splitting { value: true } \
                 max_execution_batch_size { value: 4 } allowed_batch_sizes: 8",
                "must equal max_execution_batch_size (4)",
            ),
        ] {
            let err = parse(text).err().unwrap_or_default();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
