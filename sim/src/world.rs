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

use crate::check::{Checkers, Coverage, Violation};
use crate::history::{CrashPoint, Entry, Event, Node};
use crate::node;
use crate::scenario::{Fault, Params, Point, Scripted, Strike};
use lease_core::{Bugs, EffectLedger, JobId, LeaseTable, Time};
use madsim::runtime::{Handle, NodeHandle, Runtime};
use madsim::task::NodeId as SimNodeId;
use madsim::time::{sleep, Instant};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How often the supervisor looks for a violation or convergence. A violation stops the world
/// within one tick; the history after it is not checked, so the report is the same either way.
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
}

impl Events {
    /// Simulated events: messages and timers, the units madsim schedules.
    pub fn simulated(&self) -> u64 {
        self.messages + self.timers
    }
}

/// The world's shared state. A madsim runtime runs on one thread, so the lock is never contended;
/// it is there because madsim tasks must be `Send`.
pub(crate) struct Ctx {
    pub params: Params,
    pub bugs: Bugs,
    /// Timers armed in the world (sleeps and receive timeouts), for the event counts.
    timers: std::sync::atomic::AtomicU64,
    start: Instant,
    chaos: NodeHandle,
    state: Mutex<State>,
}

/// What survives in the world: durable node state, the history, and the seed's stream.
pub(crate) struct State {
    /// The table's durable state: survives restarts of the table node.
    pub table: LeaseTable,
    /// The ledger's durable state: survives restarts of the ledger node.
    pub ledger: EffectLedger,
    /// The seed's stream for decisions made while the world runs.
    pub rng: Xoshiro256PlusPlus,
    /// The network's own stream, for faults on single messages: kept apart, so that holding a
    /// message back never shifts a crash or a dependency draw.
    wire: Xoshiro256PlusPlus,
    /// Whether the fault phase is still on.
    pub faults_on: bool,
    /// Whether every job has been offered and answered.
    pub arrivals_done: bool,
    history: Vec<Entry>,
    checkers: Checkers,
    violation: Option<Violation>,
    nodes: BTreeMap<Node, SimNodeId>,
    incarnations: BTreeMap<Node, u64>,
    down: BTreeMap<Node, u64>,
    paused: BTreeSet<Node>,
    script: Vec<Scripted>,
    rival_jobs: BTreeSet<JobId>,
}

impl Ctx {
    /// Simulated time since the world began: the table's clock.
    pub fn now(&self) -> Time {
        Time(self.start.elapsed().as_micros() as u64)
    }

    /// Sleeps `us` microseconds of simulated time, counting the timer.
    pub async fn sleep_us(&self, us: u64) {
        self.armed();
        sleep(Duration::from_micros(us)).await;
    }

    /// Counts one armed timer.
    pub fn armed(&self) {
        self.timers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Locks the world's state.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("world lock poisoned: a node panicked")
    }

    /// Appends an event to the history, and checks it.
    pub fn record(&self, node: Node, event: Event) {
        let now = self.now();
        self.state().record_at(now, node, event);
    }

    /// Draws whether something with probability `p` happens now; never during the heal.
    pub fn chance(&self, p: f64) -> bool {
        let mut state = self.state();
        state.faults_on && p > 0.0 && state.rng.gen_bool(p.min(1.0))
    }

