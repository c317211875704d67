//! The planted bugs that live in `lease-runtime` ([`Bug::RUNTIME`]): mistakes that accept nothing
//! unsafe, so that no checker of the history can see them, yet cost a service something real (a
//! job charged an attempt that never ran, a lease left to lapse, a dashboard that lies, a handler
//! told no deadline, a transaction of nothing at every turn, a handler never told to stop). The simulator audits the runtime it
//! sweeps (docs/testing.md, "The simulator audits the runtime it sweeps"), and each audit must
//! catch its bug, as a crash of the world that names what the runtime did, within the seed budget
//! from every start. Each lives in the runtime, so every store plants it.

use lease_core::Bug;
use lease_sim::runner::{hunt_from, Target};
use lease_sim::scenarios::Scenario;
use lease_sim::world::Verdict;
use std::sync::atomic::AtomicBool;

/// Starting seeds, further apart than any budget.
const STARTS: [u64; 4] = [0, 100_000, 200_000, 300_000];
/// The most seeds a runtime bug may take from any start.
const BUDGET: u64 = 200;

/// Where each runtime bug is hunted (a scenario that reaches its code) and what the audit that
/// catches it says.
fn hunted_by(bug: Bug) -> (Scenario, &'static str) {
    match bug {
        // Only a buffer (fewer handlers than slots) holds a lease its machine may give up there.
        Bug::BufferKeepsGivenUp => (Scenario::LARGE_BATCHES, "given up while it waited in the buffer (line"),
        // Deploys stop processes gracefully: a grant answered after the stop, and leases handed
        // back, each owe a release.
        Bug::StopDropsLateGrants => (Scenario::SERVICE_HANDLERS, "after it was told to stop, and never released it"),
        Bug::ShutdownReleasesUnawaited => (Scenario::SERVICE_HANDLERS, "handed back at shutdown (line"),
        // Recording handlers' outputs go to the ledger in batches when a process batches.
        Bug::RecordBatchCountedOnce => (Scenario::SERVICE_HANDLERS, "outputs sent to record"),
        Bug::DeadlineUnset => (Scenario::SERVICE_HANDLERS, "is told the deadline 0"),
        Bug::LinesEveryTurn => (Scenario::SERVICE_HANDLERS, "writes an empty batch of lines"),
        // A deploy whose grace runs out while a handler runs: long stalls of whole processes.
        Bug::ShutdownLeavesHandlers => (Scenario::LARGE_BATCHES, "returned with a handler running, never cancelled"),
        other => panic!("{other} is not a runtime bug"),
    }
}

// Proves every audit of the runtime has teeth: each planted runtime bug, swept from four starts,
// fails a seed within 200 from every one, as a crash whose message is its own audit's, and no
// checker of the history is what caught it.
#[test]
fn every_planted_runtime_bug_is_caught_by_its_audit() {
    let stop = AtomicBool::new(false);
    let mut report = Vec::new();
    for bug in Bug::RUNTIME {
        let (scenario, says) = hunted_by(bug);
        let target = Target::planted(scenario, Some(bug));
        let hunted = hunt_from(target, &STARTS, BUDGET, 2, &stop);
        for (catch, from) in hunted.catches.iter().zip(STARTS) {
            let found = catch.invariant.unwrap_or_else(|| panic!("{bug} escaped {BUDGET} seeds from seed {from}"));
            assert_eq!(found.name(), "crash", "{bug} from {from} caught by {found}");
            let seed = catch.first_failing_seed.expect("a catch has its seed");
            match target.run(seed).verdict {
                Verdict::Crash(crash) => {
                    assert!(crash.message.contains(says), "{bug} at seed {seed}: {}", crash.message)
                }
                other => panic!("{bug} at seed {seed}: {other:?}"),
            }
            // Without the bug, the same seed holds: the audit saw the bug, nothing else.
            let clean = Target::new(scenario).run(seed).verdict;
            assert!(matches!(clean, Verdict::Held), "{} seed {seed} without {bug}: {clean:?}", scenario.name());
        }
        report.push(format!(
            "{bug} on {}: median {} worst {}",
            scenario.name(),
            hunted.median_seeds,
            hunted.worst_seeds
        ));
    }
    println!("{}", report.join("\n"));
    assert!(Bug::RUNTIME.iter().all(|&bug| lease_store::StoreKind::Sqlite.plants(bug)));
}
