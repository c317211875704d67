//! The nightly sweep flags end to end, through the real `lease-sim` binary: failing seeds land in
//! `--failures-dir` and replay from their files, shards split a range exactly, and bad flags exit 3.

mod common;

use common::lease_sim;
use lease_core::Bug;
use lease_sim::runner::{self, SeedResult, Target};
use lease_sim::scenarios::Scenario;
use lease_sim::shard::{SeedPlan, Shard};
use lease_sim::world::RunReport;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The words that start every reproduce command, before the binary's own arguments.
const CARGO_PREFIX: &str = "cargo run --release -p lease-sim --";

/// A fresh directory for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("lease-sim-nightly-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|error| panic!("not one JSON object ({error}):\n{stdout}"))
}

fn failing_seeds(summary: &serde_json::Value) -> Vec<(u64, String)> {
    summary["failures"]
        .as_array()
        .expect("failures is a list")
        .iter()
        .map(|failure| (failure["seed"].as_u64().unwrap(), failure["invariant"].as_str().unwrap().to_string()))
        .collect()
}

// Proves that a canary sweep with --failures-dir leaves, for every failing seed, a history, a
// trace, a reproduce script with the commit and toolchain that found it, and a plan; that the
// script, run with `sh` from a directory outside the checkout, replays the same violation (exit
// 1) with the binary that wrote it, and falls back to cargo's line; that its first line takes
// more flags; that the history fails the outside checker the same way (exit 1); and that the plan
// replays the same violation too.
#[test]
fn every_failing_seed_leaves_files_that_replay_it() {
    let dir = TempDir::new("failures");
    let dir_arg = dir.0.join("nested").to_str().unwrap().to_string();
    let (code, stdout, stderr) =
        lease_sim(&["sweep", "--bug", "canary", "--seeds", "0..200", "--failures-dir", &dir_arg, "--json"]);
    assert_eq!(code, Some(1), "the canary breaks a safety invariant:\n{stderr}");
    let summary = json(&stdout);
    let failures = failing_seeds(&summary);
    assert!(!failures.is_empty(), "the canary fails some seed in 200");
    assert_eq!(summary["failures_written"].as_u64(), Some(failures.len() as u64));
    let files = std::fs::read_dir(&dir_arg).unwrap().count();
    assert_eq!(files, 4 * failures.len(), "four files per failing seed, and nothing else");
    for (seed, invariant) in &failures {
        let file = |extension: &str| Path::new(&dir_arg).join(format!("seed-{seed}.{extension}"));
        let trace = std::fs::read_to_string(file("trace")).unwrap();
        assert!(trace.contains(&format!("SAFETY VIOLATION: {invariant}")), "seed {seed}'s trace ends with it");
        let reproduce = std::fs::read_to_string(file("reproduce")).unwrap();
        let command = reproduce.lines().next().expect("the command is the first line");
        let provenance = lease_check::provenance::line();
        let build = format!("# found by lease-sim {provenance}\n");
        assert!(reproduce.ends_with(&build), "it ends with the build that found it: {reproduce}");
        let binary = std::fs::canonicalize(env!("CARGO_BIN_EXE_lease-sim")).unwrap();
        let args: Vec<&str> = command
            .strip_prefix(binary.to_str().unwrap())
            .unwrap_or_else(|| panic!("starts with the binary that wrote it, {binary:?}: {reproduce}"))
            .split_whitespace()
            .collect();
        assert!(args.contains(&seed.to_string().as_str()), "the command names seed {seed}: {reproduce}");
        let fallback = format!("\nexec {CARGO_PREFIX} {}\n", args.join(" "));
        assert!(reproduce.contains(&fallback), "without the binary, cargo from a checkout: {reproduce}");
        let replay = Command::new("sh").arg(file("reproduce")).current_dir(std::env::temp_dir()).output().unwrap();
        let stdout = String::from_utf8_lossy(&replay.stdout);
        assert_eq!(
            replay.status.code(),
            Some(1),
            "sh seed-{seed}.reproduce, outside the checkout:\n{reproduce}{stdout}"
        );
        assert!(stdout.contains(&format!("SAFETY VIOLATION: {invariant}")), "same invariant on replay:\n{stdout}");
        let (code, stdout, _) = lease_sim(&["check", file("jsonl").to_str().unwrap()]);
        assert_eq!(code, Some(1), "{stdout}");
        assert!(stdout.contains(&format!("{invariant} violated")), "the checker agrees:\n{stdout}");
        let (code, stdout, _) = lease_sim(&["run", "--plan", file("plan.json").to_str().unwrap()]);
        assert_eq!(code, Some(1), "the plan replays the failure:\n{stdout}");
        assert!(stdout.contains(&format!("SAFETY VIOLATION: {invariant}")), "same invariant from the plan:\n{stdout}");
    }
}

