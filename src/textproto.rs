//! Text-format protobuf, as TF Serving's and Triton's configuration files are written
//! (`models.config`, `batching_parameters.txt`, `config.pbtxt`).
//!
//! The messages are the ones compiled from `proto/` for the wire; their descriptors are
//! embedded by the build script, so a file is parsed against exactly the fields the server's
//! own types have, and an unknown field is an error that names it.

use std::sync::LazyLock;

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};

use crate::proto::FILE_DESCRIPTOR_SET;

/// The compiled-in descriptors, decoded once: a constant of the binary like the bytes it is
/// decoded from, not state. The repository poll parses every model's `config.pbtxt` every two
/// seconds; decoded per parse, the poll of a folder of six models took 2.6% of a core under
/// load, growing with every model, and 0.04% decoded once (perf, docs/BENCHMARKS.md). `None`
/// only if the embedded bytes are not a descriptor set, a build problem.
static POOL: LazyLock<Option<DescriptorPool>> =
    LazyLock::new(|| DescriptorPool::decode(FILE_DESCRIPTOR_SET).ok());

/// Why a text-format file could not be read as its message.
#[derive(Debug, thiserror::Error)]
pub enum TextProtoError {
    /// The embedded descriptors lack the message: a build problem, not the file's.
    #[error("no message type {0} is compiled in")]
    UnknownMessage(String),
    #[error("{0}")]
    Syntax(String),
    #[error("the parsed message does not convert to {message}: {reason}")]
    Convert { message: String, reason: String },
}

/// Parses `text` as the protobuf message `full_name` (e.g. `inference.ModelConfig`) into the
/// generated type `M`.
pub fn parse<M: Message + Default>(full_name: &str, text: &str) -> Result<M, TextProtoError> {
    parse_dynamic(full_name, text)?
        .transcode_to::<M>()
        .map_err(|err| TextProtoError::Convert {
            message: full_name.to_owned(),
            reason: err.to_string(),
        })
}

/// Parses `text` as the message `full_name`, kept dynamic: for walking the fields a file
/// sets, and for the messages an `Any` holds (expanded in the text as `[type.googleapis.com/NAME]`).
pub fn parse_dynamic(full_name: &str, text: &str) -> Result<DynamicMessage, TextProtoError> {
    let descriptor = message_descriptor(full_name)?;
    DynamicMessage::parse_text_format(descriptor, &colons_before_lists(text))
        .map_err(|err| TextProtoError::Syntax(err.to_string()))
}

/// Decodes `bytes` (an `Any`'s value) as the message `full_name`, kept dynamic.
pub fn decode_dynamic(full_name: &str, bytes: &[u8]) -> Result<DynamicMessage, TextProtoError> {
    DynamicMessage::decode(message_descriptor(full_name)?, bytes).map_err(|err| {
        TextProtoError::Convert {
            message: full_name.to_owned(),
            reason: err.to_string(),
        }
    })
}

fn message_descriptor(full_name: &str) -> Result<prost_reflect::MessageDescriptor, TextProtoError> {
    let pool = POOL
        .as_ref()
        .ok_or_else(|| TextProtoError::UnknownMessage(full_name.to_owned()))?;
    pool.get_message_by_name(full_name)
        .ok_or_else(|| TextProtoError::UnknownMessage(full_name.to_owned()))
}

/// The text with a `:` after every field name that is directly followed by a list (`input [
/// { ... } ]`). The text format lets the colon go before a list of messages, and Triton's
/// own examples leave it out, but the parser wants it. Strings and `#` comments are copied
/// as they are.
fn colons_before_lists(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    // Whether the last thing outside whitespace was a word (a field name or a value).
    let mut after_word = false;
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                out.push(c);
                while let Some(inner) = chars.next() {
                    out.push(inner);
                    if inner == '\\' {
                        if let Some(escaped) = chars.next() {
                            out.push(escaped);
                        }
                    } else if inner == c {
                        break;
                    }
                }
                after_word = false;
            }
            '#' => {
                out.push(c);
                for inner in chars.by_ref() {
                    out.push(inner);
                    if inner == '\n' {
                        break;
                    }
                }
            }
            '[' if after_word => {
                out.push_str(": [");
                after_word = false;
            }
            c if c.is_whitespace() => out.push(c),
            c => {
                after_word = c.is_alphanumeric() || c == '_';
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::ModelConfig;

    #[test]
    fn reads_a_triton_config() -> Result<(), TextProtoError> {
        let config: ModelConfig = parse(
            "inference.ModelConfig",
            r#"
            name: "ranker"
            platform: "onnxruntime_onnx"
            max_batch_size: 8
            input [ { name: "x", data_type: TYPE_FP32, dims: [ 16 ] } ]
            dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
            instance_group [ { count: 2, kind: KIND_CPU } ]
            "#,
        )?;
        assert_eq!(config.name, "ranker");
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input.first().map(|i| i.dims.clone()), Some(vec![16]));
        assert_eq!(config.instance_group.first().map(|g| g.count), Some(2));
        Ok(())
    }

    #[test]
    fn a_colon_goes_before_lists_only_where_missing() {
        assert_eq!(
            colons_before_lists("input [ {dims: [1]} ] # a [ b\nname: \"x [y\" out[\n"),
            "input : [ {dims: [1]} ] # a [ b\nname: \"x [y\" out: [\n"
        );
    }

    #[test]
    fn an_unknown_field_is_named() {
        let err = parse::<ModelConfig>("inference.ModelConfig", "name: \"m\"\nmax_bach_size: 4\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("max_bach_size"), "{err}");
    }
}
