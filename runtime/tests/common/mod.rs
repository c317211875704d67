//! What the runtime tests share: a manual clock that a driver moves to the next timer when
//! nothing else can run (a discrete-event loop: fast and deterministic), and an in-memory client
//! over `lease-core`'s own table and ledger, with the faults a test plants.
#![allow(dead_code)] // Each test file uses its own part.

use futures::future::{self, BoxFuture, FutureExt};
use futures::task::{waker_ref, ArcWake};
use lease_core::{
    Apply, EffectLedger, Epoch, JobId, JobState, LeaseTable, OpId, OutputId, ReclaimReply, ReclaimRequest,
    ReclaimerConfig, ReclaimerId, Renewal, RequestId, Span, TableConfig, Time, WorkerConfig, WorkerId, WorkerReply,
    WorkerRequest,
};
use lease_history::{Event, Node};
use lease_runtime::{Client, Clock, Runtime};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// The most turns (a poll, or a move of the clock) one driven test takes.
const TURNS_MAX: u64 = 1_000_000;

/// A clock that moves only when [`drive`] moves it, to the earliest timer.
#[derive(Clone, Default)]
pub struct ManualClock(Arc<Mutex<Timers>>);

#[derive(Default)]
struct Timers {
    now: Time,
    sleepers: Vec<(Time, Waker)>,
}

impl ManualClock {
    fn timers(&self) -> MutexGuard<'_, Timers> {
        self.0.lock().unwrap()
    }

    /// Moves the clock to the earliest timer and wakes its sleepers; false when none waits.
    fn advance(&self) -> bool {
        let mut timers = self.timers();
        let Some(next) = timers.sleepers.iter().map(|(at, _)| *at).min() else { return false };
        timers.now = timers.now.max(next);
        let now = timers.now;
        let (due, waiting): (Vec<_>, Vec<_>) = timers.sleepers.drain(..).partition(|(at, _)| *at <= now);
        timers.sleepers = waiting;
        drop(timers);
        due.into_iter().for_each(|(_, waker)| waker.wake());
        true
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Time {
        self.timers().now
    }

    fn sleep_until(&self, at: Time) -> BoxFuture<'static, ()> {
        let clock = self.clone();
        Box::pin(future::poll_fn(move |cx| {
            let mut timers = clock.timers();
            if timers.now >= at {
                return Poll::Ready(());
            }
            timers.sleepers.push((at, cx.waker().clone()));
            Poll::Pending
        }))
    }
}

struct Flag(AtomicBool);

impl ArcWake for Flag {
    fn wake_by_ref(flag: &Arc<Self>) {
        flag.0.store(true, Ordering::SeqCst);
    }
}

/// Runs `test` to its end: polls it while anything in it was woken, and otherwise moves the clock
/// to the earliest timer. Panics if it can neither run nor wait (a deadlock) or takes too long.
pub fn drive<T>(clock: &ManualClock, test: impl Future<Output = T>) -> T {
    let mut test = pin!(test);
    let flag = Arc::new(Flag(AtomicBool::new(true)));
    let waker = waker_ref(&flag);
    let mut cx = Context::from_waker(&waker);
    for _ in 0..TURNS_MAX {
        if flag.0.swap(false, Ordering::SeqCst) {
            if let Poll::Ready(value) = test.as_mut().poll(&mut cx) {
                return value;
            }
        } else {
            assert!(clock.advance(), "deadlock at {}: nothing runs and no timer waits", clock.now());
        }
    }
    panic!("the test took more than {TURNS_MAX} turns");
}

/// A lease ttl of 1 s; heartbeats every 300 ms, a 200 ms margin, requests time out after 200 ms.
pub fn worker_config() -> WorkerConfig {
    WorkerConfig {
        lease_ttl: Span::from_secs(1),
        heartbeat_every: Span::from_ms(300),
        drift_margin: Span::from_ms(200),
        request_timeout: Span::from_ms(200),
        idle_backoff: Span::from_ms(50),
        acquire_wait: Span::ZERO,
    }
}

/// A scan every 250 ms, requests timing out after 200 ms, three retries.
pub fn reclaimer_config() -> ReclaimerConfig {
    ReclaimerConfig { scan_every: Span::from_ms(250), request_timeout: Span::from_ms(200), retries_max: 3, wave: 4 }
}

/// Faults a test plants in the in-memory client.
#[derive(Debug, Default)]
pub struct Faults {
    /// Renewals of this lease reach the table but their answers are lost.
    pub lose_renewals_of: Option<(JobId, Epoch)>,
    /// The next this many records are applied, but their answers are lost.
    pub lose_record_answers: u32,
    /// Acquires are answered at once, but their answers arrive this much later.
    pub delay_acquire_answers: Option<Span>,
    /// Only this many acquire calls (copies included) are delayed, the first ones; `None`: all.
    pub delayed_acquires: Option<u32>,
    /// The next this many `executing` lines fail to write (the store could not be reached).
    pub fail_executing_lines: u32,
    /// The next this many `dependency_failed` lines fail to write.
    pub fail_failure_lines: u32,
}

