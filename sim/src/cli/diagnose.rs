//! `lease-sim diagnose`: the cause of each incident of a history, one line each; with `--eval`,
//! how often the cause is right over the labelled scenarios and the swarm.

use super::BadInput;
use crate::report::eval;
use crate::report::Report;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;

/// Prints one line per incident of `file`.
pub(super) fn diagnose(file: &Path, window_us: Option<u64>) -> Result<u8, BadInput> {
    let entries = super::report::read_history(file)?;
    let report = Report::of(&entries, window_us).map_err(|error| BadInput(format!("{}: {error}", file.display())))?;
    if report.incidents.is_empty() {
        println!("{}: no incident", file.display());
    }
    for incident in &report.incidents {
        println!(
            "{:.3} s to {:.3} s: {} (arrivals {:+.2}, workers {:+.2}, dependency {:+.2}; load {:.2})",
            incident.from_us as f64 / 1e6,
            incident.to_us as f64 / 1e6,
            incident.verdict.cause,
            incident.verdict.terms.arrivals,
            incident.verdict.terms.workers,
            incident.verdict.terms.dependency,
            incident.verdict.load
        );
    }
    Ok(0)
}

/// Runs the evaluation and prints it (or its JSON).
pub(super) fn evaluate(seeds: u64, swarm_seeds: u64, threads: usize, json: bool) -> Result<u8, BadInput> {
    if seeds == 0 {
        return Err(BadInput("--seeds must be at least 1".to_string()));
    }
    let total = seeds * crate::scenarios::Scenario::LABELLED.len() as u64 + swarm_seeds;
    let bar = if std::io::stderr().is_terminal() { ProgressBar::new(total) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {per_sec}, eta {eta}").expect("the template is valid"),
    );
    let started = std::time::Instant::now();
    let eval = eval::evaluate(seeds, swarm_seeds, threads, &|| bar.inc(1));
    bar.finish_and_clear();
    if json {
        println!("{}", serde_json::to_string_pretty(&eval).expect("an evaluation always serialises"));
    } else {
        print!("{}", eval::render(&eval));
        println!("{} runs on {} threads in {:.1} s", total, threads, started.elapsed().as_secs_f64());
    }
    Ok(0)
}
