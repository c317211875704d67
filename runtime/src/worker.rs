//! The worker runtime: `slots` [`lease_core::Worker`] machines, one per job in flight, driven in
//! one future around the handler.
//!
//! **The loop.** Each turn: every machine whose timeout is due takes the time
//! (`handle_timeout`); every machine's actions are drained, each request becoming a call on the
//! [`Client`] (bounded by the request's timeout) or, for an `Execute`, the handler; then the loop
//! waits for whichever comes first: a call's or a handler's end, the earliest timeout, or the
//! shutdown signal. Nothing is spawned: the calls and handlers in flight are one
//! `FuturesUnordered` polled by the loop, so the loop runs on any executor.
//!
//! **Around the handler.** An `Execute` runs the handler once per request: the machine sends an
//! `Execute` that timed out again under the same id, and while a handler runs for that id the
//! copy is ignored (the effect is never started twice because a request timed out); once the
//! handler is done, a copy records its output again rather than run it again. Meanwhile the
//! machine heartbeats, however long the handler takes. When the handler ends, the machine takes
//! the time first: a lease it has stopped acting on records nothing. The output (its identity,
//! [`crate::output_id`] of its bytes, or the one the dependency named) is recorded under the epoch
//! ([`Client::record`]) and the ledger's answer goes back to the machine, which completes. A
//! fenced dependency recorded its output itself, with the effect ([`crate::Output::Recorded`]):
//! nothing is recorded, and the ledger's answer it brought goes to the machine as it is, which
//! completes, or abandons the lease on `fenced` or `conflict`. When the machine abandons the
//! lease (self-fenced, lost, fenced, conflict), the handler's [`crate::Cancel`] fires and the
//! handler is dropped. Lookup-then-adopt and a conflict's hand-over to a reclaimer are the
//! machine's.
//!
//! **Batching.** With [`WorkerOptions::batch`] above 1, each wake takes every end that is ready,
//! and the requests the machines make at one turn leave together, one call per kind (acquires,
//! renewals, lookups, completions, requeues: [`Client::worker_batch`]; records:
//! [`Client::record_batch`]; the `executing` lines of the effects decided at the turn:
//! [`Client::lines`]), at most `batch` a call. Each answer goes to its own machine as it comes.
//! With [`WorkerOptions::handlers`] below the slots, the slots beyond are a local buffer of granted
//! jobs, fenced as any other (a lease its machine gave up while it waited is released unrun). With
//! a [`WorkerOptions::linger`], a kind whose batch is not full waits up to that long for more
//! (River's completer timer), so the ends of handlers that come a few milliseconds apart leave
//! together; a full batch leaves at once, and so do lookups, `executing` lines, records and
//! completions that no other slot's job can join, and a request its machine has replaced under
//! a new id while it waited never leaves. Between a decision and its start a turn may stall at
//! another slot's point (a pause of the whole process), so each effect is decided again, the
//! machine taking the time, before its line is written and before it starts.
//!
//! **Shutdown.** Once the signal resolves, no slot acquires again (a grant that answers an
//! acquire already sent is released at once); jobs in flight may finish for `grace`. Then every
//! handler still running is cancelled, and every lease still held is either released (back at
//! the queue's head, no attempt counted) or left to expire:
//!
//! - released when no handler started under it (it was being acquired or looked up): nothing
//!   was tried;
//! - left when its handler started: the effect may have reached the dependency, and a dependency
//!   that records its own output (the simulator's does) would hold one that a release hides: the
//!   release undoes the attempt, so the next grant, a first attempt again, would skip the lookup
//!   and run the effect again, and a different output would conflict. The lease expires and a
//!   reclaimer looks the operation up, then adopts or requeues (the attempt counted, for it was
//!   one).
//!
//! Each release says so first, on the history: an `abandoned` line whose why is `shutdown`.
//! `lease-check`'s conformance spec accepts a worker's release only of a grant it declined, or one
//! it gave up at shutdown without an `executing` line under it
//! (`worker_releases_only_what_it_declined`), so a service's exported history is judged whole.

use crate::job::{Cancel, Handler, HandlerError, Job, Outcome, Output, Trigger};
use crate::metrics::Count;
use crate::seam::{Client, Clock, Hook, Point, Started};
use crate::{OptionsError, Runtime};
use futures::future::{self, AbortHandle, Abortable, BoxFuture, Either, Fuse, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use lease_core::{
    Acquired, Apply, Completion, Epoch, Execution, JobId, OpId, OutputId, Release, RequestId, Requeue, Span, Time,
    Worker, WorkerAction, WorkerConfig, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::{Event, Node};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

/// The most slots (jobs in flight) one worker runtime drives.
pub const SLOTS_MAX: usize = 1_024;

/// The id of a release the runtime sends on its own, at shutdown or for a buffered job whose
/// lease its machine gave up ([`WorkerOptions::handlers`]): no machine waits on it, so it needs
/// no number of a machine's. Far above any a machine reaches, and below a store's per-life
/// numbering (`lease_store::LIFE_SHIFT`); a transport that tells stale copies of a worker's
/// requests by their ids must leave it out of the worker's numbering, as the simulator's table
/// does (the machine goes on numbering its acquires from below it).
pub const SHUTDOWN_RELEASE: RequestId = RequestId(u32::MAX as u64);

/// What a worker runtime runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOptions {
    /// One worker machine per id: as many jobs in flight at once. Distinct, 1 to [`SLOTS_MAX`],
    /// and no other process's: the table tells a retried acquire by its worker and request id.
    pub slots: Vec<WorkerId>,
    /// Every machine's timing.
    pub worker: WorkerConfig,
    /// How long jobs in flight may still finish after the shutdown signal.
    pub grace: Span,
    /// Planted bugs in the machines: none, and only the simulator and the live runner can plant
    /// one ([`crate::Planted`]).
    pub planted: crate::Planted,
    /// How long one handler call may run; past it, its [`crate::Cancel`] fires, it is dropped,
    /// and the job is requeued as after a retryable error (its attempt counted). `None`: no
    /// limit. Heartbeats keep a lease while its handler runs, however long: without a limit, a
    /// handler that hangs holds its job until the process stops (a self-fence comes only when
    /// renewals fail).
    pub handler_timeout: Option<Span>,
    /// The most requests of one kind that one call carries: the slots' acquires, renewals,
    /// lookups, completions and requeues made at one turn of the loop go to the client together
    /// ([`Client::worker_batch`]; a store serves them in one transaction), at most this many at
    /// a time. 1, the default, sends each alone. At most the table's `batch_max`.
    pub batch: usize,
    /// How long a batch that is not full may wait for more of its kind ([`WorkerOptions::batch`]
    /// above 1): the completer's and the fetcher's timer, as River's. Zero, the default, sends each
    /// turn's requests at the end of the turn. Requests of one kind leave as soon as `batch` of
    /// them wait, or when the oldest has waited `linger`, or when no more can come (a lookup, an
    /// `executing` line, a record or a completion, once no other slot's job is before that step:
    /// the last jobs of a burst do not wait at each step for company that cannot come); at most
    /// half a request's timeout (a request's timeout counts from when its machine made it), and a
    /// lease that a wait carries past its machine's estimate is never acted on: an effect is
    /// decided again before its `executing` line leaves, and a record of an abandoned lease is
    /// dropped.
    pub linger: Span,
    /// How many handlers run at once: 0, the default, one per slot. Fewer, and the slots beyond
    /// them are a local buffer of granted jobs (River's fetcher keeps one): their machines
    /// acquire and look up ahead, and a job whose lookup found nothing waits, its lease kept by
    /// heartbeats, until a handler is free. A buffered job is still fenced: it starts only if
    /// its machine, taking the time at its turn, still acts on the lease, and a lease its
    /// machine gave up while it waited (self-fenced past its estimate: a pause, or renewals cut
    /// off) is released, back at the queue's head with no attempt counted, never run late. At
    /// shutdown the buffer is released at once. The simulator sweeps buffers in `large-batches`
    /// and `service-handlers` (`handlers=` on the run line), and holds the runtime to its
    /// release: it passes [`Point::Buffered`] as an effect enters the buffer.
    pub handlers: usize,
}

impl WorkerOptions {
    /// `slots` machines on `worker`'s timing, a grace of one lease ttl, no handler timeout, no
    /// planted bug.
    pub fn new(slots: Vec<WorkerId>, worker: WorkerConfig) -> WorkerOptions {
        WorkerOptions {
            slots,
            grace: worker.lease_ttl,
            worker,
            planted: crate::Planted::NONE,
            handler_timeout: None,
            batch: 1,
            linger: Span::ZERO,
            handlers: 0,
        }
    }

    /// The same options with `bugs` planted in every machine (feature `planted-bugs`: for the
    /// simulator and the live runner, which prove that their checkers catch them).
    #[cfg(feature = "planted-bugs")]
    pub fn planting(self, bugs: lease_core::Bugs) -> WorkerOptions {
        WorkerOptions { planted: crate::Planted(bugs), ..self }
    }

    /// `slots` machines timed as fractions of the table's `lease_ttl`: a heartbeat every third of
    /// it, a fifth kept as the margin for clock drift, requests timing out after a fifth, a tenth
    /// between acquires on an empty queue, no long polling. Checked when the runtime starts.
    pub fn with_ttl(slots: Vec<WorkerId>, lease_ttl: Span) -> WorkerOptions {
        let worker = WorkerConfig {
            lease_ttl,
            heartbeat_every: lease_ttl / 3,
            drift_margin: lease_ttl / 5,
            request_timeout: lease_ttl / 5,
            idle_backoff: lease_ttl / 10,
            acquire_wait: Span::ZERO,
        };
        WorkerOptions::new(slots, worker)
    }

    fn validate(&self) -> Result<(), OptionsError> {
        self.worker.validate()?;
        if self.slots.is_empty() || self.slots.len() > SLOTS_MAX {
            return Err(OptionsError::Slots { count: self.slots.len() });
        }
        let mut ids = self.slots.clone();
        ids.sort();
        if let Some(pair) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(OptionsError::SlotTwice(pair[0]));
        }
        if self.batch == 0 || self.batch > SLOTS_MAX {
            return Err(OptionsError::Batch { batch: self.batch });
        }
        if self.handlers > self.slots.len() {
            return Err(OptionsError::Handlers { handlers: self.handlers, slots: self.slots.len() });
        }
        if self.linger.0 > self.worker.request_timeout.0 / 2 {
            return Err(OptionsError::Linger { linger: self.linger, request_timeout: self.worker.request_timeout });
        }
        Ok(())
    }
}

