//! The faults a history names, node by node: what excuses lost work.
//!
//! Two checkers judge work lost in the fault phase, [`crate::heartbeats`] (a lease its worker's
//! heartbeats did not keep) and [`crate::useful_grants`] (a grant nobody used). Neither excuses the
//! phase wholesale: a loss is excused only by a fault the history names that struck the worker's
//! process, or a node the work needed, while the work was at stake. This is their shared memory of
//! those faults.
//!
//! A node is *struck* while a crash, stop or pause holds it (`crashed` or `stopped` until
//! `restarted`, `paused` until `resumed`; stalls at protocol points are written as pauses) or a
//! partition cuts it off (until `healed`, or the heal of the fault phase), and at the instant any of
//! those begins or ends, or a message it sent or was to get is `lost` or `delayed`. A worker's
//! fault is its process's: every slot of a process shares its faults (the `run` line's
//! `worker_processes`).

use lease_history::{Entry, Event, Node};
use std::collections::BTreeMap;

/// The faults struck so far, by node. See the module documentation.
#[derive(Debug, Clone, Default)]
pub(crate) struct Strikes {
    /// Worker processes, when each runs several slots.
    processes: Option<u32>,
    /// Nodes a crash, stop or pause holds now, with how many.
    down: BTreeMap<Node, u32>,
    /// Nodes a partition holds now, with how many: all of them end with the fault phase.
    cut: BTreeMap<Node, u32>,
    /// When a fault last struck each node (its start or end, or a message of its lost or held
    /// back).
    last_struck_us: BTreeMap<Node, u64>,
    /// The same, but for messages held back: when the fault last struck each node.
    last_hard_us: BTreeMap<Node, u64>,
    /// How late a message of each node's held back arrives at the latest: when its hold ends.
    held_until_us: BTreeMap<Node, u64>,
    /// The network's slowest one-way latency (the `run` line's `latency_us`, else its calm one).
    latency_max_us: u64,
    /// Whether the fault phase is on and its network slower than the calm one (the `run` line's
    /// `latency_us` reaching above its `latency_calm_us`).
    slow: bool,
}

impl Strikes {
    /// Folds in `entry`; returns the nodes (processes, for workers) a fault began to strike at it,
    /// as [`Strikes::key`] names them. A worker's clean exit (`stopped` of a worker) holds it down
    /// like a crash, but strikes nothing: it is no fault.
    pub(crate) fn absorb(&mut self, entry: &Entry) -> Vec<Node> {
        let t_us = entry.t_us;
        match &entry.event {
            Event::Run { worker_processes, latency_us, latency_calm_us, .. } => {
                self.processes = worker_processes.filter(|&n| n > 0);
                self.latency_max_us = latency_us.or(*latency_calm_us).map_or(0, |[_, max]| max);
                self.slow = matches!((latency_us, latency_calm_us), (Some([_, max]), Some([_, calm])) if max > calm);
                Vec::new()
            }
            Event::FaultsHealed {} => {
                self.slow = false;
                for node in std::mem::take(&mut self.cut).into_keys() {
                    self.last_struck_us.insert(node, t_us);
                    self.last_hard_us.insert(node, t_us);
                }
                Vec::new()
            }
            Event::Stopped { target: target @ Node::Worker(_) } => {
                let node = self.hold(Hold::Down, *target, t_us);
                self.down.insert(node, 1);
                Vec::new()
            }
            // A crash (or a stop) ends whatever pause held the process: it is down until it
            // restarts, and one restart lifts it.
            Event::Crashed { target, .. } | Event::Stopped { target } => {
                let node = self.hold(Hold::Down, *target, t_us);
                self.down.insert(node, 1);
                vec![node]
            }
            Event::Paused { target, .. } => vec![self.hold(Hold::Down, *target, t_us)],
            Event::Restarted { target } | Event::Resumed { target } => {
                self.lift(Hold::Down, *target, t_us);
                Vec::new()
            }
            // A partition of the table from everyone strikes the table; one between the table (or
            // the ledger) and a worker, either way round, strikes that worker.
            Event::Partitioned { target, peer } => vec![self.hold(Hold::Cut, cut_off(*target, *peer), t_us)],
            Event::Healed { target, peer } => {
                self.lift(Hold::Cut, cut_off(*target, *peer), t_us);
                Vec::new()
            }
            // A message lost or held back strikes the worker that sent it or was to get it.
            Event::Lost { target, peer, .. } | Event::Delayed { target, peer, .. } => {
                let struck: Vec<Node> = [*target, *peer]
                    .into_iter()
                    .filter(|node| matches!(node, Node::Worker(_)))
                    .map(|node| self.key(node))
                    .collect();
                for node in &struck {
                    self.last_struck_us.insert(*node, t_us);
                    match &entry.event {
                        Event::Delayed { len_us, .. } => {
                            let until = self.held_until_us.entry(*node).or_default();
                            *until = (*until).max(t_us.saturating_add(*len_us));
                        }
                        _ => {
                            self.last_hard_us.insert(*node, t_us);
                        }
                    }
                }
                struck
            }
            _ => Vec::new(),
        }
    }

