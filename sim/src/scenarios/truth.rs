//! The ground truth of a run's faults: which fault kinds its parameters switched on, when, and
//! which [`Cause`] of a backlog each one is. A report reads the history alone and names causes;
//! this reads the parameters, which the report never sees, and is what its answer is scored
//! against.
//!
//! The mapping, per fault kind (each a [`TrueFault`] over `[from_us, to_us]`):
//!
//! | fault | cause | when |
//! | --- | --- | --- |
//! | a surge (`Fault::Surge`, from `Params::surge`) | arrivals | its window |
//! | a faulty dependency (`Fault::Degrade`: any of the dependency's rates above 0) | dependency | its window, or 0 to the heal |
//! | a scheduled crash, pause, partition or cut of a worker, reclaimer or the table | workers | `[at, at + len]` (a crash: its `down_us`) |
//! | a scheduled crash, pause, partition or cut of the ledger (either end of a cut) | dependency | the same |
//! | a scheduled fault of the arrival generator | arrivals | the same |
//! | crash or stall rates at protocol points, scripted strikes, the window faults (`Params::windows`), packet loss | workers | 0 to the heal |
//! | scripted rival outputs (`Params::rival_jobs`) | dependency | 0 to the heal |
//! | a plan's keyed faults: a crash or stall of a node, a lost, held-back or doubled message | workers (dependency when the node is the ledger) | when dealt, for its length |
//! | a plan's keyed dependency faults (`slow`, `fail`, `rival`) | dependency | when dealt |
//!
//! Clock offsets and drift are not a cause of a backlog and are left out. The windows of a
//! surge and of the dependency are read from the schedule, where [`Params::schedule_windows`]
//! puts them for every seeded run and a plan keeps them, so a plan's parameters give the same
//! truth as its seed's.

use super::Params;
use crate::faults::decide::{Keyed, Site};
use crate::faults::{CrashRates, Fault};
use lease_check::report::Cause;
use lease_history::Node;

/// One fault kind a run switched on, the cause it is, and when it was on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TrueFault {
    /// The cause of a backlog this fault is.
    pub cause: Cause,
    /// The fault kind: `surge`, `dependency`, `crash`, `pause`, `partition`, `cut`,
    /// `crash_rates`, `stall_rates`, `script`, `window_faults`, `loss`, `rival_jobs`, or a plan's
    /// keyed verb (`stall`, `slow`, `fail`, `rival`, `lose`, `delay`, `duplicate`).
    pub kind: &'static str,
    /// When it started, in microseconds of the table's clock.
    pub from_us: u64,
    /// When it ended (inclusive): at the latest the heal for the fault phase's rates.
    pub to_us: u64,
}

/// The faults `params` switch on, each with its cause and its time span, sorted by start, then
/// end, cause and kind, without repeats. See the module documentation for the mapping.
pub fn fault_causes(params: &Params) -> Vec<TrueFault> {
    let heal_us = params.fault_phase_us;
    let mut faults = Vec::new();
    let mut phase = |cause: Cause, kind: &'static str, on: bool| {
        if on {
            faults.push(TrueFault { cause, kind, from_us: 0, to_us: heal_us });
        }
    };
    phase(Cause::Workers, "crash_rates", params.crash != CrashRates::default());
    let stall = &params.stall;
    phase(
        Cause::Workers,
        "stall_rates",
        [stall.before_effect, stall.before_ack, stall.before_renew].iter().any(|&r| r > 0.0),
    );
    phase(Cause::Workers, "script", !params.script.is_empty());
    phase(Cause::Workers, "window_faults", window_faults_on(params));
    phase(Cause::Workers, "loss", params.loss_rate > 0.0);
    phase(Cause::Dependency, "rival_jobs", !params.rival_jobs.is_empty());
    for &(at_us, fault) in &params.schedule {
        faults.push(scheduled(at_us, fault, heal_us));
    }
    for keyed in params.planned.iter().flat_map(|planned| planned.iter()) {
        faults.push(keyed_fault(keyed));
    }
    faults.sort_by_key(|fault| (fault.from_us, fault.to_us, fault.cause, fault.kind));
    faults.dedup();
    faults
}

/// Whether any of the faults aimed at the protocol's windows is on.
fn window_faults_on(params: &Params) -> bool {
    let w = &params.windows;
    let rates = [
        w.delay_rate,
        w.duplicate_rate,
        w.hand_back_copy,
        w.after_listing,
        w.after_fence,
        w.before_renew_reply,
        w.renew_at_boundary,
        w.reclaim_at_boundary,
        w.complete_at_boundary,
        w.effect_at_boundary,
    ];
    rates.iter().any(|&rate| rate > 0.0)
}

/// The cause of a fault on `nodes`: the dependency when one is the ledger, arrivals when one is
/// the arrival generator, else workers (workers, reclaimers, the table).
fn cause_of(nodes: &[Node]) -> Cause {
    if nodes.contains(&Node::Ledger) {
        return Cause::Dependency;
    }
    if nodes.contains(&Node::Arrivals) {
        return Cause::Arrivals;
    }
    Cause::Workers
}

