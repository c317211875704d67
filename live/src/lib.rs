//! # lease-live: a chaos run of real processes on a real store, judged by the same checkers
//! and the same report as a simulated run.
//!
//! The orchestrator draws a [`plan::LivePlan`] from the seed, opens the store (SQLite file or a
//! PostgreSQL schema of the run's own), and starts, as separate OS processes (this binary
//! re-executed, [`child`]): the dependency stub, the reclaimers, the workers and the arrival
//! generator. It then deals the plan's faults with real signals (SIGKILL, then a restart;
//! SIGSTOP, then SIGCONT), writes each to the run's log, heals at the end of the fault phase,
//! waits (bounded) for every accepted job to end, stops and reaps every child, and exports one
//! history: the log in its order ([`db`]: time, ties in commit order), after a `run` line, every time counted from the
//! run's start on the table's clock.
//!
//! Safety: every loop is bounded in count and time; only loopback addresses are used; every
//! child is reaped when the run ends, on Ctrl-C (SIGINT, SIGTERM) and on any error (the fleet's
//! `Drop`), and dies with the orchestrator in any case (`PR_SET_PDEATHSIG`).

pub mod bench;
pub mod child;
pub mod cli;
pub mod db;
pub mod floor;
pub mod plan;
pub mod stub;
pub mod truth;

use child::ChildRole;
use db::{host_now, Handle, Lines};
use lease_core::{Bug, Bugs, JobId};
use lease_history::{Entry, Event, Node, Point, Rate, HISTORY_VERSION};
use lease_store::Place;
use plan::{FaultKind, LivePlan, Role, Shape, SignalStrike};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

/// Set by SIGINT or SIGTERM: the run stops dealing faults, reaps every child and ends.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// How long the orchestrator sleeps between looks at its fleet.
const TICK: Duration = Duration::from_millis(5);
/// How long a stopping child may take to end before it is killed.
const STOP_GRACE_US: u64 = 3_000_000;
/// How long the stub may take to start listening.
const STUB_READY_US: u64 = 10_000_000;

/// Where the store will be, before the run makes its own file or schema there (which is then a
/// [`Place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// A SQLite file in the run's directory.
    Sqlite,
    /// A PostgreSQL server (a schema of the run's own, dropped at the end unless kept).
    Postgres {
        /// The server's URL; loopback only.
        url: String,
    },
}

impl StoreChoice {
    /// The store's kind.
    pub fn kind(&self) -> lease_store::StoreKind {
        match self {
            StoreChoice::Sqlite => lease_store::StoreKind::Sqlite,
            StoreChoice::Postgres { .. } => lease_store::StoreKind::Postgres,
        }
    }
}

/// A live run's options.
#[derive(Debug, Clone)]
pub struct Options {
    /// The shape and the seed.
    pub shape: Shape,
    /// The store.
    pub store: StoreChoice,
    /// The planted bug.
    pub bug: Option<Bug>,
    /// The run's directory.
    pub out: PathBuf,
    /// Keep the PostgreSQL schema after the run.
    pub keep_db: bool,
    /// Print each fault as it is dealt.
    pub verbose: bool,
}

/// What a run left behind.
#[derive(Debug)]
pub struct Finished {
    /// The plan it ran.
    pub plan: LivePlan,
    /// `DIR/history.jsonl`.
    pub history: PathBuf,
    /// The stub's counts.
    pub truth: stub::Truth,
    /// Strikes dealt, by kind and point (`kill at after_effect`, ...).
    pub dealt: BTreeMap<String, u64>,
    /// Children started, restarts included.
    pub started: usize,
    /// Children still alive after the reaping (must be 0).
    pub left: usize,
    /// Whether every accepted job ended before the drain's bound.
    pub drained: bool,
    /// Microseconds from the heal to the last accepted job's end (or the drain's bound).
    pub drain_us: u64,
}

/// How a run can end without a history.
#[derive(Debug)]
pub enum Failure {
    /// Ctrl-C or SIGTERM: every child was reaped.
    Interrupted,
    /// A harness error, or a child that failed on its own: a message for a person.
    Harness(String),
}

impl From<lease_store::StoreError> for Failure {
    fn from(error: lease_store::StoreError) -> Failure {
        Failure::Harness(format!("the store: {error}"))
    }
}

