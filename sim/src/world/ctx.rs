//! What the nodes of a world share: the durable table and ledger, the history with its checkers,
//! the streams faults are drawn from, and the bookkeeping of which node is up, down or paused.
//!
//! Nodes and fault verbs depend on this module, never on [`crate::world`], which spawns them.

use super::params::{Arrival, Params, CALM_LATENCY_US};
use crate::faults::decide::Decisions;
use lease_check::{Checkers, Violation};
use lease_core::{Bugs, Time};
use lease_history::{Entry, Event, Node};
use madsim::runtime::NodeHandle;
use madsim::task::NodeId as SimNodeId;
use madsim::time::sleep;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The world's shared state. A madsim runtime runs on one thread, so the lock is never contended;
/// it is there because madsim tasks must be `Send`.
pub(crate) struct Ctx {
    pub params: Params,
    pub bugs: Bugs,
    /// Timers armed in the world (sleeps and receive timeouts), for the event counts.
    pub(crate) timers: std::sync::atomic::AtomicU64,
    /// Batches served (one message, one transaction each), by kind ([`super::Events::BATCH_KINDS`]),
    /// and the requests they carried, for the event counts.
    pub(crate) batches: [[std::sync::atomic::AtomicU64; super::BATCH_KINDS]; 2],
    /// madsim's elapsed time when the world began: [`Ctx::now`] is madsim's elapsed time past it
    /// (read as a `Duration`, not as an `Instant` added to and subtracted from again).
    pub(crate) start: Duration,
    /// madsim's clock, read directly: a read through `Instant::now` takes madsim's `clock_gettime`
    /// override, which looks the runtime up in a thread-local and clones its handle every time.
    pub(crate) time: madsim::time::TimeHandle,
    /// The world's own node: it carries held-back messages, restarts and repairs, so that no
    /// crash or pause of the node that caused them touches them.
    pub(crate) chaos: NodeHandle,
    pub(crate) state: Mutex<State>,
}

/// What survives in the world: durable node state, the history, and the fault streams.
pub(crate) struct State {
    /// The table's and the ledger's durable state, on the run's store: survives restarts of the
    /// table and ledger nodes.
    pub durable: super::durable::Durable,
    /// Every fault decision: drawn from the seed's streams or looked up in a plan, and recorded.
    pub decisions: Decisions,
    /// Whether the fault phase is still on.
    pub faults_on: bool,
    /// Whether the dependency's faulty window is open (`Fault::Degrade`): a seeded run draws the
    /// dependency's faults only then.
    pub dependency_degraded: bool,
    /// Whether every job has been offered and answered.
    pub arrivals_done: bool,
    /// The jobs offered so far, and when: the plan's arrival list.
    pub arrivals: Vec<Arrival>,
    pub(crate) history: Vec<Entry>,
    pub(crate) checkers: Checkers,
    pub(crate) violation: Option<Violation>,
    pub(crate) nodes: BTreeMap<Node, SimNodeId>,
    pub(crate) incarnations: BTreeMap<Node, u64>,
    /// Nodes that are down, with the life that crashed.
    pub(crate) down: BTreeMap<Node, u64>,
    pub(crate) paused: BTreeSet<Node>,
    /// Each worker's and reclaimer's shutdown signal, for the life that is listening.
    pub(crate) stop_signals: BTreeMap<Node, (u64, futures::channel::oneshot::Sender<()>)>,
    /// Nodes told to stop and not yet exited: the life told, and how long it stays down once it
    /// has exited.
    pub(crate) stopping: BTreeMap<Node, (u64, u64)>,
    /// Partitions in force: a node cut off from everyone (`None`) or from one peer.
    pub(crate) cuts: BTreeSet<(Node, Option<Node>)>,
    /// Messages about each lease so far, by kind: what keys a lease message's latency.
    pub(crate) lease_messages: BTreeMap<LeaseMessage, u32>,
    /// How many messages of each kind about each job (and no lease) went between two nodes.
    pub(crate) job_messages: BTreeMap<JobMessage, u32>,
    /// The leases a worker runtime holds in its buffer (it passed [`lease_history::Point::Buffered`]
    /// for the job and has not started the effect), by slot and job, with the process's life.
    pub(crate) buffered: BTreeMap<(Node, lease_core::JobId), u64>,
    /// The releases a worker runtime owes: a lease its slot gave up while it was buffered, or
    /// handed back at shutdown (its `abandoned` line), by slot, job and epoch, with the life, the
    /// line and which of the two. Sending the release pays it; a crash of the life forgives it.
    /// See [`Ctx::unpaid_release`].
    pub(crate) owed_releases: BTreeMap<(Node, lease_core::JobId, lease_core::Epoch), (u64, usize, Owed)>,
}

