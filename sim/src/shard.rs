//! Which seeds a sweep runs: a base, an optional end, and a shard of the machines that split them.
//!
//! Shard `I/N` of a range starting at `base` takes the seeds `base + I + k*N` for `k = 0, 1, ...`
//! (below the end, if there is one): seed `s` belongs to shard `(s - base) % N`. So the `N` shards
//! of a range never overlap, and together they are the whole range. A sweep takes its seeds in
//! `k` order and every seed it starts runs to its end, so the seeds a sweep ran are always
//! `k in 0..count` for some count: a base, a shard and a count name them exactly, however the
//! sweep stopped (end of range, time budget, Ctrl-C).

use std::fmt;
use std::str::FromStr;

/// One part of `count` equal interleaved parts of a seed range, `index` counted from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// Which part, `0..count`.
    pub index: u64,
    /// How many parts.
    pub count: u64,
}

/// Why a `--shard` argument was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// No `/` between the index and the count.
    #[error("bad shard {0:?}: write I/N, for example 0/8 (shard 0 of 8)")]
    NoSlash(String),
    /// The index or the count is not a whole number.
    #[error("bad shard {0:?}: {1:?} is not a whole number; write I/N, for example 0/8")]
    NotANumber(String, String),
    /// Zero shards.
    #[error("bad shard {0:?}: the shard count N must be at least 1")]
    NoShards(String),
    /// An index at or past the count.
    #[error("bad shard {0:?}: the index I counts from 0 and must be below N (0/{1} .. {2}/{1})")]
    IndexTooLarge(String, u64, u64),
}

impl Shard {
    /// The whole range: one shard of one.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Whether `seed` belongs to this shard of a range that starts at `base`.
    pub fn holds(self, base: u64, seed: u64) -> bool {
        seed >= base && (seed - base) % self.count == self.index
    }
}

impl FromStr for Shard {
    type Err = ShardError;

