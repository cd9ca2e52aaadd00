//! How a model rolls out a new version, as `config.toml` writes it:
//!
//! ```toml
//! [traffic]
//! split = { "1" = 90, "2" = 10 }   # version number or label -> weight
//! sticky_header = "x-user-id"      # one header value always gets the same version
//!
//! [traffic.shadow]
//! target = "2"                     # version or label that gets a copy of sampled requests
//! percent = 100
//!
//! [metrics]
//! score_histograms = ["score"]     # outputs whose values are observed per version
//! ```
//!
//! The tables as written ([`TrafficConfig`], [`MetricsConfig`]) are checked once into a
//! [`Rollout`], which the repository publishes with the model's record on every poll, so a
//! weight edited in the file applies without reloading a version. What a request does with it
//! (the draw, the copy) is `crate::traffic`'s.

use std::collections::BTreeMap;

use http::HeaderName;
use serde::Deserialize;

use crate::version::VersionSelector;

/// The largest weight one target may have: sums of a few stay far from overflow.
pub const MAX_WEIGHT: i64 = 1_000_000;

/// `[traffic]` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficConfig {
    /// Version number or label -> weight; requests that name no version follow it.
    #[serde(default)]
    pub split: BTreeMap<String, i64>,
    /// A header whose value always maps to the same version while the weights stay.
    pub sticky_header: Option<String>,
    pub shadow: Option<ShadowConfig>,
}

/// `[traffic.shadow]` as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowConfig {
    pub target: String,
    /// The share of answered requests copied, 0 to 100.
    #[serde(default = "hundred")]
    pub percent: u32,
}

fn hundred() -> u32 {
    100
}

/// `[metrics]` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Outputs whose every row value is observed in a histogram per model and version.
    #[serde(default)]
    pub score_histograms: Vec<String>,
}

/// One target of a split and its weight (0 keeps it listed, in metrics, but never drawn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weighted {
    /// As written in the file, for metrics and logs.
    pub written: String,
    pub selector: VersionSelector,
    pub weight: u64,
}

/// The split: its targets in the file's (sorted) order; `total` is positive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub targets: Vec<Weighted>,
    pub total: u64,
    pub sticky_header: Option<HeaderName>,
}

/// Where shadow copies go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadow {
    pub written: String,
    pub target: VersionSelector,
    /// The version `target` names: the number, or the label's version when checked (labels
    /// live in the same file, so a moved label is checked again with it).
    pub target_version: Option<u64>,
    pub percent: u32,
}

/// A model's checked rollout settings; `None` on the record when the file sets none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rollout {
    pub split: Option<Split>,
    pub shadow: Option<Shadow>,
    pub score_outputs: Vec<String>,
}

impl Rollout {
    /// Checks `[traffic]` and `[metrics]` against the model's labels. `None` when neither
    /// asks for anything.
    pub fn from_config(
        traffic: &TrafficConfig,
        metrics: &MetricsConfig,
        labels: &BTreeMap<String, u64>,
    ) -> Result<Option<Self>, String> {
        let split = split(traffic, labels)?;
        let shadow = match &traffic.shadow {
            None => None,
            Some(shadow) => {
                if shadow.percent > 100 {
                    return Err(format!(
                        "[traffic.shadow]: percent must be 0 to 100, got {}",
                        shadow.percent
                    ));
                }
                let selector = target("[traffic.shadow] target", &shadow.target, labels)?;
                let target_version = match &selector {
                    VersionSelector::Specific(version) => Some(*version),
                    VersionSelector::Label(label) => labels.get(label).copied(),
                    VersionSelector::Latest => None,
                };
                Some(Shadow {
                    written: shadow.target.clone(),
                    target: selector,
                    target_version,
                    percent: shadow.percent,
                })
            }
        };
        let rollout = Self {
            split,
            shadow,
            score_outputs: metrics.score_histograms.clone(),
        };
        Ok((rollout != Self::default()).then_some(rollout))
    }

    /// The version numbers this rollout names that `served` (the versions the policy
    /// serves) lacks; labels name versions too.
    pub fn unserved(&self, served: &[u64], labels: &BTreeMap<String, u64>) -> Vec<String> {
        let split = self
            .split
            .iter()
            .flat_map(|split| &split.targets)
            .filter(|t| t.weight > 0);
        let named = split
            .map(|t| (&t.written, &t.selector))
            .chain(self.shadow.iter().map(|s| (&s.written, &s.target)));
        named
            .filter(|(_, selector)| {
                let version = match selector {
                    VersionSelector::Specific(v) => Some(*v),
                    VersionSelector::Label(label) => labels.get(label).copied(),
                    VersionSelector::Latest => None,
                };
                version.is_some_and(|v| !served.contains(&v))
            })
            .map(|(written, _)| written.clone())
            .collect()
    }
}

