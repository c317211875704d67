//! `lease-sim shrink`: a failing seed or plan, shrunk to a minimal plan that fails the same
//! invariant, written out with its history, its trace, an explanation and a reproduce file.
//!
//! Exit status: 0 when the failure was shrunk and every file written (what it fails is printed,
//! and named in `reproduce` and `plan.json`); 3 bad input or a harness error: a bad flag, an
//! unreadable plan, an unwritable DIR, or a seed or plan that holds (nothing to shrink). With
//! `--every-bug`: 0 when every planted bug was caught and its shrunk plan, replayed, still fails
//! the same way with at most 3 faults; 3 otherwise.

use super::{BadInput, EXIT_BAD_INPUT};
use crate::faults::plan::Plan;
use crate::faults::shrink::{self, Shrunk, Size};
use crate::runner::{self, Finding, Target, CARGO_RUN};
use crate::scenarios::Scenario;
use crate::world::{RunReport, Verdict};
use lease_core::Bug;
use lease_history::atomic;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// The shrinker's default budget of runs.
pub const BUDGET: u64 = 2_000;

/// What to shrink.
pub(super) enum Source {
    /// A seed of a scenario, with its planted bug.
    Seed(Target, u64),
    /// A plan read from a file.
    Plan(Box<Plan>, PathBuf),
}

/// `lease-sim shrink`: shrinks one failure into `out`. 0 when it shrank: a failure shrunk is the
/// command's success, whatever invariant the failure breaks.
pub(super) fn shrink(source: Source, budget: u64, out: &Path) -> Result<u8, BadInput> {
    std::fs::create_dir_all(out).map_err(|e| BadInput(format!("cannot create {}: {e}", out.display())))?;
    let (plan, origin) = match &source {
        Source::Seed(target, seed) => {
            let report = target.run(*seed);
            (report.plan.clone(), target.reproduce(*seed))
        }
        Source::Plan(plan, path) => ((**plan).clone(), format!("{CARGO_RUN} run --plan {}", path.display())),
    };
    let params = plan.params().map_err(|e| BadInput(format!("plan: {e}")))?;
    let started = Instant::now();
    // A seeded run is replayed from its recorded plan: the shrinker works on plans, and the
    // replay is the same run.
    let report = crate::world::run(params);
    if shrink::finding(&report).is_none() {
        return Err(BadInput(format!("{origin}: every invariant held; there is no failure to shrink")));
    }
    let bar = progress_bar(budget);
    let mut progress = |runs: u64, best: &Plan, run: &RunReport| {
        if let Some(bar) = &bar {
            bar.set_position(runs);
            bar.set_message(format!(
                "{} faults, {} jobs, {} lines",
                best.faults.len(),
                best.arrivals.len(),
                run.history.len()
            ));
        }
    };
    let shrunk = shrink::shrink(plan, report, budget, &mut progress).map_err(BadInput)?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let mut plan = shrunk.plan.clone();
    plan.comment = Some(format!("shrunk by lease-sim shrink from: {origin}"));
    write_out(out, &plan, &shrunk, &origin)?;
    let (b, a) = (shrunk.before, shrunk.after);
    println!("shrunk: {} ({})", shrunk.finding, violation_message(&shrunk.report));
    println!(
        "  faults {} -> {}, jobs {} -> {}, workers+reclaimers {} -> {}, history lines {} -> {} ({:.1}%), runs {}{}, {:.1}s",
        b.faults,
        a.faults,
        b.jobs,
        a.jobs,
        b.nodes,
        a.nodes,
        b.lines,
        a.lines,
        100.0 * a.lines as f64 / b.lines.max(1) as f64,
        shrunk.runs,
        if shrunk.exhausted { " (budget spent)" } else { "" },
        started.elapsed().as_secs_f64()
    );
    println!("  written to {}: plan.json history.jsonl trace.txt explanation.txt reproduce", out.display());
    println!("reproduce: {CARGO_RUN} run --plan {}", out.join("plan.json").display());
    Ok(0)
}

fn violation_message(report: &RunReport) -> String {
    match &report.verdict {
        Verdict::Safety(violation) | Verdict::Liveness(violation) => violation.message.clone(),
        Verdict::Crash(crash) => crash.to_string(),
        Verdict::Held => "held".to_string(),
    }
}

/// Writes the shrunk plan, its history, its trace, its explanation and a reproduce file.
fn write_out(out: &Path, plan: &Plan, shrunk: &Shrunk, origin: &str) -> Result<(), BadInput> {
    let write = |name: &str, text: &str| {
        let path = out.join(name);
        atomic::write(&path, text.as_bytes()).map_err(|e| BadInput(format!("cannot write {}: {e}", path.display())))
    };
    let history = &shrunk.report.history;
    write("plan.json", &plan.to_json())?;
    write("history.jsonl", &lease_history::to_jsonl(history))?;
    write("trace.txt", &lease_history::render::render(history))?;
    let explanation = match &shrunk.report.verdict {
        Verdict::Safety(violation) | Verdict::Liveness(violation) => lease_check::explain::explain(history, violation),
        Verdict::Crash(crash) => format!("{crash}\n(trace.txt has every line before it)\n"),
        Verdict::Held => unreachable!("a shrunk plan fails"),
    };
    write("explanation.txt", &explanation)?;
    // The plan by its absolute path: `sh DIR/reproduce` works from any directory.
    let plan_path = out.join("plan.json");
    let plan_path = std::path::absolute(&plan_path).unwrap_or(plan_path);
    let notes = [
        format!("shrunk from: {origin}"),
        format!("expect: {}", shrunk.finding),
        format!("shrunk by lease-sim {}", lease_check::provenance::line()),
    ];
    write("reproduce", &runner::reproduce_file(&format!("run --plan {}", plan_path.display()), &notes))
}

