//! `lease-sim run`: one seed, its parameters, figures and outcome.

use super::{coverage_line, print_figures, BadInput, EXIT_CRASH, EXIT_LIVENESS, EXIT_SAFETY};
use crate::atomic::AtomicFile;
use crate::figures::Figures;
use crate::history::{to_jsonl, Entry, Event};
use crate::runner::Target;
use crate::world::Verdict;
use lease_core::JobId;
use std::path::Path;

pub(super) fn run(target: Target, seed: u64, history: Option<&Path>, trace: bool) -> Result<u8, BadInput> {
    // Find an unwritable history file before spending time on the run.
    let writer = history
        .map(|path| {
            AtomicFile::create(path).map_err(|error| BadInput(format!("cannot write {}: {error}", path.display())))
        })
        .transpose()?;
    // The seed and every parameter first, before the world starts (as VOPR does): whatever
    // happens inside it, a hang or an abort, the screen already says how to get here again.
    let params = target.params(seed);
    println!(
        "lease-sim run: scenario={} seed={seed}{}",
        params.scenario,
        target.bug.map(|b| format!(" bug={b}")).unwrap_or_default()
    );
    println!("params: {}", params.describe());
    println!("reproduce: {}", target.reproduce(seed));
    let report = crate::world::run(params);
    if trace {
        print!("{}", crate::render::render(&report.history));
    }
    let figures = Figures::of_run(&report);
    print_figures(&figures, report.sim_us);
    println!("sometimes: {}", coverage_line(&report.coverage));
    if let Some(writer) = writer {
        let path = history.expect("a writer has a path");
        writer
            .commit(to_jsonl(&report.history).as_bytes())
            .map_err(|error| BadInput(format!("cannot write {}: {error}", path.display())))?;
        println!("history: {} lines written to {}", report.history.len(), history.unwrap().display());
    }
    let code = match &report.verdict {
        Verdict::Held => {
            println!("outcome: held (every invariant, and every accepted job reached a terminal outcome)");
            0
        }
        Verdict::Crash(crash) => {
            println!("outcome: CRASH: {crash}");
            println!("  the history holds the {} lines recorded before it; --trace shows them", report.history.len());
            println!("reproduce: {}", target.reproduce(seed));
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
            println!("reproduce: {}", target.reproduce(seed));
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
        .filter(|(_, entry)| entry.job() == Some(job) || is_fault(&entry.event))
        .map(|(index, entry)| (index + 1, entry))
        .collect();
    let skipped = story.len().saturating_sub(STORY_LINES_MAX);
    println!("story of {job} up to the violation (with the faults meanwhile; --trace shows everything):");
    if skipped > 0 {
        println!("  ... {skipped} earlier lines");
    }
    for (line, entry) in &story[skipped..] {
        println!("  {line:>6} {}", crate::render::render_line(entry));
    }
}

fn is_fault(event: &Event) -> bool {
    matches!(
        event,
        Event::Crashed { .. }
            | Event::Restarted { .. }
            | Event::Paused { .. }
            | Event::Resumed { .. }
            | Event::Partitioned { .. }
            | Event::Healed { .. }
            | Event::FaultsHealed {}
    )
}
