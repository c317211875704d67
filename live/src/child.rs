//! The processes of a live run, each the `lease-sim` binary re-executed as `lease-sim live-child`:
//! a worker or a reclaimer running lease-core's state machine on lease-store with the host's clock
//! and real timeouts, the arrival generator, and the dependency stub.
//!
//! Each child dies with the orchestrator (`PR_SET_PDEATHSIG`), ends when its stdin closes, and
//! bounds its own life besides: no loop outlives the run's deadline or [`STEPS_MAX`] steps.
//!
//! stdin carries the orchestrator's commands, one a line: `arm after_effect` or `arm
//! during_ack` (strike at that point next time it is reached), `disarm`, and `go`. stdout carries
//! only the lines the orchestrator reads: `at POINT JOB` (this worker is at the armed point and
//! waits for `go`: now is the moment to kill or pause it), `ready PORT` and `truth JSON` (the stub).
//! Everything else goes to stderr, which the orchestrator keeps in `DIR/logs/`.

use super::db::{host_now, Handle, Lines};
use super::plan::LivePlan;
use lease_core::Apply;
use lease_core::{
    Bug, Bugs, Execution, Fencing, JobId, ReclaimAction, ReclaimReply, ReclaimRequest, Reclaimer, ReclaimerId,
    RequestId, Time, Worker, WorkerAction, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::Point;
use lease_history::{Event, Node};
use std::io::{BufRead, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::time::Duration;

/// The most protocol steps (replies and timeouts handled) one process takes.
pub const STEPS_MAX: u64 = 50_000_000;
/// How long a process waits at most before it looks at its commands again.
const COMMAND_POLL: Duration = Duration::from_millis(20);
/// How long a struck worker waits for `go` before it goes on by itself.
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

/// A command from the orchestrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Arm(Point),
    Disarm,
    Go,
    Stop,
}

/// Runs one child; `Err` is a message for stderr (exit 3).
pub fn run(plan: &LivePlan, role: ChildRole, index: u32, life: u64, stub_port: u16, parent: u32) -> Result<(), String> {
    die_with_parent(parent)?;
    let bugs = Bugs::plant(plan.bug.as_deref().map(str::parse::<Bug>).transpose().map_err(|e| e.to_string())?);
    let store =
        super::db::open(&plan.db, plan.table(), bugs).map_err(|error| format!("cannot open the store: {error}"))?;
    if role == ChildRole::Stub {
        return super::stub::serve(plan, bugs, store);
    }
    let commands = commands();
    let deadline = Time(plan.t0_us + plan.duration_us + plan.drain_max_us + OVERRUN_US);
    let mut child = Child { store, commands, clock: Clock::default(), deadline };
    let outcome = match role {
        ChildRole::Worker => child.worker(plan, bugs, index, life, stub_port),
        ChildRole::Reclaimer => child.reclaimer(plan, bugs, index, life),
        ChildRole::Arrivals => child.arrivals(plan),
        ChildRole::Stub => unreachable!("served above"),
    };
    outcome.map_err(|error| format!("{role:?} {index}: {error}"))
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

/// The orchestrator's commands, read from stdin on a thread; the end of stdin is `Stop`.
fn commands() -> Receiver<Command> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let command = match line.trim() {
                "arm after_effect" => Command::Arm(Point::AfterEffect),
                "arm during_ack" => Command::Arm(Point::DuringAck),
                "arm mid_reclaim" => Command::Arm(Point::MidReclaim),
                "disarm" => Command::Disarm,
                "go" => Command::Go,
                other => {
                    eprintln!("unknown command {other:?}");
                    continue;
                }
            };
            if sender.send(command).is_err() {
                return;
            }
        }
        let _ = sender.send(Command::Stop);
    });
    receiver
}

/// The host's clock, never going back (the core asserts its time only moves forward).
#[derive(Debug, Default)]
struct Clock {
    last: Time,
}

impl Clock {
    fn now(&mut self) -> Time {
        self.last = self.last.max(host_now());
        self.last
    }

    fn at_least(&mut self, t: Time) -> Time {
        self.last = self.last.max(t);
        self.now()
    }
}

struct Child {
    store: Handle,
    commands: Receiver<Command>,
    clock: Clock,
    deadline: Time,
}

/// What the commands say to do next.
enum Next {
    Go,
    Stop,
}