/// The seeds a `--json` sweep summary says it ran, rebuilt from its base, shard and count.
fn seeds_run(summary: &serde_json::Value) -> BTreeSet<u64> {
    let shard: Shard = summary["shard"].as_str().unwrap().parse().unwrap();
    let plan = SeedPlan { base: summary["seed_base"].as_u64().unwrap(), end: None, shard };
    let runs = summary["runs"].as_u64().unwrap();
    let seeds: BTreeSet<u64> = plan.first(runs).collect();
    let description = summary["seeds"].as_str().unwrap();
    assert_eq!(description, plan.describe(runs), "the summary spells out the same seeds");
    assert_eq!(summary["seed_first"].as_u64(), seeds.first().copied());
    assert_eq!(summary["seed_last"].as_u64(), seeds.last().copied());
    seeds
}

// Proves that two shards of one range, each run by the binary, report disjoint seed sets whose
// union is the range, and that each shard's failures lie in its own set.
#[test]
fn two_shards_report_disjoint_seeds_that_cover_the_range() {
    let mut union = BTreeSet::new();
    for shard in ["0/2", "1/2"] {
        let (code, stdout, stderr) =
            lease_sim(&["sweep", "--bug", "canary", "--seeds", "300..401", "--shard", shard, "--json"]);
        assert!(matches!(code, Some(0 | 1)), "{stderr}");
        let summary = json(&stdout);
        assert_eq!(summary["seed_base"].as_u64(), Some(300));
        assert_eq!(summary["ended"].as_str(), Some("range_end"));
        let seeds = seeds_run(&summary);
        for (seed, _) in failing_seeds(&summary) {
            assert!(seeds.contains(&seed), "shard {shard} reported seed {seed}, which is not its own");
        }
        assert!(union.is_disjoint(&seeds), "shard {shard} overlaps the other");
        union.extend(seeds);
    }
    assert_eq!(union, (300..401).collect(), "the two shards together are the range");
}

// Proves, through the runner's own seed picking, that the shards of a range run disjoint seeds
// whose union is the range, and that a stopped sweep ran exactly its plan's first seeds.
#[test]
fn the_runner_runs_each_shard_of_a_range_exactly_once() {
    let target = Target::new(Scenario::CALM);
    let sweep = |plan: &SeedPlan, stop_after: u64| {
        let (stop, seeds) = (AtomicBool::new(false), Mutex::new(Vec::new()));
        let (tally, _) = runner::sweep_plan(target, plan, 2, &stop, &|_: &RunReport, result: &SeedResult| {
            let mut seeds = seeds.lock().unwrap();
            seeds.push(result.seed);
            if seeds.len() as u64 >= stop_after {
                stop.store(true, Ordering::Relaxed);
            }
        });
        let mut seeds = seeds.into_inner().unwrap();
        seeds.sort_unstable();
        let tallied = (tally.runs, tally.seed_min, tally.seed_max);
        assert_eq!(tallied, (seeds.len() as u64, seeds.first().copied(), seeds.last().copied()));
        seeds
    };
    let mut union = BTreeSet::new();
    for index in 0..3 {
        let plan = SeedPlan { base: 50, end: Some(80), shard: Shard { index, count: 3 } };
        let seeds = sweep(&plan, u64::MAX);
        assert_eq!(seeds.len() as u64, plan.len().unwrap());
        for seed in seeds {
            assert!(union.insert(seed), "seed {seed} ran in two shards");
        }
    }
    assert_eq!(union, (50..80).collect());
    let open = SeedPlan { base: 7, end: None, shard: Shard { index: 2, count: 5 } };
    let seeds = sweep(&open, 10);
    assert!(seeds.len() >= 10 && seeds.iter().all(|&seed| (seed - 7) % 5 == 2), "{seeds:?}");
    assert_eq!(seeds, open.first(seeds.len() as u64).collect::<Vec<_>>(), "a stopped sweep ran a prefix of its plan");
}