/// A kind of message about one lease: the request (or its answer) and the lease's job and epoch.
pub(crate) type LeaseMessage = (lease_history::MessageKind, bool, lease_core::JobId, lease_core::Epoch);
/// A message about a job and no lease: its sender, receiver, kind, whether it is a reply, and job.
pub(crate) type JobMessage = (Node, Node, lease_history::MessageKind, bool, lease_core::JobId);

impl Ctx {
    /// Simulated time since the world began: the table's clock.
    pub fn now(&self) -> Time {
        Time(self.time.elapsed().saturating_sub(self.start).as_micros() as u64)
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

    /// Counts one batch served, of `requests` requests of kind `kind`
    /// ([`super::Events::BATCH_KINDS`]).
    pub fn served_batch(&self, kind: usize, requests: usize) {
        self.batches[0][kind].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.batches[1][kind].fetch_add(requests as u64, std::sync::atomic::Ordering::Relaxed);
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

    /// How long the network takes to carry a message, in microseconds: in the fault phase, in the
    /// world's latency range; after the heal, in the calm one. It is a function of the run's seed
    /// and the message (sender, receiver, kind, job and wire id), not a draw from a shared stream:
    /// a plan edited elsewhere, or shrunk, leaves this message's latency as it was.
    pub fn latency_us(&self, key: &impl std::hash::Hash) -> u64 {
        let (min, max) = if self.state().faults_on { self.params.latency_us } else { CALM_LATENCY_US };
        min + mix(self.params.seed, key) % (max.max(min) - min + 1)
    }

    /// How many messages of this kind about this lease went before this one.
    pub(crate) fn nth_of_lease(&self, key: LeaseMessage) -> u32 {
        let mut state = self.state();
        let count = state.lease_messages.entry(key).or_insert(0);
        *count += 1;
        *count
    }

    /// How many messages of this kind about this job (and no lease) went from this sender to this
    /// receiver before this one.
    pub(crate) fn nth_of_job(&self, key: JobMessage) -> u32 {
        let mut state = self.state();
        let count = state.job_messages.entry(key).or_insert(0);
        *count += 1;
        *count
    }

    /// Whether a partition in force cuts `from` off from `to`.
    pub fn is_cut(&self, from: Node, to: Node) -> bool {
        let (from, to) = (self.params.process_of(from), self.params.process_of(to));
        let state = self.state();
        if state.cuts.is_empty() {
            return false;
        }
        [(from, None), (to, None), (from, Some(to)), (to, Some(from))].iter().any(|cut| state.cuts.contains(cut))
    }

    /// The middle of the network's one-way latency: how long a message aimed at a time takes.
    pub fn one_way_us(&self) -> u64 {
        let (min, max) = self.params.latency_us;
        (min + max) / 2
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
        let node = self.params.process_of(node);
        let state = self.state();
        state.incarnations.get(&node) == Some(&incarnation) && !state.down.contains_key(&node)
    }

    /// madsim's id of `node`.
    pub(crate) fn sim_id(&self, node: Node) -> SimNodeId {
        self.state().nodes[&self.params.process_of(node)]
    }

    /// Whether `node` is down.
    pub(crate) fn is_down(&self, node: Node) -> bool {
        self.state().down.contains_key(&self.params.process_of(node))
    }

    /// The running world's context, for tasks spawned from `&Ctx`.
    pub(crate) fn self_arc(&self) -> Arc<Ctx> {
        SELF.with(|cell| cell.borrow().clone().expect("world context set"))
    }

    pub(crate) fn violated(&self) -> bool {
        self.state().violation.is_some()
    }

    /// A release still owed ([`State::owed_releases`]), told as a failure: by the life `only`
    /// names, or else by any life still current and up (a life that crashed is forgiven: the
    /// crash may have struck before its release left, and an exited life was audited as it
    /// returned). A runtime sends the release in the turn that writes the `abandoned` line, so
    /// one still owed when its life returns, or when the world ends, was never sent.
    pub(crate) fn unpaid_release(&self, only: Option<(Node, u64)>) -> Option<String> {
        let state = self.state();
        let owes = |slot: Node, life: u64| {
            let process = self.params.process_of(slot);
            match only {
                Some(owner) => owner == (process, life),
                None => state.incarnations.get(&process) == Some(&life) && !state.down.contains_key(&process),
            }
        };
        let (&(slot, job, epoch), &(life, line, owed)) =
            state.owed_releases.iter().find(|(&(slot, ..), &(life, ..))| owes(slot, life))?;
        Some(format!("{slot} life {life}: its runtime never released {job} {epoch}, {owed} (line {line})"))
    }
}

/// Why a worker runtime owes a release ([`State::owed_releases`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owed {
    /// Its slot gave the lease up while the effect waited in the buffer, never started.
    Buffered,
    /// It wrote the lease's `abandoned` line at shutdown: handed back, to be released.
    HandedBack,
}

impl std::fmt::Display for Owed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Owed::Buffered => "given up while it waited in the buffer",
            Owed::HandedBack => "handed back at shutdown",
        })
    }
}