    /// The node a fault of `node` strikes: a worker's process (its first slot), or itself.
    pub(crate) fn key(&self, node: Node) -> Node {
        match (node, self.processes) {
            (Node::Worker(n), Some(processes)) => Node::Worker(n % processes),
            _ => node,
        }
    }

    /// Whether the fault phase is on and its network slower than the calm one.
    pub(crate) fn slow(&self) -> bool {
        self.slow
    }

    /// Whether a crash, stop or pause holds `node` (its process) now.
    pub(crate) fn down(&self, node: Node) -> bool {
        self.down.contains_key(&self.key(node))
    }

    /// Whether a fault struck `node` (its process) at or after `since_us`, or holds it now.
    pub(crate) fn struck_since(&self, node: Node, since_us: u64) -> bool {
        let node = self.key(node);
        self.down.contains_key(&node)
            || self.cut.contains_key(&node)
            || self.last_struck_us.get(&node).is_some_and(|&at| at >= since_us)
    }

    /// Whether a fault could have kept `node` (its process) from answering, between `since_us`
    /// and `by_us`, something it got at `since_us` at the earliest: one holds it now, or struck
    /// it since `since_us` (a crash, stop, pause or partition began or ended, a message of its
    /// was lost), or a message of its held back since then arrives within a round trip of
    /// `by_us` or later. A message held back but delivered with time to spare kept nothing
    /// from it: a worker that gave up waiting for a late answer still declines the grant it
    /// brings.
    pub(crate) fn kept_from(&self, node: Node, since_us: u64, by_us: u64) -> bool {
        let node = self.key(node);
        let round_trip_us = 2 * self.latency_max_us;
        self.down.contains_key(&node)
            || self.cut.contains_key(&node)
            || self.last_hard_us.get(&node).is_some_and(|&at| at >= since_us)
            || self.held_until_us.get(&node).is_some_and(|&until| until.saturating_add(round_trip_us) >= by_us)
    }

    /// A fault of kind `hold` struck `node` at `t_us`, and holds it until lifted: its key.
    fn hold(&mut self, hold: Hold, node: Node, t_us: u64) -> Node {
        let node = self.key(node);
        self.last_struck_us.insert(node, t_us);
        self.last_hard_us.insert(node, t_us);
        *self.holds(hold).entry(node).or_default() += 1;
        node
    }

    /// A fault of kind `hold` that held `node` ended at `t_us`.
    fn lift(&mut self, hold: Hold, node: Node, t_us: u64) {
        let node = self.key(node);
        self.last_struck_us.insert(node, t_us);
        self.last_hard_us.insert(node, t_us);
        let holds = self.holds(hold);
        if let Some(count) = holds.get_mut(&node) {
            *count -= 1;
            if *count == 0 {
                holds.remove(&node);
            }
        }
    }

    /// The nodes faults of kind `hold` hold now.
    fn holds(&mut self, hold: Hold) -> &mut BTreeMap<Node, u32> {
        match hold {
            Hold::Down => &mut self.down,
            Hold::Cut => &mut self.cut,
        }
    }
}

/// The node a partition from `target` to `peer` cuts off: the worker when the table (or the
/// ledger) is cut off from it, the target otherwise (the table, when it is cut off from everyone).
fn cut_off(target: Node, peer: Option<Node>) -> Node {
    match (target, peer) {
        (Node::Table | Node::Ledger, Some(peer)) => peer,
        _ => target,
    }
}

/// What holds a node while a fault lasts.
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// A crash, stop or pause: until it restarts or resumes.
    Down,
    /// A partition: until it heals, or the fault phase ends.
    Cut,
}
