//! `lease-sim explore`'s promises: the search is deterministic from its seed, it keeps only plans
//! that reached something new, it catches a planted bug and ends with a shrunk plan that replays
//! the failure, and bad arguments are refused.

mod common;

use common::lease_sim;
use lease_sim::explore::{explore, keys};
use lease_sim::runner::Target;
use lease_sim::scenarios::Scenario;
use std::collections::BTreeSet;

// Proves the search is deterministic from its seed: two searches of 60 runs from seed 7 reach the
// same keys at the same runs, made the same way, and keep the same plans, byte for byte; and that
// every kept plan's run reached a key no earlier run had (the corpus holds nothing redundant),
// which a replay of the plan reaches again.
#[test]
fn the_search_is_deterministic_and_keeps_only_what_reached_something_new() {
    let target = Target::new(Scenario::SWARM);
    let first = explore(target, 7, 60, &mut |_, _| true);
    let second = explore(target, 7, 60, &mut |_, _| true);
    assert_eq!(first.runs, 60);
    assert_eq!(first.first, second.first);
    let plans = |explored: &lease_sim::explore::Explored| {
        explored.corpus.iter().map(|kept| (kept.run, kept.how.clone(), kept.plan.to_json())).collect::<Vec<_>>()
    };
    assert_eq!(plans(&first), plans(&second));
    assert!(first.corpus.iter().any(|kept| kept.how.starts_with("run ")), "no mutated plan was kept");
    for kept in &first.corpus {
        let new: BTreeSet<&String> =
            first.first.iter().filter(|(_, (run, _))| *run == kept.run).map(|(key, _)| key).collect();
        assert!(!new.is_empty(), "run {} was kept, reaching nothing first", kept.run);
        let replayed = lease_sim::world::run(kept.plan.params().expect("a kept plan plays"));
        let again = keys(&replayed);
        assert!(new.iter().all(|key| again.contains(*key)), "run {}'s replay lost what it reached", kept.run);
    }
}

// Proves the explorer's failures end as a shrunk plan that fails again when played, with its
// reproduce line, and exit status 1; a search that holds exits 0 and writes its corpus; bad
// arguments exit 3 with a message.
#[test]
fn a_failure_ends_as_a_shrunk_plan_and_bad_arguments_are_refused() {
    let dir = std::env::temp_dir().join(format!("lease-sim-explore-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let corpus = dir.to_str().unwrap().to_string();
    let (code, stdout, stderr) = lease_sim(&["explore", "--runs", "200", "--bug", "renew-grace", "--corpus", &corpus]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("FAILED: fencing"), "{stdout}");
    let plan = dir.join("explore-failure-0.json");
    assert!(stdout.contains(&format!("run --plan {}", plan.display())), "{stdout}");
    let (code, replay, _) = lease_sim(&["run", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code, Some(1), "the shrunk plan fails again:\n{replay}");
    assert!(replay.contains("fencing"), "{replay}");
    let _ = std::fs::remove_dir_all(&dir);

    let (code, stdout, stderr) = lease_sim(&["explore", "--runs", "12", "--corpus", &corpus]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let written = std::fs::read_dir(&dir).unwrap().count();
    assert!(stdout.contains(&format!("corpus: {written} plans written")), "{written} files:\n{stdout}");
    let _ = std::fs::remove_dir_all(&dir);

    for (args, said) in [
        (&["explore", "--runs", "0"][..], "--runs must be from 1"),
        (&["explore", "--budget", "0s"][..], "is not a wall time"),
        (&["explore", "--budget", "soon"][..], "is not a wall time"),
        (&["explore", "--scenario", "nope"][..], "unknown scenario"),
        (&["explore", "--bug", "nope"][..], "nope"),
    ] {
        let (code, stdout, stderr) = lease_sim(args);
        assert!(code == Some(3) || code == Some(2), "{args:?} exits {code:?}:\n{stdout}{stderr}");
        assert!(stderr.contains(said), "{args:?}:\n{stderr}");
    }
}
