//! A service on a store: worker threads and reclaimer threads driving `lease-core`'s state
//! machines against a real database, on a real clock, with failures injected so that recovery
//! shows. The `service` example is a command line over [`run`]; docs/stores.md, "The example: a
//! service", walks through it.
//!
//! **Not for a simulated world.** This module reads the host's clock and runs threads; nothing
//! else in the crate does, and nothing in `lease-sim` calls it.
//!
//! **How a request travels.** [`Worker`] and [`Reclaimer`] are sans-IO: they say what to send
//! ([`WorkerAction::Send`], [`ReclaimAction::Send`]) and take the answer back (`handle_reply`);
//! they sleep until `poll_timeout` and then `handle_timeout`. Here the "network" is a call on the
//! thread's own store handle (one database connection), so every request is answered at once and
//! none is lost or duplicated: the state machines' retries stay idle, their rules do the rest.
//!
//! **The dependency** is a mock: it takes [`Options::effect_latency`], then produces an output
//! whose id is a function of the operation and the epoch it ran under ([`output_of`]), so an
//! effect repeated under a later epoch would claim the operation with a *different* output, and
//! the ledger would keep it as a rival: a repeat cannot hide. The output is recorded through
//! [`crate::LedgerStore::apply`], which never overwrites. On a job's first attempt the worker executes
//! at once (no earlier holder can have produced anything); on any later one it looks the
//! operation up first and adopts what is recorded rather than run the effect again.
//!
//! **The failures injected**, each on the job's first lease only (epoch 1), so each strikes once:
//! - [`Injected::CrashAfterEffect`] (jobs `0..crash_after_effect`): the worker crashes right after
//!   the ledger recorded its output, before it completes the job. Its lease expires; a reclaimer
//!   lists it, fences it (a new epoch), looks the operation up, adopts the recorded output and
//!   completes the job. The worker restarts as a new life of the same id.
//! - [`Injected::LostReply`] (the next `lost_reply` jobs): the dependency recorded the output but
//!   its answer was lost, so the worker hears "failed" and requeues the job; the next worker to
//!   take it looks the operation up and adopts the output instead of running the effect again.
//!
//! **Bounded.** Every loop stops after [`STEPS_MAX`] steps or at [`Options::time_limit`],
//! whichever comes first; a run that did not finish shows as jobs not ended, never as a hang.
//!
//! **Checked.** At the end [`run`] reads back every job ([`crate::TableStore::job`]), its operation
//! ([`crate::LedgerStore::op`]) and the store's history log ([`crate::TableStore::events`]): every job must have
//! ended exactly once, completed with the one output the ledger recorded, after exactly one
//! applied effect.

use crate::{Caller, Clock, Place, Store, StoreError};
use lease_core::{
    Apply, Bugs, ConfigError, Enqueued, Epoch, Execution, JobId, JobState, OpId, Outcome, OutputId, Owner,
    ReclaimAction, Reclaimer, ReclaimerConfig, ReclaimerId, RequestId, Span, TableConfig, Time, Worker, WorkerAction,
    WorkerConfig, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::{Entry, Event, Node};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// The most jobs one run enqueues.
pub const JOBS_MAX: u64 = 1_000_000;
/// The most worker threads, and the most reclaimer threads, of one run.
pub const THREADS_MAX: u32 = 64;
/// The most steps (a wake-up, its requests and its answers) one worker or reclaimer loop takes.
pub const STEPS_MAX: u64 = 1_000_000;
/// Output ids are `job * OUTPUTS_PER_JOB + epoch` (see [`output_of`]).
const OUTPUTS_PER_JOB: u64 = 1_000_000;

/// A new handle on `place` for the service (one connection), the schema migrated if needed. On
/// SQLite the table's clock is the host's, which the service passes in ([`HostClock`]); on
/// PostgreSQL it is the server's ([`Clock::Database`]), so services on many machines share one.
pub fn open(place: &Place, config: TableConfig) -> Result<Box<dyn Store + Send>, StoreError> {
    let clock = match place {
        Place::Sqlite { .. } => Clock::Caller,
        Place::Postgres { .. } => Clock::Database,
    };
    place.open(config, Bugs::NONE, clock)
}

/// What a run does. Every field is checked by [`Options::validate`]; see [`Options::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Jobs enqueued at the start, ids `0..jobs`; at most [`JOBS_MAX`].
    pub jobs: u64,
    /// Worker threads, each with its own connection; 1 to [`THREADS_MAX`].
    pub workers: u32,
    /// Reclaimer threads, each with its own connection; 1 to [`THREADS_MAX`].
    pub reclaimers: u32,
    /// The table's lease ttl. The workers' and reclaimers' timings are fractions of it.
    pub lease_ttl: Span,
    /// How long the mock dependency takes to produce an output.
    pub effect_latency: Span,
    /// Jobs `0..crash_after_effect` crash their first worker right after the effect.
    pub crash_after_effect: u64,
    /// The next `lost_reply` jobs lose the dependency's answer on their first attempt.
    pub lost_reply: u64,
    /// The most expired leases one reclaim batch takes.
    pub batch_max: usize,
    /// The most worker grants a job gets before it is dead-lettered.
    pub attempts_max: u32,
    /// When every loop stops, done or not.
    pub time_limit: Duration,
}

