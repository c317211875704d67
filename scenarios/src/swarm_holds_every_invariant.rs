//! Proves that the protocol holds every invariant under the swarm, as FoundationDB and
//! TigerBeetle's VOPR test: each seed switches every fault kind on or off at random (crashes at
//! protocol points and at random, partitions of nodes and links, loss and latency, pauses and
//! stalls, clock drift, a slow and failing dependency, rival outputs, arrival surges) and picks
//! its own rates. How: a sweep over the default seeds that must also reach every interesting
//! situation listed for the swarm.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::SWARM;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::sweep_holds_and_reaches;

    // The swarm sweep holds and reaches every situation of the swarm's list; and each of the
    // protocol's seven windows (lease_check::windows) in at least 5% of the seeds, so that a
    // bug living in one is met within a few dozen seeds, not once a night.
    #[test]
    fn swarm_sweep_holds_and_reaches_every_situation_and_window() {
        let reach = sweep_holds_and_reaches(SCENARIO, 1000);
        println!("swarm coverage: {:?}", reach.coverage);
        println!("seeds reaching: {:?}", reach.seeds_reaching);
        if !reach.default_seeds {
            return; // A chosen seed range proves the invariants, not the rates.
        }
        for window in lease_check::windows::WINDOWS {
            assert!(SCENARIO.situations().contains(&window), "the swarm does not require {window}");
            let seeds = reach.seeds_reaching.get(window);
            assert!(
                seeds * 20 >= reach.runs,
                "{window} reached in {seeds} of {} seeds, under 5%: {:?}",
                reach.runs,
                reach.seeds_reaching
            );
        }
    }

    // Proves the window faults strike, show in the history, and stop at the heal: over the first
    // swarm seeds that deal them, messages are held back and doubled, and reclaimers and workers
    // stall after a listing, after a fence and before a renewal's answer; every such line comes
    // before `faults_healed`.
    #[test]
    fn window_faults_strike_in_the_fault_phase_only() {
        use lease_history::{Point, Event};
        let mut seen = std::collections::BTreeSet::new();
        let dealt = (0..200).map(|seed| SCENARIO.params(seed, None)).filter(|params| {
            let w = &params.windows;
            w.delay_rate > 0.0 && w.duplicate_rate > 0.0 && w.after_listing > 0.0 && w.before_renew_reply > 0.0
        });
        for params in dealt.take(20) {
            let report = lease_sim::world::run(params);
            let healed = report.history.iter().position(|entry| entry.event == Event::FaultsHealed {});
            let healed = healed.expect("every run heals");
            for (index, entry) in report.history.iter().enumerate() {
                let name = match &entry.event {
                    Event::Delayed { .. } => "delayed",
                    Event::Duplicated { .. } => "duplicated",
                    Event::Paused { point: Some(Point::AfterListing), .. } => "after_listing",
                    Event::Paused { point: Some(Point::MidReclaim), .. } => "after_fence",
                    Event::Paused { point: Some(Point::BeforeRenewReply), .. } => "before_renew_reply",
                    _ => continue,
                };
                assert!(index < healed, "seed {}: {name} on line {} after the heal", report.params.seed, index + 1);
                seen.insert(name);
            }
        }
        let all = ["after_fence", "after_listing", "before_renew_reply", "delayed", "duplicated"];
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), all);
    }

    // Proves the explorer, searching over the swarm's fault plans (mutating them as data: aims at
    // exact expiries, holds past a lease, reclaim storms, splices), finds no failure the seeds
    // missed: `LEASE_EXPLORE_RUNS` runs (default 100) from seed 0. This is how ci/mutants puts the
    // explorer in its loop (`ci/mutants --explore N`): a mutant that only a searched plan exposes
    // fails here, with the shrunk plan that replays it.
    #[test]
    fn the_explorer_finds_no_failure_over_the_swarms_plans() {
        let runs = match std::env::var("LEASE_EXPLORE_RUNS") {
            Ok(runs) => runs.parse().unwrap_or_else(|_| panic!("LEASE_EXPLORE_RUNS={runs:?} is not a number of runs")),
            Err(_) => 100,
        };
        let explored = lease_sim::explore::explore(lease_sim::runner::Target::new(SCENARIO), 0, runs, &mut |_, _| true);
        if let Some((shrunk, how)) = explored.failure {
            panic!(
                "explore run {} ({how}) failed: {:?}; its shrunk plan:\n{}",
                explored.runs - 1,
                shrunk.finding,
                shrunk.plan.to_json()
            );
        }
        assert_eq!(explored.runs, runs);
    }

    // Proves a crash dealt as an acknowledgement leaves strikes when the acknowledgement leaves
    // in a batch too (the simulator arms it at `during_ack` and strikes once the completion, alone
    // or in its batch, has left). Over the swarm's batched seeds among 0..100, every crash dealt
    // at `during_ack` is written as a `crashed` at `during_ack` for its job by its process, unless
    // its process crashed or stopped otherwise first. Here, not in lease-sim's own tests, so that
    // `ci/mutants` runs it: a simulator that struck only lone completions survived it before
    // (`sim/src/node/runtime.rs`, `Wire::ask`'s `WorkerBatch` arm), a fault dealt and never
    // struck, which no checker of the history can see.
    #[test]
    fn a_crash_dealt_during_an_acknowledgement_strikes_in_a_batch_too() {
        use lease_history::{Event, Node};
        use lease_sim::faults::decide::{Dealt, Keyed, Site, Visit};
        use lease_sim::faults::plan::Planned;
        use lease_sim::faults::Point;
        let target = lease_sim::runner::Target::new(SCENARIO);
        let (mut dealt, mut struck) = (0, 0);
        for seed in (0..100).filter(|&seed| target.params(seed).slots > 1) {
            let report = target.run(seed);
            let process = |node: Node| report.params.process_of(node);
            for planned in &report.plan.faults {
                let Planned::Keyed(Keyed { fired_us, visit: Visit { site, .. }, dealt: Dealt::Crash { .. } }) = planned
                else {
                    continue;
                };
                let Site::Point { node, point: Point::DuringAck, job: Some(job) } = *site else { continue };
                dealt += 1;
                let later = report.history.iter().filter(|entry| entry.t_us >= *fired_us);
                let ended = later.into_iter().find_map(|entry| match entry.event {
                    Event::Crashed { target, point, job: crashed } if process(target) == process(node) => {
                        Some(point == Point::DuringAck && crashed == Some(job))
                    }
                    Event::Stopped { target } if process(target) == process(node) => Some(false),
                    _ => None,
                });
                match ended {
                    Some(true) => struck += 1,
                    Some(false) => {}
                    None => panic!("seed {seed}: a crash dealt to {node} at during_ack for {job} never struck"),
                }
            }
        }
        assert!(dealt >= 10, "the batched seeds deal {dealt} crashes at during_ack");
        assert!(struck * 10 >= dealt * 9, "{struck} of {dealt} crashes dealt at during_ack struck there");
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 12);
    }
}