// Proves that a time-boxed sweep with a date base stops on time, says so, and names the date.
#[test]
fn a_time_boxed_sweep_from_the_date_stops_and_names_its_base() {
    let (code, stdout, stderr) =
        lease_sim(&["sweep", "--scenario", "calm", "--duration", "1s", "--seed-from-date", "--shard", "1/4", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let summary = json(&stdout);
    assert_eq!(summary["ended"].as_str(), Some("time_up"));
    assert_eq!(summary["duration_s"].as_u64(), Some(1));
    let date = summary["seed_base_date"].as_str().expect("the date is named");
    let yyyymmdd: u64 = date.replace('-', "").parse().unwrap();
    assert_eq!(summary["seed_base"].as_u64(), Some(yyyymmdd * lease_sim::nightly::SEEDS_PER_DAY));
    assert!(seeds_run(&summary).len() > 10, "a second runs more than ten calm seeds");
    let wall_ms = summary["wall_ms"].as_u64().unwrap();
    assert!((1_000..5_000).contains(&wall_ms), "stopped about a second in, not {wall_ms}ms");
}

// Proves that bad nightly flags exit 3 with a message saying what is wrong, before any seed runs.
#[test]
fn bad_nightly_flags_exit_3_with_a_clear_message() {
    let file = TempDir::new("not-a-dir");
    std::fs::write(&file.0, "a file, not a directory").unwrap();
    let under_a_file = file.0.join("failures");
    let cases: &[(&[&str], &str)] = &[
        (&["sweep", "--duration", "0"], "more than zero"),
        (&["sweep", "--duration", "soon"], "90s, 10m, 1h"),
        (&["sweep", "--duration", "10y"], "90s, 10m, 1h"),
        (&["sweep", "--shard", "2/2"], "must be below N"),
        (&["sweep", "--shard", "0/0"], "at least 1"),
        (&["sweep", "--shard", "half"], "write I/N"),
        (&["sweep", "--seeds", "0..1", "--shard", "1/2"], "holds no seed"),
        (&["sweep", "--seeds", "0..9", "--seed-base", "4"], "cannot be used with"),
        (&["sweep", "--seed-from-date", "--seed-base", "4"], "cannot be used with"),
        (&["sweep", "--failures-dir", under_a_file.to_str().unwrap()], "cannot write to"),
    ];
    for (args, needle) in cases {
        let (code, stdout, stderr) = lease_sim(args);
        assert_eq!(code, Some(3), "{args:?} should exit 3, stderr: {stderr}");
        assert!(stderr.contains(needle), "{args:?} should say {needle:?}, said: {stderr}");
        assert!(!stdout.contains("sweep:"), "{args:?} ran seeds before refusing: {stdout}");
    }
}

// Proves that a planted-bug sweep with a failures dir writes no more than the summary lists, and
// that the sweep's rerun command runs exactly the same seeds again.
#[test]
fn the_rerun_command_runs_the_same_seeds_again() {
    let (_, stdout, _) =
        lease_sim(&["sweep", "--bug", Bug::Canary.name(), "--seeds", "10..70", "--shard", "2/3", "--json"]);
    let first = json(&stdout);
    let rerun = first["rerun"].as_str().expect("a rerun command");
    let args: Vec<&str> = rerun.strip_prefix(CARGO_PREFIX).unwrap().split_whitespace().chain(["--json"]).collect();
    let (_, stdout, _) = lease_sim(&args);
    let again = json(&stdout);
    assert_eq!(seeds_run(&first), seeds_run(&again), "{rerun}");
    assert_eq!(first["failures"], again["failures"], "{rerun}");
}
