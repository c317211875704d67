//! `lease-sim`: run one seed, sweep many, or check a history file.
//!
//! Exit status: 0 every run held; 1 a safety invariant failed; 2 a liveness check failed; 3 bad
//! input or a harness error.

use clap::{Parser, Subcommand};
use lease_core::Bug;
use lease_sim::check::check_history;
use lease_sim::figures::Figures;
use lease_sim::history::{parse_jsonl, to_jsonl};
use lease_sim::runner::{self, SeedResult, Target};
use lease_sim::scenario::Scenario;
use lease_sim::world::Verdict;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

const EXIT_SAFETY: u8 = 1;
const EXIT_LIVENESS: u8 = 2;
const EXIT_BAD_INPUT: u8 = 3;

/// Deterministic simulation of lease recovery: seeded worlds, swarm faults, invariant checkers.
#[derive(Parser, Debug)]
#[command(name = "lease-sim", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one seed and print its parameters, outcome and figures.
    Run {
        /// The scenario (see `lease-sim scenarios`).
        #[arg(long, default_value = "swarm")]
        scenario: String,
        /// The seed.
        #[arg(long)]
        seed: u64,
        /// Write the history (JSONL) to this file.
        #[arg(long)]
        history: Option<PathBuf>,
        /// Plant a bug (see `lease-sim bugs`).
        #[arg(long)]
        bug: Option<String>,
        /// Print the whole history, rendered as a table (see README, "Reading a trace").
        #[arg(long)]
        trace: bool,
    },
    /// Run many seeds and summarise.
    Sweep {
        /// The scenario (see `lease-sim scenarios`).
        #[arg(long, default_value = "swarm")]
        scenario: String,
        /// Seed range, `A..B` (B excluded) or `A..=B`.
        #[arg(long, default_value = "0..500")]
        seeds: String,
        /// Threads; defaults to the machine's cores.
        #[arg(long)]
        threads: Option<usize>,
        /// Print the summary as one JSON object on stdout.
        #[arg(long)]
        json: bool,
        /// Plant a bug (see `lease-sim bugs`).
        #[arg(long)]
        bug: Option<String>,
    },
    /// Sweep with every planted bug in turn and report how fast each is caught.
    Hunt {
        /// The first seed of every bug's sweep.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Seeds each bug may take before it counts as escaped.
        #[arg(long, default_value_t = 200)]
        budget: u64,
        /// The scenario to sweep.
        #[arg(long, default_value = "swarm")]
        scenario: String,
        /// Threads; defaults to the machine's cores.
        #[arg(long)]
        threads: Option<usize>,
        /// Print a JSON list of {bug, invariant, first_failing_seed, seeds_to_failure, wall_ms}.
        #[arg(long)]
        json: bool,
    },
    /// Check a history file against every invariant, as an outside checker would.
    Check {
        /// The JSONL history.
        file: PathBuf,
    },
    /// List the scenarios.
    Scenarios,
    /// List the planted bugs.
    Bugs,
}

