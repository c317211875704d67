//! The command line's own promises, through the real `lease-sim` binary: a world's panic stays
//! off stderr, `shrink` exits 0 when it shrank, `bugs` says what each bug breaks, the help text
//! counts the files it writes, a recorded plan holds no `u64::MAX`, and a sweep re-runs a sample
//! of its seeds and says how many.

mod common;

use common::lease_sim;
use lease_sim::runner::Recheck;
use std::path::PathBuf;

/// A fresh directory for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("lease-sim-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn join(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What madsim prints, unasked, for a panic that unwinds out of one of its tasks.
const MADSIM_CONTEXT: &str = "context: node=";

// Proves a world's panic is reported by lease-sim alone: with a planted bug that trips the
// table's own assertion, `sweep`, `shrink` and `hunt` each report the crash, and stderr carries
// no madsim `context: node=… task=…` line (nor a Rust panic message) for it.
#[test]
fn a_world_panic_prints_no_madsim_context_line() {
    let dir = TempDir::new("quiet");
    let out = dir.join("shrunk");
    let runs: [(&[&str], i32, &str); 3] = [
        (&["sweep", "--seeds", "25..28", "--bug", "requeue-keeps-expiry"], 4, "seed 25 crash"),
        (&["shrink", "--seed", "0", "--bug", "requeue-keeps-expiry", "--out", &out], 0, "shrunk: crash"),
        (&["hunt", "--bug", "requeue-keeps-expiry", "--starts", "1", "--budget", "20"], 0, " crash "),
    ];
    for (args, status, said) in runs {
        let (code, stdout, stderr) = lease_sim(args);
        assert_eq!(code, Some(status), "{args:?}:\n{stdout}{stderr}");
        assert!(stdout.contains(said), "{args:?} reports the crash ({said:?}):\n{stdout}");
        assert!(!stderr.contains(MADSIM_CONTEXT), "{args:?} let madsim's context line through:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{args:?} printed the panic:\n{stderr}");
    }
}

// Proves `shrink` exits 0 when it shrank a failure, names the failure it kept, and documents its
// exit statuses in --help; and that a crash shrinks to a plan that crashes the same way (the
// table's assertion, not a clock overflow of the shrinker's making) with no `u64::MAX` in it.
#[test]
fn shrink_exits_0_and_keeps_the_crash_it_was_given() {
    let dir = TempDir::new("shrink");
    let out = dir.join("shrunk");
    let (code, stdout, stderr) = lease_sim(&["shrink", "--seed", "0", "--bug", "requeue-keeps-expiry", "--out", &out]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("shrunk: crash (the world panicked: an expiry belongs to a live lease"), "{stdout}");
    let plan = std::fs::read_to_string(dir.0.join("shrunk/plan.json")).unwrap();
    assert!(!plan.contains(&u64::MAX.to_string()), "{plan}");
    let (_, help, _) = lease_sim(&["shrink", "--help"]);
    assert!(help.contains("Exit status: 0 when the failure was shrunk"), "{help}");
    assert!(help.contains("3 bad input"), "{help}");
}