    /// What strikes a node passing `point` for `job`: a scripted strike first (each fires once),
    /// else a crash or a stall drawn at the scenario's rates. Nothing strikes during the heal.
    pub fn strike(&self, point: Point, job: JobId) -> Option<Strike> {
        let mut state = self.state();
        if !state.faults_on {
            return None;
        }
        if let Some(index) = state.script.iter().position(|s| s.job == job && s.point == point) {
            return Some(state.script.remove(index).strike);
        }
        let crash = &self.params.crash;
        let crash_rate = match point {
            Point::BeforeEffect => crash.before_effect,
            Point::AfterEffect => crash.after_effect,
            Point::DuringAck => crash.during_ack,
            Point::MidReclaim => crash.mid_reclaim,
            Point::BeforeRenew | Point::BeforeRenewReply | Point::AfterListing => 0.0,
        };
        if crash_rate > 0.0 && state.rng.gen_bool(crash_rate.min(1.0)) {
            return Some(Strike::Crash);
        }
        let stall = &self.params.stall;
        let windows = &self.params.windows;
        let (stall_rate, short) = match point {
            Point::BeforeEffect => (stall.before_effect, false),
            Point::DuringAck => (stall.before_ack, false),
            Point::BeforeRenew => (stall.before_renew, false),
            Point::BeforeRenewReply => (windows.before_renew_reply, true),
            Point::AfterListing => (windows.after_listing, true),
            Point::MidReclaim => (windows.after_fence, true),
            Point::AfterEffect => (0.0, false),
        };
        if stall_rate > 0.0 && state.rng.gen_bool(stall_rate.min(1.0)) {
            if short {
                return Some(Strike::Stall(windows.draw_len_us(&mut state.rng)));
            }
            let (min, max) = stall.len_us;
            return Some(Strike::Stall(state.rng.gen_range(min..=max.max(min))));
        }
        None
    }

    /// What the network does to one message sent now: how long it holds it back, if at all, and
    /// how long after it a second copy follows, if one does. A hand-back or acknowledgement of a
    /// job (`hand_back`) may also get a late copy. Nothing during the heal.
    pub fn message_fault(&self, hand_back: Option<JobId>) -> (Option<u64>, Option<u64>) {
        let windows = &self.params.windows;
        let mut state = self.state();
        // A hand-back of a job out of attempts is a dead-letter on its way: whenever the seed
        // deals late copies at all, it gets one, for dead-letters are few and their copies are
        // the window.
        let rates = [windows.delay_rate, windows.duplicate_rate, windows.hand_back_copy];
        if !state.faults_on || rates.iter().all(|&rate| rate <= 0.0) {
            return (None, None);
        }
        let out_of_attempts = |job| state.table.attempts(job).is_some_and(|n| n >= self.params.table.attempts_max);
        let copy_rate = match hand_back {
            Some(job) if windows.hand_back_copy > 0.0 && out_of_attempts(job) => 1.0,
            Some(_) => windows.hand_back_copy,
            None => 0.0,
        };
        let wire = &mut state.wire;
        let delay =
            (windows.delay_rate > 0.0 && wire.gen_bool(windows.delay_rate.min(1.0))).then(|| windows.draw_len_us(wire));
        let mut copy = (windows.duplicate_rate > 0.0 && wire.gen_bool(windows.duplicate_rate.min(1.0)))
            .then(|| windows.draw_len_us(wire));
        if copy.is_none() && copy_rate > 0.0 && wire.gen_bool(copy_rate) {
            copy = Some(windows.draw_late_gap_us(wire));
        }
        (delay, copy)
    }

    /// How long a worker holds the heartbeat it just decided on for `job`, so that the renewal
    /// lands within a drift margin of the lease's expiry (either side), when the seed aims one
    /// there; `None` otherwise.
    pub fn renew_hold_us(&self, job: JobId) -> Option<u64> {
        let margin = self.params.worker.drift_margin.as_us().max(2);
        self.aimed_hold_us(self.params.windows.renew_at_boundary, |state| {
            let expires_at = state.table.lease(job)?.expires_at.0;
            (expires_at + margin / 2).checked_sub(state.rng.gen_range(0..margin))
        })
    }

    /// How long a worker holds the dependency call it just decided on for `job`, so that the call
    /// reaches the ledger after the lease expired, within one reclaim scan of the expiry, when the
    /// seed aims one there; `None` otherwise.
    pub fn effect_hold_us(&self, job: JobId) -> Option<u64> {
        self.past_expiry_hold_us(job, self.params.windows.effect_at_boundary)
    }