impl Default for Options {
    /// 50 jobs, 4 workers, 1 reclaimer, a 300 ms lease, a 3 ms dependency, 2 crashes after the
    /// effect, 1 lost reply, batches of 8, 3 attempts, 30 s.
    fn default() -> Options {
        Options {
            jobs: 50,
            workers: 4,
            reclaimers: 1,
            lease_ttl: Span::from_ms(300),
            effect_latency: Span::from_ms(3),
            crash_after_effect: 2,
            lost_reply: 1,
            batch_max: 8,
            attempts_max: 3,
            time_limit: Duration::from_secs(30),
        }
    }
}

impl Options {
    /// Checks that the run can work; the message says what to change.
    pub fn validate(&self) -> Result<(), ServiceError> {
        let bad = |message: String| Err(ServiceError::Options(message));
        if self.jobs == 0 || self.jobs > JOBS_MAX {
            return bad(format!("jobs must be 1 to {JOBS_MAX}, not {}", self.jobs));
        }
        if !(1..=THREADS_MAX).contains(&self.workers) || !(1..=THREADS_MAX).contains(&self.reclaimers) {
            return bad(format!("workers and reclaimers must be 1 to {THREADS_MAX} each"));
        }
        if self.crash_after_effect.saturating_add(self.lost_reply) > self.jobs {
            return bad(format!(
                "{} crashes and {} lost replies need as many jobs, but there are {}",
                self.crash_after_effect, self.lost_reply, self.jobs
            ));
        }
        if self.lease_ttl < Span::from_ms(20) || self.lease_ttl > Span::from_secs(3_600) {
            return bad(format!("the lease ttl must be 20 ms to 1 h, not {}", self.lease_ttl));
        }
        if self.effect_latency.0 * 4 > self.lease_ttl.0 {
            return bad(format!(
                "the effect takes {} but a lease lasts {}: keep the effect under a quarter of the lease, \
                 or every worker outlives its lease",
                self.effect_latency, self.lease_ttl
            ));
        }
        if self.lost_reply > 0 && self.attempts_max < 2 {
            return bad("a lost reply needs a second attempt: attempts_max must be at least 2".to_string());
        }
        if self.time_limit.is_zero() {
            return bad("the time limit must be positive".to_string());
        }
        self.table().validate()?;
        self.worker().validate()?;
        self.reclaimer().validate()?;
        Ok(())
    }

    /// The table's limits: room for every job at once.
    pub fn table(&self) -> TableConfig {
        let capacity = usize::try_from(self.jobs).unwrap_or(usize::MAX);
        TableConfig { capacity, lease_ttl: self.lease_ttl, batch_max: self.batch_max, attempts_max: self.attempts_max }
    }

    /// A worker's timing: a heartbeat every third of the lease, a fifth of it kept as the margin
    /// for clock drift, and a tenth of it between acquires on an empty queue.
    pub fn worker(&self) -> WorkerConfig {
        let ttl = self.lease_ttl;
        WorkerConfig {
            lease_ttl: ttl,
            heartbeat_every: ttl / 3,
            drift_margin: ttl / 5,
            request_timeout: ttl / 5,
            idle_backoff: ttl / 10,
            acquire_wait: Span::ZERO,
        }
    }