// Proves a plan written before the idle backoff was bounded (18446744073709551615) still plays,
// and that the plan `run --record-plan` records from it holds the run's length instead.
#[test]
fn a_recorded_plan_holds_a_meaningful_idle_backoff() {
    let dir = TempDir::new("plan");
    let (code, stdout, stderr) =
        lease_sim(&["run", "--scenario", "calm", "--seed", "1", "--record-plan", &dir.join("a.json")]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let recorded = std::fs::read_to_string(dir.0.join("a.json")).unwrap();
    let backoff = recorded.split("\"idle_backoff_us\":").nth(1).unwrap().split(',').next().unwrap().to_string();
    let old =
        recorded.replacen(&format!("\"idle_backoff_us\":{backoff}"), &format!("\"idle_backoff_us\":{}", u64::MAX), 1);
    assert_ne!(old, recorded);
    std::fs::write(dir.0.join("old.json"), old).unwrap();
    let (code, stdout, stderr) =
        lease_sim(&["run", "--plan", &dir.join("old.json"), "--record-plan", &dir.join("b.json")]);
    assert_eq!(code, Some(0), "an old plan still plays:\n{stdout}{stderr}");
    let again = std::fs::read_to_string(dir.0.join("b.json")).unwrap();
    assert!(!again.contains(&u64::MAX.to_string()), "{again}");
    let fault_phase: u64 = number_after(&again, "\"fault_phase_us\":");
    let budget: u64 = number_after(&again, "\"liveness_budget_us\":");
    assert_eq!(number_after(&again, "\"idle_backoff_us\":"), fault_phase + budget, "{again}");
}

fn number_after(text: &str, key: &str) -> u64 {
    let rest = text.split(key).nth(1).unwrap_or_else(|| panic!("{key} in {text}"));
    rest.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

// Proves `lease-sim bugs` gives every planted bug its one-line description, as `scenarios` does,
// in one column after the names.
#[test]
fn bugs_lists_each_bug_with_its_description() {
    let (code, stdout, _) = lease_sim(&["bugs"]);
    assert_eq!(code, Some(0));
    let bugs: Vec<lease_core::Bug> = lease_core::Bug::every().collect();
    assert_eq!(stdout.lines().count(), bugs.len(), "{stdout}");
    let column = stdout.lines().next().unwrap().find(lease_core::Bug::ALL[0].about()).expect("a description");
    for (line, bug) in stdout.lines().zip(&bugs) {
        assert!(line.starts_with(&format!("{bug} ")), "{line}");
        assert_eq!(line.find(bug.about()), Some(column), "{bug}'s description, in the column: {line}");
    }
}

// Proves `sweep --help` names the four files `--failures-dir` writes for a failing seed (the
// nightly test counts four on disk).
#[test]
fn sweep_help_names_the_four_failure_files() {
    let (code, help, _) = lease_sim(&["sweep", "--help"]);
    assert_eq!(code, Some(0));
    let flag = help.split("--failures-dir").nth(1).expect("the flag is documented");
    let flag = flag.split("\n      --").next().unwrap();
    assert!(flag.contains("four files"), "{flag}");
    for file in ["seed-S.jsonl", "seed-S.trace", "seed-S.reproduce", "seed-S.plan.json"] {
        assert!(flag.contains(file), "{file} missing from: {flag}");
    }
}

// Proves a sweep re-runs its sample of seeds (one in 64 by default, chosen by the seed) and says
// how many, in JSON and in text; that `--recheck 1` re-runs every seed and `--recheck 0` none;
// and that every re-run repeated its history (exit 0).
#[test]
fn a_sweep_rechecks_its_sample_of_seeds_and_counts_them() {
    let expected = (0..200).filter(|&seed| Recheck::DEFAULT.samples(seed)).count() as u64;
    assert!(expected > 0, "200 seeds hold a sample");
    let (code, stdout, stderr) = lease_sim(&["sweep", "--scenario", "calm", "--seeds", "0..200", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["rechecked"].as_u64(), Some(expected), "{stdout}");
    assert_eq!(summary["recheck_every"].as_u64(), Some(64));
    let (code, stdout, _) = lease_sim(&["sweep", "--scenario", "calm", "--seeds", "0..200"]);
    assert_eq!(code, Some(0));
    let line = format!("recheck: {expected} of 200 seeds run twice (one in 64): every history repeated");
    assert!(stdout.contains(&line), "{stdout}");
    for (every, rechecked) in [("1", 6), ("0", 0)] {
        let (code, stdout, _) =
            lease_sim(&["sweep", "--scenario", "calm", "--seeds", "0..6", "--recheck", every, "--json"]);
        assert_eq!(code, Some(0));
        let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(summary["rechecked"].as_u64(), Some(rechecked), "--recheck {every}: {stdout}");
    }
}
