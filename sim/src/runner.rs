//! Running seeds: one at a time, or a sweep across threads.
//!
//! A seed's result depends on the seed alone: each seed gets its own world on whichever thread
//! takes it, results are gathered by seed, and the summary is built in seed order. So a sweep's
//! output is the same for any `--threads`.

use crate::check::{Coverage, Invariant};
use crate::figures::{Figures, Spread};
use crate::history::Entry;
use crate::scenarios::Scenario;
use crate::shard::SeedPlan;
use crate::world::durable::StoreKind;
use crate::world::{self, RunReport, Verdict};
use lease_core::Bug;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// What to run for one seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The scenario.
    pub scenario: Scenario,
    /// The planted bug, if any.
    pub bug: Option<Bug>,
    /// Where the table and ledger keep their state.
    pub store: StoreKind,
}

impl Target {
    /// The scenario, with no planted bug.
    pub fn new(scenario: Scenario) -> Target {
        Target { scenario, bug: None, store: StoreKind::Memory }
    }

    /// The scenario with `bug` planted, on the in-memory store.
    pub fn planted(scenario: Scenario, bug: Option<Bug>) -> Target {
        Target { bug, ..Target::new(scenario) }
    }

    /// The same target on `store`.
    pub fn on(self, store: StoreKind) -> Target {
        Target { store, ..self }
    }

    /// Every parameter of `seed`'s world.
    pub fn params(self, seed: u64) -> crate::scenarios::Params {
        let mut params = self.scenario.params(seed, self.bug);
        params.store = self.store;
        params
    }

    /// Runs one seed. A panic inside the world is caught: [`Verdict::Crash`].
    pub fn run(self, seed: u64) -> RunReport {
        world::run(self.params(seed))
    }

    /// The one-line command that reproduces `seed`.
    pub fn reproduce(self, seed: u64) -> String {
        let bug = self.bug.map(|bug| format!(" --bug {bug}")).unwrap_or_default();
        let store = match self.store {
            StoreKind::Memory => String::new(),
            store => format!(" --store {store}"),
        };
        format!("cargo run --release -p lease-sim -- run --scenario {} --seed {seed}{bug}{store}", self.scenario.name())
    }
}

/// What a failing seed found: a broken invariant, or a crash (a panic inside the world). It
/// prints, and serialises, as the invariant's name or `crash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Finding {
    /// An invariant broke.
    Violated(Invariant),
    /// The world panicked: a core assertion or a harness bug.
    Crash,
}