    /// How long a worker holds the completion it just decided on for `job`, so that it reaches
    /// the table after the lease expired, within one reclaim scan of the expiry, when the seed
    /// aims one there; `None` otherwise.
    pub fn complete_hold_us(&self, job: JobId) -> Option<u64> {
        self.past_expiry_hold_us(job, self.params.windows.complete_at_boundary)
    }

    /// With chance `rate`, a hold that makes a message sent now about `job` land after its lease
    /// expires, within one reclaim scan of the expiry.
    fn past_expiry_hold_us(&self, job: JobId, rate: f64) -> Option<u64> {
        let scan_us = self.params.reclaimer.scan_every.as_us().max(2);
        self.aimed_hold_us(rate, |state| Some(state.table.lease(job)?.expires_at.0 + state.rng.gen_range(0..scan_us)))
    }

    /// How long a reclaimer holds the scan it just decided on, so that the listing lands just
    /// after the earliest expiry (within half a drift margin), when the seed aims one there and
    /// that expiry comes before the next scan; `None` otherwise.
    pub fn listing_hold_us(&self) -> Option<u64> {
        let margin = self.params.worker.drift_margin.as_us().max(2);
        let hold = self.aimed_hold_us(self.params.windows.reclaim_at_boundary, |state| {
            Some(state.table.poll_timeout()?.0 + state.rng.gen_range(0..margin / 2))
        });
        hold.filter(|&hold| hold <= self.params.reclaimer.scan_every.as_us())
    }

    /// With chance `rate`, during the fault phase, how long to hold a message sent now so that it
    /// lands at the table time `lands_at` picks (from the table's state and the seed's stream);
    /// `None` when the seed does not aim this one, or that time is already too close.
    fn aimed_hold_us(&self, rate: f64, lands_at: impl FnOnce(&mut State) -> Option<u64>) -> Option<u64> {
        let now = self.now().0;
        let mut state = self.state();
        if !state.faults_on || rate <= 0.0 || !state.rng.gen_bool(rate.min(1.0)) {
            return None;
        }
        let lands_at = lands_at(&mut state)?;
        lands_at.checked_sub(now + self.one_way_us()).filter(|&hold| hold > 0)
    }

    /// Runs `task` on the world's own node, `after_us` from now: the network carrying a message
    /// it held back, which no pause, crash or restart of the sender touches.
    pub fn after(&self, after_us: u64, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.armed();
        self.chaos.spawn(async move {
            sleep(Duration::from_micros(after_us)).await;
            task.await;
        });
    }

    /// The middle of the network's one-way latency: how long a message aimed at a time takes.
    fn one_way_us(&self) -> u64 {
        let (min, max) = self.params.latency_us;
        (min + max) / 2
    }

    /// Whether the dependency's call for `job` also writes a rival output.
    pub fn rival(&self, job: JobId) -> bool {
        if self.state().rival_jobs.remove(&job) {
            return self.state().faults_on;
        }
        self.chance(self.params.dependency.rival_rate)
    }

    /// Stalls the calling node's process for `len_us` at `point`, working on `job`: it does
    /// nothing, not even heartbeat.
    pub async fn stall(&self, node: Node, point: Point, job: JobId, len_us: u64) {
        self.record(Node::World, Event::Paused { target: node, point: Some(point.into()), job: Some(job) });
        self.sleep_us(len_us).await;
        self.record(Node::World, Event::Resumed { target: node });
    }

    /// A new incarnation number for `node`, which is (re)starting.
    pub fn incarnate(&self, node: Node) -> u64 {
        let mut state = self.state();
        let incarnation = state.incarnations.entry(node).or_insert(0);
        *incarnation += 1;
        *incarnation
    }

