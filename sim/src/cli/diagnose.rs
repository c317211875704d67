//! `lease-sim diagnose --eval`: how often the report names the right cause (`diagnose FILE` is
//! lease-check's), over the labelled scenarios and the swarm.

use super::BadInput;
use crate::eval;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

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