/// What a worker runtime did, counted as it happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerTally {
    /// Handler calls started.
    pub handled: u64,
    /// Outputs sent to the ledger ([`Client::record`] calls, copies included).
    pub recorded: u64,
    /// Jobs the table completed for this runtime (an idempotent repeat included).
    pub completed: u64,
    /// Outputs adopted from the ledger instead of a handler call.
    pub adopted: u64,
    /// Leases the machines stopped acting on (self-fenced, lost, fenced, conflict, declined).
    pub abandoned: u64,
    /// Handlers cancelled: their lease was abandoned, or shutdown's grace ran out.
    pub cancelled: u64,
    /// Leases handed back, the table agreeing: grants declined, and leases given up at shutdown.
    pub released: u64,
    /// Leases held at shutdown whose handler had started: left to expire, for a reclaimer to
    /// adopt the output or requeue the job.
    pub left: u64,
    /// Jobs handed back unrun: their machine gave the lease up after their effect was decided and
    /// before it started, while they waited in the buffer ([`WorkerOptions::handlers`]) or in a
    /// batching turn (counted as asked; `released` counts the table's yes).
    pub buffer_released: u64,
    /// Effects that never started because the store refused their `executing` lines: the lease
    /// had expired or been taken by the time the line reached it
    /// ([`crate::Client::started`]).
    pub refused_lines: u64,
}

/// One `Execute` of one lease: its handler, then its output.
struct Effect {
    id: RequestId,
    op: OpId,
    epoch: Epoch,
    /// Present while the handler runs.
    running: Option<(Trigger, AbortHandle)>,
    /// The handler's output, once it returned one.
    output: Option<OutputId>,
    /// A record call is in flight.
    recording: bool,
}

/// One machine and what the runtime keeps beside it.
struct Slot {
    id: WorkerId,
    worker: Worker,
    effect: Option<Effect>,
    /// The lease under which the slot last wrote `executing` (its handler about to start): never
    /// released at shutdown.
    started_lease: Option<(JobId, Epoch)>,
    /// The lease under which a write of the slot's `executing` line failed, its answer unknown: the
    /// store may have committed it, so from then on the lease is never released, even when a
    /// later decision under it never sends its line.
    unknown_line: Option<(JobId, Epoch)>,
    /// Acquire calls in flight: counted as they leave, not while a linger holds them.
    acquiring: u32,
    /// Draining, this slot asks for nothing more.
    closed: bool,
    /// The machine's `act_until`, as the handler's [`Job::deadline`] reads it.
    deadline: Arc<AtomicU64>,
}

/// What a call or a handler in flight ended with.
enum Done {
    Answer {
        slot: usize,
        id: RequestId,
        request: WorkerRequest,
        reply: Option<WorkerReply>,
    },
    Handled {
        slot: usize,
        id: RequestId,
        outcome: Outcome<Output>,
    },
    Recorded {
        slot: usize,
        id: RequestId,
        output: OutputId,
        apply: Option<Apply>,
    },
    /// A handler ran past [`WorkerOptions::handler_timeout`] (and was dropped).
    TimedOut {
        slot: usize,
        id: RequestId,
    },
    /// A handler dropped (cancelled), or an answer nobody waits on.
    Nothing,
}

/// Whether requests like `request` go out in batches ([`WorkerOptions::batch`]), and in which
/// group: one kind per batch.
fn batch_group(request: &WorkerRequest) -> Option<u8> {
    match request {
        WorkerRequest::Acquire => Some(0),
        WorkerRequest::Renew { .. } => Some(1),
        WorkerRequest::Lookup { .. } => Some(2),
        WorkerRequest::Complete { .. } => Some(3),
        WorkerRequest::Requeue { .. } => Some(4),
        _ => None,
    }
}

/// The batch groups beyond the requests': outputs to record, and effects to start (their
/// `executing` lines).
const LOOKUPS: usize = 2;
const COMPLETES: usize = 3;
const RECORDS: usize = 5;
const EFFECTS: usize = 6;
const GROUPS: usize = 7;

/// What woke the loop.
enum Wake {
    Done(Vec<Done>),
    Shutdown,
    Timeout,
}