impl Finding {
    /// The finding's name: the invariant's, or `crash`.
    pub fn name(self) -> &'static str {
        match self {
            Finding::Violated(invariant) => invariant.name(),
            Finding::Crash => "crash",
        }
    }

    /// The exit status it gives: 1 safety, 2 liveness, 4 crash.
    pub fn exit_code(self) -> u8 {
        match self {
            Finding::Violated(invariant) if invariant.is_safety() => EXIT_SAFETY,
            Finding::Violated(_) => EXIT_LIVENESS,
            Finding::Crash => EXIT_CRASH,
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Exit status: a safety invariant failed.
pub const EXIT_SAFETY: u8 = 1;
/// Exit status: a liveness check failed.
pub const EXIT_LIVENESS: u8 = 2;
/// Exit status: a world panicked (a core assertion or a harness bug).
pub const EXIT_CRASH: u8 = 4;

/// One failing seed, as a sweep reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The invariant that broke, or `crash`.
    pub invariant: Finding,
    /// What broke, in a sentence.
    pub message: String,
    /// The command that replays it.
    pub reproduce: String,
}

/// What one seed of a sweep leaves behind: small, so that a long sweep stays flat in memory.
#[derive(Debug, Clone)]
pub struct SeedResult {
    /// The seed.
    pub seed: u64,
    /// The failure, if any.
    pub failure: Option<Failure>,
    /// Situations reached.
    pub coverage: Coverage,
    /// The run's figures.
    pub figures: Figures,
    /// Simulated time of the run.
    pub sim_us: u64,
}

impl SeedResult {
    /// Reduces a report to what a sweep keeps.
    pub fn of(target: Target, report: &RunReport) -> SeedResult {
        let seed = report.params.seed;
        let failure = match &report.verdict {
            Verdict::Held => None,
            Verdict::Safety(violation) | Verdict::Liveness(violation) => Some(Failure {
                seed,
                invariant: Finding::Violated(violation.invariant),
                message: violation.message.clone(),
                reproduce: target.reproduce(seed),
            }),
            Verdict::Crash(crash) => Some(Failure {
                seed,
                invariant: Finding::Crash,
                message: crash.to_string(),
                reproduce: target.reproduce(seed),
            }),
        };
        SeedResult {
            seed,
            failure,
            coverage: report.coverage.clone(),
            figures: Figures::of_run(report),
            sim_us: report.sim_us,
        }
    }
}

/// A hash of a history, for comparing runs within one process. It hashes the entries themselves
/// (every field of every line, in order) rather than their JSON, which would cost more than the
/// run; two histories with equal hashes render to the same JSONL bytes.
pub fn history_hash(history: &[Entry]) -> u64 {
    use std::hash::{Hash, Hasher};
    // `DefaultHasher::new()` has fixed keys: the same entries give the same hash on every thread.
    let mut hasher = std::hash::DefaultHasher::new();
    history.hash(&mut hasher);
    hasher.finish()
}

/// A sweep's summary. `--json` prints exactly this.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The scenario.
    pub scenario: &'static str,
    /// The planted bug, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bug: Option<String>,
    /// First seed.
    pub seed_first: u64,
    /// Seeds run.
    pub runs: u64,
    /// Every failing seed, in seed order.
    pub failures: Vec<Failure>,
    /// Seeds per wall-clock second.
    pub seeds_per_sec: f64,
    /// Simulated time over wall time.
    pub sim_speedup: f64,
    /// Wall time, in milliseconds.
    pub wall_ms: u64,
    /// Threads used.
    pub threads: usize,
    /// How often each interesting situation happened, all seeds together.
    pub sometimes: Coverage,
    /// How many seeds reached each interesting situation at least once.
    pub seeds_reaching: Coverage,
    /// Counts, all seeds together.
    pub totals: Figures,
    /// Queue wait across all seeds' p99s: the spread of per-seed p99 values.
    pub queue_wait_p99: Spread,
    /// End-to-end delay across all seeds' p99s.
    pub end_to_end_p99: Spread,
    /// Whether the sweep was interrupted before its last seed.
    pub interrupted: bool,
}

impl Summary {
    /// The exit status: 0 every run held; else the gravest finding's: 1 a safety invariant
    /// failed, then 4 a world panicked, then 2 liveness failed.
    pub fn exit_code(&self) -> u8 {
        let codes = self.failures.iter().map(|failure| failure.invariant.exit_code());
        codes.min_by_key(|&code| [EXIT_SAFETY, EXIT_CRASH, EXIT_LIVENESS].iter().position(|&c| c == code)).unwrap_or(0)
    }
}

/// Runs `seeds` on `threads` threads. `on_done` is called once per finished seed (for progress);
/// `stop` ends the sweep early (Ctrl-C, a time budget): seeds already started still finish.
pub fn sweep(
    target: Target,
    seeds: &[u64],
    threads: usize,
    stop: &AtomicBool,
    on_done: &(dyn Fn(&SeedResult) + Sync),
) -> (Vec<SeedResult>, std::time::Duration) {
    let results = Mutex::new(Vec::with_capacity(seeds.len()));
    let threads = threads.min(seeds.len().max(1));
    let wall = sweep_by(target, threads, stop, &|k| seeds.get(k as usize).copied(), &|_, result| {
        on_done(&result);
        results.lock().expect("no sweep thread panics while holding the results").push(result);
    });
    let mut results = results.into_inner().expect("sweep threads finished");
    results.sort_by_key(|result| result.seed);
    (results, wall)
}