/// Stops the run on SIGINT or SIGTERM (once per process; a second handler is refused quietly).
pub fn catch_interrupts() {
    let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst));
}

/// The PostgreSQL URL `--store postgres` uses without `--url`.
pub fn default_pg_url() -> String {
    std::env::var("LEASE_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// Refuses a PostgreSQL URL whose host is not loopback: a live run sends signals and load, and
/// stays on this machine.
pub fn check_loopback(url: &str) -> Result<(), String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host = if let Some(bracketed) = host_port.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    match host {
        "127.0.0.1" | "localhost" | "::1" => Ok(()),
        other => Err(format!("--url must name a loopback host (127.0.0.1, localhost or ::1), not {other:?}")),
    }
}

/// Runs one live chaos run and exports its history. Every child is reaped before it returns.
pub fn run(options: &Options) -> Result<Finished, Failure> {
    run_with(options, &|_| {})
}

/// [`run`], with the drawn plan changed by `tweak` before any process starts (the benchmark's
/// bursts and timed kills).
pub fn run_with(options: &Options, tweak: &dyn Fn(&mut LivePlan)) -> Result<Finished, Failure> {
    std::fs::create_dir_all(options.out.join("logs"))
        .map_err(|error| Failure::Harness(format!("cannot create {}: {error}", options.out.display())))?;
    let db = match &options.store {
        StoreChoice::Sqlite => {
            let path = options.out.join("live.sqlite");
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            Place::Sqlite { path }
        }
        StoreChoice::Postgres { url } => {
            let schema = format!("lease_live_{}_{}", std::process::id(), host_now().0 % 1_000_000_000);
            Place::Postgres { url: url.clone(), schema }
        }
    };
    let bugs = Bugs::plant(options.bug);
    let bug = options.bug.map(|bug| bug.to_string());
    // A first plan opens the store (creating the schema); the real one starts on its clock.
    let mut draft = LivePlan::draw(&options.shape, db.clone(), bug.clone(), 0);
    tweak(&mut draft);
    let mut store = db::open(&db, draft.table(), bugs)?;
    let mut log = db::open(&db, draft.table(), bugs)?;
    let t0_us = log.now()?.0;
    let mut plan = LivePlan::draw(&options.shape, db.clone(), bug, t0_us);
    tweak(&mut plan);
    let plan_path = options.out.join("live.json");
    let plan_json = serde_json::to_string_pretty(&plan).expect("a plan serialises");
    lease_history::atomic::write(&plan_path, plan_json.as_bytes())
        .map_err(|error| Failure::Harness(format!("cannot write {}: {error}", plan_path.display())))?;
    let (fault_log, faults) = FaultLog::start(log);
    let outcome = Orchestra::new(&plan, &plan_path, &options.out, options.verbose).and_then(|mut orchestra| {
        orchestra.faults = Some(faults);
        let result = orchestra.play(&mut store);
        let (truth, started, left) = orchestra.finish();
        let (drained, drain_us) = result?;
        Ok((truth?, started, left, drained, drain_us, std::mem::take(&mut orchestra.dealt)))
    });
    // Every child is gone: nothing holds the database's lock, and the fault log drains.
    let outcome = outcome.and_then(|finished| fault_log.finish().map(|()| finished));
    let exported = outcome.and_then(|(truth, started, left, drained, drain_us, dealt)| {
        let history = export(&plan, &mut store, &options.out)?;
        Ok(Finished { plan: plan.clone(), history, truth, dealt, started, left, drained, drain_us })
    });
    drop(store);
    if !options.keep_db {
        if let Err(error) = db::drop_schema(&db) {
            eprintln!("lease-sim live: could not drop the run's schema: {error}");
        }
    }
    exported
}

/// Writes `DIR/history.jsonl`: the `run` line, then the log in its order, every time counted
/// from the run's start.
fn export(plan: &LivePlan, store: &mut Handle, out: &Path) -> Result<PathBuf, Failure> {
    let run = Entry {
        t_us: 0,
        node: Node::World,
        event: Event::Run {
            history_version: HISTORY_VERSION,
            seed: plan.seed,
            scenario: "live".to_string(),
            batch_max: plan.batch_max,
            capacity: plan.capacity,
            lease_ttl_us: plan.lease_ttl_us,
            attempts_max: plan.attempts_max,
            bug: plan.bug.clone(),
            store: Some(plan.db.name().to_string()),
            drift_margin_us: Some(plan.drift_margin_us),
            latency_us: None,
            latency_calm_us: None,
            pruned_before_us: None,
            worker_processes: None,
            scan_every_us: Some(plan.scan_every_us),
            params: plan.params(),
        },
    };
    let mut text = run.to_json();
    text.push('\n');
    for line in store.events()? {
        text.push_str(&rebase(&line, plan.t0_us).map_err(Failure::Harness)?);
        text.push('\n');
    }
    let path = out.join("history.jsonl");
    lease_history::atomic::write(&path, text.as_bytes())
        .map_err(|error| Failure::Harness(format!("cannot write {}: {error}", path.display())))?;
    Ok(path)
}

/// One log line with its times counted from `t0_us`: `t_us` and every expiry (a uniform shift,
/// which changes no comparison the checkers make).
fn rebase(line: &str, t0_us: u64) -> Result<String, String> {
    let mut value: serde_json::Value =
        serde_json::from_str(line).map_err(|error| format!("a log line is not JSON ({error}): {line}"))?;
    fn shift(value: &mut serde_json::Value, key: &str, t0_us: u64) {
        if let Some(field) = value.get_mut(key) {
            if let Some(us) = field.as_u64() {
                *field = serde_json::Value::from(us.saturating_sub(t0_us));
            }
        }
    }
    for key in ["t_us", "expires_at_us", "new_expires_at_us"] {
        shift(&mut value, key, t0_us);
    }
    if let Some(leases) = value.get_mut("leases").and_then(serde_json::Value::as_array_mut) {
        for lease in leases {
            shift(lease, "expires_at_us", t0_us);
        }
    }
    Ok(value.to_string())
}

/// One child's place in the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    role: u8,
    index: u32,
}

