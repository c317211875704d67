//! `--store sqlite`: every world's table and ledger on lease-store's SQL, judged by the same swarm.
//!
//! The SQL store asks the same rules as the in-memory table, so a seed must give the same history
//! on either, byte for byte (but for the run line, which names the store), and the store's own
//! event log must be that history's table and ledger lines (every world checks this itself, and
//! crashes when they differ). The store's own planted bugs, in its SQL statements, must be caught.

use lease_core::Bug;
use lease_history::to_jsonl;
use lease_sim::faults::plan::Plan;
use lease_sim::runner::{self, Target};
use lease_sim::scenarios::Scenario;
use lease_sim::shard::{SeedPlan, Shard};
use lease_sim::world::durable::StoreKind;
use lease_sim::world::{RunReport, Verdict};
use std::sync::atomic::AtomicBool;

/// The run's history as JSONL, its run line aside, and the run line.
fn body(report: &RunReport) -> (String, String) {
    let jsonl = to_jsonl(&report.history);
    let (run, rest) = jsonl.split_once('\n').expect("a history has a run line");
    (run.to_string(), rest.to_string())
}

fn assert_same_world(target: Target, seed: u64) {
    let memory = target.run(seed);
    let sqlite = target.on(StoreKind::Sqlite).run(seed);
    assert!(
        !matches!(sqlite.verdict, Verdict::Crash(_)),
        "{:?} seed {seed} crashed on sqlite: {:?}",
        target.scenario,
        sqlite.verdict
    );
    let (memory_run, memory_rest) = body(&memory);
    let (sqlite_run, sqlite_rest) = body(&sqlite);
    assert_eq!(
        sqlite_run,
        memory_run.replacen(",\"drift_margin_us\":", ",\"store\":\"sqlite\",\"drift_margin_us\":", 1),
        "the run line names the store, and nothing else differs"
    );
    assert!(memory_rest == sqlite_rest, "{:?} seed {seed}: the SQL store's history differs", target.scenario);
    assert_eq!(format!("{:?}", memory.verdict), format!("{:?}", sqlite.verdict));
}

// Proves the SQL store decides as the in-memory table does, under every fault the swarm deals:
// 40 swarm seeds and 2 seeds of every scenario give byte-identical histories on both stores
// (and the same verdicts), and none crashed, so each store's event log was its history's table
// and ledger lines.
#[test]
fn the_sql_store_gives_the_in_memory_tables_history_byte_for_byte() {
    for seed in 0..40 {
        assert_same_world(Target::new(Scenario::SWARM), seed);
    }
    for scenario in Scenario::ALL {
        for seed in [1, 2] {
            assert_same_world(Target::new(*scenario), seed);
        }
    }
}

// Proves a planted bug in the rules acts through the SQL store just as through the table: the
// first failing seed of a bug's hunt fails the same way on both, with the same history.
#[test]
fn a_planted_rule_bug_fails_the_same_seed_the_same_way_on_both_stores() {
    let stop = AtomicBool::new(false);
    for bug in [Bug::ReclaimWithoutCas, Bug::LedgerWithoutFence, Bug::FenceRevivesFinished] {
        let target = Target::planted(Scenario::SWARM, Some(bug));
        let catch = runner::hunt(target, 0, 2_000, 2, &stop);
        let seed = catch.first_failing_seed.unwrap_or_else(|| panic!("{bug} escaped 2,000 seeds"));
        assert_same_world(target, seed);
        assert!(!matches!(target.on(StoreKind::Sqlite).run(seed).verdict, Verdict::Held), "{bug} seed {seed}");
    }
}

/// Each seed's history hash on sqlite, on `threads` threads.
fn hashes(target: Target, seeds: &[u64], threads: usize) -> Vec<(u64, u64)> {
    let results = std::sync::Mutex::new(Vec::new());
    let on_report = |report: &RunReport, result: &runner::SeedResult| {
        results.lock().unwrap().push((result.seed, runner::history_hash(&report.history)));
    };
    let (first, last) = (seeds[0], *seeds.last().unwrap());
    let plan = SeedPlan { base: first, end: Some(last + 1), shard: Shard { index: 0, count: 1 } };
    let _ = runner::sweep_plan(target, &plan, threads, &AtomicBool::new(false), &on_report);
    let mut results = results.into_inner().unwrap();
    results.sort_unstable();
    results
}

