//! A service on a store, on the runtime: worker and reclaimer runtimes against a real database,
//! on the host's clock, with failures injected so that recovery shows, and a check at the end
//! that every job ended exactly once. The `service` example is a command line over [`run`];
//! docs/stores.md, "The example: a service", walks through it.
//!
//! **The runtime, as a service runs it.** Each worker is a [`Runtime::work`] of one slot on a
//! [`StoreClient`] of its own; each reclaimer a [`Runtime::reclaim`]. On PostgreSQL every worker
//! and reclaimer has its own connection, and the server's clock stamps every line. On SQLite they
//! share one handle (one connection), whose thread reads the host's clock right before each call:
//! SQLite serialises its writers anyway, and the log, in commit order, is then in clock order too
//! (handles of their own would read the clock in one order and take SQLite's write lock in
//! another, and the log would step back in time).
//!
//! **The dependency** is a mock: it takes [`Options::effect_latency`], then produces an output
//! that names the operation and the epoch it ran under ([`output_bytes`]), so an effect repeated
//! under a later epoch would claim the operation with a *different* output, and the ledger would
//! keep it as a rival: a repeat cannot hide. The runtime records it under the epoch
//! ([`crate::Client::record`]), which never overwrites. On a job's first attempt the worker
//! executes at once (no earlier holder can have produced anything); on any later one it looks the
//! operation up first and adopts what is recorded rather than run the effect again.
//!
//! **The failures injected**, each on the job's first lease only, so each strikes once:
//! - [`Injected::CrashAfterEffect`] (jobs `0..crash_after_effect`): the worker crashes right after
//!   the ledger recorded its output, before it completes the job: a [`crate::Hook`] at
//!   `after_effect` never returns, and the worker's runtime is dropped, as a killed process's is.
//!   Its lease expires; a reclaimer lists it, fences it (a new epoch), looks the operation up,
//!   adopts the recorded output and completes the job. The worker restarts as a new life of the
//!   same id, which numbers its requests apart from the old one's.
//! - [`Injected::LostReply`] (the next `lost_reply` jobs): the dependency records the output but
//!   its answer is lost, so the handler fails and the runtime requeues the job; the next worker to
//!   take it looks the operation up and adopts the output instead of running the effect again.
//!
//! **Bounded.** Every runtime stops at [`Options::time_limit`] or once every job has ended,
//! whichever comes first; a run that did not finish shows as jobs not ended, never as a hang.
//!
//! **Checked.** At the end [`run`] reads back every job, its operation and the store's history
//! log: every job must have ended exactly once, completed with the one output the ledger
//! recorded, after exactly one applied effect.

use crate::store::{HostClock, StoreClient};
use crate::{
    output_id, Client, HandlerError, Hook, Job, OptionsError, Point, ReclaimerOptions, Runtime, WorkerOptions,
};
use futures::channel::mpsc;
use futures::future::{self, BoxFuture, FutureExt, Shared};
use futures::StreamExt;
use lease_core::{
    ConfigError, Enqueued, Epoch, JobId, JobState, OpId, Outcome, ReclaimerConfig, ReclaimerId, Span, TableConfig,
    WorkerConfig, WorkerId,
};
use lease_history::{Event, Node};
use lease_store::{Place, Store, StoreError};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most jobs one run enqueues.
pub const JOBS_MAX: u64 = 1_000_000;
/// The most workers, and the most reclaimers, of one run (each a runtime of its own).
pub const RUNTIMES_MAX: u32 = 64;