/// Bad input: a message for a person, and exit status 3.
struct BadInput(String);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let code = if error.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    let command = cli.command.unwrap_or(Command::Sweep {
        scenario: "swarm".to_string(),
        seeds: "0..500".to_string(),
        threads: None,
        json: false,
        bug: None,
    });
    match execute(command) {
        Ok(code) => ExitCode::from(code),
        Err(BadInput(message)) => {
            eprintln!("lease-sim: {message}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

fn execute(command: Command) -> Result<u8, BadInput> {
    match command {
        Command::Run { scenario, seed, history, bug, trace } => {
            let target = Target { scenario: parse_scenario(&scenario)?, bug: parse_bug(bug.as_deref())? };
            run(target, seed, history.as_deref(), trace)
        }
        Command::Sweep { scenario, seeds, threads, json, bug } => {
            let target = Target { scenario: parse_scenario(&scenario)?, bug: parse_bug(bug.as_deref())? };
            let seeds = parse_seeds(&seeds)?;
            Ok(sweep(target, seeds, parse_threads(threads)?, json))
        }
        Command::Hunt { from, budget, scenario, threads, json } => {
            let scenario = parse_scenario(&scenario)?;
            if budget == 0 {
                return Err(BadInput("--budget must be at least 1".to_string()));
            }
            Ok(hunt(scenario, from, budget, parse_threads(threads)?, json))
        }
        Command::Check { file } => check(&file),
        Command::Scenarios => {
            for scenario in Scenario::ALL {
                println!("{:<12} {}", scenario.name(), scenario.about());
            }
            Ok(0)
        }
        Command::Bugs => {
            for bug in Bug::ALL {
                println!("{bug}");
            }
            Ok(0)
        }
    }
}

fn parse_threads(threads: Option<usize>) -> Result<usize, BadInput> {
    match threads {
        Some(0) => Err(BadInput("--threads must be at least 1".to_string())),
        Some(threads) => Ok(threads),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

fn parse_scenario(name: &str) -> Result<Scenario, BadInput> {
    Scenario::from_name(name).ok_or_else(|| {
        let known: Vec<_> = Scenario::ALL.iter().map(|scenario| scenario.name()).collect();
        BadInput(format!("unknown scenario {name:?}; known scenarios: {}", known.join(", ")))
    })
}

fn parse_bug(name: Option<&str>) -> Result<Option<Bug>, BadInput> {
    name.map(|name| name.parse::<Bug>().map_err(|error| BadInput(error.to_string()))).transpose()
}

/// Parses `A..B` (B excluded) or `A..=B`; an empty or reversed range is an error.
fn parse_seeds(range: &str) -> Result<std::ops::Range<u64>, BadInput> {
    let bad = |why: &str| BadInput(format!("bad seed range {range:?}: {why}; write A..B (B excluded) or A..=B"));
    let (start, end, inclusive) = if let Some((a, b)) = range.split_once("..=") {
        (a, b, true)
    } else if let Some((a, b)) = range.split_once("..") {
        (a, b, false)
    } else {
        return Err(bad("no `..`"));
    };
    let number = |s: &str| s.trim().parse::<u64>().map_err(|_| bad(&format!("{s:?} is not a seed")));
    let (start, end) = (number(start)?, number(end)?);
    let end = if inclusive { end.checked_add(1).ok_or_else(|| bad("end too large"))? } else { end };
    if end < start {
        return Err(bad("it is reversed"));
    }
    if end == start {
        return Err(bad("it is empty"));
    }
    Ok(start..end)
}

fn run(target: Target, seed: u64, history: Option<&Path>, trace: bool) -> Result<u8, BadInput> {
    // Find an unwritable history file before spending time on the run.
    let writer = history.map(AtomicFile::create).transpose()?;
    let report = target.run(seed);
    let params = &report.params;
    println!(
        "lease-sim run: scenario={} seed={seed}{}",
        params.scenario,
        target.bug.map(|b| format!(" bug={b}")).unwrap_or_default()
    );
    println!("params: {}", params.describe());
    if trace {
        print!("{}", lease_sim::render::render(&report.history));
    }
    let figures = Figures::of(&report.history);
    print_figures(&figures, report.sim_us);
    println!("sometimes: {}", coverage_line(&report.coverage));
    if let Some(writer) = writer {
        writer.commit(to_jsonl(&report.history).as_bytes())?;
        println!("history: {} lines written to {}", report.history.len(), history.unwrap().display());
    }
    let code = match &report.verdict {
        Verdict::Held => {
            println!("outcome: held (every invariant, and every accepted job reached a terminal outcome)");
            0
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
            println!("reproduce: {}", target.reproduce(seed));
            code
        }
    };
    Ok(code)
}

fn print_figures(figures: &Figures, sim_us: u64) {
    println!(
        "figures: accepted={} rejected={} completed={} dead_lettered={} quarantined={} attempts={} executions={} \
         adoptions={} reclaims={} crashes={} events={} sim_s={:.3}",
        figures.accepted,
        figures.rejected,
        figures.completed,
        figures.dead_lettered,
        figures.quarantined,
        figures.attempts,
        figures.executions,
        figures.adoptions,
        figures.reclaims,
        figures.crashes,
        figures.events,
        sim_us as f64 / 1e6
    );
    let ms = |us: u64| us as f64 / 1e3;
    println!(
        "latency: queue_wait p50={:.1}ms p99={:.1}ms max={:.1}ms; end_to_end p50={:.1}ms p99={:.1}ms max={:.1}ms",
        ms(figures.queue_wait.p50_us),
        ms(figures.queue_wait.p99_us),
        ms(figures.queue_wait.max_us),
        ms(figures.end_to_end.p50_us),
        ms(figures.end_to_end.p99_us),
        ms(figures.end_to_end.max_us)
    );
}

fn coverage_line(coverage: &lease_sim::check::Coverage) -> String {
    coverage.0.iter().map(|(name, count)| format!("{name}={count}")).collect::<Vec<_>>().join(" ")
}

fn sweep(target: Target, seeds: std::ops::Range<u64>, threads: usize, json: bool) -> u8 {
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

/// Exit status of `hunt`: 0 when every bug was caught within the budget, 1 when one escaped.
fn hunt(scenario: Scenario, from: u64, budget: u64, threads: usize, json: bool) -> u8 {
    let stop = AtomicBool::new(false);
    let mut catches = Vec::new();
    if !json {
        println!(
            "hunt: scenario={} from seed {from}, budget {budget} seeds per bug, {threads} threads",
            scenario.name()
        );
        println!("{:<30} {:<22} {:>10} {:>8} {:>9}", "bug", "caught by", "first seed", "seeds", "wall ms");
    }
    for bug in Bug::ALL {
        let catch = runner::hunt(scenario, bug, from, budget, threads, &stop);
        if !json {
            let invariant = catch.invariant.map_or("ESCAPED".to_string(), |invariant| invariant.to_string());
            let first = catch.first_failing_seed.map_or("-".to_string(), |seed| seed.to_string());
            println!(
                "{:<30} {:<22} {:>10} {:>8} {:>9}",
                catch.bug, invariant, first, catch.seeds_to_failure, catch.wall_ms
            );
        }
        catches.push(catch);
    }
    let escaped = catches.iter().filter(|catch| catch.invariant.is_none()).count();
    if json {
        println!("{}", serde_json::to_string(&catches).expect("catches serialise"));
    } else {
        let mut seeds: Vec<u64> = catches.iter().map(|catch| catch.seeds_to_failure).collect();
        seeds.sort_unstable();
        println!("median seeds to failure: {}; escaped: {escaped}", seeds[seeds.len() / 2]);
    }
    u8::from(escaped > 0)
}

fn check(file: &Path) -> Result<u8, BadInput> {
    let text =
        std::fs::read_to_string(file).map_err(|error| BadInput(format!("cannot read {}: {error}", file.display())))?;
    let entries = parse_jsonl(&text).map_err(|error| BadInput(format!("{}: {error}", file.display())))?;
    match check_history(&entries) {
        Ok(coverage) => {
            println!("{}: {} lines, every invariant held", file.display(), entries.len());
            println!("sometimes: {}", coverage_line(&coverage));
            Ok(0)
        }
        Err(violation) => {
            println!("{}: {violation}", file.display());
            for &line in &violation.lines {
                if let Some(entry) = entries.get(line.wrapping_sub(1)) {
                    println!("  line {line}: {}", entry.to_json());
                }
            }
            Ok(if violation.invariant.is_safety() { EXIT_SAFETY } else { EXIT_LIVENESS })
        }
    }
}

/// A file written atomically: everything goes to a temporary file beside it, which is renamed
/// over the target only when complete, so an interrupted run leaves no half-written file.
struct AtomicFile {
    target: PathBuf,
    temporary: PathBuf,
    file: std::fs::File,
}

impl AtomicFile {
    fn create(target: &Path) -> Result<AtomicFile, BadInput> {
        let name = target.file_name().ok_or_else(|| BadInput(format!("{} is not a file name", target.display())))?;
        let mut temporary_name = std::ffi::OsString::from(".");
        temporary_name.push(name);
        temporary_name.push(format!(".tmp{}", std::process::id()));
        let temporary = target.with_file_name(temporary_name);
        let file = std::fs::File::create(&temporary)
            .map_err(|error| BadInput(format!("cannot write {}: {error}", target.display())))?;
        Ok(AtomicFile { target: target.to_path_buf(), temporary, file })
    }

    fn commit(mut self, bytes: &[u8]) -> Result<(), BadInput> {
        let fail = |error: std::io::Error| BadInput(format!("cannot write {}: {error}", self.target.display()));
        self.file.write_all(bytes).map_err(fail)?;
        self.file.sync_all().map_err(fail)?;
        std::fs::rename(&self.temporary, &self.target).map_err(fail)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.temporary);
    }
}