    /// Whether `incarnation` is `node`'s current life and the node is up. A request sent by an
    /// earlier life, or by a node that is down, travelled on a connection its crash reset: it
    /// must not be served.
    pub fn is_current(&self, node: Node, incarnation: u64) -> bool {
        let state = self.state();
        state.incarnations.get(&node) == Some(&incarnation) && !state.down.contains_key(&node)
    }

    /// Crashes `node` at protocol point `point` and restarts it after the restart delay. The
    /// caller must not touch the network again: its task is dropped at its next await.
    pub fn crash(&self, node: Node, point: Point, job: Option<JobId>) {
        self.record(Node::World, Event::Crashed { target: node, point: point.into(), job });
        self.take_down(node, self.params.restart_delay_us);
    }

    fn take_down(&self, node: Node, down_us: u64) {
        let (id, life) = {
            let mut state = self.state();
            let life = state.incarnations.get(&node).copied().unwrap_or(0);
            state.down.insert(node, life);
            (state.nodes[&node], life)
        };
        Handle::current().kill(id);
        let ctx = self.self_arc();
        self.chaos.spawn(async move {
            ctx.sleep_us(down_us).await;
            ctx.bring_up(node, life);
        });
    }

    /// Restarts `node` if it is still down from the crash of life `life`.
    fn bring_up(&self, node: Node, life: u64) {
        let id = {
            let mut state = self.state();
            if state.down.get(&node) != Some(&life) {
                return;
            }
            state.down.remove(&node);
            state.nodes[&node]
        };
        self.record(Node::World, Event::Restarted { target: node });
        Handle::current().restart(id);
    }

    fn self_arc(&self) -> Arc<Ctx> {
        SELF.with(|cell| cell.borrow().clone().expect("world context set"))
    }

    fn violated(&self) -> bool {
        self.state().violation.is_some()
    }
}

thread_local! {
    /// The running world's context, for tasks spawned from `&Ctx`. One runtime per thread at a time.
    static SELF: std::cell::RefCell<Option<Arc<Ctx>>> = const { std::cell::RefCell::new(None) };
}

