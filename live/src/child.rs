//! The processes of a live run, each the `lease-live` binary re-executed as `lease-live
//! live-child`: a worker or a reclaimer running `lease-runtime` (the runtime a service adopts) on
//! lease-store with the host's clock and real timeouts, the arrival generator, and the dependency
//! stub.
//!
//! A worker process is one [`Runtime::work`] of one slot, whose handler calls the stub: a fenced
//! dependency, which records its output in the ledger with the effect and answers the ledger's
//! verdict ([`lease_runtime::Output::Recorded`]). A reclaimer process is one [`Runtime::reclaim`].
//! Both run on a [`StoreClient`] over the run's database, numbering their requests by the
//! process's life, and write their own lines (`executing`, `adopted`, `abandoned`,
//! `batch_stopped`, `gave_up`) through it, stamped by the database's clock as every other line.
//!
//! Each child dies with the orchestrator (`PR_SET_PDEATHSIG`), ends when its stdin closes, and
//! bounds its own life besides: none outlives the run's deadline. A worker or reclaimer that ends
//! drops its runtime where it stands, as a crash does: a lease it held expires and is reclaimed
//! (a graceful release at the end is a shutdown `lease-check` does not know yet).
//!
//! stdin carries the orchestrator's commands, one a line: `arm after_effect`, `arm during_ack` or
//! `arm mid_reclaim` (strike at that point next time it is reached), `disarm`, and `go`. stdout
//! carries only the lines the orchestrator reads: `at POINT JOB` (this process is at the armed
//! point and waits for `go`: now is the moment to kill or pause it), `ready PORT` and `truth JSON`
//! (the stub). Everything else goes to stderr, which the orchestrator keeps in `DIR/logs/`.

use super::db::{host_now, Handle};
use super::plan::LivePlan;
use futures::future::{self, BoxFuture, Either, FutureExt};
use lease_core::{Bug, Bugs, Execution, JobId, ReclaimerId, Span, Time, WorkerId};
use lease_history::{Node, Point};
use lease_runtime::store::{HostClock, StoreClient};
use lease_runtime::{HandlerError, Hook, Job, Output, ReclaimerOptions, Runtime, WorkerOptions};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a process waits at most before it looks at its commands again.
const COMMAND_POLL: Duration = Duration::from_millis(20);
/// How long a struck process waits for `go` before it goes on by itself.
const STRIKE_WAIT: Duration = Duration::from_secs(30);
/// A child outlives the run's plan by at most this much, orchestrator or not.
const OVERRUN_US: u64 = 60_000_000;

/// Which process this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChildRole {
    /// A worker.
    Worker,
    /// A reclaimer.
    Reclaimer,
    /// The arrival generator.
    Arrivals,
    /// The dependency stub.
    Stub,
}

/// Runs one child; `Err` is a message for stderr (exit 3).
pub fn run(plan: &LivePlan, role: ChildRole, index: u32, life: u64, stub_port: u16, parent: u32) -> Result<(), String> {
    die_with_parent(parent)?;
    let bugs = Bugs::plant(plan.bug.as_deref().map(str::parse::<Bug>).transpose().map_err(|e| e.to_string())?);
    let deadline = Time(plan.t0_us + plan.duration_us + plan.drain_max_us + OVERRUN_US);
    let commands = Commands::start(deadline);
    let outcome = match role {
        ChildRole::Stub => return super::stub::serve(plan, bugs, open(plan, bugs)?),
        ChildRole::Arrivals => arrivals(plan, &commands, open(plan, bugs)?),
        ChildRole::Worker | ChildRole::Reclaimer => serve(plan, role, bugs, index, life, stub_port, commands),
    };
    outcome.map_err(|error| format!("{role:?} {index}: {error}"))
}

fn open(plan: &LivePlan, bugs: Bugs) -> Result<Handle, String> {
    super::db::open(&plan.db, plan.table(), bugs).map_err(|error| format!("cannot open the store: {error}"))
}

/// Asks the kernel to SIGKILL this process when its parent dies, then checks the parent is still
/// the orchestrator (it may have died before the request).
fn die_with_parent(parent: u32) -> Result<(), String> {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and changes only this process's
    // disposition on its parent's death.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    if std::os::unix::process::parent_id() != parent {
        return Err("the orchestrator is gone".to_string());
    }
    Ok(())
}

/// The orchestrator's commands, read from stdin on a thread: the point armed, the `go`s owed to
/// a strike, and whether the run is over for this process (stdin closed, or past the deadline).
struct Commands {
    armed: Mutex<Option<Point>>,
    /// One message per `go`, and one when stdin closes.
    go: Mutex<Receiver<()>>,
    stopped: AtomicBool,
    deadline: Time,
}