/// What a run does. Every field is checked by [`Options::validate`]; see [`Options::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Jobs enqueued at the start, ids `0..jobs`; at most [`JOBS_MAX`].
    pub jobs: u64,
    /// Workers, each a runtime of one slot; 1 to [`RUNTIMES_MAX`].
    pub workers: u32,
    /// Reclaimers; 1 to [`RUNTIMES_MAX`].
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
    /// When every runtime stops, done or not.
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
        if !(1..=RUNTIMES_MAX).contains(&self.workers) || !(1..=RUNTIMES_MAX).contains(&self.reclaimers) {
            return bad(format!("workers and reclaimers must be 1 to {RUNTIMES_MAX} each"));
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
        if self.effect_latency.0.saturating_mul(4) > self.lease_ttl.0 {
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

    /// A worker's timing: [`WorkerOptions::with_ttl`]'s (a heartbeat every third of the lease, a
    /// fifth of it kept as the margin for clock drift, a tenth of it between acquires on an empty
    /// queue).
    pub fn worker(&self) -> WorkerConfig {
        WorkerOptions::with_ttl(Vec::new(), self.lease_ttl).worker
    }

    /// A reclaimer's timing: [`ReclaimerOptions::with_ttl`]'s (a scan every quarter of the lease).
    pub fn reclaimer(&self) -> ReclaimerConfig {
        ReclaimerOptions::with_ttl(ReclaimerId(0), self.lease_ttl).reclaimer
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
    /// Options the runtime refuses.
    #[error("bad options: {0}")]
    Runtime(#[from] OptionsError),
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

/// The bytes the mock dependency produces for `op` under `epoch`: they name both, so that a
/// repeat under a later epoch is a different output ([`output_id`] of other bytes), which the
/// ledger cannot take for the same.
pub fn output_bytes(op: OpId, epoch: Epoch) -> Vec<u8> {
    format!("the output of {op} under {epoch}").into_bytes()
}

/// What the workers and reclaimers did, beyond what the store's log shows.
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

/// A run's outcome: what the runtimes did, what the store's log says, and what was found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The backend, as [`Place::name`] spells it.
    pub backend: &'static str,
    /// The options run.
    pub options: Options,
    /// What the runtimes did.
    pub tally: Tally,
    /// What the store's history log shows.
    pub log: LogFigures,
    /// How long the run took, enqueues to the last runtime's end.
    pub elapsed: Duration,
    /// Broken safety: a job ended twice, or with another output than the ledger's, or an effect
    /// applied twice. Empty when it held.
    pub safety: Vec<String>,
    /// Jobs that had not ended when the runtimes stopped. Empty when it held.
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

/// Resolves when every runtime must stop: every job has ended, or the time limit passed.
type Stop = Shared<BoxFuture<'static, ()>>;

/// What the run's parts share.
#[derive(Clone)]
struct Run {
    place: Place,
    options: Options,
    clock: HostClock,
    /// On SQLite, the one handle every part shares (see the module doc).
    shared: Option<StoreClient>,
    tally: Arc<Mutex<Tally>>,
    /// The jobs whose injected crash has struck, over every worker and life.
    crashed: Arc<Mutex<BTreeSet<JobId>>>,
    stop: Stop,
}

impl Run {
    /// A client for one part of the run, numbering its requests by `life`.
    async fn client(&self, life: u64) -> Result<StoreClient, StoreError> {
        match &self.shared {
            Some(shared) => Ok(shared.with_life(life)),
            None => StoreClient::open(&self.place, self.options.table(), self.clock, life).await,
        }
    }

    fn count(&self, add: impl FnOnce(&mut Tally)) {
        add(&mut self.tally.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// Enqueues `options.jobs` jobs on `place`, runs the workers and reclaimers until every job has
/// ended (or the time limit), then reads everything back and judges it.
pub async fn run(place: &Place, options: &Options) -> Result<Summary, ServiceError> {
    options.validate()?;
    let clock = HostClock::start();
    let started = Instant::now();
    let main = StoreClient::open(place, options.table(), clock, 1).await?;
    let jobs: Vec<(JobId, Vec<u8>)> = (0..options.jobs).map(|job| (JobId(job), Vec::new())).collect();
    let answers = main.enqueue_batch(jobs).await?;
    for (job, answer) in (0..options.jobs).map(JobId).zip(answers) {
        if !matches!(answer, Enqueued::Accepted { .. }) {
            return Err(ServiceError::NotFresh { job, answer });
        }
    }
    let stop = all_ended(main.clone(), options.lease_ttl / 10, options.time_limit).boxed().shared();
    let shared = matches!(place, Place::Sqlite { .. }).then(|| main.clone());
    let run = Run {
        place: place.clone(),
        options: *options,
        clock,
        shared,
        tally: Arc::default(),
        crashed: Arc::default(),
        stop,
    };
    let workers = future::try_join_all((0..options.workers).map(|n| work(run.clone(), WorkerId(n))));
    let reclaimers = future::try_join_all((0..options.reclaimers).map(|n| reclaim(run.clone(), ReclaimerId(n))));
    future::try_join(workers, reclaimers).await?;
    let elapsed = started.elapsed();
    let tally = *run.tally.lock().unwrap_or_else(PoisonError::into_inner);
    let jobs = options.jobs;
    let judged = main.call(move |store, _| judge(store, jobs)).await?;
    Ok(Summary {
        backend: place.name(),
        options: *options,
        tally,
        log: judged.log,
        elapsed,
        safety: judged.safety,
        liveness: judged.liveness,
    })
}

/// Resolves once no accepted job is left to end (asked every `every`), or after `limit`.
async fn all_ended(client: StoreClient, every: Span, limit: Duration) {
    let ended = async move {
        while !client.call(|store, _| store.backlog()).await.is_ok_and(|backlog| backlog == 0) {
            tokio::time::sleep(Duration::from_micros(every.0)).await;
        }
    };
    future::select(Box::pin(ended), Box::pin(tokio::time::sleep(limit))).await;
}

/// One worker: a runtime of one slot, and a new life after each injected crash.
async fn work(run: Run, id: WorkerId) -> Result<(), ServiceError> {
    for life in 1.. {
        let client = run.client(life).await?;
        let (crash, crashed) = mpsc::unbounded();
        let hook = CrashAfterEffect { run: run.clone(), crash };
        let runtime = Runtime::new(Arc::new(run.clock), Arc::new(client.clone())).with_hook(Arc::new(hook));
        let options = WorkerOptions { grace: Span::ZERO, ..WorkerOptions::new(vec![id], run.options.worker()) };
        let handler = dependency(run.clone(), client.clone(), id);
        let working = runtime.work(options, handler, run.stop.clone());
        match future::select(Box::pin(working), crashed.into_future()).await {
            future::Either::Left((tally, _)) => {
                let tally = tally?;
                run.count(|sum| {
                    sum.worker_adoptions += tally.adopted;
                    sum.abandoned += tally.abandoned;
                });
                return Ok(());
            }
            // Crashed: the runtime is dropped with everything it held; the lease is left to expire.
            // The line says so, as the simulator's world and the live runner's orchestrator write
            // theirs: a reader (and lease-check's coverage) sees where the worker died.
            future::Either::Right(((job, _), _)) => {
                run.count(|sum| sum.crashes += 1);
                let crashed = Event::Crashed { target: Node::Worker(id.0), point: Point::AfterEffect, job };
                client.line(Node::World, crashed).await;
            }
        }
    }
    Ok(())
}

/// The mock dependency, as worker `id`'s handler: slow, deterministic in what it produces, and,
/// for a job whose answer is lost, recording its output itself before it fails.
fn dependency(run: Run, client: StoreClient, id: WorkerId) -> impl Fn(Job) -> BoxFuture<'static, crate::Outcome> {
    move |job: Job| {
        let (run, client) = (run.clone(), client.clone());
        Box::pin(async move {
            tokio::time::sleep(Duration::from_micros(run.options.effect_latency.0)).await;
            run.count(|sum| sum.effects_run += 1);
            let bytes = output_bytes(job.op, job.epoch);
            if run.options.fault(job.id, job.epoch) != Some(Injected::LostReply) {
                return Ok(bytes);
            }
            // The dependency records its output under the worker's name, and its answer is lost:
            // the line says so, without which the log shows a requeue with no failure to explain it.
            run.count(|sum| sum.lost_replies += 1);
            let _apply = client.record(id, job.op, job.epoch, output_id(&bytes)).await;
            let (from, op, epoch) = (Node::Worker(id.0), job.op, job.epoch);
            client
                .line(
                    Node::Ledger,
                    Event::DependencyFailed { from, job: job.id, op, epoch, after_effect: true, permanent: false },
                )
                .await;
            Err(HandlerError::Reported("the dependency's answer was lost".to_string()))
        })
    }
}

/// The hook of a worker whose first lease of jobs `0..crash_after_effect` crashes after the effect:
/// at `after_effect` (the ledger recorded the output), once per job, it tells the worker's driver
/// the job, and never returns; the driver drops the runtime and writes the `crashed` line.
struct CrashAfterEffect {
    run: Run,
    crash: mpsc::UnboundedSender<JobId>,
}

impl Hook for CrashAfterEffect {
    fn at(&self, _node: Node, point: Point, job: Option<JobId>) -> BoxFuture<'static, ()> {
        let Some(job) = job.filter(|_| point == Point::AfterEffect) else { return Box::pin(future::ready(())) };
        if self.run.options.fault(job, Epoch(1)) != Some(Injected::CrashAfterEffect) || !self.first_crash_of(job) {
            return Box::pin(future::ready(()));
        }
        let _ = self.crash.unbounded_send(job);
        Box::pin(future::pending())
    }
}

impl CrashAfterEffect {
    /// Whether `job`'s crash has not struck yet in this run (and now has).
    fn first_crash_of(&self, job: JobId) -> bool {
        self.run.crashed.lock().unwrap_or_else(PoisonError::into_inner).insert(job)
    }
}

/// One reclaimer runtime.
async fn reclaim(run: Run, id: ReclaimerId) -> Result<(), ServiceError> {
    let client = run.client(1).await?;
    let runtime = Runtime::new(Arc::new(run.clock), Arc::new(client));
    let options = ReclaimerOptions::new(id, run.options.reclaimer());
    let tally = runtime.reclaim(options, run.stop.clone()).await?;
    run.count(|sum| {
        sum.reclaimer_adoptions += tally.adopted;
        sum.alerts += tally.stopped;
    });
    Ok(())
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
fn judge(store: &mut dyn Store, jobs: u64) -> Result<Judged, StoreError> {
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
    for job in (0..jobs).map(JobId) {
        let Some(record) = store.job(job)? else {
            safety.push(format!("job {job} was enqueued but the store does not know it"));
            continue;
        };
        let op = store.op(OpId::for_job(job))?;
        let terminal_lines = ended.get(&job.0).copied().unwrap_or(0);
        let effect_lines = applied.get(&job.0).copied().unwrap_or(0);
        let JobState::Terminal(terminal) = record.state else {
            liveness.push(format!("job {job} had not ended when the runtimes stopped: {:?}", record.state));
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