impl State {
    /// Appends an event at `now`, and checks it, while the caller holds the lock.
    pub fn record_at(&mut self, now: Time, node: Node, event: Event) {
        let entry = Entry { t_us: now.0, node, event };
        self.history.push(entry);
        let line = self.history.len();
        if self.violation.is_some() {
            return;
        }
        if let Err(violation) = self.checkers.observe(line, &self.history[line - 1]) {
            self.violation = Some(violation);
        }
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
    let (history, coverage, wasted_grants) = match ctx {
        Some(ctx) => {
            // The lock may be poisoned by the very panic: the state is still the last one written.
            let mut state = ctx.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let history = std::mem::take(&mut state.history);
            let wasted = state.checkers.wasted_grants(history.last().map_or(0, |entry| entry.t_us));
            (history, state.checkers.coverage().clone(), wasted)
        }
        None => (Vec::new(), Coverage::default(), (0, 0)),
    };
    let sim_us = history.last().map_or(0, |entry| entry.t_us);
    let events = Events { messages: 0, timers: 0, history: history.len() as u64 };
    let verdict = Verdict::Crash(Crash { message });
    RunReport { params, history, verdict, coverage, wasted_grants, sim_us, events }
}

fn run_world(params: Params) -> RunReport {
    let mut config = madsim::Config::default();
    config.net.packet_loss_rate = 0.0;
    config.net.send_latency = latency(params.latency_us);
    let runtime = Runtime::with_seed_and_config(params.seed, config);
    let chaos = runtime.create_node().name("chaos").build();
    let bugs = planted(&params);
    let table =
        LeaseTable::with_bugs(params.table, bugs).unwrap_or_else(|error| panic!("unworkable parameters: {error}"));
    let rng = Xoshiro256PlusPlus::seed_from_u64(params.seed ^ 0x0c4a_05e5);
    let state = State {
        table,
        ledger: EffectLedger::with_bugs(bugs),
        rng,
        wire: Xoshiro256PlusPlus::seed_from_u64(params.seed ^ 0x3e55_a9e5),
        faults_on: true,
        arrivals_done: false,
        history: Vec::with_capacity(params.jobs as usize * 12),
        checkers: Checkers::new(),
        violation: None,
        nodes: BTreeMap::new(),
        incarnations: BTreeMap::new(),
        down: BTreeMap::new(),
        paused: BTreeSet::new(),
        script: params.script.clone(),
        rival_jobs: params.rival_jobs.iter().copied().collect(),
    };
    let verdict = runtime.block_on({
        let params = params.clone();
        async move {
            let timers = std::sync::atomic::AtomicU64::new(0);
            let ctx = Arc::new(Ctx { params, bugs, timers, start: Instant::now(), chaos, state: Mutex::new(state) });
            SELF.with(|cell| *cell.borrow_mut() = Some(ctx.clone()));
            let verdict = supervise(&ctx).await;
            let sim_us = ctx.now().0;
            let events = Events {
                messages: madsim::net::NetSim::current().stat().msg_count,
                timers: ctx.timers.load(std::sync::atomic::Ordering::Relaxed),
                history: 0,
            };
            let mut state = ctx.state();
            let history = std::mem::take(&mut state.history);
            let coverage = state.checkers.coverage().clone();
            let wasted_grants = state.checkers.wasted_grants(history.last().map_or(0, |entry| entry.t_us));
            drop(state);
            SELF.with(|cell| *cell.borrow_mut() = None);
            (verdict, history, coverage, wasted_grants, sim_us, events)
        }
    });
    let (verdict, history, coverage, wasted_grants, sim_us, mut events) = verdict;
    events.history = history.len() as u64;
    RunReport { params, history, verdict, coverage, wasted_grants, sim_us, events }
}

fn planted(params: &Params) -> Bugs {
    Bugs::plant(params.bug)
}

fn latency((min_us, max_us): (u64, u64)) -> std::ops::Range<Duration> {
    Duration::from_micros(min_us)..Duration::from_micros(max_us.max(min_us + 1))
}

async fn supervise(ctx: &Arc<Ctx>) -> Verdict {
    let params = &ctx.params;
    ctx.record(
        Node::World,
        Event::Run {
            history_version: crate::history::HISTORY_VERSION,
            seed: params.seed,
            scenario: params.scenario.to_string(),
            batch_max: params.table.batch_max,
            capacity: params.table.capacity,
            lease_ttl_us: params.table.lease_ttl.as_us(),
            attempts_max: params.table.attempts_max,
            bug: params.bug.map(|bug| bug.name().to_string()),
            params: params.describe(),
        },
    );
    build_nodes(ctx);
    madsim::net::NetSim::current().update_config(|net| net.packet_loss_rate = params.loss_rate);
    for &(at_us, fault) in &params.schedule {
        if !wait_until(ctx, at_us).await {
            return finish(ctx).await;
        }
        inject(ctx, fault);
    }
    if wait_until(ctx, params.fault_phase_us).await {
        heal(ctx);
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
                    (Ok(()), Ok(())) => Verdict::Held,
                    (_, Err(violation)) => Verdict::Liveness(violation),
                    (Err(()), Ok(())) => Verdict::Liveness(Violation {
                        invariant: crate::check::Invariant::Liveness,
                        job: None,
                        message: "the arrival generator never finished offering its jobs".to_string(),
                        lines: Vec::new(),
                    }),
                }
            }
        }
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

