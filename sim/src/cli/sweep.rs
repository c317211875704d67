//! `lease-sim sweep`: many seeds, a progress bar, and a summary.
//!
//! For the nightly runs (`ci/nightly`) a sweep can also be time-boxed (`--duration`), split across
//! machines (`--shard I/N`), started from a base seed that names the night (`--seed-base`,
//! `--seed-from-date`), keep every failing seed's files (`--failures-dir`), and stop cleanly on
//! Ctrl-C. Whatever stops it, the summary names exactly the seeds that ran (see [`SeedPlan`]).

mod failures_dir;

use super::{coverage_line, ms, parse_bug, parse_scenario, parse_seeds, parse_threads, print_counts, BadInput};
use crate::nightly::{parse_duration, Date};
use crate::runner::{self, Recheck, SeedResult, Summary, Target};
use crate::shard::{SeedPlan, Shard};
use crate::world::durable::StoreKind;
use crate::world::RunReport;
use failures_dir::{FailuresDir, FAILURES_WRITTEN_MAX};
use lease_history::atomic::AtomicFile;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Seeds a sweep runs when neither `--seeds` nor `--duration` bounds it.
pub const SEEDS_DEFAULT: u64 = 500;

/// The exit status after a second Ctrl-C, which quits at once without a summary (128 + SIGINT).
pub const EXIT_FORCED: i32 = 130;

/// The arguments of `lease-sim sweep`.
#[derive(clap::Args, Debug)]
pub(super) struct SweepArgs {
    /// The scenario (see `lease-sim scenarios`).
    #[arg(long, default_value = "swarm")]
    scenario: String,
    /// Seed range, `A..B` (B excluded) or `A..=B` [default: 500 seeds from the base; with
    /// --duration, every seed from the base on until the time is up].
    #[arg(long, conflicts_with_all = ["seed_base", "seed_from_date"])]
    seeds: Option<String>,
    /// Threads; defaults to the machine's cores.
    #[arg(long)]
    threads: Option<usize>,
    /// Print the summary as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Also write the JSON summary to FILE (atomically), whatever --json says.
    #[arg(long, value_name = "FILE")]
    summary_json: Option<PathBuf>,
    /// Plant a bug (see `lease-sim bugs`).
    #[arg(long)]
    bug: Option<String>,
    /// Where the table and ledger keep their state: `memory`, or `sqlite` (lease-store's SQL on
    /// an in-memory SQLite database in each world).
    #[arg(long, value_parser = crate::world::durable::parse_world_store, default_value_t = StoreKind::Memory)]
    store: StoreKind,
    /// Start no new seed after this much wall time (90s, 10m, 1h, or plain seconds); seeds
    /// already started run to their end. Without --seeds the range has no end.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Run only shard I of N (I from 0): the seeds base+I+k*N. The N shards of a range never
    /// overlap and together run all of it.
    #[arg(long, value_name = "I/N", default_value = "0/1")]
    shard: Shard,
    /// The first seed of the range (the base every shard counts from) [default: 0].
    #[arg(long, value_name = "S", conflicts_with = "seed_from_date")]
    seed_base: Option<u64>,
    /// Take the base from today's UTC date: YYYYMMDD * 1000000000, printed in the summary.
    #[arg(long)]
    seed_from_date: bool,
    /// For every failing seed S (at most 100 of them), write four files into DIR, atomically:
    /// seed-S.jsonl (history), seed-S.trace (rendered), seed-S.reproduce (a script that replays
    /// it: `sh DIR/seed-S.reproduce`) and seed-S.plan.json (its fault plan, for `run --plan` and
    /// `shrink --plan`). DIR is created if missing.
    #[arg(long, value_name = "DIR")]
    failures_dir: Option<PathBuf>,
    /// Exit 5 when every run held but a situation the scenario requires (see `lease-sim
    /// scenarios`) was never reached: a sweep that never reached the dangerous case proved nothing.
    #[arg(long)]
    require_coverage: bool,
    /// Run one seed in N twice, chosen by a hash of the seed, and compare the two histories: a
    /// difference is a finding (`nondeterministic`, exit 6). 0 runs every seed once.
    #[arg(long, value_name = "N", default_value_t = Recheck::DEFAULT.every)]
    recheck: u64,
}

impl Default for SweepArgs {
    /// What `lease-sim` with no subcommand runs: `sweep` with clap's own defaults, so that the
    /// defaults are written once, in the attributes above.
    fn default() -> SweepArgs {
        #[derive(clap::Parser)]
        struct Bare {
            #[command(flatten)]
            args: SweepArgs,
        }
        <Bare as clap::Parser>::parse_from(["sweep"]).args
    }
}