    /// Parses `I/N`: shard `I` (from 0) of `N`.
    fn from_str(text: &str) -> Result<Shard, ShardError> {
        let (index, count) = text.split_once('/').ok_or_else(|| ShardError::NoSlash(text.to_string()))?;
        let number = |part: &str| {
            part.trim().parse::<u64>().map_err(|_| ShardError::NotANumber(text.to_string(), part.to_string()))
        };
        let (index, count) = (number(index)?, number(count)?);
        if count == 0 {
            return Err(ShardError::NoShards(text.to_string()));
        }
        if index >= count {
            return Err(ShardError::IndexTooLarge(text.to_string(), count, count - 1));
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The seeds a sweep takes, in the order it takes them: `base + shard.index + k * shard.count`
/// for `k = 0, 1, ...`, all below `end` when there is one (none: until the sweep is stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedPlan {
    /// The first seed of the whole range (of every shard together).
    pub base: u64,
    /// The end of the range, excluded; `None` for an open range (a time-boxed sweep).
    pub end: Option<u64>,
    /// The shard this sweep runs.
    pub shard: Shard,
}

impl SeedPlan {
    /// The `k`-th seed this plan takes, or `None` past its end (or past `u64::MAX`).
    pub fn seed(&self, k: u64) -> Option<u64> {
        let seed = k.checked_mul(self.shard.count)?.checked_add(self.shard.index)?.checked_add(self.base)?;
        match self.end {
            Some(end) if seed >= end => None,
            _ => Some(seed),
        }
    }

    /// How many seeds the plan holds; `None` for an open range.
    pub fn len(&self) -> Option<u64> {
        let end = self.end?;
        let first = self.base.saturating_add(self.shard.index);
        Some(end.saturating_sub(first).div_ceil(self.shard.count))
    }

    /// Whether the plan holds no seed at all (a shard index past a short range).
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// The first `count` seeds of the plan: the seeds a sweep that ran `count` of them ran.
    pub fn first(&self, count: u64) -> impl Iterator<Item = u64> + '_ {
        (0..count).map_while(|k| self.seed(k))
    }

    /// The first `count` seeds, written so that a person can list them: `A..B` for a whole range,
    /// `base+I+k*N for k in 0..count` for a shard.
    pub fn describe(&self, count: u64) -> String {
        if self.shard == Shard::WHOLE {
            return format!("{}..{}", self.base, self.base + count);
        }
        format!("{}+{}+k*{} for k in 0..{count}", self.base, self.shard.index, self.shard.count)
    }

    /// A `--seeds A..B` range that, with this plan's `--shard`, names exactly its first `count`
    /// seeds again; `None` when it ran none.
    pub fn rerun_range(&self, count: u64) -> Option<String> {
        let last = self.seed(count.checked_sub(1)?)?;
        Some(format!("{}..={last}", self.base))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_shard_parses_from_i_slash_n() {
        assert_eq!("0/1".parse(), Ok(Shard::WHOLE));
        assert_eq!("3/8".parse(), Ok(Shard { index: 3, count: 8 }));
        assert_eq!(" 1 / 2 ".trim().parse(), Ok(Shard { index: 1, count: 2 }));
        assert_eq!(Shard { index: 3, count: 8 }.to_string(), "3/8");
    }

    #[test]
    fn a_bad_shard_is_refused_with_a_reason() {
        let refused = |text: &str| text.parse::<Shard>().expect_err(text).to_string();
        assert!(refused("3").contains("write I/N"));
        assert!(refused("").contains("write I/N"));
        assert!(refused("a/8").contains("\"a\" is not a whole number"));
        assert!(refused("1/").contains("is not a whole number"));
        assert!(refused("-1/8").contains("is not a whole number"));
        assert!(refused("0/0").contains("at least 1"));
        assert!(refused("8/8").contains("must be below N"));
        assert!(refused("9/8").contains("must be below N"));
        assert!(refused("1/2/3").contains("is not a whole number"));
    }

    #[test]
    fn the_shards_of_a_range_are_disjoint_and_cover_it() {
        for (base, end, count) in [(0, 200, 2), (7, 100, 3), (5, 6, 4), (1_000, 1_037, 8), (10, 11, 1)] {
            let mut seen = BTreeSet::new();
            for index in 0..count {
                let plan = SeedPlan { base, end: Some(end), shard: Shard { index, count } };
                let seeds: Vec<u64> = plan.first(u64::MAX).collect();
                assert_eq!(seeds.len() as u64, plan.len().unwrap(), "len of {plan:?}");
                for seed in seeds {
                    assert!(plan.shard.holds(base, seed), "{seed} in {plan:?}");
                    assert!(seen.insert(seed), "seed {seed} in two shards of {base}..{end}");
                }
            }
            assert_eq!(seen, (base..end).collect(), "the shards of {base}..{end} in {count}");
        }
    }

    #[test]
    fn an_open_plan_runs_on_and_stops_only_at_the_end_of_u64() {
        let plan = SeedPlan { base: u64::MAX - 5, end: None, shard: Shard { index: 1, count: 2 } };
        assert_eq!(plan.len(), None);
        assert_eq!(plan.first(10).collect::<Vec<_>>(), [u64::MAX - 4, u64::MAX - 2, u64::MAX]);
    }

    #[test]
    fn a_plan_describes_and_reruns_exactly_the_seeds_it_ran() {
        let whole = SeedPlan { base: 40, end: None, shard: Shard::WHOLE };
        assert_eq!(whole.describe(10), "40..50");
        assert_eq!(whole.rerun_range(10).as_deref(), Some("40..=49"));
        let shard = SeedPlan { base: 40, end: None, shard: Shard { index: 1, count: 4 } };
        assert_eq!(shard.describe(3), "40+1+k*4 for k in 0..3");
        assert_eq!(shard.first(3).collect::<Vec<_>>(), [41, 45, 49]);
        assert_eq!(shard.rerun_range(3).as_deref(), Some("40..=49"));
        assert_eq!(shard.rerun_range(0), None);
        let rerun = SeedPlan { base: 40, end: Some(50), shard: shard.shard };
        assert_eq!(rerun.first(u64::MAX).collect::<Vec<_>>(), [41, 45, 49]);
    }
}
