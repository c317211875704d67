//! Batched worlds: worker processes of several slots, each slot a worker id of its own (`n + k ×
//! workers`), that coalesce their slots' requests into batches (lease-runtime's
//! `WorkerOptions::batch`). The swarm draws them for half its seeds, after every older draw.

use lease_history::{Event, Node};
use lease_sim::runner::Target;
use lease_sim::scenarios::Scenario;
use lease_sim::world::Verdict;
use std::collections::BTreeMap;

/// The swarm's batched seeds among `0..count`, with their slots.
fn batched_seeds(count: u64) -> Vec<(u64, u32)> {
    let target = Target::new(Scenario::SWARM);
    (0..count).map(|seed| (seed, target.params(seed).slots)).filter(|&(_, slots)| slots > 1).collect()
}

// Proves the swarm sweeps batched worlds: about half of 200 seeds draw worker processes of 2 to
// 4 slots batching as many requests a call (the draw comes after every older one, so each seed
// keeps its faults), and every one of them holds every checker.
#[test]
fn the_swarm_draws_batched_worlds_and_they_hold() {
    let batched = batched_seeds(200);
    assert!((60..=140).contains(&batched.len()), "{} of 200 seeds batch", batched.len());
    let target = Target::new(Scenario::SWARM);
    for &(seed, slots) in batched.iter().take(40) {
        assert!((2..=4).contains(&slots), "seed {seed}: {slots} slots");
        let params = target.params(seed);
        assert_eq!(params.batch, slots as usize, "seed {seed}: a batch per slot");
        let report = target.run(seed);
        assert!(matches!(report.verdict, Verdict::Held), "seed {seed}: {:?}", report.verdict);
        let run = match &report.history[0].event {
            Event::Run { params, .. } => params.clone(),
            other => panic!("the first line is the run's: {other:?}"),
        };
        assert!(run.contains(&format!("slots={slots} batch={slots}")), "the run line says so: {run}");
    }
}

// Proves a fault strikes a whole process: in a batched world, every crash, pause and restart of a
// worker process is written once for each of its slots, at one time, and the slots' own lines
// (grants, executions) name worker ids beyond the process count.
#[test]
fn a_fault_strikes_every_slot_of_its_process() {
    let target = Target::new(Scenario::SWARM);
    let (mut struck, mut beyond) = (0, false);
    for (seed, slots) in batched_seeds(60) {
        let report = target.run(seed);
        let workers = report.params.workers;
        let mut lines: BTreeMap<(u64, &str, u32), Vec<u32>> = BTreeMap::new();
        for entry in &report.history {
            let (kind, target) = match &entry.event {
                Event::Crashed { target, .. } => ("crashed", *target),
                Event::Restarted { target } => ("restarted", *target),
                Event::Paused { target, .. } => ("paused", *target),
                Event::Granted { owner: Node::Worker(n), .. } => {
                    beyond |= *n >= workers;
                    continue;
                }
                _ => continue,
            };
            if let Node::Worker(n) = target {
                lines.entry((entry.t_us, kind, n % workers)).or_default().push(n);
            }
        }
        for ((at, kind, process), ids) in lines {
            let mut want: Vec<u32> = (0..slots).map(|k| process + k * workers).collect();
            let mut ids = ids;
            ids.sort();
            want.sort();
            assert!(ids.len() % want.len() == 0, "seed {seed}: {kind} at {at} struck {ids:?}, not {want:?}");
            struck += 1;
        }
    }
    assert!(struck > 20, "only {struck} faults struck batched processes");
    assert!(beyond, "no grant named a slot beyond the first of its process");
}

// Proves the runtime starts one handler per request in a batched turn: in swarm seed 4815 (4
// processes of 4 slots) slot w8's execute for j14 timed out and was sent again within the turn
// that decided it, while the machine took the time for another slot's effect. The copy once
// queued a second start: two handlers for one request, the first never cancelled, which made its
// call again after its lease (self_fencing). The runtime now ignores a copy queued in the same
// turn, and asserts that no request gets a second handler (a crash of the world otherwise).
#[test]
fn an_execute_sent_again_within_a_batched_turn_starts_one_handler() {
    let report = Target::new(Scenario::SWARM).run(4815);
    assert!(report.params.slots > 1, "seed 4815 is a batched world");
    assert!(matches!(report.verdict, Verdict::Held), "{:?}", report.verdict);
}
