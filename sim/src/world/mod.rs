//! One simulated world per seed: the madsim runtime, its nodes, the fault schedule and the two
//! phases of a run.
//!
//! The step loop, in prose. [`run`] builds a madsim runtime from the seed and runs the supervisor
//! in it. The supervisor creates the nodes (table, ledger, workers, reclaimers, arrivals, and a
//! `chaos` node that performs delayed restarts and fault repairs), writes the `run` line, and then
//! walks the fault schedule: at each fault's time it applies it and asks the chaos node to undo it
//! later. Protocol-point crashes are not scheduled: nodes draw them from the seed's stream as they
//! pass those points. At `fault_phase_us` everything heals: partitions close, paused nodes resume,
//! packet loss stops, the dependency turns reliable. The supervisor then waits until every
//! accepted job has its terminal outcome, or the liveness budget runs out. A safety violation
//! stops the run at once. Finally every node is killed and the runtime gets one more tick, so
//! madsim frees the world (see DESIGN.md, "madsim facts").

pub(crate) mod ctx;
pub mod durable;
pub mod params;
pub(crate) mod strike;
pub(crate) mod verbs;

pub use params::{Arrival, Params, CALM_LATENCY_US};

use crate::faults::decide::Decisions;
use crate::faults::plan::Plan;
use crate::node;
use ctx::{Ctx, State, SELF};
use lease_check::{Checkers, Coverage, Violation};
use lease_core::Bugs;
use lease_history::{Entry, Event, Node};
use madsim::runtime::{Handle, Runtime};
use madsim::task::NodeId as SimNodeId;
use madsim::time::sleep;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the supervisor looks for a violation or convergence. A violation stops the world
/// within one tick, and the history ends at the violating line: nothing after it is recorded, so
/// the report is the same either way.
const SUPERVISOR_TICK_US: u64 = 100_000;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every invariant held, and every accepted job reached its terminal outcome.
    Held,
    /// A safety invariant broke; the run stopped there.
    Safety(Violation),
    /// After the heal, some accepted job never reached a terminal outcome in time.
    Liveness(Violation),
    /// The world panicked: a core assertion (an impossible state) or a harness bug. The run
    /// stopped there; the history holds every line recorded before the panic.
    Crash(Crash),
}

/// A panic inside a world, caught so that the seed is not lost.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Crash {
    /// The panic's message, with where it was raised when known.
    pub message: String,
}

impl std::fmt::Display for Crash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the world panicked: {}", self.message)
    }
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The parameters the seed chose.
    pub params: Params,
    /// The history, line 1 first.
    pub history: Vec<Entry>,
    /// The outcome.
    pub verdict: Verdict,
    /// The interesting situations reached.
    pub coverage: Coverage,
    /// Grants that expired unused, as the checkers counted them: over the whole run, and among
    /// those granted after the heal (the `wasted_grants` figures).
    pub wasted_grants: (u64, u64),
    /// Simulated time at the end, in microseconds.
    pub sim_us: u64,
    /// What the simulator did.
    pub events: Events,
    /// The run's faults as data: replaying it gives this history again.
    pub plan: Plan,
}

/// What the simulator did in one run: the work a benchmark counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Events {
    /// Messages sent over madsim's network.
    pub messages: u64,
    /// Timers armed: sleeps and receive timeouts.
    pub timers: u64,
    /// History lines recorded.
    pub history: u64,
    /// Batches served, by kind ([`Events::BATCH_KINDS`]): messages that carried several requests
    /// of one kind from one worker process's slots, each served in one transaction.
    pub batches: [u64; BATCH_KINDS],
    /// The requests those batches carried, by kind.
    pub batched: [u64; BATCH_KINDS],
}

/// How many kinds of batch a world counts.
pub const BATCH_KINDS: usize = 6;

