//! The `lease-sim` command line. Each subcommand has its own module.
//!
//! Exit status: 0 every run held; 1 a safety invariant failed; 2 a liveness check failed; 3 bad
//! input or a harness error; 4 a world panicked (a core assertion or a harness bug, caught per
//! seed); 5 a sweep with `--require-coverage` never reached a required situation; 6 a seed that a
//! sweep ran twice (`--recheck`) recorded two different histories: the run is not deterministic.
//!
//! `shrink` is the exception: it is given a failure, so 0 says it shrank it and wrote its files
//! (the failure's invariant is printed, and named in the files); 3 is bad input or a harness
//! error, including a seed or plan that holds (nothing to shrink): see `lease-sim shrink --help`.

mod bench;
mod diagnose;
mod explore;
mod hunt;
mod run;
mod shrink;
mod sweep;

use crate::runner::Target;
use crate::scenarios::Scenario;
use crate::world::durable::StoreKind;
use clap::{Parser, Subcommand};
use lease_check::figures::Figures;
use lease_core::Bug;
use std::path::PathBuf;
use std::process::ExitCode;

pub use crate::runner::{EXIT_CRASH, EXIT_LIVENESS, EXIT_NONDETERMINISTIC, EXIT_SAFETY};
/// Bad input, or a harness error.
pub use lease_check::cli::EXIT_BAD_INPUT;
/// A sweep with `--require-coverage` never reached one of the scenario's required situations.
pub const EXIT_UNCOVERED: u8 = 5;

