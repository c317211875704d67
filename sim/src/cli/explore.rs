//! `lease-sim explore`: the coverage-guided search ([`crate::explore`]), its comparison with the
//! swarm alone in the same number of runs, and its corpus.

use super::BadInput;
use crate::explore::{self, Explored};
use crate::runner::Target;
use lease_history::atomic::AtomicFile;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Parses a wall-clock budget: `90s`, `5m`, `1h`, or a bare number of seconds.
pub(super) fn parse_budget(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a wall time: write seconds, e.g. 90s, 5m or 1h");
    let (number, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, "s"),
    };
    let number: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => Some(number),
        "m" => number.checked_mul(60),
        "h" => number.checked_mul(3_600),
        _ => None,
    };
    match seconds {
        Some(0) | None => Err(bad()),
        Some(seconds) => Ok(Duration::from_secs(seconds)),
    }
}

/// Writes `text` to `path` atomically.
fn write(path: &Path, text: &str) -> Result<(), BadInput> {
    let fail = |error: std::io::Error| BadInput(format!("cannot write {}: {error}", path.display()));
    AtomicFile::create(path).map_err(fail)?.commit(text.as_bytes()).map_err(fail)
}

/// Exit status of `explore`: 0 when every run held, 1 when one failed (its plan shrunk and
/// written, with its reproduce line).
pub(super) fn explore(
    target: Target,
    seed: u64,
    runs: u64,
    budget: Option<Duration>,
    corpus_dir: Option<PathBuf>,
) -> Result<u8, BadInput> {
    if let Some(dir) = &corpus_dir {
        std::fs::create_dir_all(dir).map_err(|error| BadInput(format!("cannot make {}: {error}", dir.display())))?;
    }
    let bug = target.bug.map_or(String::new(), |bug| format!(" bug={bug}"));
    println!("explore: scenario={}{bug} seed={seed} runs={runs}", target.scenario.name());
    let started = Instant::now();
    let over = || budget.is_some_and(|budget| started.elapsed() >= budget);
    let explored: Explored = explore::explore(target, seed, runs, &mut |_, _| !over());
    let wall = started.elapsed();
    let alone = explore::swarm_alone(target, seed, explored.runs);
    println!(
        "explored: {} runs in {:.1}s, {} keys, a corpus of {} plans",
        explored.runs,
        wall.as_secs_f64(),
        explored.first.len(),
        explored.corpus.len()
    );
    let added: Vec<(&String, &(u64, String))> =
        explored.first.iter().filter(|(key, _)| !alone.contains_key(*key)).collect();
    let missed = alone.keys().filter(|key| !explored.first.contains_key(*key)).count();
    println!(
        "swarm alone: seeds {seed}..{} ({} runs), {} keys; the explorer added {} keys it never reached, and missed {missed}",
        seed.wrapping_add(explored.runs),
        explored.runs,
        alone.len(),
        added.len()
    );
    if !added.is_empty() {
        println!("reached by the explorer only (first run, how it was made):");
        for (key, (run, how)) in &added {
            println!("  {run:>6}  {how:<40}  {key}");
        }
    }
    println!("situations, first run to reach each (explorer / swarm seed):");
    let situations = explored.first.keys().chain(alone.keys()).filter(|key| key.starts_with("sometimes:"));
    for key in situations.collect::<std::collections::BTreeSet<_>>() {
        let ours = explored.first.get(key).map_or("-".to_string(), |(run, _)| run.to_string());
        let theirs = alone.get(key).map_or("-".to_string(), |seed| seed.to_string());
        println!("  {:<44} {ours:>8} {theirs:>10}", key.trim_start_matches("sometimes:"));
    }
    if let Some(dir) = &corpus_dir {
        for kept in &explored.corpus {
            let mut plan = kept.plan.clone();
            plan.comment = Some(format!("explore seed {seed}, run {}: {}", kept.run, kept.how));
            write(&dir.join(format!("plan-{:06}.json", kept.run)), &plan.to_json())?;
        }
        println!("corpus: {} plans written to {}", explored.corpus.len(), dir.display());
    }
    let Some((shrunk, how)) = explored.failure else { return Ok(0) };
    let path = corpus_dir.unwrap_or_default().join(format!("explore-failure-{seed}.json"));
    let mut plan = shrunk.plan.clone();
    plan.comment = Some(format!("explore seed {seed}: {how}, shrunk"));
    write(&path, &plan.to_json())?;
    println!(
        "FAILED: {} at run {} ({how}); shrunk in {} runs to {} faults, {} jobs, {} history lines: {}",
        shrunk.finding.name(),
        explored.runs - 1,
        shrunk.runs,
        shrunk.after.faults,
        shrunk.after.jobs,
        shrunk.after.lines,
        path.display()
    );
    println!("  reproduce: {} run --plan {}", crate::runner::CARGO_RUN, path.display());
    Ok(1)
}