impl Events {
    /// The kinds of batch, in the order [`Events::batches`] counts them: a worker process's
    /// requests of one kind, and the outputs its slots' handlers made at one turn.
    pub const BATCH_KINDS: [&'static str; BATCH_KINDS] =
        ["acquire", "renew", "lookup", "complete", "requeue", "record"];

    /// The kind of batch whose first request is `first`.
    pub fn batch_kind(first: &lease_core::WorkerRequest) -> usize {
        use lease_core::WorkerRequest;
        match first {
            WorkerRequest::Acquire => 0,
            WorkerRequest::Renew { .. } => 1,
            WorkerRequest::Lookup { .. } => 2,
            WorkerRequest::Complete { .. } => 3,
            _ => 4,
        }
    }

    /// The kind of a batch of records.
    pub const RECORDS: usize = 5;

    /// Simulated events: messages and timers, the units madsim schedules.
    pub fn simulated(&self) -> u64 {
        self.messages + self.timers
    }
}

impl RunReport {
    /// The run's figures: the wasted grants are the ones its checkers already counted, so the
    /// history is not followed a second time for them.
    pub fn figures(&self) -> lease_check::figures::Figures {
        lease_check::figures::Figures::with_wasted(&self.history, self.wasted_grants)
    }
}

/// Runs one world to its end. A panic inside it (a core assertion, a harness bug) is caught and
/// becomes [`Verdict::Crash`], with the history recorded up to it, so that a sweep keeps the seed
/// and goes on with the next one.
pub fn run(params: Params) -> RunReport {
    let outcome = crate::panics::catching(|| run_world(params.clone()));
    match outcome {
        Ok(report) => report,
        Err(message) => crashed(params, message),
    }
}

/// The report of a world that panicked: whatever its context had recorded.
fn crashed(params: Params, message: String) -> RunReport {
    let ctx = SELF.with(|cell| cell.borrow_mut().take());
    let (history, coverage, wasted_grants, plan) = match ctx {
        Some(ctx) => {
            // The lock may be poisoned by the very panic: the state is still the last one written.
            let mut state = ctx.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let history = std::mem::take(&mut state.history);
            let wasted = state.checkers.wasted_grants(history.last().map_or(0, |entry| entry.t_us));
            let plan = Plan::of_run(&params, &state.arrivals, &state.decisions.recorded);
            (history, state.checkers.coverage().clone(), wasted, plan)
        }
        None => (Vec::new(), Coverage::default(), (0, 0), Plan::of_run(&params, &[], &[])),
    };
    let sim_us = history.last().map_or(0, |entry| entry.t_us);
    let events = Events { history: history.len() as u64, ..Events::default() };
    let verdict = Verdict::Crash(Crash { message });
    RunReport { params, history, verdict, coverage, wasted_grants, sim_us, events, plan }
}

fn run_world(params: Params) -> RunReport {
    let mut config = madsim::Config::default();
    // Messages are lost by the world's own stream (`faults::decide`), never by madsim's, whose
    // draws steer its scheduler.
    config.net.packet_loss_rate = 0.0;
    // Latency is the world's too (`Ctx::latency_us`): a function of the message, not a draw from
    // madsim's stream, so that a change to one message's fate does not re-roll every other
    // message's latency. madsim adds a fixed microsecond.
    config.net.send_latency =
        Duration::from_micros(MADSIM_LATENCY_US)..Duration::from_nanos(MADSIM_LATENCY_US * 1_000 + 1);
    let runtime = Runtime::with_seed_and_config(params.seed, config);
    let chaos = runtime.create_node().name("chaos").build();
    let bugs = Bugs::plant(params.bug);
    if let Some(why) = durable::refuses(params.store, params.bug) {
        panic!("harness bug: {why}");
    }
    let durable = durable::Durable::open(params.store, params.table, bugs)
        .unwrap_or_else(|error| panic!("unworkable parameters: {error}"));
    let decisions = match &params.planned {
        Some(keyed) => Decisions::planned(params.seed, keyed),
        None => Decisions::drawn(params.seed, &params.script, &params.rival_jobs),
    };
    let state = State {
        durable,
        decisions,
        faults_on: true,
        dependency_degraded: false,
        arrivals_done: false,
        arrivals: Vec::with_capacity(params.jobs as usize),
        history: Vec::with_capacity(params.jobs as usize * 12),
        checkers: Checkers::new(),
        violation: None,
        nodes: BTreeMap::new(),
        incarnations: BTreeMap::new(),
        down: BTreeMap::new(),
        paused: BTreeSet::new(),
        stop_signals: BTreeMap::new(),
        stopping: BTreeMap::new(),
        cuts: BTreeSet::new(),
        lease_messages: BTreeMap::new(),
        job_messages: BTreeMap::new(),
        buffered: BTreeMap::new(),
        owed_releases: BTreeMap::new(),
    };
    // The root and every task of the world are contained (see `crate::panics`): a panic comes
    // out of `block_on` as a value and unwinds from here, not through madsim, which prints it.
    let verdict = runtime.block_on(crate::panics::world({
        let params = params.clone();
        async move {
            let timers = std::sync::atomic::AtomicU64::new(0);
            let time = madsim::time::TimeHandle::current();
            let ctx = Arc::new(Ctx {
                params,
                bugs,
                timers,
                batches: Default::default(),
                start: time.elapsed(),
                time,
                chaos,
                state: Mutex::new(state),
            });
            SELF.with(|cell| *cell.borrow_mut() = Some(ctx.clone()));
            let verdict = tracing::Instrument::instrument(supervise(&ctx), crate::logs::world_span()).await;
            let sim_us = ctx.now().0;
            let events = Events {
                messages: madsim::net::NetSim::current().stat().msg_count,
                timers: ctx.timers.load(std::sync::atomic::Ordering::Relaxed),
                history: 0,
                batches: ctx.batches[0].each_ref().map(|count| count.load(std::sync::atomic::Ordering::Relaxed)),
                batched: ctx.batches[1].each_ref().map(|count| count.load(std::sync::atomic::Ordering::Relaxed)),
            };
            let mut state = ctx.state();
            let history = std::mem::take(&mut state.history);
            let coverage = state.checkers.coverage().clone();
            let wasted_grants = state.checkers.wasted_grants(history.last().map_or(0, |entry| entry.t_us));
            let plan = Plan::of_run(&ctx.params, &state.arrivals, &state.decisions.recorded);
            let store_log = state.durable.log();
            drop(state);
            SELF.with(|cell| *cell.borrow_mut() = None);
            (verdict, history, coverage, wasted_grants, sim_us, events, plan, store_log)
        }
    }));
    let verdict = verdict.unwrap_or_else(|payload| std::panic::resume_unwind(payload));
    let (mut verdict, history, coverage, wasted_grants, sim_us, mut events, plan, store_log) = verdict;
    if params.store != durable::StoreKind::Memory && !matches!(verdict, Verdict::Crash(_)) {
        if let Some(why) = durable::differs(&history, &store_log, matches!(verdict, Verdict::Held)) {
            let message = format!("the {} store's event log is not the world's history: {why}", params.store);
            verdict = Verdict::Crash(Crash { message });
        }
    }
    events.history = history.len() as u64;
    RunReport { params, history, verdict, coverage, wasted_grants, sim_us, events, plan }
}

/// The fixed latency madsim adds to every message, on top of the world's own.
const MADSIM_LATENCY_US: u64 = 1;

async fn supervise(ctx: &Arc<Ctx>) -> Verdict {
    let params = &ctx.params;
    ctx.record(
        Node::World,
        Event::Run {
            history_version: lease_history::HISTORY_VERSION,
            seed: params.seed,
            scenario: params.scenario.clone(),
            batch_max: params.table.batch_max,
            capacity: params.table.capacity,
            lease_ttl_us: params.table.lease_ttl.as_us(),
            attempts_max: params.table.attempts_max,
            bug: params.bug.map(|bug| bug.name().to_string()),
            store: (params.store != durable::StoreKind::Memory).then(|| params.store.name().to_string()),
            drift_margin_us: Some(params.worker.drift_margin.as_us()),
            latency_us: Some([params.latency_us.0, params.latency_us.1]),
            latency_calm_us: Some([CALM_LATENCY_US.0, CALM_LATENCY_US.1]),
            pruned_before_us: None,
            worker_processes: (params.slots > 1).then_some(params.workers),
            scan_every_us: Some(params.reclaimer.scan_every.as_us()),
            params: params.describe(),
        },
    );
    build_nodes(ctx);
    for &(at_us, fault) in &params.schedule {
        if !wait_until(ctx, at_us).await {
            return finish(ctx).await;
        }
        ctx.inject(fault);
    }
    if wait_until(ctx, params.fault_phase_us).await {
        ctx.heal();
        let deadline = params.fault_phase_us + params.liveness_budget_us;
        while !ctx.violated() && !converged(ctx) && ctx.now().0 < deadline {
            ctx.sleep_us(SUPERVISOR_TICK_US).await;
        }
    }
    finish(ctx).await
}

/// Sleeps until `at_us`, waking every supervisor tick to stop early on a violation. False if one
/// happened.
async fn wait_until(ctx: &Ctx, at_us: u64) -> bool {
    loop {
        if ctx.violated() {
            return false;
        }
        let now = ctx.now().0;
        if now >= at_us {
            return true;
        }
        ctx.sleep_us((at_us - now).min(SUPERVISOR_TICK_US)).await;
    }
}

fn converged(ctx: &Ctx) -> bool {
    let state = ctx.state();
    state.arrivals_done && state.checkers.unfinished() == 0
}

async fn finish(ctx: &Arc<Ctx>) -> Verdict {
    let verdict = {
        let mut state = ctx.state();
        match state.violation.take() {
            Some(violation) => Verdict::Safety(violation),
            None => {
                let now = ctx.now().0;
                let unfinished = if state.arrivals_done { Ok(()) } else { Err(()) };
                match (unfinished, state.checkers.check_liveness(now)) {
                    (Ok(()), Ok(())) => match unanswered_offer(&state.history, &state.arrivals) {
                        Some(violation) => Verdict::Liveness(violation),
                        None => Verdict::Held,
                    },
                    (_, Err(violation)) => Verdict::Liveness(violation),
                    (Err(()), Ok(())) => Verdict::Liveness(Violation {
                        invariant: lease_check::Invariant::Liveness,
                        job: None,
                        message: "the arrival generator never finished offering its jobs".to_string(),
                        lines: Vec::new(),
                    }),
                }
            }
        }
    };
    // A worker runtime releases every lease it gave up in its buffer: a release still owed by a
    // life that is up was never sent (`Ctx::unpaid_release`).
    let verdict = match (verdict, ctx.unpaid_release(None)) {
        (Verdict::Held | Verdict::Liveness(_), Some(message)) => Verdict::Crash(Crash { message }),
        (verdict, _) => verdict,
    };
    // Kill every node and give the runtime one more tick, so that madsim frees the world.
    let mut ids: Vec<SimNodeId> = ctx.state().nodes.values().copied().collect();
    ids.push(ctx.chaos.id());
    for id in ids {
        Handle::current().kill(id);
    }
    sleep(Duration::from_millis(1)).await;
    verdict
}

/// A job the generator offered, whose offer was answered (the generator offers each job until
/// it is), that no line answers: no `arrived`, `duplicate` or `rejected`. The history is all an
/// operator has; a customer's job turned away, or taken, with no line to say so is lost work that
/// every checker of the history would miss, since none of them sees the offer.
fn unanswered_offer(history: &[Entry], arrivals: &[crate::faults::plan::Arrival]) -> Option<Violation> {
    let answered: BTreeSet<lease_core::JobId> = history
        .iter()
        .filter_map(|entry| match entry.event {
            Event::Arrived { job, .. } | Event::Duplicate { job } | Event::Rejected { job, .. } => Some(job),
            _ => None,
        })
        .collect();
    let job = arrivals.iter().map(|arrival| lease_core::JobId(arrival.job)).find(|job| !answered.contains(job))?;
    Some(Violation {
        invariant: lease_check::Invariant::Liveness,
        job: Some(job),
        message: format!(
            "{job} was offered and the table answered, but no line says it arrived, was known or was rejected"
        ),
        lines: Vec::new(),
    })
}

fn build_nodes(ctx: &Arc<Ctx>) {
    let handle = Handle::current();
    let add = |node: Node, addr: SocketAddr| {
        let ctx2 = ctx.clone();
        let built = handle
            .create_node()
            .name(node.to_string())
            .ip(addr.ip())
            .init(move || crate::panics::contained(node::main(ctx2.clone(), node)))
            .build();
        ctx.state().nodes.insert(node, built.id());
    };
    add(Node::Table, crate::net::table_addr());
    add(Node::Ledger, crate::net::ledger_addr());
    for n in 0..ctx.params.workers {
        add(Node::Worker(n), crate::net::worker_addr(n));
    }
    for n in 0..ctx.params.reclaimers {
        add(Node::Reclaimer(n), crate::net::reclaimer_addr(n));
    }
    add(Node::Arrivals, crate::net::arrivals_addr());
}

#[cfg(test)]
mod tests {
    use super::unanswered_offer;
    use crate::faults::plan::Arrival;
    use lease_core::JobId;
    use lease_history::{Entry, Event, Node, RejectReason};

    fn line(t_us: u64, event: Event) -> Entry {
        Entry { t_us, node: Node::Table, event }
    }

    // Proves the check of offers against the history: every offered job needs a line that
    // answers it (arrived, duplicate or rejected); one with none is named, as a table that
    // answered a batch and wrote lines for its accepted jobs only would leave it.
    #[test]
    fn an_offered_job_with_no_line_is_lost_work() {
        let arrivals: Vec<Arrival> = (0..3).map(|job| Arrival { job, at_us: 10 }).collect();
        let mut history =
            vec![line(10, Event::Arrived { job: JobId(0), backlog: 1 }), line(10, Event::Duplicate { job: JobId(1) })];
        let violation = unanswered_offer(&history, &arrivals).expect("job 2 has no line");
        assert_eq!(violation.job, Some(JobId(2)));
        assert_eq!(violation.invariant, lease_check::Invariant::Liveness);
        history.push(line(10, Event::Rejected { job: JobId(2), reason: RejectReason::QueueFull }));
        assert!(unanswered_offer(&history, &arrivals).is_none(), "each has its line");
        assert!(unanswered_offer(&history, &[]).is_none(), "nothing offered");
    }
}