/// Runs the seeds of `plan` on `threads` threads, in plan order, until the plan ends or `stop`
/// is set (Ctrl-C, a time budget), and folds their results into a [`Tally`] as they finish.
/// Every seed started runs to its end, so the seeds run are always the plan's first
/// `tally.runs`, whatever stopped the sweep.
///
/// `on_report` sees each seed's whole report, history included, on the worker thread that ran
/// it, just before the report is dropped: the one moment a sweep holds a history, so a failing
/// seed's history can be written out there without running the seed again.
pub fn sweep_plan(
    target: Target,
    plan: &SeedPlan,
    threads: usize,
    stop: &AtomicBool,
    on_report: &(dyn Fn(&RunReport, &SeedResult) + Sync),
) -> (Tally, std::time::Duration) {
    let tally = Mutex::new(Tally::default());
    // No more threads than seeds; at least one, which finds an empty plan empty.
    let seeds_max = plan.len().map_or(usize::MAX, |len| usize::try_from(len).unwrap_or(usize::MAX));
    let threads = threads.min(seeds_max.max(1));
    let wall = sweep_by(target, threads, stop, &|k| plan.seed(k), &|report, result| {
        on_report(report, &result);
        tally.lock().expect("no sweep thread panics while holding the tally").add(&result);
    });
    let tally = tally.into_inner().expect("sweep threads finished");
    // Each index runs once, so the seeds are distinct plan seeds; they are the plan's first
    // `runs` exactly when the highest is seed number `runs - 1`.
    let last = tally.runs.checked_sub(1).and_then(|k| plan.seed(k));
    assert_eq!(tally.seed_max, last, "a sweep of {plan:?} ran seeds that are not the plan's first {}", tally.runs);
    (tally, wall)
}

/// The sweep loop: each thread takes the next index `k`, runs `seed_at(k)`, hands the report and
/// result to `on_result`, and stops at the first index with no seed or once `stop` is set. An
/// index is taken only when it will be run, so the indices run are always `0..n`.
fn sweep_by(
    target: Target,
    threads: usize,
    stop: &AtomicBool,
    seed_at: &(dyn Fn(u64) -> Option<u64> + Sync),
    on_result: &(dyn Fn(&RunReport, SeedResult) + Sync),
) -> std::time::Duration {
    assert!(threads > 0, "a sweep needs a thread");
    let next = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Some(seed) = seed_at(next.fetch_add(1, Ordering::Relaxed)) else { return };
                let report = target.run(seed);
                let result = SeedResult::of(target, &report);
                on_result(&report, result);
            });
        }
    });
    started.elapsed()
}

/// A sweep's results, folded in as they finish, in any order: all that [`summarise`] needs, in
/// memory that grows by two numbers a seed (its p99s) and its failure, if any. A kept
/// [`SeedResult`] costs about 1.6 KB, and a time-boxed night runs hundreds of thousands of seeds.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Seeds folded in.
    pub runs: u64,
    /// The lowest seed folded in.
    pub seed_min: Option<u64>,
    /// The highest seed folded in.
    pub seed_max: Option<u64>,
    sometimes: Coverage,
    seeds_reaching: Coverage,
    totals: Figures,
    sim_us: u64,
    queue_wait_p99s: Vec<u64>,
    end_to_end_p99s: Vec<u64>,
    failures: Vec<Failure>,
}

impl Tally {
    /// Folds one seed's result in.
    pub fn add(&mut self, result: &SeedResult) {
        self.runs += 1;
        self.seed_min = Some(self.seed_min.map_or(result.seed, |seed| seed.min(result.seed)));
        self.seed_max = Some(self.seed_max.map_or(result.seed, |seed| seed.max(result.seed)));
        self.sometimes.merge(&result.coverage);
        self.seeds_reaching.merge(&result.coverage.reached());
        self.totals.add_counts(&result.figures);
        self.sim_us += result.sim_us;
        self.queue_wait_p99s.push(result.figures.queue_wait.p99_us);
        self.end_to_end_p99s.push(result.figures.end_to_end.p99_us);
        self.failures.extend(result.failure.clone());
    }

    /// The summary of everything folded in; failures in seed order.
    pub fn summary(mut self, target: Target, wall: std::time::Duration, threads: usize, interrupted: bool) -> Summary {
        self.failures.sort_by_key(|failure| failure.seed);
        let wall_s = wall.as_secs_f64().max(1e-9);
        Summary {
            scenario: target.scenario.name(),
            bug: target.bug.map(|bug| bug.name().to_string()),
            seed_first: self.seed_min.unwrap_or(0),
            runs: self.runs,
            failures: self.failures,
            seeds_per_sec: self.runs as f64 / wall_s,
            sim_speedup: self.sim_us as f64 / 1e6 / wall_s,
            wall_ms: wall.as_millis() as u64,
            threads,
            sometimes: self.sometimes,
            seeds_reaching: self.seeds_reaching,
            totals: self.totals,
            queue_wait_p99: Spread::of(self.queue_wait_p99s),
            end_to_end_p99: Spread::of(self.end_to_end_p99s),
            interrupted,
        }
    }
}