/// Deterministic simulation of lease recovery: seeded worlds, swarm faults, invariant checkers.
#[derive(Parser, Debug)]
#[command(name = "lease-sim", version = lease_check::provenance::VERSION, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one seed, or play a plan, and print its parameters, outcome and figures.
    Run {
        /// The scenario (see `lease-sim scenarios`).
        #[arg(long, default_value = "swarm")]
        scenario: String,
        /// The seed.
        #[arg(long, required_unless_present = "plan")]
        seed: Option<u64>,
        /// Play this plan instead of drawing faults from a seed: every fault it lists, and
        /// nothing else (see docs/faults-and-plans.md, "Fault plans").
        #[arg(long, value_name = "FILE", conflicts_with_all = ["seed", "bug"])]
        plan: Option<PathBuf>,
        /// Write the run's plan (its world, arrivals and every fault dealt) to this file.
        #[arg(long, value_name = "FILE")]
        record_plan: Option<PathBuf>,
        /// Write the history (JSONL) to this file.
        #[arg(long)]
        history: Option<PathBuf>,
        /// Plant a bug (see `lease-sim bugs`).
        #[arg(long)]
        bug: Option<String>,
        /// Where the table and ledger keep their state: `memory`, or `sqlite` (lease-store's SQL
        /// on an in-memory SQLite database in each world).
        #[arg(long, value_parser = crate::world::durable::parse_world_store, conflicts_with = "plan", default_value_t = StoreKind::Memory)]
        store: StoreKind,
        /// Print the world's logs on stderr, each line stamped with the simulated time: every
        /// history line as it is recorded, in the span of the node that recorded it (`RUST_LOG`,
        /// e.g. `lease_sim=trace` for every message too, overrides the level; see
        /// docs/simulator.md, "Logs").
        #[arg(long)]
        log: bool,
        /// Print the whole history, rendered as a table (see docs/history.md, "Reading a trace").
        #[arg(long)]
        trace: bool,
        /// Report on the run's history as `lease-sim report` does, into this directory
        /// (report.txt, report.json, timeline.svg).
        #[arg(long, value_name = "DIR")]
        report: Option<PathBuf>,
    },
    /// Run many seeds and summarise.
    Sweep(sweep::SweepArgs),
    /// Sweep with every planted bug in turn, from several starting seeds, and report how fast
    /// each is caught: the median and the worst seeds to failure.
    Hunt {
        /// The first starting seed; the others follow 100000 apart.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// How many starting seeds each bug is hunted from.
        #[arg(long, default_value_t = 8)]
        starts: u64,
        /// Hunt only these planted bugs (repeatable; default: every one the store can plant).
        #[arg(long = "bug", value_name = "NAME")]
        bugs: Vec<String>,
        /// Where the table and ledger keep their state: `memory`, or `sqlite` (lease-store's SQL
        /// on an in-memory SQLite database in each world).
        #[arg(long, value_parser = crate::world::durable::parse_world_store, default_value_t = StoreKind::Memory)]
        store: StoreKind,

        /// Seeds each bug may take from one start before it counts as escaped.
        #[arg(long, default_value_t = 2_000)]
        budget: u64,
        /// The scenario to sweep.
        #[arg(long, default_value = "swarm")]
        scenario: String,
        /// Threads; defaults to the machine's cores.
        #[arg(long)]
        threads: Option<usize>,
        /// Print a JSON list of {bug, catches: [{invariant, first_failing_seed, seeds_to_failure,
        /// wall_ms, reproduce}], median_seeds, worst_seeds, escaped}.
        #[arg(long)]
        json: bool,
    },
    /// Search over fault plans for what the scenario's draws do not reach: keep every plan that
    /// reached something new (a situation, an answer and its why, two lines of one job's story),
    /// mutate the kept ones (shift a fault, aim it at a lease's expiry to the microsecond, add a
    /// pause or a crash, splice two plans, drop a fault), and compare with the seeds alone in as
    /// many runs. Deterministic from --seed for a given number of runs; a failure is shrunk and
    /// written as a plan, with its reproduce line (exit 1).
    Explore {
        /// The scenario.
        #[arg(long, default_value = "swarm")]
        scenario: String,
        /// The search's seed; its first runs are the scenario's seeds from here.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// How many runs (the comparison with the seeds alone runs as many again).
        #[arg(long, default_value_t = 200)]
        runs: u64,
        /// Stop after this much wall time, e.g. 60s or 5m (the run count then varies with the
        /// machine; --runs alone is reproducible).
        #[arg(long, value_parser = explore::parse_budget)]
        budget: Option<std::time::Duration>,
        /// Write every kept plan here (plan-RUN.json), and a failure's shrunk plan.
        #[arg(long, value_name = "DIR")]
        corpus: Option<PathBuf>,
        /// Plant this bug in every run.
        #[arg(long)]
        bug: Option<String>,
    },
    /// Measure speed, scaling and memory (run it in release; it takes minutes).
    Bench {
        /// Seeds for the speed figures (scaling runs a tenth and a hundredth at the larger sizes).
        #[arg(long, default_value_t = 2_000)]
        seeds: u64,
        /// Seeds for the memory figure; 0 skips it.
        #[arg(long, default_value_t = 100_000)]
        memory_seeds: u64,
        /// Threads for the parallel figure, at least 2; defaults to the machine's cores.
        #[arg(long)]
        threads: Option<usize>,
        /// Print the figures as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Shrink a failing seed (or plan) to a minimal plan that fails the same invariant, and write
    /// it to DIR with its history, trace, explanation and a reproduce file.
    ///
    /// Exit status: 0 when the failure was shrunk and its files written (the invariant it fails
    /// is printed, and named in DIR/reproduce); 3 bad input or a harness error: a bad flag, an
    /// unreadable plan, an unwritable DIR, or a seed or plan that holds (nothing to shrink). With
    /// --every-bug: 0 when every shrunk plan still fails with at most 3 faults, else 3.
    Shrink {
        /// The scenario.
        #[arg(long, default_value = "swarm")]
        scenario: String,
        /// The failing seed.
        #[arg(long, required_unless_present_any = ["plan", "every_bug"])]
        seed: Option<u64>,
        /// Plant a bug (see `lease-sim bugs`).
        #[arg(long)]
        bug: Option<String>,
        /// Where the table and ledger keep their state: `memory`, or `sqlite` (lease-store's SQL
        /// on an in-memory SQLite database in each world).
        #[arg(long, value_parser = crate::world::durable::parse_world_store, conflicts_with_all = ["plan", "every_bug"], default_value_t = StoreKind::Memory)]
        store: StoreKind,
        /// Shrink this failing plan instead of a seed.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["seed", "bug"])]
        plan: Option<PathBuf>,
        /// The most runs the shrinker may spend.
        #[arg(long, default_value_t = shrink::BUDGET)]
        budget: u64,
        /// Where to write plan.json, history.jsonl, trace.txt, explanation.txt and reproduce.
        #[arg(long, value_name = "DIR", required_unless_present = "every_bug")]
        out: Option<PathBuf>,
        /// Hunt every planted bug from seed 0 and shrink its first failing seed: the table of
        /// docs/faults-and-plans.md (exit 3 if a shrunk plan keeps more than 3 faults or stops
        /// failing).
        #[arg(long, conflicts_with_all = ["seed", "bug", "plan", "out"])]
        every_bug: bool,
        /// With --every-bug: seeds each bug may take before it counts as not caught.
        #[arg(long, default_value_t = 2_000)]
        hunt_budget: u64,
        /// With --every-bug: threads for the hunt.
        #[arg(long)]
        threads: Option<usize>,
        /// With --every-bug: print JSON rows instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Check a history file against every invariant, as an outside checker would.
    Check {
        /// The JSONL history.
        file: PathBuf,
    },
    /// Read a history as the operator on call would: windows, incidents, their cause, the
    /// customers' delay and the recovery (docs/reports.md). Prints report.txt; with
    /// --out, writes report.txt, report.json and timeline.svg there.
    Report(lease_check::cli::ReportArgs),
    /// Name the cause of each incident of a history, one line each; with --eval, measure how often
    /// the cause is right over the labelled scenarios and the swarm (docs/reports.md).
    Diagnose {
        /// The JSONL history (not with --eval).
        #[arg(required_unless_present = "eval", conflicts_with = "eval")]
        file: Option<PathBuf>,
        /// The window length, e.g. 400ms (default: the lease ttl).
        #[arg(long, value_parser = lease_check::cli::parse_duration)]
        window: Option<u64>,
        /// Run every labelled scenario and the swarm, and print the confusion matrix.
        #[arg(long)]
        eval: bool,
        /// Seeds per labelled scenario.
        #[arg(long, default_value_t = 200, requires = "eval")]
        seeds: u64,
        /// Swarm seeds for the agreement rate.
        #[arg(long, default_value_t = 200, requires = "eval")]
        swarm_seeds: u64,
        /// Threads; defaults to the machine's cores.
        #[arg(long, requires = "eval")]
        threads: Option<usize>,
        /// Print the evaluation as JSON.
        #[arg(long, requires = "eval")]
        json: bool,
    },
    /// Run real worker, reclaimer, arrival and dependency processes on SQLite or PostgreSQL,
    /// kill and pause them, then check and report on the history (docs/live-runs.md).
    Live(lease_live::cli::LiveArgs),
    /// One process of a live run (started by `live`).
    #[command(hide = true)]
    LiveChild(lease_live::cli::ChildArgs),
    /// List the scenarios.
    Scenarios,
    /// List the planted bugs.
    Bugs,
}

pub use lease_check::cli::BadInput;

/// Runs the command line; the binary's `main`.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return lease_check::cli::unparsed(&error),
    };
    let command = cli.command.unwrap_or_else(|| Command::Sweep(sweep::SweepArgs::default()));
    lease_check::cli::exit("lease-sim", execute(command))
}