impl Key {
    const STUB: Key = Key { role: 0, index: 0 };
    const ARRIVALS: Key = Key { role: 3, index: 0 };

    fn of(role: Role, index: u32) -> Key {
        match role {
            Role::Reclaimer => Key { role: 1, index },
            Role::Worker => Key { role: 2, index },
        }
    }

    fn role(self) -> ChildRole {
        match self.role {
            0 => ChildRole::Stub,
            1 => ChildRole::Reclaimer,
            2 => ChildRole::Worker,
            _ => ChildRole::Arrivals,
        }
    }

    fn node(self) -> Node {
        match self.role() {
            ChildRole::Worker => Node::Worker(self.index),
            ChildRole::Reclaimer => Node::Reclaimer(self.index),
            ChildRole::Arrivals => Node::Arrivals,
            ChildRole::Stub => Node::Ledger,
        }
    }

    fn name(self) -> String {
        match self.role() {
            ChildRole::Stub => "stub".to_string(),
            ChildRole::Arrivals => "arrivals".to_string(),
            _ => self.node().to_string(),
        }
    }
}

/// What a child is doing, as far as the orchestrator is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Up,
    /// Armed for a signalled strike: waiting for its `at` line.
    Armed(SignalStrike),
    /// SIGSTOPped until then (microseconds since the start); `go` owed after the SIGCONT.
    Paused {
        until_us: u64,
        owes_go: bool,
    },
    /// Killed; restarted then.
    Down {
        restart_us: u64,
    },
    /// Ended by itself (the arrival generator, when every job was offered).
    Done,
}

struct Slot {
    life: u64,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    state: State,
}

/// The fleet of children and the fault schedule being dealt.
struct Orchestra {
    plan: LivePlan,
    plan_path: PathBuf,
    out: PathBuf,
    verbose: bool,
    slots: BTreeMap<Key, Slot>,
    lines: Receiver<(Key, u64, String)>,
    lines_to: Sender<(Key, u64, String)>,
    stub_port: u16,
    pids: Vec<u32>,
    dealt: BTreeMap<String, u64>,
    /// The fault lines, to the thread that writes them (see [`FaultLog`]).
    faults: Option<Sender<(Node, Event, u64)>>,
}

/// The thread that writes the orchestrator's fault lines. A paused process may hold the
/// database's lock (SQLite's file lock, PostgreSQL's log lock or a row) until it is resumed: the
/// orchestrator must never wait for it, or it would never resume it. Each line is stamped when its
/// signal was sent, and written when the lock allows.
struct FaultLog {
    thread: std::thread::JoinHandle<Result<(), String>>,
}