/// Summarises a sweep's results, in seed order.
pub fn summarise(
    target: Target,
    results: &[SeedResult],
    wall: std::time::Duration,
    threads: usize,
    interrupted: bool,
) -> Summary {
    let mut tally = Tally::default();
    for result in results {
        tally.add(result);
    }
    tally.summary(target, wall, threads, interrupted)
}

/// How fast the default sweep catches one planted bug.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Catch {
    /// The planted bug.
    pub bug: String,
    /// The invariant that caught it (or `crash`); `None` if it escaped the budget.
    pub invariant: Option<Finding>,
    /// The first failing seed at or after the start.
    pub first_failing_seed: Option<u64>,
    /// Seeds run up to and including the first failing one (the budget, if it escaped).
    pub seeds_to_failure: u64,
    /// Wall time to the first failure, in milliseconds.
    pub wall_ms: u64,
    /// The command that replays the first failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reproduce: Option<String>,
}

/// How fast one planted bug is caught from several starting seeds: the spread that says whether
/// a bug is loud (caught in a handful of seeds from anywhere) or needs a rare interleaving.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hunted {
    /// The planted bug.
    pub bug: String,
    /// One catch per starting seed, in start order.
    pub catches: Vec<Catch>,
    /// The median of the seeds to failure (an escape counts as the budget).
    pub median_seeds: u64,
    /// The most seeds to failure (the budget, if any start escaped).
    pub worst_seeds: u64,
    /// Starts from which the bug escaped the budget.
    pub escaped: usize,
}

impl Hunted {
    /// The invariants (or `crash`) that caught the bug, each once, in order of first appearance.
    pub fn caught_by(&self) -> Vec<Finding> {
        let mut found: Vec<Finding> = Vec::new();
        for finding in self.catches.iter().filter_map(|catch| catch.invariant) {
            if !found.contains(&finding) {
                found.push(finding);
            }
        }
        found
    }
}

/// Hunts the target's planted bug from each of `starts`, `budget` seeds at most each.
pub fn hunt_from(target: Target, starts: &[u64], budget: u64, threads: usize, stop: &AtomicBool) -> Hunted {
    assert!(!starts.is_empty(), "a hunt needs a starting seed");
    let bug = target.bug.expect("a hunt plants a bug");
    let catches: Vec<Catch> = starts.iter().map(|&from| hunt(target, from, budget, threads, stop)).collect();
    let mut seeds: Vec<u64> = catches.iter().map(|catch| catch.seeds_to_failure).collect();
    seeds.sort_unstable();
    Hunted {
        bug: bug.name().to_string(),
        median_seeds: seeds[seeds.len() / 2],
        worst_seeds: *seeds.last().expect("a start"),
        escaped: catches.iter().filter(|catch| catch.invariant.is_none()).count(),
        catches,
    }
}

/// Sweeps the target (its bug planted) from seed `from` on, in order, until the first failing
/// seed or `budget` seeds. The first failure is the lowest failing seed, whatever `threads` is:
/// seeds run in chunks, and a chunk reports its lowest failure.
pub fn hunt(target: Target, from: u64, budget: u64, threads: usize, stop: &AtomicBool) -> Catch {
    let bug = target.bug.expect("a hunt plants a bug");
    let started = Instant::now();
    let chunk = (threads as u64 * 2).max(1);
    let mut next = from;
    while next < from + budget && !stop.load(Ordering::Relaxed) {
        let end = (next + chunk).min(from + budget);
        let seeds: Vec<u64> = (next..end).collect();
        let (results, _) = sweep(target, &seeds, threads, stop, &|_| {});
        if let Some(failure) = results.iter().find_map(|result| result.failure.as_ref()) {
            return Catch {
                bug: bug.name().to_string(),
                invariant: Some(failure.invariant),
                first_failing_seed: Some(failure.seed),
                seeds_to_failure: failure.seed - from + 1,
                wall_ms: started.elapsed().as_millis() as u64,
                reproduce: Some(failure.reproduce.clone()),
            };
        }
        next = end;
    }
    Catch {
        bug: bug.name().to_string(),
        invariant: None,
        first_failing_seed: None,
        seeds_to_failure: next - from,
        wall_ms: started.elapsed().as_millis() as u64,
        reproduce: None,
    }
}
