//! KServe's sequence extension (`sequence_id`, `sequence_start`, `sequence_end`) as the request
//! path carries it, and the one check of it against the model that answers ([`admit`]).
//!
//! A stateful model keeps state between the requests of a sequence, and needs a sequence
//! batcher to route them to one slot in order. A stateless model would run each of them on
//! its own, in whatever batch it lands in, while the client believes its state was kept: so
//! such a request is refused rather than answered. The work that serves stateful models
//! replaces [`admit`] with the routing to a sequence's slot.

use crate::error::Error;
use crate::repository::LoadedModel;
use crate::wire_error::ParamError;

/// The sequence a request belongs to, as its client named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SequenceId {
    Number(u64),
    Text(String),
}

/// What a request says about its sequence, when it says it belongs to one (a non-zero or
/// non-empty `sequence_id`, or either flag set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequence {
    /// `None` when only a flag was given: a stateful model refuses that, as Triton does.
    pub id: Option<SequenceId>,
    pub start: bool,
    pub end: bool,
}

impl Sequence {
    /// The request parameter that puts the request in a sequence: the one a refusal names.
    pub fn parameter(&self) -> &'static str {
        if self.id.is_some() {
            "sequence_id"
        } else if self.start {
            "sequence_start"
        } else {
            "sequence_end"
        }
    }
}

/// Whether `model` takes a request that belongs to `sequence`. No model served here has a
/// sequence batcher (a config.pbtxt with `sequence_batching` is refused at load), so a
/// request of a sequence is refused, naming its parameter and the model.
pub(super) fn admit(model: &LoadedModel, sequence: Option<&Sequence>) -> Result<(), Error> {
    match sequence {
        None => Ok(()),
        Some(sequence) => Err(ParamError::NotStateful {
            model: model.name.to_string(),
            parameter: sequence.parameter(),
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_parameter_that_made_the_request_part_of_a_sequence() {
        let named = |id: Option<SequenceId>, start, end| Sequence { id, start, end }.parameter();
        assert_eq!(
            named(Some(SequenceId::Number(7)), true, true),
            "sequence_id"
        );
        assert_eq!(
            named(Some(SequenceId::Text("a".into())), false, false),
            "sequence_id"
        );
        assert_eq!(named(None, true, false), "sequence_start");
        assert_eq!(named(None, false, true), "sequence_end");
    }
}
