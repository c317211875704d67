//! `lease-sim bench`: speed, scaling and memory figures (see [`crate::bench`]).

use crate::bench::{self, BenchOptions, Report};

/// Runs the benchmark and prints its figures; always exit status 0 (figures, not verdicts).
pub(super) fn bench(options: BenchOptions, json: bool) -> u8 {
    let progress = |what: &str| eprintln!("bench: measuring {what}...");
    let report = bench::run(options, &progress);
    if json {
        println!("{}", serde_json::to_string(&report).expect("the report serialises"));
    } else {
        print_report(&report);
    }
    0
}

fn print_report(report: &Report) {
    let line = |name: &str, speed: &bench::Speed| {
        println!(
            "{name:<28} {:>9.1} seeds/s {:>12.0} events/s {:>9.0}x sim/wall {:>8.0} events/seed ({} seeds, {} threads)",
            speed.seeds_per_sec,
            speed.events_per_sec,
            speed.sim_speedup,
            speed.events_per_seed,
            speed.seeds,
            speed.threads
        )
    };
    line("swarm, 100 jobs", &report.swarm_one_thread);
    line("swarm, 100 jobs", &report.swarm_threads);
    line("reference world (ceiling)", &report.reference);
    println!("swarm events/s vs reference: {:.0}%", report.swarm_vs_reference * 100.0);
    println!("threads speedup: {:.2}x", report.thread_speedup);
    for scale in &report.scaling {
        println!(
            "scaling: {:>6} jobs {:>9.2} seeds/s {:>8.1} us/job ({} seeds)",
            scale.jobs, scale.seeds_per_sec, scale.us_per_job, scale.seeds
        );
    }
    println!("cost per job, 10,000 vs 100 jobs: {:.2}x", report.cost_growth_100_to_10000);
    let logging = &report.logging;
    println!(
        "logging: off {:.1} seeds/s, subscriber with every event disabled {:.1} seeds/s ({:.1}% of off) \
         ({} seeds each); at debug into a sink {:.1} seeds/s ({} seeds); 1 thread",
        logging.off_seeds_per_sec,
        logging.disabled_seeds_per_sec,
        logging.disabled_vs_off * 100.0,
        logging.seeds,
        logging.debug_seeds_per_sec,
        logging.debug_seeds,
    );
    let cost = &report.report;
    println!(
        "report: {:.0} us per 10,000 history lines ({:.0} us with report.txt, report.json and timeline.svg drawn), \
         over {} histories of {} lines; 1 thread",
        cost.us_per_10k_lines, cost.us_per_10k_lines_with_files, cost.histories, cost.lines
    );
    line("swarm, memory store", &report.stores.memory);
    line("swarm, sqlite store", &report.stores.sqlite);
    println!(
        "store: sqlite at {:.2}x the in-memory store's seeds/s (the same seeds, in turns, 1 thread; histories identical)",
        report.stores.sqlite_vs_memory
    );
    if let Some(memory) = report.memory {
        println!(
            "memory: rss {} KiB at start, {} KiB after {} seeds (growth {} KiB), peak {} KiB",
            memory.rss_start_kib,
            memory.rss_end_kib,
            memory.seeds,
            memory.rss_end_kib as i64 - memory.rss_start_kib as i64,
            memory.rss_peak_kib
        );
    }
}