    /// A reclaimer's timing: a scan every quarter of the lease.
    pub fn reclaimer(&self) -> ReclaimerConfig {
        ReclaimerConfig { scan_every: self.lease_ttl / 4, request_timeout: self.lease_ttl / 5, retries_max: 3 }
    }

    /// The failure injected into `job` under `epoch`, if any: only on its first lease.
    pub fn fault(&self, job: JobId, epoch: Epoch) -> Option<Injected> {
        if epoch != Epoch(1) {
            return None;
        }
        if job.0 < self.crash_after_effect {
            return Some(Injected::CrashAfterEffect);
        }
        if job.0 < self.crash_after_effect + self.lost_reply {
            return Some(Injected::LostReply);
        }
        None
    }
}

/// A failure injected into one job's first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// The worker crashes after the ledger recorded its output, before it completes the job.
    CrashAfterEffect,
    /// The dependency records the output, but its answer is lost: the worker hears "failed".
    LostReply,
}

/// What stops a run before it can be judged.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Options that cannot work.
    #[error("bad options: {0}")]
    Options(String),
    /// A timing the core refuses.
    #[error("bad options: {0}")]
    Timing(#[from] ConfigError),
    /// The store failed (could not be opened or reached, or refused a call).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store already knew a job: the service needs a fresh file or schema.
    #[error(
        "the store answered {answer:?} to enqueuing job {job}: it already holds jobs; \
         point the service at a fresh file or schema"
    )]
    NotFresh {
        /// The job.
        job: JobId,
        /// The store's answer.
        answer: Enqueued,
    },
}

/// The host's clock in microseconds since the Unix epoch, made monotonic: the system clock is
/// read once, at the start, and a monotonic clock counts from there. A system clock stepped back
/// by the operating system therefore never makes a store refuse a `now` as earlier than the last.
#[derive(Debug, Clone, Copy)]
pub struct HostClock {
    start: Instant,
    start_unix_us: u64,
}

impl HostClock {
    /// Starts the clock now.
    pub fn start() -> HostClock {
        let since_epoch = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let start_unix_us = u64::try_from(since_epoch.as_micros()).expect("the year is before 294,000");
        HostClock { start: Instant::now(), start_unix_us }
    }

    /// The time now.
    pub fn now(&self) -> Time {
        let elapsed_us = u64::try_from(self.start.elapsed().as_micros()).expect("a run lasts less than 584,000 years");
        Time(self.start_unix_us + elapsed_us)
    }

    /// How long since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Sleeps until `at` on this clock, but not past `limit` since the start.
    fn sleep_until(&self, at: Time, limit: Duration) {
        let wait = Duration::from_micros(at.saturating_since(self.now()).0);
        std::thread::sleep(wait.min(limit.saturating_sub(self.elapsed())));
    }
}

/// The output the mock dependency produces for `op` under `epoch`: a function of both, so that
/// a repeat under a later epoch is a different output, which the ledger cannot take for the same.
/// Readable in the log: output 7000002 is job 7's effect under epoch 2.
pub fn output_of(op: OpId, epoch: Epoch) -> OutputId {
    assert!(epoch.0 < OUTPUTS_PER_JOB, "epoch {epoch:?} past the output numbering");
    OutputId(op.job.0 * OUTPUTS_PER_JOB + epoch.0)
}

/// What one worker or reclaimer thread did, beyond what the store's log shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Calls to the dependency.
    pub effects_run: u64,
    /// Outputs adopted by workers (found by a lookup, not run again).
    pub worker_adoptions: u64,
    /// Outputs adopted by reclaimers.
    pub reclaimer_adoptions: u64,
    /// Worker crashes injected.
    pub crashes: u64,
    /// Dependency answers lost.
    pub lost_replies: u64,
    /// Leases a worker stopped acting on (self-fenced, lost, fenced or conflicting).
    pub abandoned: u64,
    /// Batches stopped on two outputs for one operation: each is an alert for an operator.
    pub alerts: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.effects_run += other.effects_run;
        self.worker_adoptions += other.worker_adoptions;
        self.reclaimer_adoptions += other.reclaimer_adoptions;
        self.crashes += other.crashes;
        self.lost_replies += other.lost_replies;
        self.abandoned += other.abandoned;
        self.alerts += other.alerts;
    }
}