impl FaultLog {
    fn start(mut log: Handle) -> (FaultLog, Sender<(Node, Event, u64)>) {
        let (sender, receiver) = mpsc::channel::<(Node, Event, u64)>();
        let thread = std::thread::spawn(move || {
            for (node, event, t_us) in receiver {
                log.line_at(node, event, t_us).map_err(|error| format!("the fault log: {error}"))?;
            }
            Ok(())
        });
        (FaultLog { thread }, sender)
    }

    /// Waits until every line sent is written.
    fn finish(self) -> Result<(), Failure> {
        self.thread.join().map_err(|_| Failure::Harness("the fault log panicked".into()))?.map_err(Failure::Harness)
    }
}

impl Orchestra {
    /// Starts the stub, then the reclaimers, the workers and the arrival generator.
    fn new(plan: &LivePlan, plan_path: &Path, out: &Path, verbose: bool) -> Result<Orchestra, Failure> {
        let (lines_to, lines) = mpsc::channel();
        let mut orchestra = Orchestra {
            plan: plan.clone(),
            plan_path: plan_path.to_path_buf(),
            out: out.to_path_buf(),
            verbose,
            slots: BTreeMap::new(),
            lines,
            lines_to,
            stub_port: 0,
            pids: Vec::new(),
            dealt: BTreeMap::new(),
            faults: None,
        };
        orchestra.spawn(Key::STUB, 1)?;
        orchestra.stub_port = orchestra.await_stub()?;
        for index in 0..plan.reclaimers {
            orchestra.spawn(Key::of(Role::Reclaimer, index), 1)?;
        }
        for index in 0..plan.workers {
            orchestra.spawn(Key::of(Role::Worker, index), 1)?;
        }
        orchestra.spawn(Key::ARRIVALS, 1)?;
        Ok(orchestra)
    }

    fn since_us(&self) -> u64 {
        host_now().0.saturating_sub(self.plan.t0_us)
    }

    /// Starts (or restarts) the child at `key`, in its life `life`.
    fn spawn(&mut self, key: Key, life: u64) -> Result<(), Failure> {
        let exe = std::env::current_exe().map_err(|error| Failure::Harness(format!("no executable: {error}")))?;
        let log_path = self.out.join("logs").join(format!("{}.log", key.name()));
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|error| Failure::Harness(format!("cannot open {}: {error}", log_path.display())))?;
        let role = match key.role() {
            ChildRole::Worker => "worker",
            ChildRole::Reclaimer => "reclaimer",
            ChildRole::Arrivals => "arrivals",
            ChildRole::Stub => "stub",
        };
        let mut child = Command::new(exe)
            .arg("live-child")
            .arg("--plan")
            .arg(&self.plan_path)
            .args(["--role", role, "--index", &key.index.to_string(), "--life", &life.to_string()])
            .args(["--stub-port", &self.stub_port.to_string(), "--parent", &std::process::id().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|error| Failure::Harness(format!("cannot start {}: {error}", key.name())))?;
        self.pids.push(child.id());
        let stdout = child.stdout.take().expect("stdout is piped");
        let lines_to = self.lines_to.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_to.send((key, life, line)).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        self.slots.insert(key, Slot { life, child: Some(child), stdin, state: State::Up });
        Ok(())
    }

    /// Waits for the stub's `ready PORT`.
    fn await_stub(&mut self) -> Result<u16, Failure> {
        let deadline = self.since_us() + STUB_READY_US;
        while self.since_us() < deadline {
            if let Ok((Key::STUB, _, line)) = self.lines.recv_timeout(Duration::from_millis(50)) {
                if let Some(port) = line.strip_prefix("ready ").and_then(|port| port.trim().parse().ok()) {
                    return Ok(port);
                }
            }
            self.check_alive()?;
        }
        Err(Failure::Harness("the dependency stub did not start listening within 10 s".to_string()))
    }

