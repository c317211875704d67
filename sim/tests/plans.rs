//! Fault plans end to end: a seeded run's recorded plan replays it byte for byte, a plan survives
//! its own text, a hand-edited plan that cannot be played is refused with exit 3, and `shrink`
//! ends with a small plan that fails the same invariant.
//!
//! `LEASE_SEEDS=N` replays N seeds of each scenario instead of the default 200.

mod common;

use common::lease_sim;
use lease_core::Bug;
use lease_history::to_jsonl;
use lease_sim::faults::plan::Plan;
use lease_sim::faults::shrink::finding;
use lease_sim::runner::Target;
use lease_sim::scenarios::Scenario;
use lease_sim::world;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

fn seeds() -> u64 {
    std::env::var("LEASE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200)
}

/// Runs `work` over `items` on two threads; returns what it reported.
fn on_two_threads<T: Sync>(items: &[T], work: impl Fn(&T) -> Option<String> + Sync) -> Vec<String> {
    let next = AtomicUsize::new(0);
    let found = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if let Some(message) = work(item) {
                        found.lock().unwrap().push(message);
                    }
                }
            });
        }
    });
    let mut found = found.into_inner().unwrap();
    found.sort();
    found
}

// Proves record-then-replay is exact: for 200 seeds of every scenario, the recorded plan, played
// with every rate at zero, writes the seeded run's history byte for byte, and records the same
// plan again (through its text: what a file holds is what replays). Failing seeds included: a
// planted bug's 40 first seeds replay to the same violation.
#[test]
fn every_recorded_plan_replays_its_run_byte_for_byte() {
    let mut targets: Vec<(Target, u64)> = Vec::new();
    for &scenario in Scenario::ALL {
        targets.extend((0..seeds()).map(|seed| (Target::new(scenario), seed)));
    }
    targets.extend((0..40).map(|seed| (Target::planted(Scenario::SWARM, Some(Bug::FenceRevivesFinished)), seed)));
    let differ = on_two_threads(&targets, |&(target, seed)| {
        let original = target.run(seed);
        let text = original.plan.to_json();
        let plan = Plan::parse(&text).map_err(|e| format!("{}: {e}", target.reproduce(seed))).ok()?;
        let replay = world::run(plan.params().ok()?);
        let same = to_jsonl(&original.history) == to_jsonl(&replay.history) && replay.plan.to_json() == text;
        (!same || original.verdict != replay.verdict).then(|| target.reproduce(seed))
    });
    let total = Scenario::ALL.len() as u64 * seeds() + 40;
    assert!(differ.is_empty(), "{} of {total} replays differ:\n{}", differ.len(), differ.join("\n"));
}

/// The digits right after the first `key` in `text`.
fn number_after<'a>(text: &'a str, key: &str) -> &'a str {
    let rest = &text[text.find(key).expect("the key is there") + key.len()..];
    &rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())]
}

// Proves the plan's text is the plan: one fault per line in time order, and reading it back gives
// the same plan.
#[test]
fn a_plan_reads_back_as_written_one_fault_a_line_in_time_order() {
    let report = Target::new(Scenario::SWARM).run(3);
    let text = report.plan.to_json();
    assert_eq!(Plan::parse(&text).expect("a recorded plan reads"), report.plan);
    let faults: Vec<&str> = text.lines().skip_while(|line| !line.contains("\"faults\"")).skip(1).collect();
    let lines: Vec<&str> = faults.iter().copied().filter(|line| line.trim_start().starts_with('{')).collect();
    assert_eq!(lines.len(), report.plan.faults.len(), "one line per fault:\n{text}");
    let times: Vec<u64> = report.plan.faults.iter().map(|fault| fault.time_us()).collect();
    assert!(times.windows(2).all(|pair| pair[0] <= pair[1]), "in time order: {times:?}");
    assert!(lines.iter().all(|line| line.contains("\"verb\":")), "each line names its verb");
}

/// `text` with `line` as its first fault.
fn with_fault(text: &str, line: &str) -> String {
    text.replacen("\"faults\": [\n", &format!("\"faults\": [\n    {line},\n"), 1)
}