fn execute(command: Command) -> Result<u8, BadInput> {
    // Before any world: no subscriber at all unless `--log` or RUST_LOG asks for one.
    let log = matches!(command, Command::Run { log: true, .. });
    crate::logs::start(log).map_err(|error| BadInput(error.to_string()))?;
    match command {
        Command::Run { scenario, seed, plan, record_plan, history, bug, store, log: _, trace, report } => {
            let source = match (plan, seed) {
                (Some(path), _) => run::Source::Plan(Box::new(read_plan(&path)?), path),
                (None, Some(seed)) => {
                    let target = Target::planted(parse_scenario(&scenario)?, parse_bug(bug.as_deref())?).on(store);
                    run::Source::Seed(check_target(target)?, seed)
                }
                (None, None) => return Err(BadInput("run needs --seed or --plan".to_string())),
            };
            let outputs = run::Outputs {
                history: history.as_deref(),
                plan: record_plan.as_deref(),
                trace,
                report: report.as_deref(),
            };
            run::run(source, outputs)
        }
        Command::Sweep(args) => sweep::sweep(args),
        Command::Explore { scenario, seed, runs, budget, corpus, bug } => {
            if runs == 0 || runs > 1_000_000 {
                return Err(BadInput("--runs must be from 1 to 1000000".to_string()));
            }
            let target = Target::planted(parse_scenario(&scenario)?, parse_bug(bug.as_deref())?);
            explore::explore(target, seed, runs, budget, corpus)
        }
        Command::Hunt { from, starts, bugs, store, budget, scenario, threads, json } => {
            let bugs = bugs.iter().map(|bug| parse_bug(Some(bug))).collect::<Result<Vec<_>, _>>()?;
            let plantable = Bug::ALL.into_iter().chain(Bug::STORE).filter(|&bug| store.plants(bug));
            let bugs: Vec<Bug> =
                if bugs.is_empty() { plantable.collect() } else { bugs.into_iter().flatten().collect() };
            if let Some(why) = bugs.iter().find_map(|&bug| crate::world::durable::refuses(store, Some(bug))) {
                return Err(BadInput(why));
            }
            let scenario = parse_scenario(&scenario)?;
            if budget == 0 || budget > hunt::START_SPACING {
                return Err(BadInput(format!("--budget must be from 1 to {}", hunt::START_SPACING)));
            }
            if starts == 0 {
                return Err(BadInput("--starts must be at least 1".to_string()));
            }
            let last = (starts - 1).checked_mul(hunt::START_SPACING).and_then(|span| span.checked_add(from));
            if last.and_then(|last| last.checked_add(budget)).is_none() {
                return Err(BadInput("--from and --starts reach past the last seed".to_string()));
            }
            let starts = hunt::starts(from, starts);
            Ok(hunt::hunt(scenario, store, &bugs, from, &starts, budget, parse_threads(threads)?, json))
        }
        Command::Bench { seeds, memory_seeds, threads, json } => {
            if seeds == 0 {
                return Err(BadInput("--seeds must be at least 1".to_string()));
            }
            let threads = parse_threads(threads)?;
            if threads < 2 {
                return Err(BadInput(
                    "bench --threads must be at least 2: it measures the speedup over one".to_string(),
                ));
            }
            let options = crate::bench::BenchOptions { seeds, memory_seeds, threads };
            Ok(bench::bench(options, json))
        }
        Command::Check { file } => lease_check::cli::check(&file),
        Command::Diagnose { file, window, eval, seeds, swarm_seeds, threads, json } => match file {
            Some(file) if !eval => lease_check::cli::diagnose(&file, window),
            _ => diagnose::evaluate(seeds, swarm_seeds, parse_threads(threads)?, json),
        },
        Command::Report(args) => args.run(),
        Command::Shrink { scenario, seed, bug, store, plan, budget, out, every_bug, hunt_budget, threads, json } => {
            if budget == 0 {
                return Err(BadInput("--budget must be at least 1".to_string()));
            }
            let scenario = parse_scenario(&scenario)?;
            if every_bug {
                return Ok(shrink::every_bug(scenario, budget, hunt_budget.max(1), parse_threads(threads)?, json));
            }
            let out = out.ok_or_else(|| BadInput("shrink needs --out DIR".to_string()))?;
            let source = match (plan, seed) {
                (Some(path), _) => shrink::Source::Plan(Box::new(read_plan(&path)?), path),
                (None, Some(seed)) => {
                    let target = Target::planted(scenario, parse_bug(bug.as_deref())?).on(store);
                    shrink::Source::Seed(check_target(target)?, seed)
                }
                (None, None) => return Err(BadInput("shrink needs --seed, --plan or --every-bug".to_string())),
            };
            shrink::shrink(source, budget, &out)
        }
        Command::Live(args) => lease_live::cli::live(&args),
        Command::LiveChild(args) => lease_live::cli::child(&args),
        Command::Scenarios => {
            for scenario in Scenario::ALL {
                println!("{:<20} {}", scenario.name(), scenario.about());
            }
            Ok(0)
        }
        Command::Bugs => {
            for bug in Bug::ALL {
                println!("{:<BUG_NAME_WIDTH$} {}", bug.name(), bug.about());
            }
            for bug in Bug::STORE {
                println!("{:<BUG_NAME_WIDTH$} {} (in lease-store's SQL: --store sqlite)", bug.name(), bug.about());
            }
            for bug in Bug::BATCH {
                println!("{:<BUG_NAME_WIDTH$} {} (in a batch on the in-memory table)", bug.name(), bug.about());
            }
            for bug in Bug::RUNTIME {
                println!("{:<BUG_NAME_WIDTH$} {} (in lease-runtime)", bug.name(), bug.about());
            }
            Ok(0)
        }
    }
}