    /// A child that ended by itself is an error, except the arrival generator ending well.
    fn check_alive(&mut self) -> Result<(), Failure> {
        for (&key, slot) in &mut self.slots {
            let Some(child) = slot.child.as_mut() else { continue };
            let Ok(Some(status)) = child.try_wait() else { continue };
            slot.child = None;
            if key == Key::ARRIVALS && status.success() {
                slot.state = State::Done;
                continue;
            }
            let log = self.out.join("logs").join(format!("{}.log", key.name()));
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
            return Err(Failure::Harness(format!(
                "{} ended on its own ({status}); the end of {}:\n  {}",
                key.name(),
                log.display(),
                tail.join("\n  ")
            )));
        }
        Ok(())
    }

    fn send(&mut self, key: Key, command: &str) {
        if let Some(stdin) = self.slots.get_mut(&key).and_then(|slot| slot.stdin.as_mut()) {
            let _ = writeln!(stdin, "{command}");
            let _ = stdin.flush();
        }
    }

    fn signal(&mut self, key: Key, signal: libc::c_int) {
        if let Some(child) = self.slots.get(&key).and_then(|slot| slot.child.as_ref()) {
            // SAFETY: kill sends a signal to our own child, whose pid we hold and have not reaped.
            unsafe {
                libc::kill(child.id() as libc::pid_t, signal);
            }
        }
    }

    fn note(&mut self, what: String) {
        if self.verbose {
            println!("live: {:>9.3} s  {what}", self.since_us() as f64 / 1e6);
        }
    }

    /// Writes a fault line, stamped now, through the fault log (never waiting for the database).
    fn record(&mut self, event: Event) {
        self.record_at(event, host_now().0);
    }

    /// A fault line stamped `at_us`: the lines of one fault that strikes several nodes (a worker
    /// process's slots) share it.
    fn record_at(&mut self, event: Event, at_us: u64) {
        if let Some(faults) = &self.faults {
            let _ = faults.send((Node::World, event, at_us));
        }
    }

    /// One fault's line for each of `key`'s nodes, at one time.
    fn record_each(&mut self, key: Key, event: impl Fn(Node) -> Event) {
        let at_us = host_now().0;
        for target in self.nodes_of(key) {
            self.record_at(event(target), at_us);
        }
    }

    fn count(&mut self, what: &str) {
        *self.dealt.entry(what.to_string()).or_default() += 1;
    }

    /// The fault phase, the heal, and the drain. Returns whether every accepted job ended, and
    /// how long after the heal.
    fn play(&mut self, store: &mut Handle) -> Result<(bool, u64), Failure> {
        let mut strikes = self.plan.strikes.clone().into_iter().peekable();
        let mut marks = self.marks();
        let ticks_max = self.plan.duration_us / TICK.as_micros() as u64 * 4 + 1_000;
        for _ in 0..ticks_max {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Err(Failure::Interrupted);
            }
            let now_us = self.since_us();
            if now_us >= self.plan.duration_us {
                break;
            }
            while let Some(strike) = strikes.next_if(|strike| strike.at_us <= now_us) {
                self.deal(strike);
            }
            while let Some((_, event)) = marks.first().filter(|(at_us, _)| *at_us <= now_us).cloned() {
                marks.remove(0);
                self.record(event);
            }
            self.tend()?;
            self.check_alive()?;
            std::thread::sleep(TICK);
        }
        self.heal()?;
        let healed_us = self.since_us();
        let drain_end_us = healed_us + self.plan.drain_max_us;
        while self.since_us() < drain_end_us {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Err(Failure::Interrupted);
            }
            self.check_alive()?;
            let offered = self.slots.get(&Key::ARRIVALS).is_some_and(|slot| slot.state == State::Done);
            if offered && store.backlog()? == 0 {
                return Ok((true, self.since_us() - healed_us));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok((false, self.plan.drain_max_us))
    }

    /// The lines that mark the windows of the faults that strike no process: the dependency's
    /// and the surge's, each ended by its own line when it ends before the heal.
    fn marks(&self) -> Vec<(u64, Event)> {
        let mut marks = Vec::new();
        // One line per change of what the dependency does: windows that overlap (a slow one and a
        // failing one) are each opened and closed by a line of their own.
        for (at_us, state) in self.plan.dependency_changes() {
            let line = match state {
                Some(state) => Event::DependencyDegraded {
                    slow_rate: Rate(if state.slow_factor > 1 { 1.0 } else { 0.0 }),
                    slow_factor: state.slow_factor,
                    fail_rate: Rate(state.fail_rate),
                    lost_reply_rate: Rate(0.0),
                    rival_rate: Rate(0.0),
                },
                None => Event::DependencyRestored {},
            };
            marks.push((at_us, line));
        }
        if let Some(surge) = self.plan.surge {
            marks.push((surge.at_us, Event::SurgeStarted { factor: surge.factor, len_us: surge.len_us }));
            marks.push((surge.at_us + surge.len_us, Event::SurgeEnded {}));
        }
        marks.retain(|(at_us, _)| *at_us < self.plan.duration_us);
        marks.sort_by_key(|(at_us, _)| *at_us);
        marks
    }