// Proves a hand-edited plan that cannot be played is refused with a message and exit 3: an
// unknown node, a time after the heal, an unknown field, an unknown verb, a keyed fault with a
// time instead of a visit, a visit without its occurrence, a dependency call off the ledger, a
// message with both ends and a lease, a window (`degrade`, `surge`) with a rate beyond 1, a field
// missing or a length of 0, another plan version, and a world that cannot work; and that
// well-formed windows play.
#[test]
fn an_invalid_plan_is_refused_with_exit_3() {
    let dir = std::env::temp_dir().join(format!("lease-plans-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let recorded = dir.join("recorded.json");
    let (code, stdout, _) = lease_sim(&["run", "--seed", "3", "--record-plan", recorded.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}");
    let text = std::fs::read_to_string(&recorded).unwrap();
    let (code, stdout, _) = lease_sim(&["run", "--plan", recorded.to_str().unwrap()]);
    assert_eq!(code, Some(0), "the recorded plan plays: {stdout}");
    let crash = text.lines().find(|line| line.contains("\"verb\":\"crash\"")).expect("seed 3 crashes something");
    let degrade = r#"{"at_us":0,"verb":"degrade","len_us":500000,"slow_rate":0.0,"slow_factor":10,"fail_rate":0.5,"lost_reply_rate":0.0,"rival_rate":0.0}"#;
    for good in [degrade, r#"{"at_us":10,"verb":"surge","factor":3,"len_us":100}"#] {
        let path = dir.join("windows.json");
        std::fs::write(&path, with_fault(&text, good)).unwrap();
        let (code, stdout, stderr) = lease_sim(&["run", "--plan", path.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{good} plays: {stdout}{stderr}");
    }
    let edits: Vec<(String, &str)> = vec![
        (text.replacen(crash, &crash.replacen("\"node\":\"w", "\"node\":\"w9", 1), 1), "unknown node w9"),
        (
            text.replacen("\"verb\":\"crash\"", "\"verb\":\"explode\"", 1),
            "unknown variant `explode`, expected one of `crash`",
        ),
        (text.replacen("\"verb\":\"crash\"", "\"colour\":\"red\",\"verb\":\"crash\"", 1), "unknown field `colour`"),
        (text.replacen("\"plan_version\": 1", "\"plan_version\": 7", 1), "plan version 7"),
        (text.replacen("\"lease_ttl_us\":", "\"x\":0,\"lease_ttl_us\":", 1), "unknown field `x`"),
        (
            text.replacen(&format!("\"capacity\":{}", number_after(&text, "\"capacity\":")), "\"capacity\":0", 1),
            "capacity must be at least 1",
        ),
        (
            with_fault(
                &text,
                r#"{"verb":"stall","at_us":10,"node":"w0","point":"before_effect","job":1,"occurrence":1,"len_us":5}"#,
            ),
            "fault 1 (`stall`): unknown field `at_us`",
        ),
        (
            with_fault(
                &text,
                r#"{"verb":"crash","at_us":10,"node":"w0","point":"before_effect","restart_after_us":5}"#,
            ),
            "takes no `point`",
        ),
        (
            with_fault(
                &text,
                r#"{"verb":"crash","fired_us":10,"node":"w0","point":"before_effect","restart_after_us":5}"#,
            ),
            "`crash` at a visit needs `occurrence`",
        ),
        (
            with_fault(
                &text,
                r#"{"verb":"slow","fired_us":10,"node":"w0","job":1,"epoch":1,"occurrence":1,"factor":5}"#,
            ),
            "at the ledger, not at w0",
        ),
        (
            with_fault(
                &text,
                r#"{"verb":"lose","fired_us":10,"message":"renew","reply":false,"job":1,"epoch":1,"from":"w0","to":"table","occurrence":1}"#,
            ),
            "names its `job` and `epoch`, not `from` and `to`",
        ),
        (with_fault(&text, &degrade.replace("\"fail_rate\":0.5", "\"fail_rate\":1.5")), "a probability"),
        (
            with_fault(&text, &degrade.replace("\"slow_factor\":10,", "")),
            "fault 1 (`degrade`): missing field `slow_factor`",
        ),
        (with_fault(&text, &degrade.replace("\"len_us\":500000", "\"len_us\":0")), "a length or factor of 0"),
        (with_fault(&text, r#"{"at_us":0,"verb":"surge","factor":0,"len_us":100}"#), "a length or factor of 0"),
        (with_fault(&text, r#"{"at_us":0,"verb":"surge","factor":3}"#), "missing field `len_us`"),
        ("not json".to_string(), "not a JSON plan"),
        (text.replacen("\"world\":", "\"store\": \"postgres\",\n  \"world\":", 1), "PostgreSQL is for live runs"),
    ];
    for (edited, expect) in edits {
        let path = dir.join("edited.json");
        std::fs::write(&path, &edited).unwrap();
        let (code, stdout, stderr) = lease_sim(&["run", "--plan", path.to_str().unwrap()]);
        assert_eq!(code, Some(3), "{expect}: {stdout}{stderr}");
        assert!(stderr.contains(expect), "says {expect:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A scheduled fault after the heal.
    let heal: u64 = number_after(&text, "\"fault_phase_us\":").parse().unwrap();
    let scheduled = text
        .lines()
        .find(|line| line.contains("\"verb\":") && line.contains("\"at_us\":") && !line.contains("skew"))
        .expect("a scheduled fault");
    let at = number_after(scheduled, "\"at_us\":");
    let later = scheduled.replacen(&format!("\"at_us\":{at}"), &format!("\"at_us\":{}", heal + 1), 1);
    let moved = text.replacen(scheduled, &later, 1);
    let path = dir.join("late.json");
    std::fs::write(&path, &moved).unwrap();
    let (code, _, stderr) = lease_sim(&["run", "--plan", path.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("after the faults heal"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// Proves shrink's promise on planted bugs: from a bug's failing seed, `shrink` writes a plan of
// at most three faults that, replayed, fails the same invariant, with its history, trace,
// explanation (the violating job's lines, the violation marked) and a reproduce file that works,
// as a script from outside the checkout and by its first line, the same plan every time; that
// a shrink exits 0; and a seed that holds is refused (exit 3), with nothing to shrink.
#[test]
fn shrink_ends_with_a_small_plan_failing_the_same_invariant() {
    let dir = std::env::temp_dir().join(format!("lease-shrink-{}", std::process::id()));
    for (bug, seed) in [("reclaim-without-cas", 3), ("dead-letter-ignores-terminal", 11), ("reclaim-skips-adoption", 0)]
    {
        let target = Target::planted(Scenario::SWARM, Some(bug.parse::<Bug>().unwrap()));
        let original = target.run(seed);
        let expected = finding(&original).unwrap_or_else(|| panic!("{bug} fails on seed {seed}"));
        let out = dir.join(bug);
        let seed_text = seed.to_string();
        let (code, stdout, stderr) =
            lease_sim(&["shrink", "--seed", &seed_text, "--bug", bug, "--out", out.to_str().unwrap()]);
        assert_eq!(code, Some(0), "a failure shrunk is a success:\n{stdout}{stderr}");
        assert!(stdout.contains(&format!("shrunk: {expected} (")), "it names what the plan fails:\n{stdout}");
        for file in ["plan.json", "history.jsonl", "trace.txt", "explanation.txt", "reproduce"] {
            assert!(out.join(file).exists(), "{bug}: {file} written");
        }
        let plan = Plan::parse(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap();
        assert!(plan.faults.len() <= 3, "{bug}: {} faults left", plan.faults.len());
        assert!(plan.arrivals.len() < original.plan.arrivals.len(), "{bug}: fewer jobs");
        assert_eq!(plan.expect.as_deref(), Some(expected.name()));
        let replay = world::run(plan.params().unwrap());
        assert_eq!(finding(&replay), Some(expected), "{bug}: the shrunk plan fails the same invariant");
        let history = std::fs::read_to_string(out.join("history.jsonl")).unwrap();
        assert_eq!(history, to_jsonl(&replay.history), "{bug}: the history written is the replay's");
        assert!(history.lines().count() * 4 < original.history.len(), "{bug}: a much shorter history");
        let explanation = std::fs::read_to_string(out.join("explanation.txt")).unwrap();
        assert!(explanation.starts_with(&format!("violation: {expected}")), "{explanation}");
        assert!(explanation.lines().any(|line| line.contains('>')), "the violating line is marked:\n{explanation}");
        let reproduce = std::fs::read_to_string(out.join("reproduce")).unwrap();
        let build = format!("# shrunk by lease-sim {}\n", lease_check::provenance::line());
        assert!(reproduce.ends_with(&build), "it names the build that shrank it: {reproduce}");
        assert!(reproduce.contains(&format!("# expect: {expected}\n")), "{reproduce}");
        let args: Vec<&str> = reproduce.lines().next().unwrap().split_whitespace().skip(1).collect();
        let (code, stdout, _) = lease_sim(&args);
        assert_eq!(code.map(|c| c as u8), Some(expected.exit_code()), "the reproduce line fails again: {stdout}");
        assert!(stdout.contains("plan="), "it plays the plan: {stdout}");
        let script = std::process::Command::new("sh").arg(out.join("reproduce")).current_dir("/").output().unwrap();
        let stdout = String::from_utf8_lossy(&script.stdout);
        assert_eq!(
            script.status.code().map(|c| c as u8),
            Some(expected.exit_code()),
            "sh DIR/reproduce from /: {stdout}"
        );
        // Shrinking is deterministic: the same failure shrinks to the same plan.
        let again = dir.join(format!("{bug}-again"));
        lease_sim(&["shrink", "--seed", &seed_text, "--bug", bug, "--out", again.to_str().unwrap()]);
        let twice = std::fs::read_to_string(again.join("plan.json")).unwrap();
        assert_eq!(twice, std::fs::read_to_string(out.join("plan.json")).unwrap(), "{bug}: the same plan twice");
    }
    let (code, _, stderr) = lease_sim(&["shrink", "--seed", "3", "--out", dir.join("held").to_str().unwrap()]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("nothing to shrink") || stderr.contains("no failure to shrink"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