impl Commands {
    fn start(deadline: Time) -> Arc<Commands> {
        let (go_to, go) = mpsc::channel();
        let commands = Arc::new(Commands {
            armed: Mutex::new(None),
            go: Mutex::new(go),
            stopped: AtomicBool::new(false),
            deadline,
        });
        let reader = Arc::clone(&commands);
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                let armed = match line.trim() {
                    "arm after_effect" => Some(Point::AfterEffect),
                    "arm during_ack" => Some(Point::DuringAck),
                    "arm mid_reclaim" => Some(Point::MidReclaim),
                    "disarm" => None,
                    "go" => {
                        let _ = go_to.send(());
                        continue;
                    }
                    other => {
                        eprintln!("unknown command {other:?}");
                        continue;
                    }
                };
                *reader.armed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = armed;
            }
            reader.stopped.store(true, Ordering::SeqCst);
            let _ = go_to.send(());
        });
        commands
    }

    /// Whether the run is over for this process.
    fn stopped(&self) -> bool {
        if self.stopped.load(Ordering::SeqCst) {
            return true;
        }
        if host_now() >= self.deadline {
            eprintln!("past the run's deadline: ending");
            self.stopped.store(true, Ordering::SeqCst);
        }
        self.stopped.load(Ordering::SeqCst)
    }

    /// Resolves once the run is over for this process (looked at every [`COMMAND_POLL`]).
    fn until_stopped(self: &Arc<Commands>) -> BoxFuture<'static, ()> {
        let commands = Arc::clone(self);
        Box::pin(async move {
            while !commands.stopped() {
                tokio::time::sleep(COMMAND_POLL).await;
            }
        })
    }

    /// Disarms `point` if it is the one armed: whether it was.
    fn take_armed(&self, point: Point) -> bool {
        let mut armed = self.armed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        armed.take_if(|armed| *armed == point).is_some()
    }

    /// Tells the orchestrator this process is at `point` for `job`, and waits for `go` (or for
    /// the SIGKILL the orchestrator may send instead), blocking: a struck process does nothing
    /// else, as the loops it replaces did.
    fn strike(&self, point: Point, job: Option<JobId>) {
        let go = self.go.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while go.try_recv().is_ok() {} // A `go` owed to no strike of this life.
        println!("at {} {}", point.name(), job.map_or(0, |job| job.0));
        let _ = std::io::stdout().flush();
        if let Err(RecvTimeoutError::Timeout) = go.recv_timeout(STRIKE_WAIT) {
            eprintln!("no go within {STRIKE_WAIT:?} at {}: going on", point.name());
        }
    }
}

/// The orchestrator's strike points, as the runtime passes them: at the point armed, the process
/// says so and waits for `go`; every other point passes at once.
struct Strikes(Arc<Commands>);

impl Hook for Strikes {
    fn at(&self, _node: Node, point: Point, job: Option<JobId>) -> BoxFuture<'static, ()> {
        if !self.0.take_armed(point) {
            return Box::pin(future::ready(()));
        }
        let commands = Arc::clone(&self.0);
        Box::pin(async move {
            let _waited = tokio::task::spawn_blocking(move || commands.strike(point, job)).await;
        })
    }
}

/// A worker or a reclaimer: the runtime on the run's store until the run is over for this
/// process, then dropped where it stands.
fn serve(
    plan: &LivePlan,
    role: ChildRole,
    bugs: Bugs,
    index: u32,
    life: u64,
    port: u16,
    commands: Arc<Commands>,
) -> Result<(), String> {
    let tokio = tokio::runtime::Builder::new_current_thread().enable_time().build().map_err(|e| e.to_string())?;
    let ran = tokio.block_on(async move {
        let clock = HostClock::start();
        let (place, table) = (plan.db.clone(), plan.table());
        let open = move || super::db::open(&place, table, bugs);
        let client = StoreClient::start(open, clock, life).await.map_err(|e| format!("cannot open the store: {e}"))?;
        let runtime =
            Runtime::new(Arc::new(clock), Arc::new(client.clone())).with_hook(Arc::new(Strikes(Arc::clone(&commands))));
        let stop = commands.until_stopped();
        let ran = match role {
            ChildRole::Worker => {
                if !start_at_backlog(plan, &client, &commands).await? {
                    return Ok(());
                }
                let slots = plan.slot_ids(index).into_iter().map(WorkerId).collect();
                let (batch, linger) = (plan.batch, Span(plan.linger_us));
                let options = WorkerOptions { batch, linger, ..WorkerOptions::new(slots, plan.worker()) };
                let options = options.planting(bugs);
                let work = if plan.dependency_in_process {
                    let latency = Duration::from_micros(plan.dependency.latency_min_us);
                    runtime.work(options, in_process_handler(latency), future::pending()).boxed()
                } else {
                    runtime.work(options, stub_handler(port), future::pending()).boxed()
                };
                future::select(work.map(|ran| ran.map(drop)).boxed(), stop).await
            }
            _ => {
                let options = ReclaimerOptions {
                    first_batch: (life - 1) << 32, // Batch numbers of each life apart, as the simulator's.
                    ..ReclaimerOptions::new(ReclaimerId(index), plan.reclaimer()).planting(bugs)
                };
                let reclaim = runtime.reclaim(options, future::pending());
                future::select(reclaim.map(|ran| ran.map(drop)).boxed(), stop).await
            }
        };
        let errors = client.errors();
        if errors.count > 0 {
            eprintln!("{} store calls failed (answered as no answer); the last: {:?}", errors.count, errors.last);
        }
        match ran {
            Either::Left((ran, _)) => ran.map_err(|error| error.to_string()),
            Either::Right(((), _)) => Ok(()),
        }
    });
    // A stub call still blocking its thread is not waited for: the process ends.
    tokio.shutdown_background();
    ran
}

