//! The planted bugs that live in `lease-runtime` ([`Bug::RUNTIME`]): mistakes that accept nothing
//! unsafe, yet cost a service something real (a job charged an attempt that never ran, a lease
//! left to lapse, a dashboard that lies, a handler told no deadline, a transaction of nothing at
//! every turn, a handler never told to stop). Most leave no mark a checker of the history can
//! see: the simulator audits the runtime it sweeps (docs/testing.md, "The simulator audits the
//! runtime it sweeps"), and each audit must catch its bug, as a crash of the world that names what
//! the runtime did, within the seed budget from every start. One, a grant dropped unseen, leaves a
//! lease nobody used on the history, and `useful_grants` must catch it there. Each lives in the
//! runtime, so every store plants it.

use lease_core::Bug;
use lease_history::Event;
use lease_sim::runner::{hunt_from, Target};
use lease_sim::scenarios::Scenario;
use lease_sim::world::Verdict;
use std::sync::atomic::AtomicBool;

/// Starting seeds, further apart than any budget.
const STARTS: [u64; 4] = [0, 100_000, 200_000, 300_000];
/// The most seeds a runtime bug may take from any start.
const BUDGET: u64 = 200;

/// What catches a runtime bug: the simulator's audit of the runtime, a crash whose message says
/// this; or a checker of the history, by its invariant's name.
#[derive(Debug, Clone, Copy)]
enum Caught {
    Audit(&'static str),
    Checker(&'static str),
}

/// Where each runtime bug is hunted (a scenario that reaches its code) and what catches it.
fn hunted_by(bug: Bug) -> (Scenario, Caught) {
    use Caught::{Audit, Checker};
    match bug {
        // Only a buffer (fewer handlers than slots) holds a lease its machine may give up there.
        Bug::BufferKeepsGivenUp => (Scenario::LARGE_BATCHES, Audit("given up while it waited in the buffer (line")),
        // Deploys stop processes gracefully: a grant answered after the stop, and leases handed
        // back, each owe a release.
        Bug::StopDropsLateGrants => {
            (Scenario::SERVICE_HANDLERS, Audit("after it was told to stop, and never released it"))
        }
        Bug::ShutdownReleasesUnawaited => (Scenario::SERVICE_HANDLERS, Audit("handed back at shutdown (line")),
        // Recording handlers' outputs go to the ledger in batches when a process batches.
        Bug::RecordBatchCountedOnce => (Scenario::SERVICE_HANDLERS, Audit("outputs sent to record")),
        Bug::DeadlineUnset => (Scenario::SERVICE_HANDLERS, Audit("is told the deadline 0")),
        Bug::LinesEveryTurn => (Scenario::SERVICE_HANDLERS, Audit("writes an empty batch of lines")),
        // A deploy whose grace runs out while a handler runs: long stalls of whole processes.
        Bug::ShutdownLeavesHandlers => {
            (Scenario::LARGE_BATCHES, Audit("returned with a handler running, never cancelled"))
        }
        // A grant dropped unseen owes nothing the runtime counts: only the history shows a lease
        // nobody used, mostly among the fault phase's delays and pauses.
        Bug::AcquireBoundedByTimeout => (Scenario::SWARM, Checker("useful_grants")),
        other => panic!("{other} is not a runtime bug"),
    }
}

// Proves every audit of the runtime has teeth: each planted runtime bug, swept from four starts,
// fails a seed within 200 from every one, as a crash whose message is its own audit's (or, for a
// bug no audit can see, as its checker's violation), and the same seed holds without the bug.
#[test]
fn every_planted_runtime_bug_is_caught_by_its_audit() {
    let stop = AtomicBool::new(false);
    let mut report = Vec::new();
    for bug in Bug::RUNTIME {
        let (scenario, caught) = hunted_by(bug);
        let target = Target::planted(scenario, Some(bug));
        let hunted = hunt_from(target, &STARTS, BUDGET, 2, &stop);
        for (catch, from) in hunted.catches.iter().zip(STARTS) {
            let found = catch.invariant.unwrap_or_else(|| panic!("{bug} escaped {BUDGET} seeds from seed {from}"));
            let seed = catch.first_failing_seed.expect("a catch has its seed");
            match (caught, target.run(seed).verdict) {
                (Caught::Audit(says), Verdict::Crash(crash)) => {
                    assert!(crash.message.contains(says), "{bug} at seed {seed}: {}", crash.message)
                }
                (Caught::Checker(name), Verdict::Safety(violation) | Verdict::Liveness(violation)) => {
                    assert_eq!(violation.invariant.name(), name, "{bug} at seed {seed}: {}", violation.message)
                }
                (_, other) => panic!("{bug} from {from} caught by {found} at seed {seed}, not {caught:?}: {other:?}"),
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

// Proves `useful_grants` judges the fault phase for real: a runtime that drops a grant answering
// an acquire after its timeout is caught, from every start, by a grant made before the heal, when
// faults still strike. A judge that excused the fault phase wholesale (as this one once did)
// would have let every one of these seeds through: each grant below lost its lease while no fault
// the history names could have kept its worker from it.
#[test]
fn a_grant_dropped_in_the_fault_phase_is_caught_there() {
    let stop = AtomicBool::new(false);
    let bug = Bug::AcquireBoundedByTimeout;
    let target = Target::planted(Scenario::SWARM, Some(bug));
    let hunted = hunt_from(target, &STARTS, BUDGET, 2, &stop);
    for (catch, from) in hunted.catches.iter().zip(STARTS) {
        let seed = catch.first_failing_seed.unwrap_or_else(|| panic!("{bug} escaped {BUDGET} seeds from seed {from}"));
        let run = target.run(seed);
        let (Verdict::Safety(violation) | Verdict::Liveness(violation)) = run.verdict else {
            panic!("{bug} at seed {seed}: {:?}", run.verdict)
        };
        let granted = &run.history[violation.lines[0] - 1];
        assert!(
            matches!(granted.event, Event::Granted { .. }),
            "seed {seed}: line {} is {granted:?}",
            violation.lines[0]
        );
        let healed = run.history.iter().find(|entry| matches!(entry.event, Event::FaultsHealed {}));
        let healed_us = healed.expect("the swarm heals its faults").t_us;
        assert!(
            granted.t_us < healed_us,
            "seed {seed}: the grant at t={}us came after the heal at t={healed_us}us",
            granted.t_us
        );
    }
}