/// A run's outcome: what the threads did, what the store's log says, and what was found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The backend, as [`Place::name`] spells it.
    pub backend: &'static str,
    /// The options run.
    pub options: Options,
    /// What the threads did.
    pub tally: Tally,
    /// What the store's history log shows.
    pub log: LogFigures,
    /// How long the run took, enqueues to the last thread's end.
    pub elapsed: Duration,
    /// Broken safety: a job ended twice, or with another output than the ledger's, or an effect
    /// applied twice. Empty when it held.
    pub safety: Vec<String>,
    /// Jobs that had not ended when the loops stopped. Empty when it held.
    pub liveness: Vec<String>,
}

impl Summary {
    /// Whether every job ended exactly once, completed with its one recorded output.
    pub fn held(&self) -> bool {
        self.safety.is_empty() && self.liveness.is_empty()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (options, tally, log) = (&self.options, &self.tally, &self.log);
        writeln!(
            f,
            "completed  {} of {} jobs in {:.3}s ({} workers, {} reclaimer(s), lease {}, effect {})",
            log.completed,
            options.jobs,
            self.elapsed.as_secs_f64(),
            options.workers,
            options.reclaimers,
            options.lease_ttl,
            options.effect_latency,
        )?;
        writeln!(
            f,
            "faults     {} worker crash(es) after the effect, {} dependency answer(s) lost",
            tally.crashes, tally.lost_replies
        )?;
        writeln!(
            f,
            "recovery   {} lease(s) reclaimed, {} output(s) adopted ({} by a reclaimer, {} by a worker), \
             {} requeue(s)",
            log.reclaimed,
            tally.reclaimer_adoptions + tally.worker_adoptions,
            tally.reclaimer_adoptions,
            tally.worker_adoptions,
            log.requeued,
        )?;
        writeln!(
            f,
            "effects    {} dependency call(s), {} output(s) applied, for {} jobs",
            tally.effects_run, log.effects_applied, options.jobs
        )?;
        writeln!(f, "history    {} lines in the store's log", log.lines)?;
        for problem in self.safety.iter().chain(&self.liveness) {
            writeln!(f, "PROBLEM    {problem}")?;
        }
        if self.held() {
            write!(f, "verdict    held: every job ended exactly once, with the one output its ledger recorded")
        } else {
            write!(f, "verdict    FAILED: {} safety and {} liveness problem(s)", self.safety.len(), self.liveness.len())
        }
    }
}

/// Figures read from the store's history log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogFigures {
    /// Lines in the log.
    pub lines: u64,
    /// `terminal` lines with outcome `completed`.
    pub completed: u64,
    /// `reclaimed` lines: fences won.
    pub reclaimed: u64,
    /// `requeued` lines.
    pub requeued: u64,
    /// `effect_applied` lines.
    pub effects_applied: u64,
}

/// Enqueues `options.jobs` jobs on `backend`, runs the workers and reclaimers until every job has
/// ended (or a bound is reached), then reads everything back and judges it.
pub fn run(backend: &Place, options: &Options) -> Result<Summary, ServiceError> {
    options.validate()?;
    let clock = HostClock::start();
    let turns = Mutex::new(());
    let mut handle = Handle::open(backend, options, &clock, &turns)?;
    for job in (0..options.jobs).map(JobId) {
        let answer = handle.call(|store, now| store.enqueue(now, job))?;
        if !matches!(answer, Enqueued::Accepted { .. }) {
            return Err(ServiceError::NotFresh { job, answer });
        }
    }
    let stop = AtomicBool::new(false);
    let tally = std::thread::scope(|scope| {
        let shared = Shared { backend, options, clock: &clock, turns: &turns, stop: &stop };
        let workers: Vec<_> = (0..options.workers).map(|n| scope.spawn(move || work(WorkerId(n), shared))).collect();
        let reclaimers: Vec<_> =
            (0..options.reclaimers).map(|n| scope.spawn(move || reclaim(ReclaimerId(n), shared))).collect();
        let mut tally = Tally::default();
        for thread in workers.into_iter().chain(reclaimers) {
            let done = thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
            tally.add(&done);
        }
        Ok::<_, ServiceError>(tally)
    })?;
    let elapsed = clock.elapsed();
    let judged = judge(&mut *handle.store, options)?;
    Ok(Summary {
        backend: backend.name(),
        options: *options,
        tally,
        log: judged.log,
        elapsed,
        safety: judged.safety,
        liveness: judged.liveness,
    })
}