struct Run<H> {
    seams: Runtime,
    options: WorkerOptions,
    handler: Arc<H>,
    slots: Vec<Slot>,
    tally: WorkerTally,
    /// Calls in flight: answers and records.
    inflight: FuturesUnordered<BoxFuture<'static, Done>>,
    /// Handlers running.
    handlers: FuturesUnordered<BoxFuture<'static, Done>>,
    /// Set by the shutdown signal: when the grace runs out.
    drain_until: Option<Time>,
    /// Calls in flight that end unanswered at their deadline: aborted when the loop takes the
    /// time past it (no timer of their own).
    deadlines: Vec<(Time, AbortHandle)>,
    /// The loop's timer, kept while the time it wakes at stays the same.
    timer: Option<(Time, BoxFuture<'static, ()>)>,
    /// Requests made at this turn, to go out together once every machine has acted
    /// ([`WorkerOptions::batch`] above 1).
    queued: Vec<(usize, RequestId, WorkerRequest)>,
    /// Outputs to record, queued so (slot, execute, output).
    queued_records: Vec<(usize, RequestId, OutputId)>,
    /// Effects decided at this turn, to start once their `executing` lines are written together.
    queued_effects: Vec<(usize, RequestId, OpId, Epoch)>,
    /// Since when each batch group (the five kinds of requests, records, effects) has waited
    /// ([`WorkerOptions::linger`]): set when its first entry is queued, cleared when it leaves.
    waiting_since: [Option<Time>; GROUPS],
    /// Effects decided while every handler was busy ([`WorkerOptions::handlers`]), oldest first:
    /// no `executing` line yet.
    buffered: std::collections::VecDeque<(usize, RequestId, OpId, Epoch)>,
    /// Leases whose effect was decided and never started, their machine having given them up:
    /// to hand back ([`Run::give_back_unstarted`]).
    unstarted: Vec<(usize, JobId, Epoch)>,
}

impl Runtime {
    /// Runs `options.slots` jobs at a time through `handler` until `shutdown` resolves, then
    /// drains (see the module doc). Fails only on unworkable options.
    pub fn work<H: Handler>(
        &self,
        options: WorkerOptions,
        handler: H,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = Result<WorkerTally, OptionsError>> + Send + 'static {
        let seams = self.clone();
        async move {
            options.validate()?;
            let now = seams.clock.now();
            let mut slots = Vec::with_capacity(options.slots.len());
            for &id in &options.slots {
                let worker = Worker::new(id, options.worker, options.planted.0, now)?;
                let deadline = Arc::new(AtomicU64::new(0));
                slots.push(Slot {
                    id,
                    worker,
                    effect: None,
                    started_lease: None,
                    unknown_line: None,
                    acquiring: 0,
                    closed: false,
                    deadline,
                });
            }
            let handler = Arc::new(handler);
            let tally = WorkerTally::default();
            let mut run = Run {
                seams,
                options,
                handler,
                slots,
                tally,
                inflight: FuturesUnordered::new(),
                handlers: FuturesUnordered::new(),
                drain_until: None,
                deadlines: Vec::new(),
                timer: None,
                queued: Vec::new(),
                queued_records: Vec::new(),
                queued_effects: Vec::new(),
                waiting_since: [None; GROUPS],
                buffered: std::collections::VecDeque::new(),
                unstarted: Vec::new(),
            };
            run.main(shutdown.boxed().fuse()).await;
            Ok(run.tally)
        }
    }
}

impl<H: Handler> Run<H> {
    fn clock(&self) -> &dyn Clock {
        &*self.seams.clock
    }

    fn client(&self) -> &dyn Client {
        &*self.seams.client
    }

    fn hook(&self) -> &dyn Hook {
        &*self.seams.hook
    }

    async fn main(&mut self, mut shutdown: Fuse<BoxFuture<'static, ()>>) {
        loop {
            self.take_time();
            self.drain().await;
            self.unbuffer().await;
            self.start_queued().await;
            self.flush();
            if self.due() {
                continue; // A point stalled the drain: the machines take the time again first.
            }
            let now = self.clock().now();
            if self.drain_until.is_some_and(|until| now >= until) || (self.drain_until.is_some() && self.idle()) {
                break;
            }
            match self.wait(&mut shutdown).await {
                Wake::Done(ended) => {
                    for done in ended {
                        self.on_done(done).await;
                    }
                }
                Wake::Shutdown => self.drain_until = Some(self.clock().now() + self.options.grace),
                // A timer is polled no more once it fired.
                Wake::Timeout => self.timer = None,
            }
        }
        self.finish().await;
    }

    /// Waits for a call's or handler's end, the earliest timeout, or the shutdown signal. Each
    /// time the loop is woken, an answer that came is taken first, then the time: once a
    /// machine's timeout (or a call's deadline, or the grace's end) is due, no handler is polled
    /// before the machines take the time. After a pause, every timer fires at once, and a handler
    /// woken by its own would otherwise go on under a lease its machine is about to give up (the
    /// simulator's swarm found this: a handler's call made again after a pause, past the lease).
    async fn wait(&mut self, shutdown: &mut Fuse<BoxFuture<'static, ()>>) -> Wake {
        let open = self.slots.iter().filter(|slot| !slot.closed);
        let calls = self.deadlines.iter().map(|(at, _)| *at);
        let lingering = self.waiting_since.iter().flatten().map(|&since| since + self.options.linger);
        let wake_at =
            open.map(|slot| slot.worker.poll_timeout()).chain(self.drain_until).chain(calls).chain(lingering).min();
        if self.timer.as_ref().map(|(at, _)| Some(*at)) != Some(wake_at) {
            self.timer = wake_at.map(|at| (at, self.seams.clock.sleep_until(at)));
        }
        let (clock, timer) = (&*self.seams.clock, &mut self.timer);
        let (inflight, handlers) = (&mut self.inflight, &mut self.handlers);
        // Batching, every end that is ready is taken at once, so that the requests the machines
        // make on them go out together; else one at a time.
        let gather = self.options.batch > 1;
        future::poll_fn(|cx| {
            let mut ended = Vec::new();
            // An answer first: it is news of the past, which the machine takes with the time.
            while let Poll::Ready(Some(done)) = inflight.poll_next_unpin(cx) {
                ended.push(done);
                if !gather {
                    return Poll::Ready(Wake::Done(ended));
                }
            }
            let due = wake_at.is_some_and(|at| clock.now() >= at);
            if !ended.is_empty() && (due || !gather) {
                return Poll::Ready(Wake::Done(ended));
            }
            if due {
                return Poll::Ready(Wake::Timeout);
            }
            while let Poll::Ready(Some(done)) = handlers.poll_next_unpin(cx) {
                ended.push(done);
                if !gather {
                    break;
                }
            }
            if !ended.is_empty() {
                return Poll::Ready(Wake::Done(ended));
            }
            // The signal is fused: once it fired, it stays pending.
            if shutdown.poll_unpin(cx).is_ready() {
                return Poll::Ready(Wake::Shutdown);
            }
            match timer.as_mut().map(|(_, timer)| timer.poll_unpin(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Wake::Timeout),
                _ => Poll::Pending,
            }
        })
        .await
    }

    /// Whether an open machine's timeout is due.
    fn due(&self) -> bool {
        let now = self.clock().now();
        self.slots.iter().any(|slot| !slot.closed && now >= slot.worker.poll_timeout())
    }

    /// Every open machine whose timeout is due takes the time.
    fn take_time(&mut self) {
        let now = self.clock().now();
        self.deadlines.retain(|(at, abort)| {
            if now >= *at {
                abort.abort();
            }
            now < *at
        });
        for slot in self.slots.iter_mut().filter(|slot| !slot.closed) {
            if now >= slot.worker.poll_timeout() {
                slot.worker.handle_timeout(now);
            }
            // Else the loop would wake at once, forever, and never yield to its executor.
            assert!(slot.worker.poll_timeout() > now, "{} is due at {now} after taking the time", slot.id);
        }
    }

    /// Acts on every machine's actions until none is left.
    async fn drain(&mut self) {
        for slot in 0..self.slots.len() {
            while let Some(action) = self.slots[slot].worker.poll() {
                // A closed slot's machine is driven no more, but a grant it declined still goes
                // back: a late grant of an acquire it had given up, taken in the same turn as
                // the grant that closed it, was left leased to nobody (large-batches, seed
                // 300060: two grants to one slot after the stop, the second handed back).
                let hands_back = matches!(
                    action,
                    WorkerAction::Abandoned { why: lease_core::Abandon::Declined, .. }
                        | WorkerAction::Send(_, WorkerRequest::Release { .. })
                );
                if !self.slots[slot].closed || hands_back {
                    self.act(slot, action).await;
                }
            }
            self.slots[slot].deadline.store(self.deadline_of(slot).map_or(0, |at| at.0), Ordering::Relaxed);
        }
    }

