//! Running seeds: one at a time, or a sweep across threads.
//!
//! A seed's result depends on the seed alone: each seed gets its own world on whichever thread
//! takes it, results are gathered by seed, and the summary is built in seed order. So a sweep's
//! output is the same for any `--threads`.
//!
//! That promise is checked as the sweep goes, as FoundationDB re-runs a share of its seeds: a
//! [`Recheck`] sample of the seeds runs twice, and a second history that differs from the first
//! is a finding of its own ([`Finding::Nondeterministic`], exit status 6).

use crate::scenarios::Scenario;
use crate::shard::SeedPlan;
use crate::world::durable::StoreKind;
use crate::world::{self, RunReport, Verdict};
use lease_check::figures::{Figures, Spread};
use lease_check::{Coverage, Invariant};
use lease_core::Bug;
use lease_history::Entry;
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
    pub fn params(self, seed: u64) -> crate::world::Params {
        let mut params = self.scenario.params(seed, self.bug);
        params.store = self.store;
        params
    }

    /// Runs one seed. A panic inside the world is caught: [`Verdict::Crash`].
    pub fn run(self, seed: u64) -> RunReport {
        world::run(self.params(seed))
    }

    /// The one-line command that reproduces `seed`, from a checkout.
    pub fn reproduce(self, seed: u64) -> String {
        format!("{CARGO_RUN} {}", self.replay_args(seed))
    }

    /// The arguments of `lease-sim` that replay `seed`: `run --scenario S --seed N ...`.
    pub fn replay_args(self, seed: u64) -> String {
        let bug = self.bug.map(|bug| format!(" --bug {bug}")).unwrap_or_default();
        let store = match self.store {
            StoreKind::Memory => String::new(),
            store => format!(" --store {store}"),
        };
        format!("run --scenario {} --seed {seed}{bug}{store}", self.scenario.name())
    }
}

/// The words that run `lease-sim` from a checkout, before its own arguments: every printed
/// reproduce line starts with them.
pub const CARGO_RUN: &str = "cargo run --release -p lease-sim --";

/// A reproduce file: a shell script, `sh FILE`, that runs `lease-sim ARGS` with the binary that
/// wrote it (its absolute path), so that it works from any directory, in a checkout or not; if
/// that binary is gone (exit 127: not found), it runs the same arguments with cargo, from a
/// checkout. Its first line is a plain command either way, so `$(head -n1 FILE) --trace` runs
/// it with more flags. `notes` follow as comments (the build that made it, what it expects).
///
/// The binary is named only when its path needs no quoting in a shell and is a `lease-sim`: a
/// test harness that calls this, or a path with a space, gets the cargo line alone.
pub fn reproduce_file(args: &str, notes: &[String]) -> String {
    reproduce_file_with(binary_at_hand().as_deref(), args, notes)
}

/// [`reproduce_file`] with the binary given: `None` writes the cargo line alone.
pub fn reproduce_file_with(binary: Option<&str>, args: &str, notes: &[String]) -> String {
    let mut out = match binary {
        Some(binary) => format!(
            "{binary} {args}\n\
             status=$?; [ \"$status\" -eq 127 ] || exit \"$status\"\n\
             # {binary} is gone: from a checkout of the build below, cargo builds it and runs the same.\n\
             exec {CARGO_RUN} {args}\n"
        ),
        None => format!("{CARGO_RUN} {args}\n"),
    };
    for note in notes {
        out.push_str(&format!("# {note}\n"));
    }
    out
}

/// The absolute path of this process's binary, when it is a `lease-sim` whose path a shell reads
/// as one word without quoting.
fn binary_at_hand() -> Option<String> {
    let path = std::env::current_exe().ok()?;
    let is_lease_sim = path.file_stem().is_some_and(|stem| stem == "lease-sim");
    let path = path.to_str()?;
    let plain = path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%".contains(&b));
    (is_lease_sim && plain && std::path::Path::new(path).is_file()).then(|| path.to_string())
}