impl Child {
    /// Takes every pending command; `Stop` when the run is over for this process.
    fn take_commands(&mut self, armed: &mut Option<Point>) -> Next {
        loop {
            match self.commands.try_recv() {
                Ok(Command::Arm(point)) => *armed = Some(point),
                Ok(Command::Disarm) => *armed = None,
                Ok(Command::Go) => {}
                Ok(Command::Stop) | Err(TryRecvError::Disconnected) => return Next::Stop,
                Err(TryRecvError::Empty) => break,
            }
        }
        if self.clock.now() >= self.deadline {
            eprintln!("past the run's deadline: ending");
            return Next::Stop;
        }
        Next::Go
    }

    /// Tells the orchestrator this worker is at `point` for `job`, and waits for `go` (or for
    /// the SIGKILL the orchestrator may send instead).
    fn strike(&mut self, point: Point, job: JobId) -> Next {
        println!("at {} {}", point.name(), job.0);
        let _ = std::io::stdout().flush();
        loop {
            match self.commands.recv_timeout(STRIKE_WAIT) {
                Ok(Command::Go) | Err(RecvTimeoutError::Timeout) => return Next::Go,
                Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return Next::Stop,
                Ok(_) => {}
            }
        }
    }

    fn worker(&mut self, plan: &LivePlan, bugs: Bugs, index: u32, life: u64, port: u16) -> Result<(), String> {
        let id = WorkerId(index);
        let node = Node::Worker(index);
        let mut armed = None;
        while let Some(backlog) = plan.start_at_backlog {
            if let Next::Stop = self.take_commands(&mut armed) {
                return Ok(());
            }
            if self.store.backlog().map_err(e)? >= backlog {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut worker = Worker::new(id, plan.worker(), bugs, self.clock.now()).map_err(|e| e.to_string())?;
        let (replies_to, replies) = mpsc::channel::<(RequestId, Option<Execution>)>();
        for _ in 0..STEPS_MAX {
            if let Next::Stop = self.take_commands(&mut armed) {
                return Ok(());
            }
            while let Some(action) = worker.poll() {
                let (request_id, request) = match action {
                    WorkerAction::Send(request_id, request) => (request_id, request),
                    WorkerAction::Adopted { job, op, output, epoch } => {
                        self.store.line(node, Event::Adopted { job, op, output, epoch }).map_err(|e| e.to_string())?;
                        continue;
                    }
                    WorkerAction::Abandoned { job, epoch, why } => {
                        let abandoned = Event::Abandoned { job, epoch, why: why.into() };
                        self.store.line(node, abandoned).map_err(|e| e.to_string())?;
                        continue;
                    }
                };
                let reply = match request {
                    WorkerRequest::Execute { op, epoch } => {
                        // The line is written, and the call made, only if the worker still holds
                        // its lease when the log is its: otherwise it self-fences now.
                        let stamp = self.store.line_if(node, |t_us| {
                            let now = self.clock.at_least(Time(t_us));
                            worker.handle_timeout(now);
                            let holds = worker.holding() == Some((op.job, epoch));
                            holds.then_some(Event::Executing { job: op.job, op, epoch })
                        });
                        if stamp.map_err(|e| e.to_string())?.is_some() {
                            let replies_to = replies_to.clone();
                            std::thread::spawn(move || {
                                let _ = replies_to.send((request_id, super::stub::call(port, id, op, epoch)));
                            });
                            worker.handle_sent(self.clock.now(), request_id);
                        }
                        None
                    }
                    WorkerRequest::Complete { job, .. } if armed == Some(Point::DuringAck) => {
                        armed = None;
                        if let Next::Stop = self.strike(Point::DuringAck, job) {
                            return Ok(());
                        }
                        Some(self.serve(id, life, request_id, request)?)
                    }
                    other => Some(self.serve(id, life, request_id, other)?),
                };
                if let Some(reply) = reply {
                    worker.handle_reply(self.clock.now(), request_id, reply);
                }
            }
            let wake = worker.poll_timeout();
            let wait = Duration::from_micros(wake.0.saturating_sub(self.clock.now().0)).min(COMMAND_POLL);
            match replies.recv_timeout(wait) {
                Ok((request_id, None)) => eprintln!("no answer from the stub to request {}", request_id.0),
                Ok((request_id, Some(execution))) => {
                    let reply = WorkerReply::Executed(execution);
                    if armed == Some(Point::AfterEffect) {
                        if let Some(job) = effect_accepted(&worker, request_id, &reply) {
                            armed = None;
                            if let Next::Stop = self.strike(Point::AfterEffect, job) {
                                return Ok(());
                            }
                        }
                    }
                    worker.handle_reply(self.clock.now(), request_id, reply);
                }
                Err(_) => {
                    let now = self.clock.now();
                    if now >= wake {
                        worker.handle_timeout(now);
                    }
                }
            }
        }
        Err(format!("ran {STEPS_MAX} steps"))
    }

    /// A worker's request to the table or the ledger's lookup, answered by the store at once. A
    /// retried acquire is known by its id, and a restarted worker's ids are its life's.
    fn serve(
        &mut self,
        id: WorkerId,
        life: u64,
        request_id: RequestId,
        request: WorkerRequest,
    ) -> Result<WorkerReply, String> {
        let now = self.clock.now();
        let numbered = lease_store::life_request(life, request_id);
        Ok(lease_store::serve_worker(&mut *self.store, now, id, numbered, request).map_err(e)?.reply)
    }

    fn reclaimer(&mut self, plan: &LivePlan, bugs: Bugs, index: u32, life: u64) -> Result<(), String> {
        let id = ReclaimerId(index);
        let node = Node::Reclaimer(index);
        // Batch numbers of each life apart, as the simulator numbers them.
        let first_batch = (life - 1) << 32;
        let mut reclaimer =
            Reclaimer::numbering_batches_from(id, plan.reclaimer(), bugs, self.clock.now(), first_batch)
                .map_err(|e| e.to_string())?;
        let mut armed = None;
        for _ in 0..STEPS_MAX {
            if let Next::Stop = self.take_commands(&mut armed) {
                return Ok(());
            }
            while let Some(action) = reclaimer.poll() {
                match action {
                    ReclaimAction::Send(request_id, request) => {
                        let reply = self.reclaim(id, request)?;
                        let won = match (&request, &reply) {
                            (ReclaimRequest::Fence { lease, .. }, ReclaimReply::Fenced(Fencing::Won { .. })) => {
                                Some(lease.job)
                            }
                            _ => None,
                        };
                        if let (Some(job), Some(Point::MidReclaim)) = (won, armed) {
                            armed = None;
                            if let Next::Stop = self.strike(Point::MidReclaim, job) {
                                return Ok(());
                            }
                        }
                        reclaimer.handle_reply(self.clock.now(), request_id, reply);
                    }
                    ReclaimAction::Adopted { job, op, output, epoch, .. } => {
                        self.store.line(node, Event::Adopted { job, op, output, epoch }).map_err(e)?;
                    }
                    ReclaimAction::BatchStopped { batch, job, recorded, rival, untouched } => {
                        let stopped = Event::BatchStopped { batch, job, identities: [recorded, rival], untouched };
                        self.store.line(node, stopped).map_err(e)?;
                    }
                    ReclaimAction::LostRace { .. } | ReclaimAction::GaveUp { .. } => {}
                }
            }
            let wake = reclaimer.poll_timeout();
            let wait = Duration::from_micros(wake.0.saturating_sub(self.clock.now().0)).min(COMMAND_POLL);
            std::thread::sleep(wait);
            let now = self.clock.now();
            if now >= wake {
                reclaimer.handle_timeout(now);
            }
        }
        Err(format!("ran {STEPS_MAX} steps"))
    }

    /// A reclaimer's request, answered by the store at once, under the batch's name.
    fn reclaim(&mut self, id: ReclaimerId, request: ReclaimRequest) -> Result<ReclaimReply, String> {
        let now = self.clock.now();
        Ok(lease_store::serve_reclaimer(&mut *self.store, now, id, request).map_err(e)?.reply)
    }

    /// Offers each job of the plan at its time.
    fn arrivals(&mut self, plan: &LivePlan) -> Result<(), String> {
        let mut armed = None;
        for &(job, at_us) in &plan.arrivals {
            let at = Time(plan.t0_us + at_us);
            loop {
                if let Next::Stop = self.take_commands(&mut armed) {
                    return Ok(());
                }
                let now = self.clock.now();
                if now >= at {
                    break;
                }
                std::thread::sleep(Duration::from_micros(at.0 - now.0).min(COMMAND_POLL));
            }
            let now = self.clock.now();
            // The answer (accepted, duplicate, rejected) is on the history: the store wrote it.
            let _answer = self.store.enqueue(now, JobId(job)).map_err(e)?;
        }
        Ok(())
    }
}

/// The job whose effect the ledger just accepted, as the worker will take it: the answer to the
/// execute in flight, for the lease the worker holds (as the simulator's worker node decides).
fn effect_accepted(worker: &Worker, id: RequestId, reply: &WorkerReply) -> Option<JobId> {
    let WorkerReply::Executed(Execution::Done { apply: Apply::Applied, .. }) = reply else { return None };
    let Some(WorkerRequest::Execute { op, epoch }) = worker.awaiting(id) else { return None };
    (worker.holding() == Some((op.job, epoch))).then_some(op.job)
}

fn e(error: lease_store::StoreError) -> String {
    error.to_string()
}