    /// The deadline `slot`'s handler is told ([`Job::deadline`]): its machine's `act_until`.
    fn deadline_of(&self, slot: usize) -> Option<Time> {
        if self.options.planted.0.on(lease_core::Bug::DeadlineUnset) {
            return None; // Planted: never published, so a handler reads zero.
        }
        self.slots[slot].worker.act_until()
    }

    /// Whether draining is done: every slot closed, or holding nothing and asking for nothing.
    fn idle(&self) -> bool {
        self.slots.iter().all(|slot| slot.closed || (slot.worker.holding().is_none() && slot.acquiring == 0))
    }

    async fn act(&mut self, slot: usize, action: WorkerAction) {
        let node = Node::Worker(self.slots[slot].id.0);
        match action {
            WorkerAction::Send(id, request) => self.send(slot, id, request).await,
            WorkerAction::Adopted { job, op, output, epoch } => {
                self.tally.adopted += 1;
                self.seams.metrics.count(Count::Adoption);
                self.client().line(node, Event::Adopted { job, op, output, epoch }).await;
            }
            WorkerAction::Abandoned { job, epoch, why } => {
                self.tally.abandoned += 1;
                if why == lease_core::Abandon::SelfFenced {
                    self.seams.metrics.count(Count::SelfFence);
                }
                self.stop_effect(slot, job, epoch);
                self.client().line(node, Event::Abandoned { job, epoch, why: why.into() }).await;
            }
        }
    }

    async fn send(&mut self, slot: usize, id: RequestId, request: WorkerRequest) {
        let node = Node::Worker(self.slots[slot].id.0);
        match request {
            WorkerRequest::Execute { op, epoch } => return self.execute(slot, id, op, epoch).await,
            WorkerRequest::Acquire if self.drain_until.is_some() => {
                self.slots[slot].closed = true;
                return;
            }
            WorkerRequest::Renew { job, .. } => self.hook().at(node, Point::BeforeRenew, Some(job)).await,
            // The acknowledgement is held here, before the table has it: a stall is a completion
            // in flight past the lease (which the table must refuse by its epoch), as the
            // simulator's and the live run's pauses make it. The machine does not take the time
            // after it, or the window would close.
            WorkerRequest::Complete { job, .. } => self.hook().at(node, Point::DuringAck, Some(job)).await,
            _ => {}
        }
        self.call(slot, id, request);
    }

    /// Sends `request` to the client, bounded by its timeout; an acquire is awaited until the
    /// client answers it or gives it up (`None`): a grant that answers an acquire the machine has
    /// given up on must still reach it, to be declined (released, its attempt undone) rather than
    /// left leased to nobody until it expires and a reclaimer spends the job's attempt on it. No
    /// timer of the runtime's can tell when such a grant stops mattering: a process paused as its
    /// acquire left sends it after the pause, and the grant that answers it is fresh (the
    /// simulator's swarm found this at seed 949 when acquires were bounded by a lease).
    /// Batching ([`WorkerOptions::batch`] above 1), a request of a kind that batches waits for
    /// the end of the turn ([`Run::flush`]), and leaves with the others of its kind.
    fn call(&mut self, slot: usize, id: RequestId, request: WorkerRequest) {
        if let (true, Some(group)) = (self.options.batch > 1, batch_group(&request)) {
            // A copy of a request still waiting (its machine timed it out during a stall of the
            // process) leaves once, with the first.
            if self.queued.iter().any(|&(queued, queued_id, _)| (queued, queued_id) == (slot, id)) {
                return;
            }
            // A request of the same kind under another id supersedes the one waiting: its machine
            // gave that one up (a stall carried a linger past its timeout), and it never left, so
            // no answer to it will come (the simulator's large-batches found one acquire of a
            // slot waiting beside its next, which the table refuses as one worker asking twice).
            // Nothing else counts it: an acquire is counted in flight only once it leaves.
            let superseded = |&(queued, _, waiting): &(usize, RequestId, WorkerRequest)| {
                queued == slot && batch_group(&waiting) == Some(group)
            };
            if let Some(at) = self.queued.iter().position(superseded) {
                self.queued.remove(at);
            }
            self.queued.push((slot, id, request));
            self.wait_from(group as usize);
            return;
        }
        self.call_now(slot, id, request);
    }

    /// Group `group` has an entry waiting: since now, unless it had one already.
    fn wait_from(&mut self, group: usize) {
        if self.waiting_since[group].is_none() {
            self.waiting_since[group] = Some(self.clock().now());
        }
    }

    /// How many of `waiting` entries of `group` leave now: every full batch, and the rest once
    /// the oldest has waited [`WorkerOptions::linger`] (or the runtime is draining).
    fn leaving(&mut self, group: usize, waiting: usize, more: bool) -> usize {
        let batch = self.options.batch;
        let due =
            !more || self.waiting_since[group].is_none_or(|since| self.clock().now() >= since + self.options.linger);
        let leaving = if due || self.drain_until.is_some() { waiting } else { waiting - waiting % batch };
        // What stays waits on from now if a batch left, else from when it began.
        self.waiting_since[group] = match (waiting - leaving, leaving) {
            (0, _) => None,
            (_, 0) => self.waiting_since[group],
            _ => Some(self.clock().now()),
        };
        leaving
    }

    /// Whether more of `group` may still come: a slot whose job's course is before it. A lookup
    /// comes after a grant (an acquire out, or waiting to leave); an effect to start, after a
    /// grant or a lookup; a record, after a lookup or an execute whose handler has no output yet;
    /// a completion, after a lookup (an output adopted) or an execute. Any other kind may come at
    /// any time. When none can, a batch that is not full leaves at once: lingering would only
    /// delay it (the last jobs of a burst waited a linger at each step). A slot waiting in the
    /// group is past that step (its machine's request is the group's own, or an execute whose
    /// output is known), so it never counts as company for itself.
    fn more_may_come(&self, group: usize) -> bool {
        if !matches!(group, LOOKUPS | EFFECTS | RECORDS | COMPLETES) {
            return true;
        }
        self.slots.iter().any(|slot| match (group, slot.worker.main_request()) {
            // A lookup comes back as an effect, a record or a completion.
            (EFFECTS | RECORDS | COMPLETES, Some(WorkerRequest::Lookup { .. })) => true,
            // The machine awaits a grant: its acquire is out, waits to leave, or is sent again.
            (LOOKUPS | EFFECTS, Some(WorkerRequest::Acquire)) => true,
            (COMPLETES, Some(WorkerRequest::Execute { .. })) => true,
            (RECORDS, Some(WorkerRequest::Execute { .. })) => {
                slot.effect.as_ref().is_none_or(|effect| effect.output.is_none())
            }
            _ => false,
        })
    }

    /// Sends the records and requests queued that are due ([`Run::leaving`]): each kind in
    /// batches of at most [`WorkerOptions::batch`], in the order the machines made them; a batch
    /// of one as a single call.
    fn flush(&mut self) {
        let mut records = std::mem::take(&mut self.queued_records);
        // The machines took the time since these were queued: an effect abandoned meanwhile
        // records nothing.
        records.retain(|&(slot, id, _)| {
            self.slots[slot].effect.as_ref().is_some_and(|effect| effect.id == id && effect.running.is_none())
        });
        let more = !records.is_empty() && self.more_may_come(RECORDS);
        let leaving = self.leaving(RECORDS, records.len(), more);
        self.queued_records = records.split_off(leaving);
        for batch in records.chunks(self.options.batch) {
            match *batch {
                [(slot, id, output)] => self.record_now(slot, id, output),
                _ => self.record_batch(batch),
            }
        }
        let mut queued = std::mem::take(&mut self.queued);
        // Stable: within a kind, the machines' order.
        queued.sort_by_key(|(_, _, request)| batch_group(request));
        let mut rest = &queued[..];
        while let Some(&(_, _, first)) = rest.first() {
            let group = batch_group(&first).expect("only requests that batch are queued");
            let same = rest.iter().take_while(|(_, _, request)| batch_group(request) == Some(group)).count();
            let (kind, after) = rest.split_at(same);
            rest = after;
            // Asked only of a kind that waits, and before any of it leaves (a pass over the slots).
            let more = self.more_may_come(group as usize);
            let leaving = self.leaving(group as usize, kind.len(), more);
            let (leave, stay) = kind.split_at(leaving);
            self.queued.extend_from_slice(stay);
            for batch in leave.chunks(self.options.batch) {
                if let [(slot, id, request)] = *batch {
                    self.call_now(slot, id, request);
                    continue;
                }
                self.call_batch(batch.to_vec());
            }
        }
    }

