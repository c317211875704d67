//! `lease-sim sweep`: many seeds, a progress bar, and a summary.

use super::{coverage_line, print_figures};
use crate::runner::{self, SeedResult, Target};
use std::sync::atomic::AtomicBool;

pub(super) fn sweep(target: Target, seeds: std::ops::Range<u64>, threads: usize, json: bool) -> u8 {
    let seeds: Vec<u64> = seeds.collect();
    let bar = indicatif::ProgressBar::new(seeds.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} seeds {per_sec} eta {eta} {msg}")
            .expect("the progress template is valid"),
    );
    let failed = std::sync::atomic::AtomicU64::new(0);
    let on_done = |result: &SeedResult| {
        if result.failure.is_some() {
            let failed = failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            bar.set_message(format!("{failed} failing"));
        }
        bar.inc(1);
    };
    let stop = AtomicBool::new(false);
    let (results, wall) = runner::sweep(target, &seeds, threads, &stop, &on_done);
    bar.finish_and_clear();
    let summary = runner::summarise(target, &results, wall, threads, false);
    if json {
        println!("{}", serde_json::to_string(&summary).expect("the summary serialises"));
    } else {
        print_summary(&summary);
    }
    summary.exit_code()
}

fn print_summary(summary: &runner::Summary) {
    let bug = summary.bug.as_ref().map(|bug| format!(" bug={bug}")).unwrap_or_default();
    println!(
        "sweep: scenario={}{bug} seeds={}..{} runs={} threads={}",
        summary.scenario,
        summary.seed_first,
        summary.seed_first + summary.runs,
        summary.runs,
        summary.threads
    );
    println!(
        "speed: {:.1} seeds/s, simulated/wall = {:.1}x, wall {:.2}s",
        summary.seeds_per_sec,
        summary.sim_speedup,
        summary.wall_ms as f64 / 1e3
    );
    print_figures(&summary.totals, 0);
    let ms = |us: u64| us as f64 / 1e3;
    println!(
        "per-seed p99: queue_wait median={:.1}ms worst={:.1}ms; end_to_end median={:.1}ms worst={:.1}ms",
        ms(summary.queue_wait_p99.p50_us),
        ms(summary.queue_wait_p99.max_us),
        ms(summary.end_to_end_p99.p50_us),
        ms(summary.end_to_end_p99.max_us)
    );
    println!("sometimes: {}", coverage_line(&summary.sometimes));
    if summary.failures.is_empty() {
        println!("result: every run held");
        return;
    }
    println!("result: {} of {} seeds FAILED", summary.failures.len(), summary.runs);
    for failure in &summary.failures {
        println!("  seed {} {}: {}", failure.seed, failure.invariant, failure.message);
        println!("    reproduce: {}", failure.reproduce);
    }
}