fn progress_bar(budget: u64) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(budget);
    let template = "{bar:40} {pos}/{len} runs {per_sec} {msg}";
    bar.set_style(indicatif::ProgressStyle::with_template(template).expect("the progress template is valid"));
    Some(bar)
}

/// One planted bug's row of the shrink table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The bug.
    pub bug: String,
    /// Its first failing seed from seed 0.
    pub seed: Option<u64>,
    /// What caught it.
    pub finding: Option<Finding>,
    /// Before shrinking.
    pub before: Option<Size>,
    /// After.
    pub after: Option<Size>,
    /// Runs the shrinker spent.
    pub runs: u64,
    /// Whether the shrunk plan, replayed, still fails the same invariant.
    pub still_fails: bool,
}

/// `lease-sim shrink --every-bug`: hunts each planted bug from seed 0 and shrinks its first
/// failing seed; prints the table (docs/faults-and-plans.md's, "Shrinking") or JSON.
pub(super) fn every_bug(scenario: Scenario, budget: u64, hunt_budget: u64, threads: usize, json: bool) -> u8 {
    let stop = AtomicBool::new(false);
    let mut rows = Vec::new();
    for bug in Bug::ALL {
        let catch = crate::runner::hunt(Target::planted(scenario, Some(bug)), 0, hunt_budget, threads, &stop);
        let row = match catch.first_failing_seed {
            None => Row {
                bug: bug.name().into(),
                seed: None,
                finding: None,
                before: None,
                after: None,
                runs: 0,
                still_fails: false,
            },
            Some(seed) => shrink_row(Target::planted(scenario, Some(bug)), seed, budget),
        };
        if !json {
            print_row(&row);
        }
        rows.push(row);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).expect("rows serialise"));
    } else {
        print_medians(&rows);
    }
    let failed = rows.iter().any(|row| !row.still_fails || row.after.is_none_or(|after| after.faults > 3));
    if failed {
        EXIT_BAD_INPUT
    } else {
        0
    }
}

/// Shrinks `seed` of `target` and checks the result replays to the same finding.
pub fn shrink_row(target: Target, seed: u64, budget: u64) -> Row {
    let report = target.run(seed);
    let plan = report.plan.clone();
    let bug = target.bug.map_or_else(String::new, |bug| bug.name().to_string());
    let Ok(shrunk) = shrink::shrink(plan, report, budget, &mut |_, _, _| {}) else {
        return Row { bug, seed: Some(seed), finding: None, before: None, after: None, runs: 0, still_fails: false };
    };
    let replayed = shrunk.plan.params().map(crate::world::run).ok();
    let still_fails = replayed.as_ref().and_then(shrink::finding) == Some(shrunk.finding);
    Row {
        bug,
        seed: Some(seed),
        finding: Some(shrunk.finding),
        before: Some(shrunk.before),
        after: Some(shrunk.after),
        runs: shrunk.runs,
        still_fails,
    }
}

fn print_row(row: &Row) {
    match (row.seed, row.finding, row.before, row.after) {
        (Some(seed), Some(finding), Some(b), Some(a)) => println!(
            "| {} | {seed} | {finding} | {} → {} | {} → {} | {} → {} ({:.1}%) | {} | {} |",
            row.bug,
            b.faults,
            a.faults,
            b.jobs,
            a.jobs,
            b.lines,
            a.lines,
            100.0 * a.lines as f64 / b.lines.max(1) as f64,
            row.runs,
            if row.still_fails { "yes" } else { "NO" }
        ),
        _ => println!("| {} | not caught | | | | | | |", row.bug),
    }
}

fn print_medians(rows: &[Row]) {
    let mut ratios: Vec<f64> =
        rows.iter().filter_map(|row| Some(row.after?.lines as f64 / row.before?.lines.max(1) as f64)).collect();
    ratios.sort_by(f64::total_cmp);
    let mut faults: Vec<usize> = rows.iter().filter_map(|row| Some(row.after?.faults)).collect();
    faults.sort_unstable();
    if let (Some(ratio), Some(worst)) = (ratios.get(ratios.len() / 2), faults.last()) {
        println!(
            "median history after/before: {:.1}%; faults after: median {}, most {}; all still fail: {}",
            100.0 * ratio,
            faults[faults.len() / 2],
            worst,
            rows.iter().all(|row| row.still_fails)
        );
    }
}