    /// Deals one strike, if its target is up.
    fn deal(&mut self, strike: SignalStrike) {
        let up =
            |orchestra: &Orchestra, key: Key| orchestra.slots.get(&key).is_some_and(|slot| slot.state == State::Up);
        let mut key = Key::of(strike.role, strike.index);
        if !up(self, key) && matches!(strike.point, Point::AfterEffect | Point::DuringAck) {
            // A signalled strike is one of the two windows the run exists for: any worker up
            // will do.
            let workers = (0..self.plan.workers).map(|index| Key::of(Role::Worker, index));
            key = workers.into_iter().find(|&other| up(self, other)).unwrap_or(key);
        }
        if !up(self, key) {
            self.count("skipped (target not up)");
            return;
        }
        match strike.point {
            Point::AtRandom => self.hit(key, strike, None),
            point => {
                self.send(key, &format!("arm {}", point.name()));
                self.slots.get_mut(&key).expect("checked").state = State::Armed(strike);
            }
        }
    }

    /// The history's nodes the child at `key` is: a worker process, each of its slots' worker
    /// ids (a fault strikes them all at once); any other, its one node.
    fn nodes_of(&self, key: Key) -> Vec<Node> {
        match key.role() {
            ChildRole::Worker => self.plan.slot_ids(key.index).into_iter().map(Node::Worker).collect(),
            _ => vec![key.node()],
        }
    }

    /// Kills or pauses the child at `key` now (at its signalled point, working on `job`).
    fn hit(&mut self, key: Key, strike: SignalStrike, job: Option<JobId>) {
        let point = strike.point;
        let target = key.node();
        let now_us = self.since_us();
        let slot = self.slots.get_mut(&key).expect("a struck child has a slot");
        match strike.kind {
            FaultKind::Kill => {
                if let Some(mut child) = slot.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                slot.stdin = None;
                slot.state = State::Down { restart_us: now_us + strike.len_us };
                self.record_each(key, |target| Event::Crashed { target, point, job });
            }
            _ => {
                let owes_go = strike.point != Point::AtRandom;
                slot.state = State::Paused { until_us: now_us + strike.len_us, owes_go };
                self.signal(key, libc::SIGSTOP);
                let point = owes_go.then_some(point);
                self.record_each(key, |target| Event::Paused { target, point, job });
            }
        }
        self.count(&format!("{} at {}", strike.kind.name(), point.name()));
        self.note(format!(
            "{} {target} at {}{}",
            strike.kind.name(),
            point.name(),
            job.map_or(String::new(), |job| format!(" on {job}"))
        ));
    }

    /// Answers the children's `at` lines, ends pauses, and restarts what is due.
    fn tend(&mut self) -> Result<(), Failure> {
        while let Ok((key, life, line)) = self.lines.try_recv() {
            let Some(rest) = line.strip_prefix("at ") else { continue };
            let job = rest.split_whitespace().nth(1).and_then(|job| job.parse().ok()).map(JobId);
            let slot = self.slots.get(&key);
            match slot.map(|slot| (slot.life, slot.state)) {
                Some((current, State::Armed(strike))) if current == life => self.hit(key, strike, job),
                _ => self.send(key, "go"),
            }
        }
        let now_us = self.since_us();
        let due: Vec<(Key, State)> = self
            .slots
            .iter()
            .filter(|(_, slot)| match slot.state {
                State::Paused { until_us, .. } => until_us <= now_us,
                State::Down { restart_us } => restart_us <= now_us,
                _ => false,
            })
            .map(|(&key, slot)| (key, slot.state))
            .collect();
        for (key, state) in due {
            self.revive(key, state)?;
        }
        Ok(())
    }