/// Waits until the backlog reaches the plan's `start_at_backlog`, if any (the bench's preloaded
/// burst); false if the run ended first.
async fn start_at_backlog(plan: &LivePlan, client: &StoreClient, commands: &Commands) -> Result<bool, String> {
    let Some(backlog) = plan.start_at_backlog else { return Ok(true) };
    while !commands.stopped() {
        if client.call(|store, _| store.backlog()).await.map_err(|e| e.to_string())? >= backlog {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(false)
}

/// The handler: the stub, a fenced dependency, called off the async loop (its call is blocking
/// TCP); its verdict is the ledger's, or its failure (the job takes the requeue path). A call
/// that got no answer is made again, as the old worker's execute was sent again: the stub is
/// idempotent by operation id, so a call whose effect happened answers that effect's output, and
/// nothing claims a failure that may not have been one. The runtime's cancellation (a self-fence)
/// ends the retries.
fn stub_handler(port: u16) -> impl Fn(Job) -> BoxFuture<'static, lease_runtime::Outcome<Output>> {
    move |job: Job| {
        Box::pin(async move {
            while !job.cancel.is_cancelled() {
                let (worker, op, epoch) = (job.worker, job.op, job.epoch);
                let call = move || super::stub::call(port, worker, op, epoch);
                match tokio::task::spawn_blocking(call).await {
                    Ok(Some(Execution::Done { output, apply })) => return Ok(Output::Recorded { output, apply }),
                    // The stub wrote its `dependency_failed` line itself.
                    Ok(Some(Execution::Failed)) => {
                        return Err(HandlerError::Reported("the dependency failed".to_string()))
                    }
                    Ok(Some(Execution::Permanent)) => {
                        return Err(HandlerError::ReportedPermanent("the dependency refused".to_string()))
                    }
                    Ok(None) | Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
            Err(HandlerError::Reported("cancelled: the runtime stopped acting on the lease".to_string()))
        })
    }
}

/// The bench's handler: the output of the job, in process, after `latency` (the runtime
/// records it, in batches when batching).
fn in_process_handler(latency: Duration) -> impl Fn(Job) -> BoxFuture<'static, lease_runtime::Outcome<Output>> {
    move |job: Job| {
        Box::pin(async move {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            Ok(Output::Bytes(format!("{} under {}", job.op, job.epoch).into_bytes()))
        })
    }
}

/// Offers each job of the plan at its time, with the jobs already due when the process comes to
/// it (a burst, or arrivals faster than an enqueue's turn), up to `batch_max` at once, in one
/// transaction ([`lease_store::TableStore::enqueue_batch`]).
fn arrivals(plan: &LivePlan, commands: &Commands, mut store: Handle) -> Result<(), String> {
    let mut next = 0;
    while let Some(&(_, at_us)) = plan.arrivals.get(next) {
        let at = Time(plan.t0_us + at_us);
        loop {
            if commands.stopped() {
                return Ok(());
            }
            let now = host_now();
            if now >= at {
                break;
            }
            std::thread::sleep(Duration::from_micros(at.0 - now.0).min(COMMAND_POLL));
        }
        let now = host_now();
        let due = plan.arrivals[next..]
            .iter()
            .take(plan.batch_max)
            .take_while(|&&(_, at_us)| Time(plan.t0_us + at_us) <= now)
            .count();
        let jobs: Vec<(JobId, Vec<u8>)> =
            plan.arrivals[next..next + due].iter().map(|&(job, _)| (JobId(job), Vec::new())).collect();
        // The answers (accepted, duplicate, rejected) are on the history: the store wrote them.
        let _answers = store.enqueue_batch(now, &jobs).map_err(|e| e.to_string())?;
        next += due;
    }
    Ok(())
}
