//! Planted bugs: every one is caught by the default swarm sweep, within its seed budget, from
//! any starting seed. Seed counts are deterministic, so this is a stable test, not a timed one.

use lease_core::Bug;
use lease_sim::runner;
use lease_sim::scenario::Scenario;
use std::sync::atomic::AtomicBool;

/// The most seeds a bug may take from any start.
const BUDGET_SEEDS: u64 = 200;
/// The most seeds a bug may take from the median start.
const MEDIAN_SEEDS_MAX: u64 = 20;
/// Starting seeds, far apart.
const STARTS: [u64; 8] = [0, 1_000, 2_000, 3_000, 4_000, 5_000, 6_000, 7_000];

// Proves the harness finds real lease bugs: each planted bug, swept by the default scenario from
// eight starting seeds, fails within 200 seeds every time and within 20 at the median, and is
// caught by the invariant that bug breaks.
#[test]
fn every_planted_bug_is_caught_within_its_seed_budget() {
    let stop = AtomicBool::new(false);
    let mut report = Vec::new();
    for bug in Bug::ALL {
        let mut seeds: Vec<u64> = Vec::new();
        for from in STARTS {
            let catch = runner::hunt(Scenario::Swarm, bug, from, BUDGET_SEEDS, 2, &stop);
            let invariant =
                catch.invariant.unwrap_or_else(|| panic!("{bug} escaped {BUDGET_SEEDS} seeds from seed {from}"));
            assert!(
                expected(bug).contains(&invariant.name()),
                "{bug} from {from} was caught by {invariant}, not {:?}",
                expected(bug)
            );
            seeds.push(catch.seeds_to_failure);
        }
        seeds.sort_unstable();
        let median = seeds[seeds.len() / 2];
        report.push(format!("{bug}: {seeds:?}"));
        assert!(median <= MEDIAN_SEEDS_MAX, "{bug}: median {median} seeds to failure over {seeds:?}");
    }
    println!("{}", report.join("\n"));
}

/// The invariants a planted bug may be caught by: the rule it breaks.
fn expected(bug: Bug) -> &'static [&'static str] {
    match bug {
        Bug::ReclaimBoundaryOffByOne | Bug::ReclaimByReclaimerClock | Bug::ReclaimWithoutCas => {
            &["no_unexpired_reclaim"]
        }
        Bug::CompleteWithoutEpochCheck | Bug::RenewWithoutEpochCheck | Bug::LedgerWithoutFence => &["fencing"],
        Bug::ReclaimSkipsAdoption => &["adopt_before_repeat"],
        Bug::UnboundedReclaimBatch | Bug::ConflictDoesNotStopBatch => &["bounded_batch"],
        Bug::WorkerWithoutSelfFence => &["self_fencing"],
        // The canary's lost completion shows first as a backlog that disagrees with the
        // history (bounded_queue), or as the second terminal outcome it causes.
        Bug::Canary => &["bounded_queue", "one_terminal"],
        // The table's own assertion fires: a panic inside the world, reported as a crash.
        Bug::RequeueKeepsExpiry => &["crash"],
    }
}