    /// Ends a pause (SIGCONT) or restarts a killed child.
    fn revive(&mut self, key: Key, state: State) -> Result<(), Failure> {
        match state {
            State::Paused { owes_go, .. } => {
                self.signal(key, libc::SIGCONT);
                self.slots.get_mut(&key).expect("paused").state = State::Up;
                self.record_each(key, |target| Event::Resumed { target });
                if owes_go {
                    self.send(key, "go");
                }
            }
            State::Down { .. } => {
                let life = self.slots[&key].life + 1;
                self.spawn(key, life)?;
                self.record_each(key, |target| Event::Restarted { target });
            }
            State::Armed(_) => {
                self.send(key, "disarm");
                self.slots.get_mut(&key).expect("armed").state = State::Up;
            }
            State::Up | State::Done => {}
        }
        Ok(())
    }

    /// The end of the fault phase: every pause ends, every killed child restarts, every armed
    /// strike is called off, and `faults_healed` is written.
    fn heal(&mut self) -> Result<(), Failure> {
        let states: Vec<(Key, State)> = self.slots.iter().map(|(&key, slot)| (key, slot.state)).collect();
        for (key, state) in states {
            self.revive(key, state)?;
        }
        self.record(Event::FaultsHealed {});
        Ok(())
    }

    /// Stops every child (workers, reclaimers and arrivals first, the stub last, for its counts),
    /// reaps them all, and counts any left alive. Returns the stub's truth.
    fn finish(&mut self) -> (Result<stub::Truth, Failure>, usize, usize) {
        let keys: Vec<Key> = self.slots.keys().copied().filter(|&key| key != Key::STUB).collect();
        for &key in &keys {
            self.signal(key, libc::SIGCONT);
            if let Some(slot) = self.slots.get_mut(&key) {
                slot.stdin = None;
            }
        }
        for key in keys {
            self.reap(key);
        }
        if let Some(slot) = self.slots.get_mut(&Key::STUB) {
            slot.stdin = None;
        }
        let deadline = self.since_us() + STOP_GRACE_US;
        let mut truth = Err(Failure::Harness("the stub ended without its counts".to_string()));
        while self.since_us() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok((Key::STUB, _, line)) => {
                    if let Some(json) = line.strip_prefix("truth ") {
                        truth = serde_json::from_str(json)
                            .map_err(|error| Failure::Harness(format!("the stub's counts: {error}")));
                        break;
                    }
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        self.reap(Key::STUB);
        let left = self.pids.iter().filter(|&&pid| alive(pid)).count();
        (truth, self.pids.len(), left)
    }

    /// Waits for the child at `key` to end, for a grace period, then kills it; reaps it either way.
    fn reap(&mut self, key: Key) {
        let Some(mut child) = self.slots.get_mut(&key).and_then(|slot| slot.child.take()) else { return };
        let deadline = self.since_us() + STOP_GRACE_US;
        while self.since_us() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Orchestra {
    /// Whatever happened, no child outlives the run: each is woken, killed and reaped.
    fn drop(&mut self) {
        for slot in self.slots.values_mut() {
            if let Some(mut child) = slot.child.take() {
                // SAFETY: a signal to our own unreaped child.
                unsafe {
                    libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Whether a process with this pid exists (a zombie included).
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the export's shift moves every absolute time and nothing else.
    #[test]
    fn rebase_moves_times_and_expiries_only() {
        let line = r#"{"t_us":1005,"node":"table","kind":"listed","reclaimer":"r0","leases":[{"job":1,"epoch":2,"expires_at_us":1003}],"len_us":40}"#;
        let moved: serde_json::Value = serde_json::from_str(&rebase(line, 1000).unwrap()).unwrap();
        assert_eq!(moved["t_us"], 5);
        assert_eq!(moved["leases"][0]["expires_at_us"], 3);
        assert_eq!(moved["len_us"], 40);
        assert!(rebase("not json", 0).is_err());
    }

    // Proves only loopback PostgreSQL URLs are accepted.
    #[test]
    fn only_loopback_urls() {
        for url in
            ["postgres://postgres@127.0.0.1:5432/test", "postgres://u:p@localhost/db", "postgresql://[::1]:5432/x"]
        {
            assert_eq!(check_loopback(url), Ok(()), "{url}");
        }
        for url in ["postgres://postgres@10.0.0.1:5432/test", "postgres://db.example.com/x"] {
            assert!(check_loopback(url).is_err(), "{url}");
        }
    }
}
