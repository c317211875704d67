//! The harness end to end: seed sweeps, determinism across threads, and one-line reproduction.
//!
//! `LEASE_SEEDS=N` sweeps N seeds instead of the default; `LEASE_SEED=S` runs exactly seed S.

mod common;

use common::lease_sim;
use lease_core::Bug;
use lease_sim::runner::{self, SeedResult, Target};
use lease_sim::scenarios::Scenario;
use lease_sim::shard::{SeedPlan, Shard};
use std::process::Command;
use std::sync::atomic::AtomicBool;

/// The seeds a test sweeps: `LEASE_SEED` alone, or `LEASE_SEEDS` of them (default `default`).
fn seeds(default: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("LEASE_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let count = std::env::var("LEASE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    (0..count).collect()
}

fn sweep(target: Target, seeds: &[u64], threads: usize) -> Vec<SeedResult> {
    runner::sweep(target, seeds, threads, &AtomicBool::new(false), &|_| {}).0
}

fn assert_all_held(target: Target, results: &[SeedResult]) {
    let failures: Vec<String> = results
        .iter()
        .filter_map(|result| result.failure.as_ref())
        .map(|failure| {
            format!(
                "seed {} broke {}: {}\n  reproduce: {}",
                failure.seed, failure.invariant, failure.message, failure.reproduce
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} seeds of {:?} failed:\n{}",
        failures.len(),
        results.len(),
        target.scenario,
        failures.join("\n")
    );
}

// Proves the protocol holds under the swarm: every safety invariant on every event, and
// liveness after the heal, over the default seeds (LEASE_SEEDS for more).
#[test]
fn swarm_sweep_holds_every_invariant() {
    let target = Target::new(Scenario::SWARM);
    let results = sweep(target, &seeds(500), 2);
    assert_all_held(target, &results);
}

/// Each seed's history hash, in seed order, from a sweep on `threads` threads.
fn hashes(target: Target, seeds: &[u64], threads: usize) -> Vec<(u64, u64)> {
    let (first, last) = (seeds[0], *seeds.last().unwrap());
    let plan = SeedPlan { base: first, end: Some(last + 1), shard: Shard { index: 0, count: 1 } };
    let hashes = std::sync::Mutex::new(Vec::new());
    let on_report = |report: &lease_sim::world::RunReport, result: &SeedResult| {
        hashes.lock().unwrap().push((result.seed, runner::history_hash(&report.history)));
    };
    let _ = runner::sweep_plan(target, &plan, threads, &AtomicBool::new(false), &on_report);
    let mut hashes = hashes.into_inner().unwrap();
    hashes.sort_unstable();
    hashes
}

// Proves determinism: every seed's history is byte-identical run on one thread or two, alone or
// after other seeds on the same thread.
#[test]
fn same_seed_gives_a_byte_identical_history_whatever_the_thread_count() {
    let target = Target::new(Scenario::SWARM);
    let seeds: Vec<u64> = (1_000..1_040).collect();
    let one = hashes(target, &seeds, 1);
    let two = hashes(target, &seeds, 2);
    assert_eq!(one, two, "some seed's history differs across thread counts");
    let last = *seeds.last().unwrap();
    let alone = runner::history_hash(&target.run(last).history);
    assert_eq!(alone, one.last().unwrap().1, "seed {last} differs when run alone");
    // And byte for byte: the JSONL of a seed run on another thread, after other seeds there.
    let (seed, before) = (seeds[7], seeds[3]);
    let here = lease_history::to_jsonl(&target.run(seed).history);
    let there = std::thread::spawn(move || {
        let _ = target.run(before);
        lease_history::to_jsonl(&target.run(seed).history)
    })
    .join()
    .expect("the other thread runs");
    assert_eq!(here, there, "seed {seed}'s JSONL differs between threads");
    let mut distinct: Vec<u64> = one.iter().map(|&(_, hash)| hash).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() > seeds.len() / 2, "seeds should give different worlds");
}

// Proves that a failure replays from its printed command alone: a canary sweep fails, and the
// printed `lease-sim run ...` command, run as printed, reports the same invariant and exit code.
#[test]
fn a_failure_replays_from_its_printed_command() {
    let target = Target::planted(Scenario::SWARM, Some(Bug::Canary));
    let results = sweep(target, &(0..200).collect::<Vec<_>>(), 2);
    let failure = results.iter().find_map(|result| result.failure.clone()).expect("the canary fails some seed in 200");
    let args: Vec<&str> = failure.reproduce.split_whitespace().skip_while(|word| *word != "--").skip(1).collect();
    let output = Command::new(env!("CARGO_BIN_EXE_lease-sim")).args(&args).output().expect("lease-sim runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "a safety violation exits 1:\n{stdout}");
    assert!(
        stdout.contains(&format!("SAFETY VIOLATION: {}", failure.invariant)),
        "same invariant on replay:\n{stdout}"
    );
    assert!(stdout.contains(&failure.reproduce), "the replay prints its own reproduce line:\n{stdout}");
}

// Proves bad input gets a clear message and exit status 3, never a panic.
#[test]
fn bad_arguments_exit_3_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["sweep", "--seeds", "5..5"], "empty"),
        (&["sweep", "--seeds", "9..3"], "reversed"),
        (&["sweep", "--seeds", "abc"], "bad seed range"),
        (&["sweep", "--scenario", "nope"], "unknown scenario"),
        (&["sweep", "--threads", "0"], "--threads must be at least 1"),
        (&["run", "--seed", "1", "--history", "/nonexistent-dir/h.jsonl"], "cannot write"),
        (&["run", "--seed", "1", "--bug", "nope"], "unknown planted bug"),
        (&["run", "--seed", "-1"], "error"),
        (&["check", "/nonexistent-file.jsonl"], "cannot read"),
        (&["frobnicate"], "error"),
        (&["hunt", "--starts", "0"], "--starts must be at least 1"),
        (&["hunt", "--budget", "0"], "--budget must be from 1"),
        (&["hunt", "--budget", "100001"], "--budget must be from 1"),
        (&["hunt", "--bug", "nope"], "unknown planted bug"),
        (&["sweep", "--require-coverage", "--seeds", "3..1"], "reversed"),
        (&["run", "--seed", "1", "--bug", "complete-by-state-only"], "--store sqlite"),
        (&["sweep", "--bug", "renew-by-epoch-only", "--store", "memory"], "--store sqlite"),
        (&["hunt", "--bug", "complete-by-state-only"], "--store sqlite"),
        (&["run", "--seed", "1", "--store", "postgres"], "invalid value"),
    ];
    for (args, needle) in cases {
        let (code, _, stderr) = lease_sim(args);
        assert_eq!(code, Some(3), "{args:?} should exit 3, stderr: {stderr}");
        assert!(stderr.contains(needle), "{args:?} should say {needle:?}, said: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    }
}

// Proves `run --history` writes a history that the outside checker (`lease-sim check`) reads back
// and accepts, and that a corrupted history file (an unknown kind, or an unknown crash point) is a
// clear error, exit 3.
#[test]
fn a_written_history_checks_clean_and_a_corrupt_one_is_refused() {
    let dir = std::env::temp_dir().join(format!("lease-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("h.jsonl");
    let (code, stdout, stderr) = lease_sim(&["run", "--seed", "7", "--history", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.lines().next().unwrap().contains("\"kind\":\"run\""));
    let (code, stdout, _) = lease_sim(&["check", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}");
    std::fs::write(&file, text.replacen("\"kind\":\"granted\"", "\"kind\":\"grantedd\"", 1)).unwrap();
    let (code, _, stderr) = lease_sim(&["check", file.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("line "), "names the bad line: {stderr}");
    let run = text.lines().next().unwrap();
    let crashed = r#"{"t_us":1,"node":"world","kind":"crashed","target":"w1","point":"sideways"}"#;
    std::fs::write(&file, format!("{run}\n{crashed}\n")).unwrap();
    let (code, _, stderr) = lease_sim(&["check", file.to_str().unwrap()]);
    assert_eq!(code, Some(3), "an unknown crash point is bad input: {stderr}");
    assert!(stderr.contains("line 2"), "names the bad line: {stderr}");
    for (from, to) in [("\"history_version\":11,", "\"history_version\":4,"), ("\"history_version\":11,", "")] {
        assert!(text.contains(from), "the run line carries its version: {run}");
        std::fs::write(&file, text.replacen(from, to, 1)).unwrap();
        let (code, _, stderr) = lease_sim(&["check", file.to_str().unwrap()]);
        assert_eq!(code, Some(3), "an unknown history version is bad input: {stderr}");
        assert!(stderr.contains("history_version"), "says which version it read: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

// Proves a panic inside a world is a finding, not the end of a sweep: with a planted bug that
// trips the table's own assertion, the sweep goes on past the panicking seeds, lists each with
// `invariant: "crash"`, its message and reproduce line, and exits 4; `run` of such a seed prints
// its seed and parameters before the world starts, then the panic, and exits 4 too.
#[test]
fn a_panic_in_a_world_exits_4_with_its_seed() {
    // Seeds 16..=20 panic; the lease's ghost expiry can also show first as a wrong listing
    // (conformance, exit 1), as it does on seeds 1 and 2, and on 32 since the swarm draws reclaim
    // waves (29..=33 panicked before).
    let (code, stdout, stderr) = lease_sim(&["sweep", "--seeds", "16..21", "--bug", "requeue-keeps-expiry", "--json"]);
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON summary");
    assert_eq!(summary["runs"].as_u64(), Some(5), "the sweep went on after the first panic");
    let failures = summary["failures"].as_array().expect("failures");
    assert!(!failures.is_empty());
    for failure in failures {
        assert_eq!(failure["invariant"].as_str(), Some("crash"), "{failure}");
        let message = failure["message"].as_str().unwrap();
        assert!(message.contains("an expiry belongs to a live lease"), "the panic's own message: {message}");
        assert!(message.contains("core/src/table.rs:"), "where it was raised: {message}");
    }
    let reproduce = failures[0]["reproduce"].as_str().unwrap();
    let args: Vec<&str> = reproduce.split_whitespace().skip_while(|word| *word != "--").skip(1).collect();
    let (code, stdout, stderr) = lease_sim(&args);
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    let seed = failures[0]["seed"].as_u64().unwrap();
    let header = stdout.find(&format!("seed={seed}")).expect("the seed is printed");
    let params = stdout.find("params: ").expect("the parameters are printed");
    let crash = stdout.find("outcome: CRASH: the world panicked").expect("the crash is reported");
    assert!(header < crash && params < crash, "seed and parameters come first:\n{stdout}");
    assert!(stdout.trim_end().ends_with(reproduce), "it ends with its reproduce line:\n{stdout}");
}

// Proves `sweep --require-coverage` turns "held, but never reached the dangerous situation" into
// exit 5, naming what was missed, while the same sweep without the flag still exits 0.
#[test]
fn require_coverage_exits_5_when_a_required_situation_was_never_reached() {
    let args = ["sweep", "--scenario", "swarm", "--seeds", "0..1", "--json"];
    let (code, stdout, stderr) = lease_sim(&args);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON summary");
    let missed = summary["never_reached"].as_array().expect("never_reached").len();
    assert!(missed > 0, "one seed cannot reach every situation of the swarm: {stdout}");
    let (code, stdout, stderr) = lease_sim(&[&args[..], &["--require-coverage"]].concat());
    assert_eq!(code, Some(5), "{stdout}{stderr}");
    let (code, stdout, _) = lease_sim(&["sweep", "--scenario", "calm", "--seeds", "0..2", "--require-coverage"]);
    assert_eq!(code, Some(0), "calm requires nothing:\n{stdout}");
}

// Proves a run's wasted-grant figures, counted by its checkers as the history grew, are exactly
// what a reader of the history alone counts (`Figures::of`, as `lease-sim check` would).
#[test]
fn a_runs_figures_agree_with_its_history_read_alone() {
    let target = Target::new(Scenario::SWARM);
    let mut wasted = 0;
    for seed in seeds(40) {
        let report = target.run(seed);
        let alone = lease_check::figures::Figures::of(&report.history);
        assert_eq!(report.figures(), alone, "seed {seed}");
        wasted += alone.wasted_grants;
    }
    assert!(wasted > 0, "the swarm wastes some grants in its fault phase, so the comparison means something");
}

// Proves that what a person keeps to replay a run names the build that ran it: `run` prints the
// commit and the toolchain in its header, before the world starts; a sweep's summary carries
// them as text and as JSON; and the history, which must stay byte-identical across commits, does
// not.
#[test]
fn run_and_sweep_name_the_commit_and_toolchain_that_ran_them() {
    use lease_check::provenance::{COMMIT, TOOLCHAIN};
    let provenance = format!("provenance: commit={COMMIT} toolchain={TOOLCHAIN}");
    let history = std::env::temp_dir().join(format!("lease-sim-provenance-{}.jsonl", std::process::id()));
    let (code, stdout, stderr) =
        lease_sim(&["run", "--scenario", "calm", "--seed", "3", "--history", history.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let header = stdout.find(&provenance).unwrap_or_else(|| panic!("the header names the build:\n{stdout}"));
    let figures = stdout.find("figures: ").expect("the figures are printed");
    assert!(header < figures, "the build is named before the world starts:\n{stdout}");
    let text = std::fs::read_to_string(&history).unwrap();
    std::fs::remove_file(&history).unwrap();
    assert!(!text.contains(TOOLCHAIN) && !text.contains("commit"), "the history stays free of provenance");

    let (code, stdout, stderr) = lease_sim(&["sweep", "--scenario", "calm", "--seeds", "0..2", "--json"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON summary");
    assert_eq!(summary["commit"].as_str(), Some(COMMIT), "{stdout}");
    assert_eq!(summary["toolchain"].as_str(), Some(TOOLCHAIN), "{stdout}");
    let (code, stdout, _) = lease_sim(&["sweep", "--scenario", "calm", "--seeds", "0..2"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains(&provenance), "the text summary names the build:\n{stdout}");
}

// Proves a closed pipe ends `lease-sim` quietly, as it does any Unix tool: `run --trace | head`
// prints its first line, and nothing panics on the writes after `head` has gone.
#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_quietly() {
    let bin = env!("CARGO_BIN_EXE_lease-sim");
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!("'{bin}' run --seed 1 --trace | head -1; '{bin}' sweep --seeds 0..20 | head -1"))
        .output()
        .expect("sh runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.starts_with("lease-sim run: scenario=swarm seed=1"), "{stdout}");
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
}