/// What a failing seed found: a broken invariant, a crash (a panic inside the world), or a
/// second run of the seed that did not repeat the first. It prints, and serialises, as the
/// invariant's name, `crash` or `nondeterministic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Finding {
    /// An invariant broke.
    Violated(Invariant),
    /// The world panicked: a core assertion or a harness bug.
    Crash,
    /// The seed, run again in the same process, recorded a different history: something outside
    /// the seed reached the world (see [`Recheck`]).
    Nondeterministic,
}

impl Finding {
    /// The finding's name: the invariant's, or `crash`.
    pub fn name(self) -> &'static str {
        match self {
            Finding::Violated(invariant) => invariant.name(),
            Finding::Crash => "crash",
            Finding::Nondeterministic => "nondeterministic",
        }
    }

    /// The exit status it gives: 1 safety, 2 liveness, 4 crash, 6 nondeterministic.
    pub fn exit_code(self) -> u8 {
        match self {
            Finding::Violated(invariant) if invariant.is_safety() => EXIT_SAFETY,
            Finding::Violated(_) => EXIT_LIVENESS,
            Finding::Crash => EXIT_CRASH,
            Finding::Nondeterministic => EXIT_NONDETERMINISTIC,
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
/// Exit status: a seed run twice recorded two different histories (`sweep --recheck`). 5 is
/// `sweep --require-coverage`'s ([`crate::cli::EXIT_UNCOVERED`]).
pub const EXIT_NONDETERMINISTIC: u8 = 6;

/// Which seeds of a sweep run twice, to check that a seed's history depends on the seed alone:
/// one in `every`, chosen by a hash of the seed (so any shard or range samples its share, and
/// the same seeds every time); `every == 0` rechecks none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recheck {
    /// One seed in this many is run twice; 0: none.
    pub every: u64,
}

impl Recheck {
    /// No seed runs twice.
    pub const OFF: Recheck = Recheck { every: 0 };
    /// `sweep`'s default: one seed in 64, about 1.6% more runs.
    pub const DEFAULT: Recheck = Recheck { every: 64 };

    /// Whether `seed` runs twice.
    pub fn samples(self, seed: u64) -> bool {
        self.every != 0 && mix(seed).is_multiple_of(self.every)
    }
}

/// SplitMix64's finaliser: consecutive seeds land far apart, so `% every` samples any arithmetic
/// run of seeds (a shard's `base+I+k*N`) evenly.
fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How a second run of a seed differs from its first, or `None` when the two histories are the
/// same: the history hashes are compared, and a difference is named by its first differing line.
pub fn differs(first: &[Entry], second: &[Entry]) -> Option<String> {
    if history_hash(first) == history_hash(second) {
        return None;
    }
    let line = first.iter().zip(second).position(|(a, b)| a != b).unwrap_or(first.len().min(second.len()));
    let show = |history: &[Entry]| history.get(line).map_or_else(|| "(no line)".to_string(), Entry::to_json);
    Some(format!(
        "run again, the seed recorded another history: {} lines, then {}; first difference at line {}: {} then {}",
        first.len(),
        second.len(),
        line + 1,
        show(first),
        show(second)
    ))
}

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
    /// Whether the seed was run a second time to check its history repeats ([`Recheck`]).
    pub rechecked: bool,
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
            figures: report.figures(),
            sim_us: report.sim_us,
            rechecked: false,
        }
    }

    /// Runs the seed again and compares the second history with `first`'s: a difference is the
    /// seed's failure, in place of any the first run found (a finding that does not replay is not
    /// one to chase).
    pub fn recheck(&mut self, target: Target, first: &RunReport) {
        assert_eq!(first.params.seed, self.seed, "a seed is rechecked against its own first run");
        let second = target.run(self.seed);
        self.rechecked = true;
        self.fail_if_differs(target, differs(&first.history, &second.history));
    }

    /// Records `difference` (from [`differs`]), if any, as the seed's failure.
    pub fn fail_if_differs(&mut self, target: Target, difference: Option<String>) {
        let Some(difference) = difference else { return };
        let first = self.failure.as_ref().map(|failure| format!(" (the first run found {})", failure.invariant));
        let message = format!("{difference}{}", first.unwrap_or_default());
        let reproduce = target.reproduce(self.seed);
        self.failure = Some(Failure { seed: self.seed, invariant: Finding::Nondeterministic, message, reproduce });
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
    /// Seeds run a second time to check that their history repeats ([`Recheck`]).
    pub rechecked: u64,
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
    /// failed, then 6 a seed did not repeat its history, then 4 a world panicked, then 2
    /// liveness failed.
    pub fn exit_code(&self) -> u8 {
        const GRAVEST_FIRST: [u8; 4] = [EXIT_SAFETY, EXIT_NONDETERMINISTIC, EXIT_CRASH, EXIT_LIVENESS];
        let codes = self.failures.iter().map(|failure| failure.invariant.exit_code());
        codes.min_by_key(|&code| GRAVEST_FIRST.iter().position(|&c| c == code)).unwrap_or(0)
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
    let wall = sweep_by(target, threads, Recheck::OFF, stop, &|k| seeds.get(k as usize).copied(), &|_, result| {
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
    sweep_plan_rechecking(target, plan, threads, Recheck::OFF, stop, on_report)
}

/// [`sweep_plan`], with the seeds `recheck` samples run twice: `on_report` sees the first run's
/// report, and a result whose failure is [`Finding::Nondeterministic`] if the second differed.
pub fn sweep_plan_rechecking(
    target: Target,
    plan: &SeedPlan,
    threads: usize,
    recheck: Recheck,
    stop: &AtomicBool,
    on_report: &(dyn Fn(&RunReport, &SeedResult) + Sync),
) -> (Tally, std::time::Duration) {
    let tally = Mutex::new(Tally::default());
    // No more threads than seeds; at least one, which finds an empty plan empty.
    let seeds_max = plan.len().map_or(usize::MAX, |len| usize::try_from(len).unwrap_or(usize::MAX));
    let threads = threads.min(seeds_max.max(1));
    let wall = sweep_by(target, threads, recheck, stop, &|k| plan.seed(k), &|report, result| {
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

/// The sweep loop: each thread takes the next index `k`, runs `seed_at(k)` (twice if `recheck`
/// samples it), hands the report and result to `on_result`, and stops at the first index with no
/// seed or once `stop` is set. An index is taken only when it will be run, so the indices run are
/// always `0..n`.
fn sweep_by(
    target: Target,
    threads: usize,
    recheck: Recheck,
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
                let mut result = SeedResult::of(target, &report);
                if recheck.samples(seed) {
                    result.recheck(target, &report);
                }
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
    /// Seeds folded in that were run twice.
    pub rechecked: u64,
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
        self.rechecked += u64::from(result.rechecked);
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
            rechecked: self.rechecked,
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

#[cfg(test)]
mod tests {
    use super::{differs, Finding, Recheck, SeedResult, Tally, Target};
    use crate::scenarios::Scenario;

    // Proves the recheck's comparison: a history compared with itself, or with a second run of its
    // seed, is the same; a history with one line moved by a microsecond, or cut short, is not,
    // and the difference is named by its first differing line.
    #[test]
    fn a_second_history_that_differs_is_named_by_its_first_differing_line() {
        let target = Target::new(Scenario::CALM);
        let first = target.run(3);
        assert_eq!(differs(&first.history, &first.history), None);
        assert_eq!(differs(&first.history, &target.run(3).history), None, "a seed repeats its history");
        let mut moved = first.history.clone();
        moved[5].t_us += 1;
        let difference = differs(&first.history, &moved).expect("a line a microsecond later is a difference");
        assert!(difference.contains("first difference at line 6:"), "{difference}");
        let short = &first.history[..first.history.len() - 1];
        let difference = differs(&first.history, short).expect("a missing last line is a difference");
        assert!(difference.contains(&format!("at line {}: ", first.history.len())), "{difference}");
        assert!(difference.ends_with(" then (no line)"), "{difference}");
    }

    // Proves a seed whose second run differed is a `nondeterministic` failure with exit status
    // 6, counted as rechecked, and that a safety violation elsewhere in the sweep still ranks
    // first (exit 1).
    #[test]
    fn a_difference_is_a_nondeterministic_finding_with_exit_6() {
        let target = Target::new(Scenario::CALM);
        let report = target.run(3);
        let mut moved = report.history.clone();
        moved[2].t_us += 1;
        let mut result = SeedResult::of(target, &report);
        assert_eq!(result.failure, None, "calm seed 3 holds");
        result.rechecked = true;
        result.fail_if_differs(target, differs(&report.history, &moved));
        let failure = result.failure.clone().expect("the difference is the seed's failure");
        assert_eq!(failure.invariant, Finding::Nondeterministic);
        assert_eq!(failure.invariant.name(), "nondeterministic");
        assert_eq!(failure.reproduce, target.reproduce(3));
        let mut tally = Tally::default();
        tally.add(&result);
        tally.add(&SeedResult::of(target, &target.run(4)));
        let summary = tally.clone().summary(target, std::time::Duration::from_secs(1), 1, false);
        assert_eq!((summary.runs, summary.rechecked), (2, 1));
        assert_eq!(summary.exit_code(), super::EXIT_NONDETERMINISTIC);
        let canary = Target::planted(Scenario::SWARM, Some(lease_core::Bug::Canary));
        let results = (0..200).map(|seed| SeedResult::of(canary, &canary.run(seed)));
        let unsafe_seed = results.into_iter().find(|result| result.failure.is_some()).expect("the canary fails");
        tally.add(&unsafe_seed);
        assert_eq!(tally.summary(target, std::time::Duration::from_secs(1), 1, false).exit_code(), super::EXIT_SAFETY);
    }

    // Proves a reproduce file runs the binary that wrote it by its absolute path, falls back to
    // cargo's line only when that binary is gone (status 127), keeps the command on its first
    // line, and ends with its notes; with no binary to name, it is cargo's line alone.
    #[test]
    fn a_reproduce_file_runs_its_binary_and_falls_back_to_cargo() {
        let notes = ["found by lease-sim commit=abc".to_string()];
        let file = super::reproduce_file_with(Some("/opt/bin/lease-sim"), "run --seed 7", &notes);
        let lines: Vec<&str> = file.lines().collect();
        assert_eq!(lines[0], "/opt/bin/lease-sim run --seed 7", "{file}");
        assert_eq!(lines[1], r#"status=$?; [ "$status" -eq 127 ] || exit "$status""#, "{file}");
        assert!(lines.contains(&"exec cargo run --release -p lease-sim -- run --seed 7"), "{file}");
        assert_eq!(lines.last(), Some(&"# found by lease-sim commit=abc"), "{file}");
        let bare = super::reproduce_file_with(None, "run --seed 7", &notes);
        assert_eq!(bare, "cargo run --release -p lease-sim -- run --seed 7\n# found by lease-sim commit=abc\n");
        // A test harness is not a lease-sim: it names no binary.
        assert_eq!(super::reproduce_file("run --seed 7", &notes), bare);
    }

    // Proves the recheck samples one seed in `every`, from a plain range and from a shard's
    // stride alike, the same seeds each time, and none when off.
    #[test]
    fn the_recheck_samples_one_seed_in_every_from_any_stride() {
        let share = |recheck: Recheck, seeds: &mut dyn Iterator<Item = u64>| {
            let seeds: Vec<u64> = seeds.collect();
            seeds.iter().filter(|&&seed| recheck.samples(seed)).count() as f64 / seeds.len() as f64
        };
        let default = Recheck::DEFAULT;
        assert_eq!(default.every, 64);
        for stride in [1, 2, 64, 1000] {
            let got = share(default, &mut (0..64_000).map(|k| 7 + k * stride));
            assert!((0.8 / 64.0..1.2 / 64.0).contains(&got), "stride {stride}: {got}");
        }
        assert_eq!(share(Recheck::OFF, &mut (0..10_000)), 0.0);
        assert_eq!(share(Recheck { every: 1 }, &mut (0..100)), 1.0);
        let sampled: Vec<u64> = (0..1_000).filter(|&seed| default.samples(seed)).collect();
        assert_eq!(sampled, (0..1_000).filter(|&seed| default.samples(seed)).collect::<Vec<_>>());
    }
}