/// What the in-memory client saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Every record call: the operation, its epoch, the output and the ledger's answer.
    pub records: Vec<(OpId, Epoch, OutputId, Apply)>,
    /// Renewals the table granted.
    pub renewed: u64,
    /// The runtime's own lines.
    pub lines: Vec<(Node, Event)>,
    /// Every batch of lines written together ([`Client::lines`]): its lines, in order.
    pub line_batches: Vec<Vec<Event>>,
    /// Every batch of worker requests ([`Client::worker_batch`]): its requests, in order.
    pub batches: Vec<Vec<WorkerRequest>>,
}

struct State {
    table: LeaseTable,
    ledger: EffectLedger,
    faults: Faults,
    seen: Seen,
}

/// The table and ledger of `lease-core` behind a mutex, answering at once on the manual clock.
#[derive(Clone)]
pub struct MemoryClient {
    clock: ManualClock,
    state: Arc<Mutex<State>>,
}

impl MemoryClient {
    /// A fresh table with room for 64 jobs, the ttl of [`worker_config`], 3 attempts, batches of 8.
    pub fn new(clock: &ManualClock) -> MemoryClient {
        let config = TableConfig { capacity: 64, lease_ttl: Span::from_secs(1), batch_max: 8, attempts_max: 3 };
        let state = State {
            table: LeaseTable::new(config).unwrap(),
            ledger: EffectLedger::new(),
            faults: Faults::default(),
            seen: Seen::default(),
        };
        MemoryClient { clock: clock.clone(), state: Arc::new(Mutex::new(state)) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Enqueues jobs `0..count`.
    pub fn enqueue(&self, count: u64) {
        let now = self.clock.now();
        let mut state = self.state();
        for job in 0..count {
            let _ = state.table.enqueue(now, JobId(job)).unwrap();
        }
    }

    /// Plants faults.
    pub fn plant(&self, plant: impl FnOnce(&mut Faults)) {
        plant(&mut self.state().faults);
    }

    /// Reads what the client saw.
    pub fn seen<T>(&self, read: impl FnOnce(&Seen) -> T) -> T {
        read(&self.state().seen)
    }

    /// The table, for the test's checks.
    pub fn table<T>(&self, read: impl FnOnce(&LeaseTable) -> T) -> T {
        read(&self.state().table)
    }

    /// Changes the table beside the runtimes: what a process that is not in the test did.
    pub fn table_mut<T>(&self, write: impl FnOnce(&mut LeaseTable, Time) -> T) -> T {
        let now = self.clock.now();
        write(&mut self.state().table, now)
    }

    /// The ledger, for the test's checks.
    pub fn ledger<T>(&self, read: impl FnOnce(&EffectLedger) -> T) -> T {
        read(&self.state().ledger)
    }

    /// Writes to the ledger as a dependency does that records its own output (a fenced one):
    /// beside the client, not through [`Client::record`].
    pub fn ledger_mut<T>(&self, write: impl FnOnce(&mut EffectLedger) -> T) -> T {
        write(&mut self.state().ledger)
    }

    /// Resolves once jobs `0..count` have all ended.
    pub fn all_ended(&self, count: u64) -> impl Future<Output = ()> + Send + 'static {
        self.until(move |table| (0..count).all(|job| table.terminal(JobId(job)).is_some()))
    }

    /// Resolves once `done` holds of the table (looked at every 50 ms).
    pub fn until(
        &self,
        done: impl Fn(&LeaseTable) -> bool + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let (client, clock) = (self.clone(), self.clock.clone());
        async move {
            while !client.table(&done) {
                clock.sleep_until(clock.now() + Span::from_ms(50)).await;
            }
        }
    }

    /// The state of every job `0..count`.
    pub fn states(&self, count: u64) -> Vec<JobState> {
        let state = self.state();
        let state_of = |job| match (state.table.terminal(job), state.table.lease(job)) {
            (Some(terminal), _) => JobState::Terminal(*terminal),
            (None, Some(lease)) => JobState::Leased(lease),
            (None, None) => JobState::Queued,
        };
        (0..count).map(|job| state_of(JobId(job))).collect()
    }

    fn answer_worker(&self, worker: WorkerId, id: RequestId, request: WorkerRequest) -> Option<WorkerReply> {
        let now = self.clock.now();
        let mut state = self.state();
        let reply = match request {
            WorkerRequest::Acquire => WorkerReply::Acquired(state.table.acquire_for(now, worker, id).unwrap()),
            WorkerRequest::Renew { job, epoch } => {
                let renewal = state.table.renew(now, job, epoch).unwrap();
                if let Renewal::Renewed { .. } = renewal {
                    state.seen.renewed += 1;
                }
                if state.faults.lose_renewals_of == Some((job, epoch)) {
                    return None;
                }
                WorkerReply::Renewed(renewal)
            }
            WorkerRequest::Lookup { op, epoch } => WorkerReply::Looked(state.ledger.lookup(op, epoch)),
            WorkerRequest::Execute { .. } => panic!("an execute reached the client: the runtime runs the handler"),
            WorkerRequest::Complete { job, epoch, output } => {
                WorkerReply::Completed(state.table.complete(now, job, epoch, output).unwrap())
            }
            WorkerRequest::Requeue { job, epoch } => {
                WorkerReply::Requeued(state.table.requeue(now, job, epoch).unwrap())
            }
            WorkerRequest::Release { job, epoch } => {
                WorkerReply::Released(state.table.release(now, job, epoch).unwrap())
            }
            WorkerRequest::DeadLetter { job, epoch } => {
                WorkerReply::Requeued(state.table.dead_letter(now, job, epoch).unwrap())
            }
        };
        Some(reply)
    }

    fn answer_reclaimer(&self, reclaimer: ReclaimerId, request: ReclaimRequest) -> ReclaimReply {
        let now = self.clock.now();
        let mut state = self.state();
        match request {
            ReclaimRequest::ListExpired { as_of, .. } => ReclaimReply::Listed(state.table.expired(now, as_of).unwrap()),
            ReclaimRequest::Fence { lease, as_of, .. } => {
                ReclaimReply::Fenced(state.table.fence(now, lease.job, lease.epoch, reclaimer, as_of).unwrap())
            }
            ReclaimRequest::Lookup { op, epoch, .. } => ReclaimReply::Looked(state.ledger.lookup(op, epoch)),
            ReclaimRequest::Complete { job, epoch, output, .. } => {
                ReclaimReply::Completed(state.table.complete(now, job, epoch, output).unwrap())
            }
            ReclaimRequest::Requeue { job, epoch, .. } => {
                ReclaimReply::Requeued(state.table.requeue(now, job, epoch).unwrap())
            }
            ReclaimRequest::Quarantine { job, epoch, recorded, rival, .. } => {
                ReclaimReply::Quarantined(state.table.quarantine(now, job, epoch, recorded, rival).unwrap())
            }
        }
    }
}

impl Client for MemoryClient {
    fn worker(
        &self,
        worker: WorkerId,
        id: RequestId,
        request: WorkerRequest,
    ) -> BoxFuture<'static, Option<WorkerReply>> {
        let answer = self.answer_worker(worker, id, request);
        let delay = {
            let faults = &mut self.state().faults;
            let left = faults.delayed_acquires.is_none_or(|left| left > 0);
            let delay = faults.delay_acquire_answers.filter(|_| request == WorkerRequest::Acquire && left);
            if let (Some(_), Some(left)) = (delay, faults.delayed_acquires.as_mut()) {
                *left -= 1;
            }
            delay
        };
        let Some(delay) = delay else { return Box::pin(future::ready(answer)) };
        let arrives = self.clock.sleep_until(self.clock.now() + delay);
        Box::pin(async move {
            arrives.await;
            answer
        })
    }