fn build_nodes(ctx: &Arc<Ctx>) {
    let handle = Handle::current();
    let add = |node: Node, addr: SocketAddr| {
        let ctx2 = ctx.clone();
        let built = handle
            .create_node()
            .name(node.to_string())
            .ip(addr.ip())
            .init(move || node::main(ctx2.clone(), node))
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

fn sim_id(ctx: &Ctx, node: Node) -> SimNodeId {
    ctx.state().nodes[&node]
}

fn is_down(ctx: &Ctx, node: Node) -> bool {
    ctx.state().down.contains_key(&node)
}

/// Applies a scheduled fault now, and has the chaos node undo it when it is due.
fn inject(ctx: &Arc<Ctx>, fault: Fault) {
    let net = madsim::net::NetSim::current();
    match fault {
        Fault::Partition { node, len_us } => {
            ctx.record(Node::World, Event::Partitioned { target: node, peer: None });
            net.clog_node(sim_id(ctx, node));
            undo_later(ctx, len_us, move |ctx| {
                madsim::net::NetSim::current().unclog_node(sim_id(ctx, node));
                ctx.record(Node::World, Event::Healed { target: node, peer: None });
            });
        }
        Fault::CutLink { a, b, len_us } => {
            if a == b {
                return;
            }
            ctx.record(Node::World, Event::Partitioned { target: a, peer: Some(b) });
            net.clog_link(sim_id(ctx, a), sim_id(ctx, b));
            net.clog_link(sim_id(ctx, b), sim_id(ctx, a));
            undo_later(ctx, len_us, move |ctx| {
                let net = madsim::net::NetSim::current();
                net.unclog_link(sim_id(ctx, a), sim_id(ctx, b));
                net.unclog_link(sim_id(ctx, b), sim_id(ctx, a));
                ctx.record(Node::World, Event::Healed { target: a, peer: Some(b) });
            });
        }
        Fault::Pause { node, len_us } => {
            if is_down(ctx, node) {
                return;
            }
            if !ctx.state().paused.insert(node) {
                return;
            }
            ctx.record(Node::World, Event::Paused { target: node, point: None, job: None });
            Handle::current().pause(sim_id(ctx, node));
            undo_later(ctx, len_us, move |ctx| resume(ctx, node));
        }
        Fault::Crash { node, down_us } => {
            if is_down(ctx, node) {
                return;
            }
            ctx.record(Node::World, Event::Crashed { target: node, point: CrashPoint::AtRandom, job: None });
            ctx.take_down(node, down_us);
        }
    }
}

fn resume(ctx: &Ctx, node: Node) {
    if !ctx.state().paused.remove(&node) {
        return;
    }
    Handle::current().resume(sim_id(ctx, node));
    ctx.record(Node::World, Event::Resumed { target: node });
}

fn undo_later(ctx: &Arc<Ctx>, after_us: u64, undo: impl FnOnce(&Ctx) + Send + 'static) {
    let ctx2 = ctx.clone();
    ctx.chaos.spawn(async move {
        ctx2.sleep_us(after_us).await;
        if ctx2.state().faults_on {
            undo(&ctx2);
        }
    });
}

/// Ends the fault phase: every partition closes, paused nodes resume, crashed nodes restart,
/// losses stop, and latency returns to normal.
fn heal(ctx: &Arc<Ctx>) {
    let net = madsim::net::NetSim::current();
    let nodes: Vec<(Node, SimNodeId)> = ctx.state().nodes.iter().map(|(n, id)| (*n, *id)).collect();
    for &(_, id) in &nodes {
        net.unclog_node(id);
        for &(_, other) in &nodes {
            net.unclog_link(id, other);
        }
    }
    for &(node, _) in &nodes {
        resume(ctx, node);
    }
    // A node still down would carry a fault into the liveness phase (a ledger down past the heal
    // leaves every grant unusable): it restarts now, and its pending restart finds it up.
    let down: Vec<(Node, u64)> = ctx.state().down.iter().map(|(node, life)| (*node, *life)).collect();
    for (node, life) in down {
        ctx.bring_up(node, life);
    }
    let calm = latency(crate::scenario::CALM_LATENCY_US);
    net.update_config(|net| {
        net.packet_loss_rate = 0.0;
        net.send_latency = calm;
    });
    ctx.state().faults_on = false;
    ctx.record(Node::World, Event::FaultsHealed {});
}
