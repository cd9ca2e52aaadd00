//! The `[traffic]` split as it happened, per version: what the statistics add to Triton's
//! figures for a model with a split. Triton's `ModelStatistics` message has no field for it,
//! so it is in the HTTP answer's JSON (an extra key clients ignore) and in the metrics
//! (`tensorport_traffic_split_requests_total`).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

use crate::infer::InferService;
use crate::repository::{ModelRecord, VersionSelector, VersionState};

/// One version's part of its model's split.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitShare {
    /// Requests the split sent to this version since it was loaded.
    pub requests: u64,
    /// `requests` over every serving version's.
    pub share: f64,
    /// The weight config.toml gives the targets that resolve to this version now, as a
    /// fraction of the split's total.
    pub weight: f64,
}

/// The split shares of `name`'s versions (every model's without a name), keyed by model and
/// version; models without a split have none.
pub fn split_shares(
    service: &InferService,
    name: Option<&str>,
) -> BTreeMap<(String, String), SplitShare> {
    let snapshot = service.repository().snapshot();
    let mut shares = BTreeMap::new();
    for record in snapshot.models() {
        if name.is_some_and(|n| !n.is_empty() && n != record.name) {
            continue;
        }
        for (version, share) in record_shares(record) {
            shares.insert((record.name.clone(), version.to_string()), share);
        }
    }
    shares
}

fn record_shares(record: &ModelRecord) -> Vec<(u64, SplitShare)> {
    let Some(split) = record.rollout.as_ref().and_then(|r| r.split.as_ref()) else {
        return Vec::new();
    };
    let counts: Vec<(u64, u64)> = record
        .versions
        .iter()
        .filter_map(|(v, state)| match state {
            VersionState::Available(model) => Some((*v, model.stats.split_requests.load(Relaxed))),
            _ => None,
        })
        .collect();
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let weight_of = |version: u64| {
        let weight: u64 = split
            .targets
            .iter()
            .filter(|t| resolves_to(record, &t.selector, version))
            .map(|t| t.weight)
            .sum();
        weight as f64 / split.total.max(1) as f64
    };
    counts
        .into_iter()
        .map(|(version, requests)| {
            let share = if total == 0 {
                0.0
            } else {
                requests as f64 / total as f64
            };
            let weight = weight_of(version);
            (
                version,
                SplitShare {
                    requests,
                    share,
                    weight,
                },
            )
        })
        .collect()
}

fn resolves_to(record: &ModelRecord, selector: &VersionSelector, version: u64) -> bool {
    match selector {
        VersionSelector::Specific(v) => *v == version,
        VersionSelector::Label(label) => record.labels.get(label) == Some(&version),
        VersionSelector::Latest => record.latest().is_ok_and(|m| m.version == version),
    }
}