    fn worker_batch(
        &self,
        calls: Vec<(WorkerId, RequestId, WorkerRequest)>,
    ) -> Vec<BoxFuture<'static, Option<WorkerReply>>> {
        self.state().seen.batches.push(calls.iter().map(|&(_, _, request)| request).collect());
        calls.into_iter().map(|(worker, id, request)| self.worker(worker, id, request)).collect()
    }

    fn record(&self, _worker: WorkerId, op: OpId, epoch: Epoch, output: OutputId) -> BoxFuture<'static, Option<Apply>> {
        let mut state = self.state();
        let apply = state.ledger.apply(op, epoch, output);
        state.seen.records.push((op, epoch, output, apply));
        if state.faults.lose_record_answers > 0 {
            state.faults.lose_record_answers -= 1;
            return Box::pin(future::ready(None));
        }
        Box::pin(future::ready(Some(apply)))
    }

    fn reclaimer(
        &self,
        reclaimer: ReclaimerId,
        _id: RequestId,
        request: ReclaimRequest,
    ) -> BoxFuture<'static, Option<ReclaimReply>> {
        Box::pin(future::ready(Some(self.answer_reclaimer(reclaimer, request))))
    }

    fn line(&self, node: Node, event: Event) -> BoxFuture<'static, bool> {
        let mut state = self.state();
        if matches!(event, Event::Executing { .. }) && state.faults.fail_executing_lines > 0 {
            state.faults.fail_executing_lines -= 1;
            return Box::pin(future::ready(false));
        }
        if matches!(event, Event::DependencyFailed { .. }) && state.faults.fail_failure_lines > 0 {
            state.faults.fail_failure_lines -= 1;
            return Box::pin(future::ready(false));
        }
        state.seen.lines.push((node, event));
        Box::pin(future::ready(true))
    }

    fn lines(&self, lines: Vec<(Node, Event)>) -> BoxFuture<'static, bool> {
        self.state().seen.line_batches.push(lines.iter().map(|(_, event)| event.clone()).collect());
        let written: Vec<_> = lines.into_iter().map(|(node, event)| self.line(node, event)).collect();
        Box::pin(future::join_all(written).map(|written| written.into_iter().all(|written| written)))
    }
}

/// A runtime on `clock` and `client`.
pub fn runtime(clock: &ManualClock, client: &MemoryClient) -> Runtime {
    Runtime::new(Arc::new(clock.clone()), Arc::new(client.clone()))
}
