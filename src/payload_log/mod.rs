//! Payload logging: a model's answered requests written, off the request path, to TFRecord
//! files of TF Serving's `PredictionLog` or to JSON lines. `config` checks the settings
//! (`[logging]` in config.toml, `logging_config` in models.config); `tfrecord` frames records
//! as TensorFlow reads them; `appender` keeps a file to whole records when a write fails;
//! `shadow` logs a shadow copy's answer beside its request's.

mod appender;
mod config;
mod files;
mod queue;
mod record;
mod shadow;
mod shared;
mod tfrecord;
mod writer;

pub use config::{Destination, LogFormat, LoggingTable, PayloadLogConfig, SizeText};
pub use queue::{QUEUE_BYTES, QUEUE_RECORDS};
pub use record::{owned_tensors, PayloadRecord, SHADOW_ORIGIN};
pub use shadow::ShadowLog;
pub use shared::WriteLosses;
pub use tfrecord::{frame_into, framed_len, masked_crc};
pub use writer::PayloadWriter;