fn split(traffic: &TrafficConfig, labels: &BTreeMap<String, u64>) -> Result<Option<Split>, String> {
    if traffic.split.is_empty() {
        if traffic.sticky_header.is_some() {
            return Err("[traffic]: sticky_header needs a split".into());
        }
        return Ok(None);
    }
    let mut targets = Vec::with_capacity(traffic.split.len());
    for (written, &weight) in &traffic.split {
        if !(0..=MAX_WEIGHT).contains(&weight) {
            return Err(format!(
                "[traffic] split: the weight of '{written}' must be 0 to {MAX_WEIGHT}, got {weight}"
            ));
        }
        let selector = target("[traffic] split", written, labels)?;
        targets.push(Weighted {
            written: written.clone(),
            selector,
            weight: weight.unsigned_abs(),
        });
    }
    let total = targets.iter().map(|t| t.weight).sum();
    if total == 0 {
        return Err("[traffic] split: at least one weight must be positive".into());
    }
    let sticky_header = match &traffic.sticky_header {
        None => None,
        Some(name) => Some(
            HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("[traffic]: sticky_header '{name}' is not a header name"))?,
        ),
    };
    Ok(Some(Split {
        targets,
        total,
        sticky_header,
    }))
}

/// A version number or a label the model defines.
fn target(
    section: &str,
    written: &str,
    labels: &BTreeMap<String, u64>,
) -> Result<VersionSelector, String> {
    match VersionSelector::from_kserve(written) {
        Ok(VersionSelector::Label(label)) if !labels.contains_key(&label) => Err(format!(
            "{section}: '{label}' is neither a version number nor a label of [version_labels]"
        )),
        Ok(VersionSelector::Latest) => Err(format!("{section}: a target must not be empty")),
        Ok(selector) => Ok(selector),
        Err(err) => Err(format!("{section}: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Option<Rollout>, String> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            traffic: TrafficConfig,
            #[serde(default)]
            metrics: MetricsConfig,
        }
        let file: File = toml::from_str(text).map_err(|err| err.to_string())?;
        let labels = BTreeMap::from([("canary".to_owned(), 2)]);
        Rollout::from_config(&file.traffic, &file.metrics, &labels)
    }

    #[test]
    fn a_split_keeps_its_targets_in_order() {
        let rollout = parse(
            "[traffic]\nsplit = { \"1\" = 90, canary = 10, \"3\" = 0 }\nsticky_header = \"X-User-Id\"",
        )
        .unwrap()
        .unwrap();
        let split = rollout.split.unwrap();
        assert_eq!(split.total, 100);
        let targets: Vec<_> = split.targets.iter().map(|t| t.selector.clone()).collect();
        assert_eq!(
            targets,
            vec![
                VersionSelector::Specific(1),
                VersionSelector::Specific(3),
                VersionSelector::Label("canary".into())
            ]
        );
        assert_eq!(split.sticky_header.unwrap().as_str(), "x-user-id");
    }

    #[test]
    fn bad_splits_name_what_is_wrong() {
        let cases = [
            (
                "[traffic]\nsplit = { \"1\" = -5 }",
                "weight of '1' must be 0 to",
            ),
            (
                "[traffic]\nsplit = { \"1\" = 0 }",
                "at least one weight must be positive",
            ),
            (
                "[traffic]\nsplit = { beta = 1 }",
                "'beta' is neither a version number",
            ),
            ("[traffic]\nsplit = { \"0\" = 1 }", "not a model version"),
            (
                "[traffic]\nsticky_header = \"x-user\"",
                "sticky_header needs a split",
            ),
            (
                "[traffic]\nsplit = { \"1\" = 1 }\nsticky_header = \"bad header\"",
                "is not a header name",
            ),
            (
                "[traffic.shadow]\ntarget = \"2\"\npercent = 101",
                "percent must be 0 to 100",
            ),
            ("[traffic.shadow]\ntarget = \"beta\"", "'beta' is neither"),
            ("[traffic]\nsplits = {}", "unknown field"),
        ];
        for (text, expected) in cases {
            let err = parse(text).expect_err(text);
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn nothing_asked_is_no_rollout() {
        assert_eq!(parse(""), Ok(None));
        let scores = parse("[metrics]\nscore_histograms = [\"score\"]").unwrap();
        assert_eq!(scores.unwrap().score_outputs, vec!["score".to_owned()]);
    }

    #[test]
    fn targets_the_policy_does_not_serve_are_named() {
        let rollout = parse("[traffic]\nsplit = { \"1\" = 1, canary = 1, \"7\" = 1, \"8\" = 0 }")
            .unwrap()
            .unwrap();
        let labels = BTreeMap::from([("canary".to_owned(), 2)]);
        assert_eq!(rollout.unserved(&[1, 2, 7], &labels), Vec::<String>::new());
        assert_eq!(
            rollout.unserved(&[1], &labels),
            vec!["7".to_owned(), "canary".to_owned()]
        );
    }
}
