//! An ensemble's steps as configured: Triton's `ensemble_scheduling { step [..] }`, or the
//! `[[ensemble.step]]` tables of `config.toml`.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `[ensemble]`: the steps, in any order (the graph their tensors draw decides the order).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnsembleConfig {
    #[serde(default)]
    pub step: Vec<StepConfig>,
}

/// One step: a model and how its tensors map onto the ensemble's.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepConfig {
    /// The step model's name.
    pub model: String,
    /// The version to run; `-1` (the default, as in Triton) the latest serving one.
    #[serde(default = "latest")]
    pub version: i64,
    /// The step model's input name -> the ensemble tensor that feeds it.
    #[serde(default)]
    pub input_map: BTreeMap<String, String>,
    /// The step model's output name -> the ensemble tensor it becomes.
    #[serde(default)]
    pub output_map: BTreeMap<String, String>,
}

fn latest() -> i64 {
    -1
}

#[cfg(test)]
impl StepConfig {
    /// A step on the latest version of `model`, its maps given as (key, value) pairs.
    pub(crate) fn mapped(model: &str, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> Self {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect()
        };
        Self {
            model: model.into(),
            version: -1,
            input_map: map(inputs),
            output_map: map(outputs),
        }
    }
}
