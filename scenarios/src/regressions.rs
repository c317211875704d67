//! Proves that no failure this project ever found comes back unseen: every plan in
//! `scenarios/regressions/` replays on every `cargo test`, and ends as its `expect` says.
//!
//! A regression is a plan, not a seed: a seed means something only while every generator draws
//! exactly as it did, while a plan lists its world, its arrivals and every fault it deals. Each
//! file carries a `comment` saying what it exposed, and an `expect`:
//! - `held`: the plan once failed (a protocol bug, a false alarm, a harness bug), and the fix
//!   must stay fixed;
//! - an invariant's name (or `crash`): the plan plants a bug, shrunk by `lease-sim shrink` to a
//!   few faults, and must still FAIL with that invariant, so a checker that loses its teeth fails
//!   here. Every planted bug has one.
//!
//! To add one: `lease-sim shrink ... --out DIR` on the failure, fix it, and copy `DIR/plan.json`
//! here with a comment; a plan that must hold gets `"expect": "held"`.

use lease_sim::faults::plan::Plan;
use lease_sim::faults::shrink::finding;
use std::path::{Path, PathBuf};

/// Where the plans live.
pub fn directory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions")
}

/// One regression plan, read from its file.
#[derive(Debug, Clone)]
pub struct Regression {
    /// The file.
    pub path: PathBuf,
    /// The plan.
    pub plan: Plan,
}

impl Regression {
    /// Replays the plan; `Err` says how the outcome differs from its `expect`.
    pub fn check(&self) -> Result<(), String> {
        let name = self.path.display();
        let expect = self.plan.expect.as_deref().ok_or_else(|| format!("{name}: no `expect`"))?;
        let params = self.plan.params().map_err(|error| format!("{name}: {error}"))?;
        let report = lease_sim::world::run(params);
        let found = finding(&report).map_or("held", |finding| finding.name());
        if found == expect {
            return Ok(());
        }
        Err(format!(
            "{name}: expected {expect}, got {found}\n  reproduce: cargo run --release -p lease-sim -- run --plan {name}"
        ))
    }
}

/// Every plan in the directory, in file-name order; the error names the first file that cannot
/// be read or has no comment.
pub fn load() -> Result<Vec<Regression>, String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(directory())
        .map_err(|error| format!("{}: {error}", directory().display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|error| format!("{}: {error}", path.display()))?;
            let plan = Plan::parse(&text).map_err(|error| format!("{}: {error}", path.display()))?;
            if plan.comment.as_deref().is_none_or(|comment| comment.trim().is_empty()) {
                return Err(format!("{}: no comment saying what it exposed", path.display()));
            }
            Ok(Regression { path, plan })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::Bug;

    // Every plan replays as its `expect` says: holds, or with a planted bug, fails that invariant.
    // Two threads share the plans.
    #[test]
    fn every_regression_plan_ends_as_it_expects() {
        let regressions = load().unwrap_or_else(|error| panic!("{error}"));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let wrong = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(regression) = regressions.get(index) else { break };
                    if let Err(error) = regression.check() {
                        wrong.lock().unwrap().push(error);
                    }
                });
            }
        });
        let wrong = wrong.into_inner().unwrap();
        assert!(wrong.is_empty(), "{} of {} regression plans:\n{}", wrong.len(), regressions.len(), wrong.join("\n"));
    }

    // The plans keep the failures of this project's history, and every planted bug has a shrunk
    // plan of at most three faults that must fail.
    #[test]
    fn the_plans_keep_the_historical_failures_and_every_planted_bug() {
        let regressions = load().unwrap_or_else(|error| panic!("{error}"));
        let named = |name: &str| regressions.iter().find(|r| r.path.file_name().is_some_and(|file| file == name));
        for name in [
            "swarm-seed-100.json",
            "clock-drift-seed-42.json",
            "clock-drift-seed-60.json",
            "mass-expiry-seed-133.json",
            "swarm-seed-936.json",
            "swarm-seed-1966.json",
            "calm-seed-156.json",
            "clock-drift-seed-4.json",
            "cut-from-table-seed-7.json",
            "swarm-seed-20261130000004159.json",
            "large-batches-seed-938.json",
            "swarm-seed-329.json",
            "large-batches-seed-300060.json",
        ] {
            let regression = named(name).unwrap_or_else(|| panic!("{name} is missing from scenarios/regressions"));
            assert_eq!(regression.plan.expect.as_deref(), Some("held"), "{name}");
        }
        // The rules' bugs, and the one runtime bug a checker of the history catches (the others'
        // audits are held to their bugs by lease-sim's runtime_bugs test).
        for bug in Bug::ALL.into_iter().chain([Bug::AcquireBoundedByTimeout]) {
            let name = format!("bug-{bug}.json");
            let regression = named(&name).unwrap_or_else(|| panic!("{name} is missing from scenarios/regressions"));
            assert_eq!(regression.plan.bug, Some(bug), "{name} plants its bug");
            assert_ne!(regression.plan.expect.as_deref(), Some("held"), "{name} must fail");
            let faults = regression.plan.faults.len();
            assert!(faults <= 3, "{name} keeps {faults} faults; shrink it again");
        }
    }
}