/// The column `lease-sim bugs` prints descriptions at: past the longest name.
const BUG_NAME_WIDTH: usize = 30;

/// Reads and checks a plan file.
pub(crate) fn read_plan(path: &std::path::Path) -> Result<crate::faults::plan::Plan, BadInput> {
    let text =
        std::fs::read_to_string(path).map_err(|e| BadInput(format!("cannot read plan {}: {e}", path.display())))?;
    crate::faults::plan::Plan::parse(&text).map_err(|e| BadInput(format!("plan {}: {e}", path.display())))
}

pub(crate) fn parse_threads(threads: Option<usize>) -> Result<usize, BadInput> {
    match threads {
        Some(0) => Err(BadInput("--threads must be at least 1".to_string())),
        Some(threads) => Ok(threads),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

pub(crate) fn parse_scenario(name: &str) -> Result<Scenario, BadInput> {
    Scenario::from_name(name).ok_or_else(|| {
        let known: Vec<_> = Scenario::ALL.iter().map(|scenario| scenario.name()).collect();
        BadInput(format!("unknown scenario {name:?}; known scenarios: {}", known.join(", ")))
    })
}

/// The target, unless its bug cannot be planted on its store.
pub(crate) fn check_target(target: Target) -> Result<Target, BadInput> {
    match crate::world::durable::refuses(target.store, target.bug) {
        Some(why) => Err(BadInput(why)),
        None => Ok(target),
    }
}

pub(crate) fn parse_bug(name: Option<&str>) -> Result<Option<Bug>, BadInput> {
    name.map(|name| name.parse::<Bug>().map_err(|error| BadInput(error.to_string()))).transpose()
}

/// Parses `A..B` (B excluded) or `A..=B`; an empty or reversed range is an error.
pub(crate) fn parse_seeds(range: &str) -> Result<std::ops::Range<u64>, BadInput> {
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

/// Prints a run's counts, and its simulated time when it is one run (`sim_us`).
pub(crate) fn print_counts(figures: &Figures, sim_us: Option<u64>) {
    let sim = sim_us.map(|us| format!(" sim_s={:.3}", us as f64 / 1e6)).unwrap_or_default();
    println!(
        "figures: accepted={} rejected={} completed={} dead_lettered={} quarantined={} attempts={} executions={} \
         adoptions={} reclaims={} crashes={} wasted_grants={} wasted_grants_after_heal={} events={}{sim}",
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
        figures.wasted_grants,
        figures.wasted_grants_after_heal,
        figures.events,
    );
}

/// Microseconds as milliseconds, for printing.
pub(crate) fn ms(us: u64) -> f64 {
    us as f64 / 1e3
}

/// Prints one run's counts and its customer-facing latencies.
pub(crate) fn print_figures(figures: &Figures, sim_us: u64) {
    print_counts(figures, Some(sim_us));
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

/// The protocol windows, as the share of seeds that reached each:
/// `windows (seeds reaching, of 2000): window_list_to_fence=131 (6.5%) ...`.
pub(crate) fn windows_line(seeds_reaching: &lease_check::Coverage, runs: u64) -> String {
    let share = |count: u64| 100.0 * count as f64 / runs.max(1) as f64;
    let windows = lease_check::windows::WINDOWS.iter().chain(&lease_check::windows::BATCH_WINDOWS).map(|&name| {
        let count = seeds_reaching.get(name);
        format!("{name}={count} ({:.1}%)", share(count))
    });
    format!("windows (seeds reaching, of {runs}): {}", windows.collect::<Vec<_>>().join(" "))
}

pub(crate) use lease_check::cli::coverage_line;