    /// Sends requests of one kind as one call ([`Client::worker_batch`]); each answer is awaited
    /// as a single call's, and goes to its machine as it comes (a store's come together, the
    /// simulator's network's one by one).
    fn call_batch(&mut self, batch: Vec<(usize, RequestId, WorkerRequest)>) {
        let now = self.clock().now();
        let mut calls = Vec::with_capacity(batch.len());
        for &(slot, id, request) in &batch {
            self.slots[slot].acquiring += u32::from(request == WorkerRequest::Acquire);
            self.slots[slot].worker.handle_sent(now, id);
            calls.push((self.slots[slot].id, id, request));
        }
        let answers = self.client().worker_batch(calls);
        assert_eq!(answers.len(), batch.len(), "a client answers each request of a batch");
        for ((slot, id, request), call) in batch.into_iter().zip(answers) {
            self.await_answer(now, slot, id, request, call);
        }
    }

    /// Sends `request` to the client now, alone (see [`Run::call`]).
    fn call_now(&mut self, slot: usize, id: RequestId, request: WorkerRequest) {
        let now = self.clock().now();
        // The request leaves now, perhaps later than the machine asked (a stall at a point): its
        // timeout counts from here.
        self.slots[slot].acquiring += u32::from(request == WorkerRequest::Acquire);
        self.slots[slot].worker.handle_sent(now, id);
        let call = self.client().worker(self.slots[slot].id, id, request);
        self.await_answer(now, slot, id, request, call);
    }

    /// Awaits the answer to `request`, sent at `now`: bounded by its timeout, except an
    /// acquire's and a release's (see [`Run::call`]).
    fn await_answer(
        &mut self,
        now: Time,
        slot: usize,
        id: RequestId,
        request: WorkerRequest,
        call: BoxFuture<'static, Option<WorkerReply>>,
    ) {
        let answer = match request {
            WorkerRequest::Acquire if self.options.planted.0.on(lease_core::Bug::AcquireBoundedByTimeout) => {
                // Planted: a grant answering after the timeout is dropped, never declined.
                Either::Right(self.bound(now + self.options.worker.request_timeout, call))
            }
            // A release too: it is sent once, and its answer (the grant undone) is counted.
            WorkerRequest::Acquire | WorkerRequest::Release { .. } => Either::Left(call),
            _ => Either::Right(self.bound(now + self.options.worker.request_timeout, call)),
        };
        self.inflight.push(Box::pin(answer.map(move |reply| Done::Answer { slot, id, request, reply })));
    }