/// What every thread of a run shares.
#[derive(Clone, Copy)]
struct Shared<'a> {
    backend: &'a Place,
    options: &'a Options,
    clock: &'a HostClock,
    /// Whose turn it is to call a SQLite store (see [`Handle`]).
    turns: &'a Mutex<()>,
    /// Set when every job has ended, or a thread failed: every loop stops.
    stop: &'a AtomicBool,
}

/// One thread's connection to the store, and the table's clock it reads.
///
/// On SQLite the table's time is the caller's, read before the transaction takes SQLite's write
/// lock: two threads that read the clock in one order could take the lock in the other, and the
/// log, in commit order, would step back in time (measured here: 60 to 80 lines out of order in a
/// run of 300 jobs on 8 workers, and steps back of up to 127 ms in the test's run). So on SQLite a call reads the clock and runs holding the
/// run's one `turns` lock: SQLite serialises its writers anyway, and the log is in clock order.
/// PostgreSQL reads its own clock inside each transaction ([`Clock::Database`]) and needs no turn.
struct Handle<'a> {
    store: Box<dyn Store>,
    clock: &'a HostClock,
    turns: Option<&'a Mutex<()>>,
}

impl<'a> Handle<'a> {
    fn open(
        backend: &Place,
        options: &Options,
        clock: &'a HostClock,
        turns: &'a Mutex<()>,
    ) -> Result<Handle<'a>, StoreError> {
        let turns = matches!(backend, Place::Sqlite { .. }).then_some(turns);
        Ok(Handle { store: open(backend, options.table())?, clock, turns })
    }

    /// Calls the store at the table's time now.
    fn call<A>(&mut self, f: impl FnOnce(&mut dyn Store, Time) -> Result<A, StoreError>) -> Result<A, StoreError> {
        let _turn = self.turns.map(|turns| turns.lock().unwrap_or_else(PoisonError::into_inner));
        f(&mut *self.store, self.clock.now())
    }

    /// Writes a line no store call writes (a worker's `executing`, `adopted` and `abandoned`, the
    /// dependency's `dependency_failed`, a reclaimer's `batch_stopped`) into the log, in its
    /// order, as the simulator's and the live runner's nodes write theirs: without them the log
    /// shows answers whose reasons it lacks (a requeue with no failure, a completion with an
    /// output nobody adopted).
    fn line(&mut self, node: Node, event: Event) -> Result<(), StoreError> {
        let mut event = Some(event);
        self.call(|store, now| {
            let mut text = |stamp: Time| Some(Entry { t_us: stamp.0, node, event: event.take()? }.to_json());
            store.append(crate::Stamp::Now(now), &node.to_string(), &mut text)
        })?;
        Ok(())
    }
}

/// Runs `step` until it says it is done, the run is stopped, or a bound is reached. An error stops
/// every other loop too.
fn bounded(shared: Shared, mut step: impl FnMut() -> Result<bool, ServiceError>) -> Result<(), ServiceError> {
    let stop = shared.stop;
    for _ in 0..STEPS_MAX {
        if stop.load(Ordering::Relaxed) || shared.clock.elapsed() >= shared.options.time_limit {
            return Ok(());
        }
        match step() {
            Ok(false) => {}
            Ok(true) => {
                stop.store(true, Ordering::Relaxed);
                return Ok(());
            }
            Err(error) => {
                stop.store(true, Ordering::Relaxed);
                return Err(error);
            }
        }
    }
    Ok(())
}

