//! The split's choice of a version for a request that names none: weighted, from a cheap
//! counter-based draw owned by the server's [`Draws`], or, for a request carrying the sticky
//! header, from a stable hash of its value, so that one user keeps one version for as long
//! as the weights stay.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::repository::Split;
use crate::version::VersionSelector;

/// A stream of pseudo-random numbers shared by every request: a counter run through a mixing
/// function (SplitMix64), so a draw is one atomic add and needs no lock and no global.
#[derive(Debug)]
pub struct Draws {
    seed: u64,
    counter: AtomicU64,
}

impl Draws {
    /// Seeded from the clock, so restarts do not replay each other's draws.
    pub fn from_clock() -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self::seeded(now.as_nanos() as u64 ^ u64::from(std::process::id()))
    }

    /// A fixed sequence, for tests.
    pub fn seeded(seed: u64) -> Self {
        Self {
            seed,
            counter: AtomicU64::new(0),
        }
    }

    pub fn next(&self) -> u64 {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        mix(self
            .seed
            .wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }

    /// True `percent` times in a hundred.
    pub fn percent(&self, percent: u32) -> bool {
        percent >= 100 || self.next() % 100 < u64::from(percent)
    }
}

/// SplitMix64's finaliser: every input bit reaches every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a, mixed: stable across processes and releases (std's hasher promises neither), so a
/// sticky key keeps its version through restarts too.
fn stable_hash(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    mix(hash)
}

/// The target of `split` for a request: by `sticky` (the sticky header's value) when it has
/// one, else by the next draw.
pub fn choose<'s>(split: &'s Split, sticky: Option<&[u8]>, draws: &Draws) -> &'s VersionSelector {
    let roll = match sticky {
        Some(key) => stable_hash(key),
        None => draws.next(),
    };
    pick(split, roll % split.total.max(1))
}

/// The target whose share of `0..total` holds `point`.
fn pick(split: &Split, point: u64) -> &VersionSelector {
    let mut below = 0u64;
    for target in &split.targets {
        below = below.saturating_add(target.weight);
        if point < below {
            return &target.selector;
        }
    }
    // Unreachable for a checked split (its total is the sum); the latest version otherwise.
    &VersionSelector::Latest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repository::Weighted;

    fn split(weights: &[(u64, u64)]) -> Split {
        Split {
            targets: weights
                .iter()
                .map(|&(version, weight)| Weighted {
                    written: version.to_string(),
                    selector: VersionSelector::Specific(version),
                    weight,
                })
                .collect(),
            total: weights.iter().map(|(_, w)| w).sum(),
            sticky_header: None,
        }
    }

    fn counts(split: &Split, draws: &Draws, n: usize) -> [usize; 4] {
        let mut counts = [0; 4];
        for _ in 0..n {
            match choose(split, None, draws) {
                VersionSelector::Specific(v) => counts[*v as usize] += 1,
                other => panic!("drew {other:?}"),
            }
        }
        counts
    }

    #[test]
    fn draws_follow_the_weights() {
        let split = split(&[(1, 90), (2, 10)]);
        for seed in [0, 1, 42, u64::MAX] {
            let counts = counts(&split, &Draws::seeded(seed), 100_000);
            assert!((89_000..=91_000).contains(&counts[1]), "{seed}: {counts:?}");
            assert_eq!(counts[1] + counts[2], 100_000);
        }
    }

    #[test]
    fn a_zero_weight_is_never_drawn() {
        let split = split(&[(1, 1), (2, 0), (3, 1)]);
        let counts = counts(&split, &Draws::seeded(7), 10_000);
        assert_eq!(counts[2], 0);
        assert!(counts[1] > 4_000 && counts[3] > 4_000, "{counts:?}");
    }

    #[test]
    fn a_seed_replays_its_draws() {
        let (a, b) = (Draws::seeded(9), Draws::seeded(9));
        let first: Vec<u64> = (0..8).map(|_| a.next()).collect();
        let second: Vec<u64> = (0..8).map(|_| b.next()).collect();
        assert_eq!(first, second);
    }

    #[test]
    fn a_sticky_key_keeps_its_version_and_keys_spread() {
        let split = split(&[(1, 50), (2, 50)]);
        let draws = Draws::seeded(3);
        let mut on_two = 0;
        for user in 0..2_000 {
            let key = format!("user-{user}");
            let first = choose(&split, Some(key.as_bytes()), &draws).clone();
            for _ in 0..5 {
                assert_eq!(choose(&split, Some(key.as_bytes()), &draws), &first);
            }
            on_two += usize::from(first == VersionSelector::Specific(2));
        }
        assert!((800..=1_200).contains(&on_two), "{on_two}");
        // The hash is fixed: this key lands where it always has.
        assert_eq!(stable_hash(b"user-1"), stable_hash(b"user-1"));
        assert_ne!(stable_hash(b"user-1"), stable_hash(b"user-2"));
    }

    #[test]
    fn percent_samples_its_share() {
        let draws = Draws::seeded(11);
        let hits = (0..10_000).filter(|_| draws.percent(25)).count();
        assert!((2_300..=2_700).contains(&hits), "{hits}");
        assert!((0..100).all(|_| draws.percent(100)));
        assert!((0..100).all(|_| !draws.percent(0)));
    }
}