/// A scheduled fault as a true fault.
fn scheduled(at_us: u64, fault: Fault, heal_us: u64) -> TrueFault {
    let span = |len_us: u64| at_us.saturating_add(len_us).min(heal_us.max(at_us));
    let (cause, kind, to_us) = match fault {
        Fault::Crash { node, down_us } => (cause_of(&[node]), "crash", span(down_us)),
        Fault::Pause { node, len_us } => (cause_of(&[node]), "pause", span(len_us)),
        // From the signal, for its downtime: the drain before the exit is the node's own time.
        Fault::Shutdown { node, down_us } => (cause_of(&[node]), "shutdown", span(down_us)),
        Fault::Partition { node, len_us } => (cause_of(&[node]), "partition", span(len_us)),
        Fault::CutLink { a, b, len_us } => (cause_of(&[a, b]), "cut", span(len_us)),
        Fault::Surge { len_us, .. } => (Cause::Arrivals, "surge", span(len_us)),
        Fault::Degrade { len_us, .. } => (Cause::Dependency, "dependency", len_us.map_or(heal_us.max(at_us), span)),
    };
    TrueFault { cause, kind, from_us: at_us, to_us }
}

/// A plan's keyed fault as a true fault: from when it was dealt, for its length.
fn keyed_fault(keyed: &Keyed) -> TrueFault {
    let from_us = keyed.fired_us;
    let cause = match keyed.visit.site {
        Site::Call { .. } => Cause::Dependency,
        site => cause_of(&site.nodes()),
    };
    let (kind, len_us) = (keyed.dealt.verb(), keyed.dealt.len_us());
    TrueFault { cause, kind, from_us, to_us: from_us.saturating_add(len_us) }
}

#[cfg(test)]
mod tests {
    use super::{fault_causes, TrueFault};
    use crate::faults::plan::Plan;
    use crate::scenarios::Scenario;
    use lease_check::report::Cause;
    use std::collections::BTreeSet;

    /// The causes of `faults`.
    fn causes(faults: &[TrueFault]) -> BTreeSet<Cause> {
        faults.iter().map(|fault| fault.cause).collect()
    }

    // Proves the truth of every labelled scenario is its label, over many seeds: a calm seed
    // switches nothing on, a single-cause seed only faults of its cause, and a mixed seed both of
    // its causes; every fault lies inside the window, after a calm lead-in of at least 2 s, and
    // ends by the heal.
    #[test]
    fn every_labelled_seed_switches_on_exactly_its_label() {
        for &scenario in Scenario::LABELLED {
            let label: BTreeSet<Cause> = scenario.label().expect("labelled").iter().copied().collect();
            for seed in 0..50 {
                let params = scenario.params(seed, None);
                let faults = fault_causes(&params);
                assert_eq!(causes(&faults), label, "{scenario:?} seed {seed}: {faults:?}");
                for fault in &faults {
                    assert!(fault.from_us >= 2_000_000, "{scenario:?} seed {seed}: {fault:?} in the lead-in");
                    assert!(fault.from_us <= fault.to_us && fault.to_us <= params.fault_phase_us, "{fault:?}");
                }
            }
        }
    }

    // Proves the truth is sorted and deterministic, and that the swarm's seeds map their fault
    // kinds to the documented causes: a surge to arrivals over its window, a faulty dependency to
    // the dependency from 0 to the heal, a crash of a worker to workers over its downtime.
    #[test]
    fn the_swarm_s_faults_map_to_their_causes_sorted() {
        let (mut surges, mut degraded, mut crashes) = (0, 0, 0);
        for seed in 0..100 {
            let params = Scenario::SWARM.params(seed, None);
            let faults = fault_causes(&params);
            assert_eq!(faults, fault_causes(&params), "deterministic");
            let keys: Vec<_> = faults.iter().map(|f| (f.from_us, f.to_us, f.cause, f.kind)).collect();
            assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "seed {seed}: sorted, no repeats");
            if let Some(surge) = params.surge {
                let want = TrueFault {
                    cause: Cause::Arrivals,
                    kind: "surge",
                    from_us: surge.at_us,
                    to_us: (surge.at_us + surge.len_us).min(params.fault_phase_us),
                };
                assert!(faults.contains(&want), "seed {seed}: {want:?} in {faults:?}");
                surges += 1;
            }
            let d = &params.dependency;
            if [d.slow_rate, d.fail_rate, d.lost_reply_rate, d.rival_rate].iter().any(|&r| r > 0.0) {
                let want = TrueFault {
                    cause: Cause::Dependency,
                    kind: "dependency",
                    from_us: 0,
                    to_us: params.fault_phase_us,
                };
                assert!(faults.contains(&want), "seed {seed}: {want:?} in {faults:?}");
                degraded += 1;
            }
            for &(at, fault) in &params.schedule {
                if let crate::faults::Fault::Crash { node: lease_history::Node::Worker(_), down_us } = fault {
                    let to_us = (at + down_us).min(params.fault_phase_us);
                    let want = TrueFault { cause: Cause::Workers, kind: "crash", from_us: at, to_us };
                    assert!(faults.contains(&want), "seed {seed}: {want:?}");
                    crashes += 1;
                }
            }
        }
        assert!(surges > 0 && degraded > 0 && crashes > 0, "{surges} {degraded} {crashes}");
    }

    // Proves a plan's parameters give the truth of the seed it was recorded from, plus its keyed
    // faults: the scheduled windows survive the plan, and a keyed fault on the dependency is a
    // dependency fault.
    #[test]
    fn a_plan_keeps_its_seed_s_windows() {
        let seeded = Scenario::DEPENDENCY_OUTAGE.params(3, None);
        let report = crate::world::run(seeded.clone());
        let replay = Plan::parse(&report.plan.to_json()).expect("a plan").params().expect("playable");
        let from_plan = fault_causes(&replay);
        for fault in fault_causes(&seeded) {
            assert!(from_plan.contains(&fault), "{fault:?} lost in the plan");
        }
        assert!(from_plan.iter().any(|fault| fault.kind == "fail" && fault.cause == Cause::Dependency));
        assert_eq!(causes(&from_plan), BTreeSet::from([Cause::Dependency]));
    }
}
