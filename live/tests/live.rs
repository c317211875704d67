//! `lease-live` end to end: real processes on a real store (PostgreSQL where `LEASE_PG_URL`,
//! or the local server, answers; else SQLite), killed and paused by real signals, judged by the
//! same checkers as a simulated run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One live run at a time: two would share the machine's two cores and each other's timing.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The store the runs use: PostgreSQL when a server answers at `LEASE_PG_URL` (default the local
/// one), else SQLite. `LEASE_PG_REQUIRED=1` makes a missing server a failure.
fn store() -> Vec<String> {
    let url = std::env::var("LEASE_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    match postgres::Client::connect(&url, postgres::NoTls) {
        Ok(_) => vec!["--store".into(), "postgres".into(), "--url".into(), url],
        Err(error) => {
            let required = std::env::var("LEASE_PG_REQUIRED").is_ok_and(|value| value == "1");
            assert!(!required, "LEASE_PG_REQUIRED=1, but no PostgreSQL answers at {url}: {error}");
            eprintln!("live tests: no PostgreSQL at {url} ({error}); running on SQLite");
            vec!["--store".into(), "sqlite".into()]
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lease-live-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `lease-live` for 10 s with 4 workers and 2 reclaimers and every fault; returns the
/// exit status and stdout.
fn live(out: &Path, seed: u64, bug: Option<&str>) -> (Option<i32>, String) {
    live_with(out, seed, bug, &[])
}

/// [`live`], with more arguments.
fn live_with(out: &Path, seed: u64, bug: Option<&str>, more: &[&str]) -> (Option<i32>, String) {
    let mut args: Vec<String> = store();
    args.extend(more.iter().map(|arg| arg.to_string()));
    args.extend(["--duration", "10s", "--workers", "4", "--reclaimers", "2"].map(String::from));
    args.extend(["--seed".to_string(), seed.to_string(), "--out".to_string(), out.display().to_string()]);
    if let Some(bug) = bug {
        args.extend(["--bug".to_string(), bug.to_string()]);
    }
    let output = Command::new(env!("CARGO_BIN_EXE_lease-live")).args(&args).output().expect("lease-live runs");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    (output.status.code(), stdout)
}

/// Processes whose command line names `out`: the run's children, if any outlived it.
fn processes_naming(out: &Path) -> Vec<String> {
    let needle = out.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && cmdline.contains("live-child") {
            found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

fn lines(out: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(out.join("history.jsonl")).expect("the history was written");
    text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

// Proves a live run holds: 4 worker and 2 reclaimer processes, an arrival generator and a
// dependency stub, with a worker SIGKILLed right after its effect was accepted and a worker
// SIGSTOPped longer than the ttl during its acknowledgement. `check` holds on the exported
// history, the stub's effect counts agree with it, a reclaimer adopted the killed worker's
// output, and no process outlives the run.
#[test]
fn a_live_run_with_kills_and_pauses_holds_adopts_and_leaves_no_process() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let out = scratch("holds");
    let (status, stdout) = live(&out, 3, None);
    assert_eq!(status, Some(0), "the live run failed");
    assert!(stdout.contains("every invariant held"), "no verdict");
    assert!(stdout.contains("the history agrees"), "the stub's counts disagree");
    // Every process's log tells its lives: none is empty, and a restarted worker's shows two.
    let logs: Vec<_> = std::fs::read_dir(out.join("logs")).expect("logs/").flatten().map(|e| e.path()).collect();
    assert!(logs.len() >= 4, "{logs:?}");
    for log in &logs {
        let text = std::fs::read_to_string(log).expect("a log reads");
        assert!(text.contains(": started, pid "), "{} says nothing: {text:?}", log.display());
    }
    let lives = |log: &std::path::PathBuf| std::fs::read_to_string(log).unwrap_or_default().matches("started").count();
    assert!(logs.iter().any(|log| lives(log) >= 2), "no log shows a restart after a kill");
    assert!(stdout.contains(" 0 left"), "a process outlived the run");
    assert_eq!(processes_naming(&out), Vec::<String>::new(), "processes outlived the run");
    let history = lines(&out);
    let ttl_us = history[0]["lease_ttl_us"].as_u64().expect("the run line");
    let kind = |line: &serde_json::Value, kind: &str| line["kind"] == kind;
    assert!(history.iter().any(|line| kind(line, "adopted")), "nothing was adopted");
    assert!(
        history.iter().any(|line| kind(line, "crashed") && line["point"] == "after_effect"),
        "no kill right after an accepted effect"
    );
    let paused_past_ttl = history.iter().enumerate().any(|(at, line)| {
        kind(line, "paused")
            && history[at..].iter().any(|later| {
                kind(later, "resumed")
                    && later["target"] == line["target"]
                    && later["t_us"].as_u64().unwrap() > line["t_us"].as_u64().unwrap() + ttl_us
            })
    });
    assert!(paused_past_ttl, "no pause longer than the ttl");
    assert!(history.iter().any(|line| kind(line, "faults_healed")), "no heal");
    for file in ["report.txt", "report.json", "timeline.svg", "truth.json"] {
        assert!(out.join(file).exists(), "{file} missing");
    }
    let _ = std::fs::remove_dir_all(&out);
}

// Proves the live run has teeth: with a bug planted in the store's SQL (River's completion,
// guarded by the job's state alone, never its epoch), the worker paused past the ttl during its acknowledgement completes
// a job that a reclaimer, paused right after its fence, holds under a newer epoch, and the run
// fails as a safety violation (exit 1).
#[test]
fn a_planted_store_bug_fails_the_live_run() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let out = scratch("bug");
    let (status, stdout) = live(&out, 3, Some("complete-by-state-only"));
    assert_eq!(status, Some(1), "the planted bug was not caught");
    assert!(stdout.contains("violated"), "no violation named");
    assert_eq!(processes_naming(&out), Vec::<String>::new(), "processes outlived the run");
    let _ = std::fs::remove_dir_all(&out);
}

// Proves bad input is refused with exit 3 and a message, before any process starts.
#[test]
fn bad_input_is_refused() {
    let out = scratch("bad");
    let out = out.display().to_string();
    for args in [
        vec!["--workers", "0"],
        vec!["--faults", "kill,flood"],
        vec!["--store", "postgres", "--url", "postgres://u@10.1.2.3/x"],
        vec!["--duration", "1s"],
        vec!["--bug", "no-such-bug"],
        vec!["--slots", "0"],
        vec!["--batch", "65"],
        vec!["--bench", "--bench-workers", "0"],
        vec!["--bench", "--bench-batch", "0"],
        vec!["--bench", "--bench-linger", "201"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_lease-live"))
            .args(["--out", &out])
            .args(&args)
            .output()
            .expect("lease-live runs");
        assert_eq!(output.status.code(), Some(3), "{args:?}");
        assert!(!output.stderr.is_empty(), "{args:?}: no message");
    }
}

// Proves batching holds under real faults: 4 worker processes of 4 slots each (16 worker ids),
// sending their slots' requests in batches of 4, beside 2 reclaimers, with every fault. `check`
// holds on the exported history, the stub's counts agree with it, grants went to slots beyond
// the first of each process, and each kill struck every slot of its process at once.
#[test]
fn a_live_run_of_batching_multi_slot_workers_holds() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let out = scratch("batched");
    let (status, stdout) = live_with(&out, 3, None, &["--slots", "4", "--batch", "4"]);
    assert_eq!(status, Some(0), "the live run failed");
    assert!(stdout.contains("every invariant held"), "no verdict");
    assert!(stdout.contains("the history agrees"), "the stub's counts disagree");
    let history = lines(&out);
    let kind = |line: &serde_json::Value, kind: &str| line["kind"] == kind;
    let worker = |node: &serde_json::Value| node.as_str().and_then(|n| n.strip_prefix('w')?.parse::<u32>().ok());
    assert!(
        history.iter().any(|line| kind(line, "granted") && worker(&line["owner"]).is_some_and(|w| w >= 4)),
        "no grant to a second slot"
    );
    let crashes: Vec<(u64, u32)> = history
        .iter()
        .filter(|line| kind(line, "crashed"))
        .filter_map(|line| Some((line["t_us"].as_u64()?, worker(&line["target"])?)))
        .collect();
    assert!(!crashes.is_empty(), "no worker was killed");
    for &(at, target) in &crashes {
        let process = target % 4;
        let struck: Vec<u32> = crashes.iter().filter(|(t, w)| *t == at && w % 4 == process).map(|(_, w)| *w).collect();
        assert_eq!(struck.len(), 4, "a kill at {at} struck every slot of process {process}: {struck:?}");
    }
    assert_eq!(processes_naming(&out), Vec::<String>::new(), "processes outlived the run");
    let _ = std::fs::remove_dir_all(&out);
}

// Proves the short bench measures what it says: 100 jobs, 2 worker processes of 4 slots in
// batches of 4 waiting up to 2 ms to fill, on each store it reaches. Every row of bench.json keeps the keys of before and
// adds the batched baseline and the write floor; each throughput is positive (the floor's only
// once it ended every job and wrote every line: it fails the bench otherwise); the recovery
// run's burst is at least the throughput run's, and where the killed workers held jobs, its
// steps (their expiries and fences) are in order and within the recovery.
#[test]
fn the_short_bench_measures_both_baselines_and_recovery() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let out = scratch("bench");
    let mut args = vec!["--bench", "--bench-quick", "--bench-jobs", "100", "--bench-workers", "2"];
    args.extend(["--bench-slots", "4", "--bench-batch", "4", "--bench-linger", "2"]);
    let output = Command::new(env!("CARGO_BIN_EXE_lease-live"))
        .args(&args)
        .args(["--out", &out.display().to_string()])
        .output()
        .expect("lease-live runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "the bench failed");
    // The summary says, per store, the worst recovery in leases, or that none was measured.
    assert!(
        stdout.lines().any(|line| line.starts_with("bench: sqlite: recovery")),
        "no recovery summary for sqlite: {stdout}"
    );
    let text = std::fs::read_to_string(out.join("bench.json")).expect("bench.json");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).expect("bench.json parses");
    assert!(!rows.is_empty(), "no row");
    for row in &rows {
        for key in
            ["store", "workers", "jobs_per_s", "baseline_jobs_per_s", "recovery_us", "batched_baseline_jobs_per_s"]
        {
            assert!(row.get(key).is_some(), "{key} missing: {row}");
        }
        for key in ["jobs_per_s", "baseline_jobs_per_s", "batched_baseline_jobs_per_s", "floor_jobs_per_s"] {
            assert!(row[key].as_f64().is_some_and(|figure| figure > 0.0), "{key}: {row}");
        }
        assert_eq!(
            (row["workers"].as_u64(), row["slots"].as_u64(), row["batch"].as_u64(), row["linger_us"].as_u64()),
            (Some(2), Some(4), Some(4), Some(2_000))
        );
        assert!(row["recovery_jobs"].as_u64() >= row["jobs"].as_u64(), "the recovery burst: {row}");
        // Where the recovery went: the held jobs fenced (at most all of them), in time order,
        // each fence before the recovery's end.
        if let (Some(steps), Some(us)) = (row["recovery_steps"].as_object(), row["recovery_us"].as_u64()) {
            let at = |key: &str| steps[key].as_u64().unwrap_or_else(|| panic!("{key}: {row}"));
            assert!(at("fenced") <= at("held") && at("fenced") > 0, "{row}");
            assert!(at("first_fence_us") <= at("last_fence_us") && at("last_fence_us") <= us, "{row}");
            assert!(at("first_expiry_us") <= at("last_expiry_us"), "{row}");
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}