    /// `call`, or `None` once the loop takes the time at or past `deadline`.
    fn bound<T: Send + 'static>(
        &mut self,
        deadline: Time,
        call: BoxFuture<'static, Option<T>>,
    ) -> impl Future<Output = Option<T>> + Send + 'static {
        let (abort, registration) = AbortHandle::new_pair();
        self.deadlines.push((deadline, abort));
        Abortable::new(call, registration).map(|answer| answer.ok().flatten())
    }

    /// The machine's `Execute` `id`: the handler, once (see the module doc).
    async fn execute(&mut self, slot: usize, id: RequestId, op: OpId, epoch: Epoch) {
        if self.queued_effects.iter().any(|&(queued, queued_id, ..)| (queued, queued_id) == (slot, id)) {
            // A copy sent again within this turn (its machine timed the first out while taking
            // the time for another effect): one start, never two handlers for one request.
            return;
        }
        if self.buffered.iter().any(|&(queued, queued_id, ..)| (queued, queued_id) == (slot, id)) {
            return; // A copy of a buffered effect: it keeps its place.
        }
        if self.handlers_busy() && self.slots[slot].effect.is_none() {
            match self.still_acting(slot, id, op, epoch) {
                true => {
                    self.buffered.push_back((slot, id, op, epoch));
                    // Buffered: from here, a lease given up before its effect starts is released.
                    let node = Node::Worker(self.slots[slot].id.0);
                    self.hook().at(node, Point::Buffered, Some(op.job)).await;
                }
                false => self.unstarted.push((slot, op.job, epoch)),
            }
            return;
        }
        self.begin(slot, id, op, epoch).await;
    }

    /// Whether every handler the options allow is taken: running, or about to start (decided at
    /// this turn).
    fn handlers_busy(&self) -> bool {
        let limit = match self.options.handlers {
            0 => return false,
            limit => limit,
        };
        let running =
            self.slots.iter().filter(|slot| slot.effect.as_ref().is_some_and(|effect| effect.running.is_some()));
        let taken = running.count() + self.queued_effects.len();
        taken >= limit
    }

    /// The buffered effects, at each turn: a lease its machine no longer acts on is released
    /// (it never ran: see [`WorkerOptions::handlers`]), every one when draining; then, oldest
    /// first, as many start as handlers are free, each decided again.
    async fn unbuffer(&mut self) {
        let draining = self.drain_until.is_some();
        let mut kept = std::collections::VecDeque::with_capacity(self.buffered.len());
        for (slot, id, op, epoch) in std::mem::take(&mut self.buffered) {
            if !draining && self.still_acting(slot, id, op, epoch) {
                kept.push_back((slot, id, op, epoch));
                continue;
            }
            self.unstarted.push((slot, op.job, epoch));
        }
        self.buffered = kept;
        for (slot, job, epoch) in std::mem::take(&mut self.unstarted) {
            self.give_back_unstarted(slot, job, epoch, draining).await;
        }
        while !self.handlers_busy() {
            let Some((slot, id, op, epoch)) = self.buffered.pop_front() else { break };
            self.begin(slot, id, op, epoch).await;
        }
    }

    /// A lease whose effect was decided but never started (no `executing` line): waiting in the
    /// buffer, or decided in a batching turn whose lines had not left. Once its machine gave it
    /// up meanwhile (self-fenced past its estimate: a pause, or renewals cut off), it is released
    /// (after the machine's `abandoned` line), back at the
    /// queue's head with its attempt undone, not left to expire and cost the job an attempt that
    /// never ran. While draining, a lease still held goes back too, and the slot asks no more.
    /// A release is refused, harmlessly, when the lease is no longer the slot's.
    async fn give_back_unstarted(&mut self, slot: usize, job: JobId, epoch: Epoch, draining: bool) {
        if !self.slots[slot].closed {
            // The machine took the time: what it did on it (its `abandoned` line) goes first.
            while let Some(action) = self.slots[slot].worker.poll() {
                self.act(slot, action).await;
            }
        }
        if self.slots[slot].started_lease == Some((job, epoch)) {
            return; // Its `executing` line may be written: never handed back.
        }
        if !draining && self.options.planted.0.on(lease_core::Bug::BufferKeepsGivenUp) {
            return; // Planted: left to lapse, its job charged an attempt that never ran.
        }
        if self.slots[slot].worker.holding() == Some((job, epoch)) {
            if !draining {
                return; // Still held, its machine awaiting another request: not given up.
            }
            self.slots[slot].closed = true;
            self.hand_back(slot, job, epoch).await;
        }
        self.tally.buffer_released += 1;
        self.call(slot, SHUTDOWN_RELEASE, WorkerRequest::Release { job, epoch });
    }

    /// Starts the machine's `Execute` `id`, a handler being free: decided (the machine taking
    /// the time), then its `executing` line, with this turn's others when batching, then the
    /// handler.
    async fn begin(&mut self, slot: usize, id: RequestId, op: OpId, epoch: Epoch) {
        if !self.decide(slot, id, op, epoch) {
            if self.slots[slot].effect.is_none() {
                self.unstarted.push((slot, op.job, epoch));
            }
            return;
        }
        // Its line goes with the others of this turn's ([`Run::start_queued`]); alone, at once.
        self.queued_effects.push((slot, id, op, epoch));
        if self.options.batch > 1 {
            self.wait_from(EFFECTS);
            return;
        }
        self.start_queued().await;
    }

    /// Whether the machine's `Execute` `id` starts an effect: not a copy of one under way (a
    /// copy records a finished effect's output again), and the lease still acted on once the
    /// machine takes the time. From here the lease is never released at shutdown: the
    /// `executing` line about to be written may commit even when its answer is lost.
    fn decide(&mut self, slot: usize, id: RequestId, op: OpId, epoch: Epoch) -> bool {
        if let Some(effect) = self.slots[slot].effect.as_ref().filter(|effect| effect.id == id) {
            // A copy sent again because the request timed out: never a second handler call.
            if let (Some(output), false) = (effect.output, effect.recording) {
                self.record(slot, id, output);
            }
            return false;
        }
        // The machine takes the time first, so the effect is decided (and its line says so) only
        // while the worker still acts on the lease.
        let execute = WorkerRequest::Execute { op, epoch };
        let now = self.clock().now();
        self.slots[slot].worker.handle_timeout(now);
        if self.slots[slot].worker.awaiting(id) != Some(execute) {
            return false;
        }
        self.slots[slot].started_lease = Some((op.job, epoch));
        true
    }

    /// The `executing` line of `id` is not known written: the history must show the effect's
    /// start before it starts, so the handler does not run. To the machine this is a call whose
    /// answer was lost: the request times out and is sent again, and the line written again.
    fn unwritten(&mut self, slot: usize, id: RequestId) {
        self.slots[slot].unknown_line = self.slots[slot].started_lease;
        self.slots[slot].worker.handle_sent(self.seams.clock.now(), id);
    }

    /// The effects decided at this turn (batching): their `executing` lines in one call
    /// ([`Client::started`], which reads the payloads of those written), then each effect whose
    /// line was written started, in turn. Lines not known written start none of them.
    async fn start_queued(&mut self) {
        let more = !self.queued_effects.is_empty() && self.more_may_come(EFFECTS);
        let mut queued = std::mem::take(&mut self.queued_effects);
        // Decided during the drain, perhaps before a stall at another slot's point (a pause of
        // the whole process): the machines take the time again, and a lease no longer acted on
        // writes no `executing` line.
        queued.retain(|&(slot, id, op, epoch)| {
            let acting = self.still_acting(slot, id, op, epoch);
            if !acting {
                // Decided, but its `executing` line was never sent: it never started, and is
                // released as a buffered lease is; unless an earlier write of its line failed
                // unknown, which may have committed (the swarm found a release after such a line,
                // once failed line writes were dealt: the machine sent the effect again, a pause
                // outlasted the lease, and the retry was given up unsent).
                let lease = Some((op.job, epoch));
                if self.slots[slot].started_lease == lease && self.slots[slot].unknown_line != lease {
                    self.slots[slot].started_lease = None;
                }
                self.unstarted.push((slot, op.job, epoch));
            }
            acting
        });
        let leaving = self.leaving(EFFECTS, queued.len(), more);
        self.queued_effects = queued.split_off(leaving);
        if queued.is_empty() {
            if self.options.planted.0.on(lease_core::Bug::LinesEveryTurn) {
                // Planted: the turn's batch of lines is written, none in it.
                self.client().lines(Vec::new()).await;
            }
            return;
        }
        let lines: Vec<_> = queued
            .iter()
            .map(|&(slot, _, op, epoch)| {
                (Node::Worker(self.slots[slot].id.0), Event::Executing { job: op.job, op, epoch })
            })
            .collect();
        // Decided, the lines not yet at the store: a process stalled here (its write waiting for
        // the store's lock) writes them late, and the store writes only those whose leases it
        // still holds by then.
        if let Some(&(node, Event::Executing { job, .. })) = lines.first() {
            self.hook().at(node, Point::BeforeLine, Some(job)).await;
        }
        let written = self.client().started(lines).await;
        for (index, (slot, id, op, epoch)) in queued.into_iter().enumerate() {
            let started = written.as_ref().map(|written| written.get(index).cloned().unwrap_or(Started::Refused));
            let payload = match started {
                None => {
                    self.unwritten(slot, id);
                    continue;
                }
                Some(Started::Refused) => {
                    // Refused by the store: the lease expired or was taken while the line was on
                    // its way (a slow write). The effect never starts; the machine times it out,
                    // and sends it again or gives the lease up. The lease is kept as started,
                    // never released: it is the store's no longer, and an earlier write of its
                    // line may have committed unknown.
                    self.slots[slot].worker.handle_sent(self.seams.clock.now(), id);
                    self.tally.refused_lines += 1;
                    continue;
                }
                Some(Started::Written(payload)) => payload,
            };
            // The machine takes the time again: the line's write, or a stall at the point of an
            // effect started before this one (a pause of the whole process), may have carried it
            // past the lease, and an effect decided before that must not start after it.
            if self.still_acting(slot, id, op, epoch) {
                self.start(slot, id, op, epoch, payload).await;
            }
        }
    }

    /// Whether the machine, taking the time now, still awaits `Execute` `id` (it acts on the
    /// lease).
    fn still_acting(&mut self, slot: usize, id: RequestId, op: OpId, epoch: Epoch) -> bool {
        let now = self.clock().now();
        self.slots[slot].worker.handle_timeout(now);
        self.slots[slot].worker.awaiting(id) == Some(WorkerRequest::Execute { op, epoch })
    }

    /// Starts the effect of `Execute` `id`, its `executing` line written and the job's `payload`
    /// read with it: the `before_effect` point, then the handler.
    async fn start(&mut self, slot: usize, id: RequestId, op: OpId, epoch: Epoch, payload: Vec<u8>) {
        let running = self.slots[slot].effect.as_ref().filter(|effect| effect.id == id);
        assert!(running.is_none(), "{} starts a second handler for request {}", self.slots[slot].id, id.0);
        let node = Node::Worker(self.slots[slot].id.0);
        // Decided, not yet started: a process paused here (a GC pause, a stall) starts its effect
        // late, perhaps past the lease, and only the dependency's check of the epoch (or the
        // runtime's, before it records) stands between that effect and the job's next owner.
        self.hook().at(node, Point::BeforeEffect, Some(op.job)).await;
        self.slots[slot].worker.handle_sent(self.seams.clock.now(), id);
        let (trigger, cancel) = Cancel::new();
        let (abort, registration) = AbortHandle::new_pair();
        let (handler, deadline) = (Arc::clone(&self.handler), Arc::clone(&self.slots[slot].deadline));
        let worker = self.slots[slot].id;
        deadline.store(self.deadline_of(slot).map_or(0, |at| at.0), Ordering::Relaxed);
        let (clock, metrics) = (Arc::clone(&self.seams.clock), Arc::clone(&self.seams.metrics));
        let run = async move {
            let started = clock.now();
            let outcome = handler.call(Job::new(worker, op, epoch, payload, cancel, deadline)).await;
            metrics.effect(clock.now().saturating_since(started).as_us() as f64 / 1e6);
            outcome
        };
        let limit = self.options.handler_timeout.map(|limit| self.seams.clock.sleep_until(self.clock().now() + limit));
        let run = async move {
            let Some(limit) = limit else { return Done::Handled { slot, id, outcome: run.await } };
            match future::select(Box::pin(run), limit).await {
                Either::Left((outcome, _)) => Done::Handled { slot, id, outcome },
                Either::Right(((), _)) => Done::TimedOut { slot, id },
            }
        };
        let mut run: BoxFuture<'static, Done> =
            Box::pin(Abortable::new(run, registration).map(|ended| ended.unwrap_or(Done::Nothing)));
        // Started now, not when the loop next waits: the handler's first step (its dependency
        // call leaving) comes straight after the point, before the machine takes the time again.
        match futures::poll!(run.as_mut()) {
            Poll::Ready(done) => self.handlers.push(Box::pin(future::ready(done))),
            Poll::Pending => self.handlers.push(run),
        }
        let running = Some((trigger, abort));
        self.slots[slot].effect = Some(Effect { id, op, epoch, running, output: None, recording: false });
        self.tally.handled += 1;
    }

    /// Sends the effect's output to the ledger: now, or with the others of this turn when
    /// batching.
    fn record(&mut self, slot: usize, id: RequestId, output: OutputId) {
        let effect = self.slots[slot].effect.as_mut().expect("recording an effect");
        if self.options.batch > 1 {
            effect.recording = true;
            self.queued_records.push((slot, id, output));
            self.wait_from(RECORDS);
            return;
        }
        self.record_now(slot, id, output);
    }

    /// Sends these effects' outputs to the ledger in one call ([`Client::record_batch`]), each
    /// answer bounded by a request's timeout and taken by its slot as a single record's would.
    fn record_batch(&mut self, batch: &[(usize, RequestId, OutputId)]) {
        let mut records = Vec::with_capacity(batch.len());
        for &(slot, id, output) in batch {
            let effect = self.slots[slot].effect.as_ref().expect("recording an effect");
            assert_eq!(effect.id, id, "recording another request's output");
            assert!(effect.running.is_none(), "recording while the handler runs");
            records.push((self.slots[slot].id, effect.op, effect.epoch, output));
        }
        // Planted, the batch is counted as one output sent.
        let once = self.options.planted.0.on(lease_core::Bug::RecordBatchCountedOnce);
        self.tally.recorded += if once { 1 } else { batch.len() as u64 };
        let deadline = self.clock().now() + self.options.worker.request_timeout;
        let answers = self.client().record_batch(records);
        assert_eq!(answers.len(), batch.len(), "a client answers each record of a batch");
        for (&(slot, id, output), call) in batch.iter().zip(answers) {
            let answer = self.bound(deadline, call);
            self.inflight.push(Box::pin(answer.map(move |apply| Done::Recorded { slot, id, output, apply })));
        }
    }

    /// Sends the effect's output to the ledger, alone.
    fn record_now(&mut self, slot: usize, id: RequestId, output: OutputId) {
        let held = &mut self.slots[slot];
        let effect = held.effect.as_mut().expect("recording an effect");
        assert_eq!(effect.id, id, "recording another request's output");
        assert!(effect.running.is_none(), "recording while the handler runs");
        effect.recording = true;
        let (op, epoch) = (effect.op, effect.epoch);
        self.tally.recorded += 1;
        let deadline = self.clock().now() + self.options.worker.request_timeout;
        let call = self.client().record(self.slots[slot].id, op, epoch, output);
        let answer = self.bound(deadline, call);
        self.inflight.push(Box::pin(answer.map(move |apply| Done::Recorded { slot, id, output, apply })));
    }

    /// The lease `job`/`epoch` is abandoned: its handler, if running, is cancelled and dropped.
    fn stop_effect(&mut self, slot: usize, job: JobId, epoch: Epoch) {
        let held = &mut self.slots[slot];
        let Some(effect) = held.effect.take_if(|effect| effect.op.job == job && effect.epoch == epoch) else {
            return;
        };
        if let Some((trigger, abort)) = effect.running {
            trigger.fire();
            abort.abort();
            self.tally.cancelled += 1;
        }
    }

    async fn on_done(&mut self, done: Done) {
        match done {
            Done::Answer { slot, id, request, reply } => self.on_answer(slot, id, request, reply).await,
            Done::Handled { slot, id, outcome } => self.on_handled(slot, id, outcome).await,
            Done::TimedOut { slot, id } => self.on_timed_out(slot, id).await,
            Done::Recorded { slot, id, output, apply } => self.on_recorded(slot, id, output, apply).await,
            Done::Nothing => {}
        }
    }

    async fn on_answer(&mut self, slot: usize, id: RequestId, request: WorkerRequest, reply: Option<WorkerReply>) {
        if request == WorkerRequest::Acquire {
            self.slots[slot].acquiring -= 1;
        }
        let Some(reply) = reply else { return }; // No answer: the machine's retry handles it.
        if let WorkerReply::Released(release) = reply {
            // No machine waits on a release.
            self.tally.released += u64::from(matches!(release, Release::Released { .. }));
            return;
        }
        let awaited = self.slots[slot].worker.awaiting(id) == Some(request);
        if let WorkerReply::Acquired(Acquired::Granted(grant) | Acquired::Regranted(grant)) = reply {
            // Shutting down: a grant that answers an acquire sent before goes straight back, the
            // machine's own (awaited) or one a slot closed since sent (it asked again as the
            // drain began, and closed then): no machine will take it, and left leased it would
            // cost the job an attempt nobody made.
            if self.slots[slot].closed || (awaited && self.drain_until.is_some()) {
                self.slots[slot].closed = true;
                let (job, epoch) = (grant.lease.job, grant.lease.epoch);
                self.hand_back(slot, job, epoch).await;
                self.call(slot, SHUTDOWN_RELEASE, WorkerRequest::Release { job, epoch });
                return;
            }
        }
        if self.slots[slot].closed {
            return;
        }
        let node = Node::Worker(self.slots[slot].id.0);
        if let (WorkerRequest::Renew { job, .. }, WorkerReply::Renewed(_), true) = (request, reply, awaited) {
            self.hook().at(node, Point::BeforeRenewReply, Some(job)).await;
        }
        if awaited {
            if let WorkerReply::Acquired(Acquired::Granted(_) | Acquired::Regranted(_)) = reply {
                self.seams.metrics.count(Count::Grant);
            }
            self.count_settled(reply);
        }
        // Read the clock after any stall: the machine takes the answer when it wakes.
        let now = self.clock().now();
        self.slots[slot].worker.handle_reply(now, id, reply);
    }

    async fn on_handled(&mut self, slot: usize, id: RequestId, outcome: Outcome<Output>) {
        let held = &mut self.slots[slot];
        let Some(effect) = held.effect.as_mut().filter(|effect| effect.id == id) else { return };
        effect.running = None;
        let execute = WorkerRequest::Execute { op: effect.op, epoch: effect.epoch };
        // The time first: a lease the machine has stopped acting on records nothing (and takes no
        // answer a fenced dependency brought back: the ledger holds it, for a reclaimer to adopt).
        held.worker.handle_timeout(self.seams.clock.now());
        if held.worker.awaiting(id) != Some(execute) {
            return;
        }
        let output = match outcome {
            Ok(Output::Bytes(bytes)) => crate::output_id(&bytes),
            Ok(Output::Named(output)) => output,
            Ok(Output::Recorded { output, apply }) => return self.effect_done(slot, id, output, apply).await,
            Err(error) => {
                // A retryable failure is requeued, a permanent one dead-lettered now. The history
                // says why, as the dependency's own line, unless the dependency wrote it: without
                // it, lease-check finds a requeue (or a dead-letter) that nothing explains.
                let (op, epoch, permanent) = (effect.op, effect.epoch, error.is_permanent());
                let failed = Event::DependencyFailed {
                    from: Node::Worker(held.id.0),
                    job: op.job,
                    op,
                    epoch,
                    after_effect: false,
                    permanent,
                };
                held.effect = None;
                if !error.is_reported() && !self.seams.client.line(Node::Ledger, failed).await {
                    // The failure's line is not known written (the store could not be reached):
                    // a requeue or dead-letter now would be one the history cannot explain. To
                    // the machine this is an execute unanswered: it is sent again, and the
                    // handler runs again.
                    return;
                }
                let held = &mut self.slots[slot];
                let execution = if permanent { Execution::Permanent } else { Execution::Failed };
                held.worker.handle_reply(self.seams.clock.now(), id, WorkerReply::Executed(execution));
                return;
            }
        };
        effect.output = Some(output);
        self.record(slot, id, output);
    }

    /// The handler ran past its limit: its cancellation fires, and the job takes the requeue
    /// path, as after a retryable error.
    async fn on_timed_out(&mut self, slot: usize, id: RequestId) {
        let Some(effect) = self.slots[slot].effect.as_mut().filter(|effect| effect.id == id) else { return };
        if let Some((trigger, _abort)) = effect.running.take() {
            trigger.fire();
            self.tally.cancelled += 1;
        }
        let timed_out = Err(HandlerError::Retryable("the handler ran past its timeout".to_string()));
        self.on_handled(slot, id, timed_out).await;
    }

    async fn on_recorded(&mut self, slot: usize, id: RequestId, output: OutputId, apply: Option<Apply>) {
        let held = &mut self.slots[slot];
        let Some(effect) = held.effect.as_mut().filter(|effect| effect.id == id) else { return };
        effect.recording = false;
        // No answer: the machine sends the execute again, and the output is recorded again.
        let Some(apply) = apply else { return };
        if held.worker.awaiting(id) != Some(WorkerRequest::Execute { op: effect.op, epoch: effect.epoch }) {
            return;
        }
        self.effect_done(slot, id, output, apply).await;
    }

    /// The ledger answered `apply` to the effect's `output` (recorded by the runtime, or by a
    /// fenced dependency), for the execute the machine awaits: the `after_effect` point when the
    /// ledger accepted it under the lease still held, then the answer to the machine, which
    /// completes or abandons.
    async fn effect_done(&mut self, slot: usize, id: RequestId, output: OutputId, apply: Apply) {
        let held = &mut self.slots[slot];
        let effect = held.effect.take().expect("an effect is done");
        assert_eq!(effect.id, id, "another request's effect is done");
        assert!(effect.running.is_none(), "an effect is done while its handler runs");
        let (job, epoch) = (effect.op.job, effect.epoch);
        if apply == Apply::Applied && held.worker.holding() == Some((job, epoch)) {
            let node = Node::Worker(held.id.0);
            self.hook().at(node, Point::AfterEffect, Some(job)).await;
        }
        let reply = WorkerReply::Executed(Execution::Done { output, apply });
        let now = self.clock().now();
        self.slots[slot].worker.handle_reply(now, id, reply);
    }

    /// Counts what an answer its machine awaited settled: a job completed (the tally) or
    /// dead-lettered (the metrics). Whether the job ended.
    fn count_settled(&mut self, reply: WorkerReply) -> bool {
        match reply {
            WorkerReply::Completed(Completion::Completed(_) | Completion::AlreadyCompleted) => {
                self.tally.completed += 1;
                true
            }
            WorkerReply::Requeued(Requeue::DeadLettered(_)) => {
                self.seams.metrics.count(Count::DeadLetter);
                true
            }
            _ => false,
        }
    }

    /// Says on the history that the slot gives `job`/`epoch` up at shutdown, before it releases
    /// it: `lease-check` accepts a worker's release only of a grant it declined, or one it gave up
    /// so, having never executed under it.
    async fn hand_back(&mut self, slot: usize, job: JobId, epoch: Epoch) {
        let node = Node::Worker(self.slots[slot].id.0);
        let why = lease_history::AbandonReason::Shutdown;
        self.client().line(node, Event::Abandoned { job, epoch, why }).await;
    }

    /// Every call still in flight once the loop has ended, each as it ends, until the last one
    /// is due: the latest deadline of a bounded call (a renewal, a lookup, a completion, a
    /// record), or a request's timeout (and an acquire's wait) from now for the answers no machine
    /// times out any more, an acquire's or a release's. Nothing takes the time now, and an answer
    /// lost on its way must not hold the exit for ever; a grant that answers later is not taken,
    /// and its lease expires.
    async fn in_flight_at_end(&mut self) -> Vec<Done> {
        let inflight = std::mem::take(&mut self.inflight);
        let timing = self.options.worker;
        let answers_due = self.clock().now() + timing.request_timeout + timing.acquire_wait;
        let last = self.deadlines.drain(..).map(|(at, _)| at).fold(answers_due, Time::max);
        let timer = self.seams.clock.sleep_until(last);
        // The calls are dropped at `last`, the bounded ones with them.
        inflight.take_until(timer).collect().await
    }

    /// Hands `job`/`epoch` back once the loop has ended: its line, then its release.
    async fn release_at_end(
        &mut self,
        slot: usize,
        job: JobId,
        epoch: Epoch,
    ) -> BoxFuture<'static, Option<WorkerReply>> {
        self.hand_back(slot, job, epoch).await;
        self.client().worker(self.slots[slot].id, SHUTDOWN_RELEASE, WorkerRequest::Release { job, epoch })
    }

    /// The grace is over (or nothing is left): cancel what still runs, release what can be.
    async fn finish(&mut self) {
        let (mut back, mut left) = (Vec::new(), Vec::new());
        for slot in 0..self.slots.len() {
            let Some((job, epoch)) = self.slots[slot].worker.holding().filter(|_| !self.slots[slot].closed) else {
                continue;
            };
            if self.options.planted.0.on(lease_core::Bug::ShutdownLeavesHandlers) {
                // Planted: the handler is dropped with the runtime, its signal never fired.
            } else {
                self.stop_effect(slot, job, epoch);
            }
            if self.slots[slot].started_lease == Some((job, epoch)) {
                left.push(slot);
                continue;
            }
            back.push((slot, job, epoch));
        }
        // Calls still in flight: releases sent while draining, and acquires, whose grants no
        // machine takes now: each goes back, unless it is a lease a slot holds (handled above);
        // and completions (and requeues), sent as the grace ran out (a stall carried the process
        // past it), whose jobs are then done, not left.
        for done in self.in_flight_at_end().await {
            let Done::Answer { slot, id, request, reply: Some(reply) } = done else { continue };
            if self.slots[slot].worker.awaiting(id) == Some(request) && self.count_settled(reply) {
                left.retain(|&held| held != slot);
            }
            match reply {
                WorkerReply::Released(Release::Released { .. }) => self.tally.released += 1,
                WorkerReply::Acquired(Acquired::Granted(grant) | Acquired::Regranted(grant)) => {
                    if self.options.planted.0.on(lease_core::Bug::StopDropsLateGrants) {
                        continue; // Planted: the grant is dropped, its lease left to lapse.
                    }
                    let (job, epoch) = (grant.lease.job, grant.lease.epoch);
                    let held = &self.slots[slot];
                    if held.worker.holding() != Some((job, epoch)) && held.started_lease != Some((job, epoch)) {
                        back.push((slot, job, epoch));
                    }
                }
                _ => {}
            }
        }
        self.tally.left += left.len() as u64;
        let mut releases = Vec::new();
        for (slot, job, epoch) in back {
            releases.push(self.release_at_end(slot, job, epoch).await);
        }
        let releases: FuturesUnordered<_> = releases.into_iter().collect();
        // Each release as the client answers it, for a request's timeout at most: a release that
        // is not answered by then leaves its lease to expire.
        let timer = self.seams.clock.sleep_until(self.clock().now() + self.options.worker.request_timeout);
        if self.options.planted.0.on(lease_core::Bug::ShutdownReleasesUnawaited) {
            return; // Planted: the releases are dropped, never polled, so never sent.
        }
        let answered: Vec<Option<WorkerReply>> = releases.take_until(timer).collect().await;
        for reply in answered {
            self.tally.released += u64::from(matches!(reply, Some(WorkerReply::Released(Release::Released { .. }))));
        }
    }
}
