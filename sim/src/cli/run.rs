//! `lease-sim run`: one seed, its parameters, figures and outcome.

use super::{coverage_line, print_figures, BadInput, EXIT_CRASH, EXIT_LIVENESS, EXIT_SAFETY};
use crate::faults::plan::Plan;
use crate::runner::Target;
use crate::world::Params;
use crate::world::Verdict;
use lease_core::JobId;
use lease_history::atomic::AtomicFile;
use lease_history::{to_jsonl, Entry};
use std::path::{Path, PathBuf};

/// What to run: a seed of a scenario, or a plan read from a file.
pub(super) enum Source {
    /// A seed, with its scenario and planted bug.
    Seed(Target, u64),
    /// A plan, and the file it came from.
    Plan(Box<Plan>, PathBuf),
}

impl Source {
    fn params(&self) -> Result<Params, BadInput> {
        match self {
            Source::Seed(target, seed) => Ok(target.params(*seed)),
            Source::Plan(plan, path) => plan.params().map_err(|e| BadInput(format!("plan {}: {e}", path.display()))),
        }
    }

    fn reproduce(&self) -> String {
        match self {
            Source::Seed(target, seed) => target.reproduce(*seed),
            Source::Plan(_, path) => format!("{} run --plan {}", crate::runner::CARGO_RUN, path.display()),
        }
    }
}

/// What to write besides the summary.
pub(super) struct Outputs<'a> {
    /// The history file.
    pub history: Option<&'a Path>,
    /// The plan file.
    pub plan: Option<&'a Path>,
    /// Print the rendered history.
    pub trace: bool,
    /// The directory to write the run's report into.
    pub report: Option<&'a Path>,
}

pub(super) fn run(source: Source, outputs: Outputs<'_>) -> Result<u8, BadInput> {
    let create = |path: &Path| {
        AtomicFile::create(path).map_err(|error| BadInput(format!("cannot write {}: {error}", path.display())))
    };
    // Find an unwritable file before spending time on the run.
    let writer = outputs.history.map(create).transpose()?;
    let plan_writer = outputs.plan.map(create).transpose()?;
    let params = source.params()?;
    let history = outputs.history;
    let trace = outputs.trace;
    // The seed and every parameter first, before the world starts (as VOPR does): whatever
    // happens inside it, a hang or an abort, the screen already says how to get here again.
    println!(
        "lease-sim run: scenario={} seed={}{}{}",
        params.scenario,
        params.seed,
        params.bug.map(|b| format!(" bug={b}")).unwrap_or_default(),
        match &source {
            Source::Plan(plan, path) =>
                format!(" plan={} ({} faults, {} jobs)", path.display(), plan.faults.len(), plan.arrivals.len()),
            Source::Seed(..) => String::new(),
        }
    );
    // Which build: a seed replays byte for byte only on the commit and toolchain that ran it.
    println!("provenance: {}", lease_check::provenance::line());
    println!("params: {}", params.describe());
    if let Source::Seed(..) = source {
        println!("faults: {}", params.describe_faults());
    }
    println!("reproduce: {}", source.reproduce());
    let report = crate::world::run(params);
    if trace {
        print!("{}", lease_history::render::render(&report.history));
    }
    let figures = report.figures();
    print_figures(&figures, report.sim_us);
    println!("sometimes: {}", coverage_line(&report.coverage));
    if let Some(writer) = writer {
        let path = history.expect("a writer has a path");
        writer
            .commit(to_jsonl(&report.history).as_bytes())
            .map_err(|error| BadInput(format!("cannot write {}: {error}", path.display())))?;
        println!("history: {} lines written to {}", report.history.len(), history.unwrap().display());
    }
    if let Some(dir) = outputs.report {
        let made = lease_check::report::Report::of(&report.history, None)
            .map_err(|error| BadInput(format!("the run's history cannot be reported on: {error}")))?;
        lease_check::cli::write_all(dir, &made, &lease_check::report::text::render(&made))?;
        println!("report: report.txt, report.json and timeline.svg written to {}", dir.display());
    }
    if let Some(writer) = plan_writer {
        let path = outputs.plan.expect("a writer has a path");
        let mut plan = report.plan.clone();
        if let Source::Plan(played, _) = &source {
            plan.comment = played.comment.clone();
        }
        plan.expect =
            Some(crate::faults::shrink::finding(&report).map_or("held", |finding| finding.name()).to_string());
        writer
            .commit(plan.to_json().as_bytes())
            .map_err(|error| BadInput(format!("cannot write {}: {error}", path.display())))?;
        println!("plan: {} faults, {} jobs written to {}", plan.faults.len(), plan.arrivals.len(), path.display());
    }
    let code = match &report.verdict {
        Verdict::Held => {
            println!("outcome: held (every invariant, and every accepted job reached a terminal outcome)");
            0
        }
        Verdict::Crash(crash) => {
            println!("outcome: CRASH: {crash}");
            println!("  the history holds the {} lines recorded before it; --trace shows them", report.history.len());
            println!("reproduce: {}", source.reproduce());
            EXIT_CRASH
        }
        Verdict::Safety(violation) | Verdict::Liveness(violation) => {
            let (kind, code) = match report.verdict {
                Verdict::Safety(_) => ("SAFETY VIOLATION", EXIT_SAFETY),
                _ => ("LIVENESS FAILURE", EXIT_LIVENESS),
            };
            println!("outcome: {kind}: {violation}");
            for &line in &violation.lines {
                if let Some(entry) = report.history.get(line.wrapping_sub(1)) {
                    println!("  line {line}: {}", entry.to_json());
                }
            }
            if let Some(job) = violation.job {
                print_story(&report.history, job, violation.lines.last().copied());
            }
            println!("reproduce: {}", source.reproduce());
            code
        }
    };
    Ok(code)
}

/// The most lines of a job's story printed with a failure; `--trace` prints everything.
const STORY_LINES_MAX: usize = 60;

/// Prints, rendered, every history line about `job` up to the violation, with the faults that
/// struck meanwhile: the story an incident review reads first.
fn print_story(history: &[Entry], job: JobId, last: Option<usize>) {
    let end = last.unwrap_or(history.len()).min(history.len());
    let story: Vec<(usize, &Entry)> = history[..end]
        .iter()
        .enumerate()
        .filter(|(_, entry)| entry.job() == Some(job) || lease_history::render::is_fault(&entry.event))
        .map(|(index, entry)| (index + 1, entry))
        .collect();
    let skipped = story.len().saturating_sub(STORY_LINES_MAX);
    println!("story of {job} up to the violation (with the faults meanwhile; --trace shows everything):");
    if skipped > 0 {
        println!("  ... {skipped} earlier lines");
    }
    for (line, entry) in &story[skipped..] {
        println!("  {line:>6} {}", lease_history::render::render_line(entry));
    }
}