thread_local! {
    /// The running world's context, for tasks spawned from `&Ctx`. One runtime per thread at a time.
    pub(crate) static SELF: std::cell::RefCell<Option<Arc<Ctx>>> = const { std::cell::RefCell::new(None) };
}

impl State {
    /// Records the line of each request a store served together at `now`, in order, under
    /// `node`, and returns the answers.
    pub fn record_served<R>(&mut self, now: Time, node: Node, served: Vec<lease_store::Served<R>>) -> Vec<R> {
        served
            .into_iter()
            .map(|served| {
                self.record_at(now, node, served.event);
                served.reply
            })
            .collect()
    }

    /// Appends an event at `now`, and checks it, while the caller holds the lock.
    /// Once a safety invariant broke, the history ends: the world stops within a supervisor tick,
    /// and what it does meanwhile is neither checked nor recorded.
    pub fn record_at(&mut self, now: Time, node: Node, event: Event) {
        if self.violation.is_some() {
            return;
        }
        let entry = Entry { t_us: now.0, node, event };
        self.history.push(entry);
        let line = self.history.len();
        let entry = &self.history[line - 1];
        // Rendered only when a subscriber wants the event (see `crate::logs`).
        tracing::debug!(
            line,
            kind = %kind(&entry.event),
            "{}",
            lease_history::render::render_line(entry).trim_start()
        );
        if let Err(violation) = self.checkers.observe(line, entry) {
            self.violation = Some(violation);
        }
    }
}

/// A well-mixed 64-bit hash of `seed` and `key`: std's SipHash with fixed keys (so the same on
/// every run and machine), finished with splitmix64.
pub(crate) fn mix(seed: u64, key: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    #[allow(deprecated, reason = "SipHasher with fixed keys is stable and deterministic, which is what this needs")]
    let mut hasher = std::hash::SipHasher::new_with_keys(seed, 0x1a7e_9c1e_5eed);
    key.hash(&mut hasher);
    let mut x = hasher.finish();
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The kind of `event` as the history spells it (`"kind"` in its JSON line), for the log line
/// that shows it. Built by serialising the event: for logs only, where it is paid only when the
/// line is printed.
fn kind(event: &lease_history::Event) -> String {
    match serde_json::to_value(event) {
        Ok(serde_json::Value::Object(fields)) => {
            fields.get("kind").and_then(|kind| kind.as_str()).unwrap_or("?").to_string()
        }
        _ => "?".to_string(),
    }
}