/// One worker thread: its own connection, a [`Worker`] state machine, and a new life after each
/// injected crash.
fn work(id: WorkerId, shared: Shared) -> Result<Tally, ServiceError> {
    let (options, clock) = (shared.options, shared.clock);
    let mut handle = Handle::open(shared.backend, options, clock, shared.turns)?;
    handle.store.set_caller(Caller { from: Some(Owner::Worker(id)), batch: None });
    let mut tally = Tally::default();
    let mut worker = Worker::new(id, options.worker(), Bugs::NONE, clock.now())?;
    let mut life = 1;
    bounded(shared, || {
        while let Some(action) = worker.poll() {
            match action {
                WorkerAction::Send(request_id, request) => {
                    // Numbered apart from the worker's other lives, which number theirs from 0 too.
                    let numbered = crate::life_request(life, request_id);
                    match answer(&mut handle, id, numbered, options, &mut tally, request)? {
                        Some(reply) => worker.handle_reply(clock.now(), request_id, reply),
                        // Crashed: everything volatile is gone, and the lease is left to expire. The
                        // process restarts as a new life, with nothing but its id.
                        None => {
                            worker = Worker::new(id, options.worker(), Bugs::NONE, clock.now())?;
                            life += 1;
                        }
                    }
                }
                WorkerAction::Adopted { job, op, output, epoch } => {
                    tally.worker_adoptions += 1;
                    handle.line(Node::Worker(id.0), Event::Adopted { job, op, output, epoch })?;
                }
                WorkerAction::Abandoned { job, epoch, why } => {
                    tally.abandoned += 1;
                    handle.line(Node::Worker(id.0), Event::Abandoned { job, epoch, why: why.into() })?;
                }
            }
        }
        // Idle, with nothing left to do anywhere: every accepted job has ended.
        if worker.holding().is_none() && handle.store.backlog()? == 0 {
            return Ok(true);
        }
        clock.sleep_until(worker.poll_timeout(), options.time_limit);
        worker.handle_timeout(clock.now());
        Ok(false)
    })?;
    Ok(tally)
}

/// Answers one worker request: the "network" is this call. The store serves every request but
/// an `Execute` ([`crate::serve_worker`]), which is the mock dependency's. `None`: the worker
/// crashed before it heard the answer.
fn answer(
    handle: &mut Handle,
    owner: WorkerId,
    request_id: RequestId,
    options: &Options,
    tally: &mut Tally,
    request: WorkerRequest,
) -> Result<Option<WorkerReply>, StoreError> {
    let WorkerRequest::Execute { op, epoch } = request else {
        let served = handle.call(|store, now| crate::serve_worker(store, now, owner, request_id, request))?;
        return Ok(Some(served.reply));
    };
    // The worker's own line before it calls the dependency, as the simulator's and the live
    // runner's workers write it: the log then shows every call the ledger answers.
    handle.line(Node::Worker(owner.0), Event::Executing { job: op.job, op, epoch })?;
    let output = call_dependency(op, epoch, options.effect_latency);
    tally.effects_run += 1;
    // The dependency records its output under the worker's name (the handle's caller).
    let apply = handle.call(|store, now| store.apply(now, op, epoch, output))?;
    let reply = match (options.fault(op.job, epoch), apply) {
        (Some(Injected::CrashAfterEffect), Apply::Applied) => {
            tally.crashes += 1;
            return Ok(None);
        }
        (Some(Injected::LostReply), _) => {
            tally.lost_replies += 1;
            // The dependency's own line, as the simulator's and the live runner's write it:
            // without it the log shows a requeue with no failure to explain it.
            let from = Node::Worker(owner.0);
            handle.line(Node::Ledger, Event::DependencyFailed { from, job: op.job, op, epoch, after_effect: true })?;
            WorkerReply::Executed(Execution::Failed)
        }
        _ => WorkerReply::Executed(Execution::Done { output, apply }),
    };
    Ok(Some(reply))
}

/// The mock dependency: slow, and deterministic in what it produces.
fn call_dependency(op: OpId, epoch: Epoch, latency: Span) -> OutputId {
    std::thread::sleep(Duration::from_micros(latency.0));
    output_of(op, epoch)
}