/// Why a sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Ended {
    /// Every seed of the range ran.
    RangeEnd,
    /// The `--duration` budget ran out.
    TimeUp,
    /// Ctrl-C (or SIGTERM).
    Interrupted,
}

/// What `sweep --json` prints: the runner's summary, and exactly which seeds it ran.
#[derive(Debug, Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    /// The first seed of the whole range, every shard together.
    seed_base: u64,
    /// The UTC date the base was taken from (`--seed-from-date`).
    #[serde(skip_serializing_if = "Option::is_none")]
    seed_base_date: Option<String>,
    /// `I/N`.
    shard: String,
    /// The seeds run: `A..B`, or `base+I+k*N for k in 0..count` for a shard.
    seeds: String,
    /// The last seed run.
    #[serde(skip_serializing_if = "Option::is_none")]
    seed_last: Option<u64>,
    /// The command that runs exactly these seeds again.
    #[serde(skip_serializing_if = "Option::is_none")]
    rerun: Option<String>,
    /// The `--duration` budget, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_s: Option<u64>,
    /// Why the sweep ended.
    ended: Ended,
    /// One seed in this many was run twice (`--recheck`; 0: none).
    recheck_every: u64,
    /// Where the failing seeds' files went.
    #[serde(skip_serializing_if = "Option::is_none")]
    failures_dir: Option<PathBuf>,
    /// Failing seeds whose files were written there.
    #[serde(skip_serializing_if = "Option::is_none")]
    failures_written: Option<u64>,
    /// The scenario's required situations that no seed reached.
    never_reached: Vec<&'static str>,
    /// The commit this binary was built from ([`lease_check::provenance::COMMIT`]).
    commit: &'static str,
    /// The compiler that built it ([`lease_check::provenance::TOOLCHAIN`]).
    toolchain: &'static str,
}

/// Runs `lease-sim sweep`. Every argument is checked, and every output path opened, before the
/// first seed runs.
pub(super) fn sweep(args: SweepArgs) -> Result<u8, BadInput> {
    let target = Target::planted(parse_scenario(&args.scenario)?, parse_bug(args.bug.as_deref())?).on(args.store);
    let target = super::check_target(target)?;
    let threads = parse_threads(args.threads)?;
    let date = args.seed_from_date.then(|| Date::of(std::time::SystemTime::now()));
    let plan = plan(&args, date)?;
    let failures = args.failures_dir.as_deref().map(FailuresDir::open).transpose()?;
    let summary_json = args
        .summary_json
        .as_deref()
        .map(|path| AtomicFile::create(path).map_err(|error| cannot_write(path, error)))
        .transpose()?;

    let flags = Flags::default();
    flags.stop_on_ctrl_c();
    let bar = progress_bar(&plan);
    let on_report = |report: &RunReport, result: &SeedResult| {
        if result.failure.is_some() {
            if let Some(failures) = &failures {
                failures.keep(target, report, result);
            }
            let failed = flags.failed.fetch_add(1, Ordering::Relaxed) + 1;
            bar.set_message(format!("{failed} failing"));
        }
        bar.inc(1);
    };
    let recheck = Recheck { every: args.recheck };
    let (tally, wall) = flags.with_deadline(args.duration, || {
        runner::sweep_plan_rechecking(target, &plan, threads, recheck, &flags.stop, &on_report)
    });
    bar.finish_and_clear();

    let (ran, seed_last) = (tally.runs, tally.seed_max);
    let interrupted = flags.interrupted.load(Ordering::Relaxed) && plan.len() != Some(ran);
    let summary = tally.summary(target, wall, threads, interrupted);
    let report = Report {
        summary: &summary,
        seed_base: plan.base,
        seed_base_date: date.map(|date| date.to_string()),
        shard: plan.shard.to_string(),
        seeds: plan.describe(ran),
        seed_last,
        rerun: rerun(target, &plan, ran),
        duration_s: args.duration.map(|duration| duration.as_secs()),
        ended: if interrupted {
            Ended::Interrupted
        } else if plan.len() == Some(ran) {
            Ended::RangeEnd
        } else {
            Ended::TimeUp
        },
        recheck_every: recheck.every,
        failures_dir: args.failures_dir.clone(),
        failures_written: failures.as_ref().map(FailuresDir::written),
        never_reached: never_reached(target.scenario, &summary.sometimes),
        commit: lease_check::provenance::COMMIT,
        toolchain: lease_check::provenance::TOOLCHAIN,
    };
    let json = serde_json::to_string(&report).expect("the summary serialises");
    if let Some(file) = summary_json {
        let path = args.summary_json.as_deref().expect("a writer has a path");
        file.commit(format!("{json}\n").as_bytes()).map_err(|error| cannot_write(path, error))?;
    }
    if args.json {
        println!("{json}");
    } else {
        print_summary(&report);
    }
    Ok(exit_code(&summary, &report.never_reached, args.require_coverage))
}