// Proves determinism on the SQL store: a seed's history is byte-identical on one thread or two,
// and run first on a fresh thread or after other worlds there (SQLite's statement cache seeds its
// hasher from the OS once per process: done on opening, never inside a world, where madsim would
// answer it from the world's random stream).
#[test]
fn sqlite_histories_are_deterministic_whatever_the_thread_count() {
    let target = Target::new(Scenario::SWARM).on(StoreKind::Sqlite);
    let seeds: Vec<u64> = (2_000..2_016).collect();
    assert_eq!(hashes(target, &seeds, 1), hashes(target, &seeds, 2));
    let seed = seeds[5];
    let first = std::thread::spawn(move || to_jsonl(&target.run(seed).history)).join().unwrap();
    let later = std::thread::spawn(move || {
        let _ = target.run(seeds[2]);
        to_jsonl(&target.run(seed).history)
    })
    .join()
    .unwrap();
    assert!(first == later, "seed {seed} differs when other worlds ran on its thread first");
}

// Proves the harness catches bugs that live in the SQL itself, which the in-memory table cannot
// have: River's completion guarded by state alone, and a heartbeat with no expiry in its guard.
// Each is caught from every one of eight starting seeds within 200 seeds, by the fencing rule (or
// by the conformance spec's answer first), and every catch replays from its printed command.
#[test]
fn the_stores_own_planted_bugs_are_caught_on_sqlite() {
    let stop = AtomicBool::new(false);
    let starts: Vec<u64> = (0..8).map(|k| k * 100_000).collect();
    for bug in Bug::STORE {
        let target = Target::planted(Scenario::SWARM, Some(bug)).on(StoreKind::Sqlite);
        let hunted = runner::hunt_from(target, &starts, 200, 2, &stop);
        for (catch, from) in hunted.catches.iter().zip(&starts) {
            let invariant = catch.invariant.unwrap_or_else(|| panic!("{bug} escaped 200 seeds from {from}"));
            assert!(["fencing", "conformance"].contains(&invariant.name()), "{bug} from {from}: {invariant}");
            let reproduce = catch.reproduce.as_deref().expect("a catch prints its command");
            assert!(reproduce.ends_with(&format!("--bug {bug} --store sqlite")), "{reproduce}");
        }
        // The same seeds hold on the in-memory table, which has no SQL to get wrong.
        let seed = hunted.catches[0].first_failing_seed.expect("caught");
        assert!(matches!(Target::new(Scenario::SWARM).run(seed).verdict, Verdict::Held));
    }
}

// Proves a run on sqlite replays from its plan: the recorded plan names the store, and playing it
// gives the run's history again.
#[test]
fn a_sqlite_run_replays_from_its_recorded_plan() {
    let target = Target::planted(Scenario::SWARM, Some(Bug::CompleteByStateOnly)).on(StoreKind::Sqlite);
    // Its first failing seed (the bug is caught within 200 seeds: the test above).
    let report = (0..200)
        .map(|seed| target.run(seed))
        .find(|report| !matches!(report.verdict, Verdict::Held))
        .expect("a seed of 0..200 catches it");
    let plan = Plan::parse(&report.plan.to_json()).expect("a recorded plan reads back");
    assert_eq!(plan.store, StoreKind::Sqlite);
    let replayed = lease_sim::world::run(plan.params().expect("the plan plays"));
    assert_eq!(format!("{:?}", replayed.verdict), format!("{:?}", report.verdict));
    // A store bug in a plan for the in-memory store is refused, with the reason.
    let memory = report.plan.to_json().replace("  \"store\": \"sqlite\",\n", "");
    let error = Plan::parse(&memory).expect_err("complete-by-state-only needs sqlite").to_string();
    assert!(error.contains("--store sqlite"), "{error}");
}
