//! Batched worlds: worker processes of several slots, each slot a worker id of its own (`n + k ×
//! workers`), that coalesce their slots' requests into batches (lease-runtime's
//! `WorkerOptions::batch`). The swarm draws them for half its seeds, after every older draw.

use lease_history::{Event, Node};
use lease_sim::runner::Target;
use lease_sim::scenarios::Scenario;
use lease_sim::world::{Events, Verdict};
use std::collections::BTreeMap;

/// The swarm's batched seeds among `0..count`, with their slots.
fn batched_seeds(count: u64) -> Vec<(u64, u32)> {
    let target = Target::new(Scenario::SWARM);
    (0..count).map(|seed| (seed, target.params(seed).slots)).filter(|&(_, slots)| slots > 1).collect()
}

// Proves the swarm sweeps batched worlds: about half of 200 seeds draw worker processes of 2 to
// 16 slots batching as many requests a call (the draw comes after every older one, so each seed
// keeps its faults), and every one of them holds every checker.
#[test]
fn the_swarm_draws_batched_worlds_and_they_hold() {
    let batched = batched_seeds(200);
    assert!((60..=140).contains(&batched.len()), "{} of 200 seeds batch", batched.len());
    let target = Target::new(Scenario::SWARM);
    for &(seed, slots) in batched.iter().take(40) {
        assert!((2..=16).contains(&slots), "seed {seed}: {slots} slots");
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

// Proves a batch is one message served in one transaction: in the swarm's batched seeds, the
// table answers two or more slots of one process at one time, one line after another (a batch
// of acquires, renewals or completions), and the run line names the processes for a reader.
#[test]
fn a_batch_reaches_the_table_as_one_message() {
    let target = Target::new(Scenario::SWARM);
    let mut batches = 0;
    for (seed, _) in batched_seeds(40).into_iter().filter(|&(seed, _)| target.params(seed).table.batch_max > 1) {
        let report = target.run(seed);
        let params = target.params(seed);
        let processes = match &report.history[0].event {
            Event::Run { worker_processes, .. } => worker_processes.expect("a batched world names its processes"),
            other => panic!("the first line is the run's: {other:?}"),
        };
        assert_eq!(processes, params.workers, "seed {seed}");
        let owner = |event: &Event| match event {
            Event::Granted { owner: Node::Worker(w), .. }
            | Event::Renewed { from: Node::Worker(w), .. }
            | Event::Terminal { from: Node::Worker(w), .. } => Some(*w),
            _ => None,
        };
        for pair in report.history.windows(2) {
            let (Some(a), Some(b)) = (owner(&pair[0].event), owner(&pair[1].event)) else { continue };
            let same_kind = std::mem::discriminant(&pair[0].event) == std::mem::discriminant(&pair[1].event);
            if pair[0].t_us == pair[1].t_us && same_kind && a != b && a % processes == b % processes {
                batches += 1;
            }
        }
    }
    assert!(batches > 50, "{batches} answers served beside another of their batch in 40 seeds");
}

// Proves the outputs a process's recording handlers made at one turn reach the ledger as one
// message, recorded in one transaction (lease-runtime's `Client::record_batch`): in
// `service-handlers`' batched seeds with recording handlers, the ledger serves batches of records,
// each of two or more, and answers a batch's records at one time, one line after another.
#[test]
fn a_batch_of_records_reaches_the_ledger_as_one_message() {
    let target = Target::new(Scenario::SERVICE_HANDLERS);
    let (mut worlds, mut batches, mut records, mut together) = (0, 0, 0, 0);
    for seed in 0..60 {
        let params = target.params(seed);
        let report = target.run(seed);
        assert!(matches!(report.verdict, Verdict::Held), "seed {seed}: {:?}", report.verdict);
        if params.batch < 2 || params.table.batch_max < 2 || params.recorders == 0 {
            assert_eq!(report.events.batches[Events::RECORDS], 0, "seed {seed} batches no records");
            continue;
        }
        worlds += 1;
        batches += report.events.batches[Events::RECORDS];
        records += report.events.batched[Events::RECORDS];
        let recorded = |event: &Event| match event {
            Event::EffectApplied { from: Node::Worker(w), .. }
            | Event::EffectRejected { from: Node::Worker(w), .. }
                if params.records_itself(w % params.workers) =>
            {
                Some(w % params.workers)
            }
            _ => None,
        };
        for pair in report.history.windows(2) {
            let (Some(a), Some(b)) = (recorded(&pair[0].event), recorded(&pair[1].event)) else { continue };
            if pair[0].t_us == pair[1].t_us && a == b && pair[0].event.job() != pair[1].event.job() {
                together += 1;
            }
        }
    }
    eprintln!("{worlds} worlds: {batches} batches of {records} records, {together} answered together");
    assert!(worlds >= 5, "only {worlds} of 60 seeds batch records");
    assert!(batches >= 10, "{batches} batches of records in {worlds} worlds");
    assert!(records >= 2 * batches, "{records} records in {batches} batches");
    assert!(together >= batches, "{together} records answered beside another of their process's, {batches} batches");
}

// Proves the planted batch bugs are caught by the checkers, not by the batches' own code: swept
// by `large-batches` (processes of 8 to 16 slots, stalled and crashed mid-batch) from eight
// starting seeds 100,000 apart, each is caught from every start within 200 seeds, by the rule it
// breaks or by conformance first: a batch of completions that checks only its first job's epoch
// (a stale completion accepted beside it), a batch of renewals that extends whatever lease each
// job holds (a stale renewal accepted), a batch of acquires that grants its last job again (one
// job handed to two workers). None is planted on SQL.
#[test]
fn the_planted_batch_bugs_are_caught() {
    use lease_core::Bug;
    use lease_sim::runner::hunt_from;
    use std::sync::atomic::AtomicBool;
    let stop = AtomicBool::new(false);
    let starts: Vec<u64> = (0..8).map(|k| k * 100_000).collect();
    let mut report = Vec::new();
    for (bug, caught_by) in [
        (Bug::BatchCompleteChecksFirst, &["conformance", "fencing"][..]),
        (Bug::BatchRenewUnchecked, &["fencing", "conformance"][..]),
        (Bug::BatchAcquireGrantsTwice, &["conformance"][..]),
    ] {
        let hunted = hunt_from(Target::planted(Scenario::LARGE_BATCHES, Some(bug)), &starts, 200, 2, &stop);
        for (catch, from) in hunted.catches.iter().zip(&starts) {
            let found = catch.invariant.unwrap_or_else(|| panic!("{bug} escaped 200 seeds from seed {from}"));
            assert!(caught_by.contains(&found.name()), "{bug} from {from} caught by {found}, not {caught_by:?}");
            assert!(catch.seeds_to_failure <= 200);
        }
        report.push(format!("{bug}: median {} worst {}", hunted.median_seeds, hunted.worst_seeds));
    }
    // A batch of enqueues that stops at its first refusal: hunted where arrivals come in batches
    // past the capacity, caught by the check of every offer against the history alone.
    let bug = Bug::BatchEnqueueStopsAtRefusal;
    let hunted = hunt_from(Target::planted(Scenario::ARRIVAL_BURSTS, Some(bug)), &starts, 200, 2, &stop);
    for (catch, from) in hunted.catches.iter().zip(&starts) {
        let found = catch.invariant.unwrap_or_else(|| panic!("{bug} escaped 200 seeds from seed {from}"));
        assert_eq!(found.name(), "liveness", "{bug} from {from} caught by {found}");
    }
    report.push(format!("{bug}: median {} worst {}", hunted.median_seeds, hunted.worst_seeds));
    println!("{}", report.join("\n"));
    for bug in Bug::BATCH {
        assert!(!lease_store::StoreKind::Sqlite.plants(bug) && lease_store::StoreKind::Memory.plants(bug), "{bug}");
    }
}