/// The sweep's status: its failures' first; else 5 when coverage is required and a required
/// situation was never reached; else 0.
fn exit_code(summary: &Summary, never_reached: &[&str], require_coverage: bool) -> u8 {
    match summary.exit_code() {
        0 if require_coverage && !never_reached.is_empty() => super::EXIT_UNCOVERED,
        code => code,
    }
}

/// The situations `scenario` requires that `sometimes` never counted, in the scenario's order.
fn never_reached(scenario: crate::scenarios::Scenario, sometimes: &lease_check::Coverage) -> Vec<&'static str> {
    scenario.situations().iter().copied().filter(|name| sometimes.get(name) == 0).collect()
}

/// The seeds to run. The base is `--seeds`' start, `--seed-base`, the date, or 0; the end is
/// `--seeds`' end, none with `--duration`, or [`SEEDS_DEFAULT`] seeds on.
fn plan(args: &SweepArgs, date: Option<Date>) -> Result<SeedPlan, BadInput> {
    let (base, end) = match &args.seeds {
        Some(range) => {
            let range = parse_seeds(range)?;
            (range.start, Some(range.end))
        }
        None => {
            let base = args.seed_base.or(date.map(Date::seed_base)).unwrap_or(0);
            let end = match args.duration {
                Some(_) => None,
                None => Some(base.checked_add(SEEDS_DEFAULT).ok_or_else(|| {
                    BadInput(format!("--seed-base {base} leaves no room for {SEEDS_DEFAULT} seeds; give --seeds"))
                })?),
            };
            (base, end)
        }
    };
    let plan = SeedPlan { base, end, shard: args.shard };
    if plan.is_empty() {
        let range = format!("{base}..{}", end.expect("only a bounded plan is empty"));
        return Err(BadInput(format!(
            "shard {} of {range} holds no seed: the range is shorter than the shard index",
            plan.shard
        )));
    }
    Ok(plan)
}

/// The command that runs the same seeds again, or `None` if none ran.
fn rerun(target: Target, plan: &SeedPlan, ran: u64) -> Option<String> {
    let range = plan.rerun_range(ran)?;
    let shard = if plan.shard == Shard::WHOLE { String::new() } else { format!(" --shard {}", plan.shard) };
    let bug = target.bug.map(|bug| format!(" --bug {bug}")).unwrap_or_default();
    Some(format!("{} sweep --scenario {} --seeds {range}{shard}{bug}", runner::CARGO_RUN, target.scenario.name()))
}

/// What stops a sweep: the time budget, or Ctrl-C. Both only stop new seeds from starting.
#[derive(Default)]
struct Flags {
    /// Set by either: the sweep's threads start no new seed.
    stop: Arc<AtomicBool>,
    /// Set by Ctrl-C (or SIGTERM).
    interrupted: Arc<AtomicBool>,
    /// Failing seeds so far, for the progress bar.
    failed: std::sync::atomic::AtomicU64,
}

impl Flags {
    /// Makes Ctrl-C (and SIGTERM, which CI sends on cancel) stop the sweep after the seeds in
    /// flight; a second one quits at once.
    fn stop_on_ctrl_c(&self) {
        let (stop, interrupted) = (self.stop.clone(), self.interrupted.clone());
        let handler = move || {
            if interrupted.swap(true, Ordering::Relaxed) {
                eprintln!("lease-sim: interrupted again; quitting without a summary");
                std::process::exit(EXIT_FORCED);
            }
            stop.store(true, Ordering::Relaxed);
            eprintln!("lease-sim: interrupted; finishing the seeds in flight (Ctrl-C again to quit at once)");
        };
        if let Err(error) = ctrlc::set_handler(handler) {
            eprintln!("lease-sim: Ctrl-C will not stop the sweep cleanly: {error}");
        }
    }

    /// Runs `sweep` while a timer thread sets `stop` once `budget` (if any) has passed. The timer
    /// reads the wall clock outside the simulated worlds, and is cancelled when `sweep` returns.
    fn with_deadline<T>(&self, budget: Option<Duration>, sweep: impl FnOnce() -> T) -> T {
        let Some(budget) = budget else { return sweep() };
        std::thread::scope(|scope| {
            let (cancel, cancelled) = mpsc::channel::<()>();
            scope.spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = cancelled.recv_timeout(budget) {
                    self.stop.store(true, Ordering::Relaxed);
                }
            });
            let result = sweep();
            drop(cancel);
            result
        })
    }
}