/// One reclaimer thread: its own connection and a [`Reclaimer`] state machine.
fn reclaim(id: ReclaimerId, shared: Shared) -> Result<Tally, ServiceError> {
    let (options, clock) = (shared.options, shared.clock);
    let mut handle = Handle::open(shared.backend, options, clock, shared.turns)?;
    let mut tally = Tally::default();
    let mut reclaimer = Reclaimer::new(id, options.reclaimer(), Bugs::NONE, clock.now())?;
    bounded(shared, || {
        while let Some(action) = reclaimer.poll() {
            match action {
                ReclaimAction::Send(request_id, request) => {
                    let served = handle.call(|store, now| crate::serve_reclaimer(store, now, id, request))?;
                    reclaimer.handle_reply(clock.now(), request_id, served.reply);
                }
                ReclaimAction::Adopted { job, op, output, epoch, .. } => {
                    tally.reclaimer_adoptions += 1;
                    handle.line(Node::Reclaimer(id.0), Event::Adopted { job, op, output, epoch })?;
                }
                ReclaimAction::BatchStopped { batch, job, recorded, rival, untouched } => {
                    tally.alerts += 1;
                    let stopped = Event::BatchStopped { batch, job, identities: [recorded, rival], untouched };
                    handle.line(Node::Reclaimer(id.0), stopped)?;
                    eprintln!("ALERT {id}: job {job} has two outputs, {recorded:?} and {rival:?}: quarantined");
                }
                ReclaimAction::LostRace { .. } | ReclaimAction::GaveUp { .. } => {}
            }
        }
        if handle.store.backlog()? == 0 {
            return Ok(true);
        }
        clock.sleep_until(reclaimer.poll_timeout(), options.time_limit);
        reclaimer.handle_timeout(clock.now());
        Ok(false)
    })?;
    Ok(tally)
}

/// What [`judge`] found.
struct Judged {
    log: LogFigures,
    safety: Vec<String>,
    liveness: Vec<String>,
}

/// Reads every job, its operation and the store's log back, and judges the run: each job ended
/// exactly once (one `terminal` line), completed with the output its ledger recorded (and no
/// rival), after exactly one applied effect (one `effect_applied` line).
fn judge(store: &mut dyn Store, options: &Options) -> Result<Judged, StoreError> {
    let mut log = LogFigures::default();
    let (mut safety, mut liveness) = (Vec::new(), Vec::new());
    let mut ended: BTreeMap<u64, u64> = BTreeMap::new();
    let mut applied: BTreeMap<u64, u64> = BTreeMap::new();
    for (number, line) in store.events()?.iter().enumerate() {
        log.lines += 1;
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            safety.push(format!("log line {} is not JSON: {line}", number + 1));
            continue;
        };
        let job = value["job"].as_u64();
        match (value["kind"].as_str(), job) {
            (Some("terminal"), Some(job)) => {
                *ended.entry(job).or_default() += 1;
                log.completed += u64::from(value["outcome"] == "completed");
            }
            (Some("effect_applied"), Some(job)) => {
                *applied.entry(job).or_default() += 1;
                log.effects_applied += 1;
            }
            (Some("reclaimed"), _) => log.reclaimed += 1,
            (Some("requeued"), _) => log.requeued += 1,
            _ => {}
        }
    }
    for job in (0..options.jobs).map(JobId) {
        let record = store.job(job)?.expect("every job was enqueued");
        let op = store.op(OpId::for_job(job))?;
        let terminal_lines = ended.get(&job.0).copied().unwrap_or(0);
        let effect_lines = applied.get(&job.0).copied().unwrap_or(0);
        let JobState::Terminal(terminal) = record.state else {
            liveness.push(format!("job {job} had not ended when the loops stopped: {:?}", record.state));
            continue;
        };
        match terminal.outcome {
            Outcome::Completed { output } if op.recorded == Some(output) && op.rival.is_none() => {}
            outcome => safety.push(format!("job {job} ended {outcome:?}, but its ledger holds {op:?}")),
        }
        if terminal_lines != 1 {
            safety.push(format!("job {job} ended {terminal_lines} times in the log"));
        }
        if effect_lines != 1 {
            safety.push(format!("job {job} had {effect_lines} effects applied"));
        }
    }
    Ok(Judged { log, safety, liveness })
}