fn progress_bar(plan: &SeedPlan) -> indicatif::ProgressBar {
    let (bar, template) = match plan.len() {
        Some(len) => (indicatif::ProgressBar::new(len), "{bar:40} {pos}/{len} seeds {per_sec} eta {eta} {msg}"),
        None => (indicatif::ProgressBar::new_spinner(), "{spinner} {pos} seeds {per_sec} elapsed {elapsed} {msg}"),
    };
    bar.set_style(indicatif::ProgressStyle::with_template(template).expect("the progress template is valid"));
    bar
}

fn cannot_write(path: &std::path::Path, error: std::io::Error) -> BadInput {
    BadInput(format!("cannot write {}: {error}", path.display()))
}

/// `recheck: 8 of 500 seeds run twice (one in 64): every history repeated`, or how many did not.
fn recheck_line(summary: &Summary, every: u64) -> String {
    if every == 0 {
        return "recheck: off (--recheck 0): no seed run twice".to_string();
    }
    let differed =
        summary.failures.iter().filter(|failure| failure.invariant == runner::Finding::Nondeterministic).count();
    let verdict = match differed {
        0 => "every history repeated".to_string(),
        n => format!("{n} DID NOT repeat their history (nondeterministic, exit 6)"),
    };
    format!("recheck: {} of {} seeds run twice (one in {every}): {verdict}", summary.rechecked, summary.runs)
}

fn print_summary(report: &Report) {
    let summary = report.summary;
    let bug = summary.bug.as_ref().map(|bug| format!(" bug={bug}")).unwrap_or_default();
    let date = report.seed_base_date.as_ref().map(|date| format!(" (the date {date} UTC)")).unwrap_or_default();
    println!(
        "sweep: scenario={}{bug} seed_base={}{date} shard={} runs={} threads={}",
        summary.scenario, report.seed_base, report.shard, summary.runs, summary.threads
    );
    println!("provenance: commit={} toolchain={}", report.commit, report.toolchain);
    let ends = report.seed_last.map(|last| format!(" (first {}, last {last})", summary.seed_first));
    println!("seeds: {}{}", report.seeds, ends.unwrap_or_default());
    match (report.ended, report.duration_s) {
        (Ended::RangeEnd, _) => println!("ended: every seed of the range ran"),
        (Ended::TimeUp, Some(budget_s)) => println!("ended: the {budget_s}s budget ran out"),
        (Ended::TimeUp, None) => unreachable!("only a time budget ends a sweep early without Ctrl-C"),
        (Ended::Interrupted, _) => println!("ended: INTERRUPTED (Ctrl-C or SIGTERM) before the end of the range"),
    }
    if let Some(rerun) = &report.rerun {
        println!("rerun: {rerun}");
    }
    println!(
        "speed: {:.1} seeds/s, simulated/wall = {:.1}x, wall {:.2}s",
        summary.seeds_per_sec,
        summary.sim_speedup,
        summary.wall_ms as f64 / 1e3
    );
    print_counts(&summary.totals, None);
    println!("{}", recheck_line(summary, report.recheck_every));
    println!(
        "per-seed p99: queue_wait median={:.1}ms worst={:.1}ms; end_to_end median={:.1}ms worst={:.1}ms",
        ms(summary.queue_wait_p99.p50_us),
        ms(summary.queue_wait_p99.max_us),
        ms(summary.end_to_end_p99.p50_us),
        ms(summary.end_to_end_p99.max_us)
    );
    println!("sometimes: {}", coverage_line(&summary.sometimes));
    println!("{}", super::windows_line(&summary.seeds_reaching, summary.runs));
    if let Some(scenario) = crate::scenarios::Scenario::from_name(summary.scenario) {
        let wanted = scenario.situations();
        let missing = &report.never_reached;
        match missing.is_empty() {
            true => println!("coverage: all {} situations of {} reached", wanted.len(), scenario.name()),
            false => println!(
                "coverage: {} of {} situations of {} reached; NEVER reached: {}",
                wanted.len() - missing.len(),
                wanted.len(),
                scenario.name(),
                missing.join(", ")
            ),
        }
    }
    if let (Some(dir), Some(written)) = (&report.failures_dir, report.failures_written) {
        let limit = if summary.failures.len() as u64 > FAILURES_WRITTEN_MAX {
            format!(" (at most {FAILURES_WRITTEN_MAX} are written; the list below has them all)")
        } else {
            String::new()
        };
        println!("failures dir: {}: files of {written} failing seeds{limit}", dir.display());
    }
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
