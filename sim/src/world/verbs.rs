//! The verbs that deal faults: methods of the world's [`Ctx`], as turmoil's `partition(a, b)` is
//! of its `Sim`. Each records what it does in the history, so that a reader sees every fault where
//! it struck, and each is the only writer of the world's state that it changes.
//!
//! - `crash` a node, and `restart` it after its downtime;
//! - `partition` a node from everyone or from one peer, and `repair` it;
//! - tell a worker or a reclaimer to `shutdown`, and take it down once it has `exited`;
//! - `pause` a node's process, and `resume` it;
//! - `stall` a node at a protocol point (it does nothing, not even heartbeat);
//! - `slow` a dependency call, or make it `fail`;
//! - `degrade` the dependency for a window, and `restore` it.
//!
//! `inject` plays a scheduled [`Fault`] with these verbs, and `heal` ends the fault phase. A
//! node's clock is set before the run, by [`Params::skew`](super::Params::skew).

use super::ctx::Ctx;
use crate::faults::{Degradation, Fault, Point};
use lease_core::{Epoch, Execution, JobId, OpId};
use lease_history::{Event, Node};
use madsim::runtime::Handle;
use std::sync::Arc;
use tracing::Instrument;

impl Ctx {
    /// The world's line of a fault that strikes `node`'s process: one per node the process is on
    /// the history (each slot of a worker process), at one time.
    fn struck(&self, node: Node, event: impl Fn(Node) -> Event) {
        for target in self.params.slot_nodes(node) {
            self.record(Node::World, event(target));
        }
    }

    /// Crashes `node` (at protocol point `point` for `job`, or wherever it was), and has the world
    /// restart it after `restart_after_us`. A node crashed at a point must not touch the network
    /// again: its task is dropped at its next await. Nothing happens to a node already down.
    pub(crate) fn crash(&self, node: Node, point: Point, job: Option<JobId>, restart_after_us: u64) {
        let node = self.params.process_of(node);
        if self.is_down(node) {
            return;
        }
        self.struck(node, |target| Event::Crashed { target, point, job });
        let (id, life) = {
            let mut state = self.state();
            let life = state.incarnations.get(&node).copied().unwrap_or(0);
            state.down.insert(node, life);
            (state.nodes[&node], life)
        };
        Handle::current().kill(id);
        let ctx2 = self.self_arc();
        let restarting = async move {
            ctx2.sleep_us(restart_after_us).await;
            ctx2.restart(node, life);
        };
        self.chaos.spawn(crate::panics::contained(restarting.instrument(crate::logs::world_span())));
    }

    /// Restarts `node` if it is still down from the crash of life `life`.
    pub(crate) fn restart(&self, node: Node, life: u64) {
        let node = self.params.process_of(node);
        let id = {
            let mut state = self.state();
            if state.down.get(&node) != Some(&life) {
                return;
            }
            state.down.remove(&node);
            state.nodes[&node]
        };
        self.struck(node, |target| Event::Restarted { target });
        Handle::current().restart(id);
    }

    /// The shutdown signal of `node`'s life `life`: it resolves when the world tells the node to
    /// stop ([`Ctx::shutdown`]), and never otherwise.
    pub(crate) fn stop_signal(&self, node: Node, life: u64) -> impl std::future::Future<Output = ()> + Send + 'static {
        let node = self.params.process_of(node);
        let (sender, signal) = futures::channel::oneshot::channel();
        self.state().stop_signals.insert(node, (life, sender));
        async move {
            if signal.await.is_err() {
                futures::future::pending::<()>().await;
            }
        }
    }

    /// Tells `node` to stop, as a deploy's `SIGTERM` does: its runtime's shutdown signal fires,
    /// and it restarts `down_us` after it has exited ([`Ctx::exited`]). Nothing happens to a node
    /// that is down, already stopping, or not yet listening.
    pub(crate) fn shutdown(&self, node: Node, down_us: u64) {
        let node = self.params.process_of(node);
        let sender = {
            let mut state = self.state();
            let life = state.incarnations.get(&node).copied().unwrap_or(0);
            if state.down.contains_key(&node) || state.stopping.get(&node).is_some_and(|(told, _)| *told == life) {
                return;
            }
            match state.stop_signals.remove(&node) {
                Some((listening, sender)) if listening == life => {
                    state.stopping.insert(node, (life, down_us));
                    sender
                }
                _ => return,
            }
        };
        // A worker's grace is its runtime's (`WorkerOptions::grace`: a lease's ttl unless drawn).
        let grace_us = matches!(node, Node::Worker(_))
            .then(|| self.params.shutdown_grace_us.unwrap_or(self.params.table.lease_ttl.as_us()));
        self.struck(node, |target| Event::Stopping { target, grace_us });
        // The receiver lives as long as the life that listens; a crash since drops both.
        let _ = sender.send(());
    }

    /// `node`'s life `life` has exited after it was told to stop: it is down from now, and
    /// restarts after its downtime, at once if the faults have healed. Called by the life's own
    /// task, which must not touch the network again.
    pub(crate) fn exited(&self, node: Node, life: u64) {
        let node = self.params.process_of(node);
        let (id, down_us) = {
            let mut state = self.state();
            match state.stopping.get(&node) {
                Some(&(told, down_us)) if told == life => {
                    state.stopping.remove(&node);
                    state.down.insert(node, life);
                    let down_us = if state.faults_on { down_us } else { 0 };
                    (state.nodes[&node], down_us)
                }
                _ => return,
            }
        };
        self.struck(node, |target| Event::Stopped { target });
        // What the exited life left running (its router) goes with it; the caller, the life's
        // own task, is dropped at its next await, as after a crash.
        Handle::current().kill(id);
        let ctx2 = self.self_arc();
        let restarting = async move {
            ctx2.sleep_us(down_us).await;
            ctx2.restart(node, life);
        };
        self.chaos.spawn(crate::panics::contained(restarting.instrument(crate::logs::world_span())));
    }

    /// Cuts `node` off from everyone (`peer` none), or from `peer` both ways.
    pub(crate) fn partition(&self, node: Node, peer: Option<Node>) {
        let (node, peer) = (self.params.process_of(node), peer.map(|peer| self.params.process_of(peer)));
        let net = madsim::net::NetSim::current();
        self.struck(node, |target| Event::Partitioned { target, peer });
        self.state().cuts.insert((node, peer));
        match peer {
            None => net.clog_node(self.sim_id(node)),
            Some(peer) => {
                net.clog_link(self.sim_id(node), self.sim_id(peer));
                net.clog_link(self.sim_id(peer), self.sim_id(node));
            }
        }
    }

    /// Repairs a partition that [`partition`] made.
    pub(crate) fn repair(&self, node: Node, peer: Option<Node>) {
        let (node, peer) = (self.params.process_of(node), peer.map(|peer| self.params.process_of(peer)));
        let net = madsim::net::NetSim::current();
        self.state().cuts.remove(&(node, peer));
        match peer {
            None => net.unclog_node(self.sim_id(node)),
            Some(peer) => {
                net.unclog_link(self.sim_id(node), self.sim_id(peer));
                net.unclog_link(self.sim_id(peer), self.sim_id(node));
            }
        }
        self.struck(node, |target| Event::Healed { target, peer });
    }

    /// Pauses `node`'s process (a GC or VM stall). False, and nothing happens, when it is down or
    /// already paused.
    pub(crate) fn pause(&self, node: Node) -> bool {
        let node = self.params.process_of(node);
        if self.is_down(node) || !self.state().paused.insert(node) {
            return false;
        }
        self.struck(node, |target| Event::Paused { target, point: None, job: None });
        Handle::current().pause(self.sim_id(node));
        true
    }

    /// Resumes `node` if it is paused.
    pub(crate) fn resume(&self, node: Node) {
        let node = self.params.process_of(node);
        if !self.state().paused.remove(&node) {
            return;
        }
        Handle::current().resume(self.sim_id(node));
        self.struck(node, |target| Event::Resumed { target });
    }

    /// Stalls the calling node's process for `len_us` at `point`, working on `job` (none for a
    /// scan): it does nothing, not even heartbeat. A scan held back is the reclaimer's own timing, and
    /// the history does not show it.
    pub(crate) async fn stall(&self, node: Node, point: Point, job: Option<JobId>, len_us: u64) {
        if point == Point::BeforeListing {
            return self.sleep_us(len_us).await;
        }
        // A slot's stall is its whole process's.
        self.struck(node, |target| Event::Paused { target, point: Some(point), job });
        self.sleep_us(len_us).await;
        self.struck(node, |target| Event::Resumed { target });
    }

    /// Fails a dependency call of `caller` for `op` under `epoch`, before or after its effect.
    pub(crate) fn fail(&self, caller: Node, op: OpId, epoch: Epoch, after_effect: bool) -> Execution {
        let permanent = false;
        self.record(
            Node::Ledger,
            Event::DependencyFailed { from: caller, job: op.job, op, epoch, after_effect, permanent },
        );
        Execution::Failed
    }

    /// Refuses a dependency call of `caller` for `op` under `epoch` for good, before any effect:
    /// the job is poison ([`crate::world::params::Params::is_poison`]).
    pub(crate) fn refuse(&self, caller: Node, op: OpId, epoch: Epoch) -> Execution {
        let (after_effect, permanent) = (false, true);
        self.record(
            Node::Ledger,
            Event::DependencyFailed { from: caller, job: op.job, op, epoch, after_effect, permanent },
        );
        Execution::Permanent
    }

    /// Plays a scheduled fault now, and has the world undo it when it is due.
    pub(crate) fn inject(self: &Arc<Self>, fault: Fault) {
        match fault {
            Fault::Partition { node, len_us } => {
                self.partition(node, None);
                self.undo_later(len_us, move |ctx| ctx.repair(node, None));
            }
            Fault::CutLink { a, b, len_us } => {
                if a == b {
                    return;
                }
                self.partition(a, Some(b));
                self.undo_later(len_us, move |ctx| ctx.repair(a, Some(b)));
            }
            Fault::Pause { node, len_us } => {
                if self.pause(node) {
                    self.undo_later(len_us, move |ctx| ctx.resume(node));
                }
            }
            Fault::Crash { node, down_us } => self.crash(node, Point::AtRandom, None, down_us),
            Fault::Shutdown { node, down_us } => self.shutdown(node, down_us),
            Fault::Surge { len_us, factor } => {
                self.record(Node::World, Event::SurgeStarted { factor, len_us });
                self.undo_later(len_us, |ctx| ctx.record(Node::World, Event::SurgeEnded {}));
            }
            Fault::Degrade { len_us, rates } => {
                self.degrade(rates);
                if let Some(len_us) = len_us {
                    self.undo_later(len_us, Ctx::restore);
                }
            }
        }
    }

    /// Turns the dependency faulty at `rates`: a seeded run draws its faults from now on.
    pub(crate) fn degrade(&self, rates: Degradation) {
        let Degradation { slow_rate, slow_factor, fail_rate, lost_reply_rate, rival_rate } = rates;
        self.record(
            Node::World,
            Event::DependencyDegraded { slow_rate, slow_factor, fail_rate, lost_reply_rate, rival_rate },
        );
        self.state().dependency_degraded = true;
    }

    /// Makes the dependency reliable again, before the heal.
    pub(crate) fn restore(&self) {
        self.state().dependency_degraded = false;
        self.record(Node::World, Event::DependencyRestored {});
    }

    /// Runs `undo` on the world's own node `after_us` from now, unless the faults healed first.
    fn undo_later(self: &Arc<Self>, after_us: u64, undo: impl FnOnce(&Ctx) + Send + 'static) {
        let ctx2 = self.clone();
        let undoing = async move {
            ctx2.sleep_us(after_us).await;
            if ctx2.state().faults_on {
                undo(&ctx2);
            }
        };
        self.chaos.spawn(crate::panics::contained(undoing.instrument(crate::logs::world_span())));
    }

    /// Ends the fault phase: every partition closes, paused nodes resume, crashed nodes restart, the
    /// network turns calm, and the dependency's and a surge's windows close (without lines of their
    /// own: `faults_healed` ends them). Nothing strikes after this.
    pub(crate) fn heal(self: &Arc<Self>) {
        let net = madsim::net::NetSim::current();
        let nodes: Vec<(Node, madsim::task::NodeId)> = self.state().nodes.iter().map(|(n, id)| (*n, *id)).collect();
        for &(_, id) in &nodes {
            net.unclog_node(id);
            for &(_, other) in &nodes {
                net.unclog_link(id, other);
            }
        }
        for &(node, _) in &nodes {
            self.resume(node);
        }
        // A node still down would carry a fault into the liveness phase (a ledger down past the heal
        // leaves every grant unusable): it restarts now, and its pending restart finds it up.
        let down: Vec<(Node, u64)> = self.state().down.iter().map(|(node, life)| (*node, *life)).collect();
        for (node, life) in down {
            self.restart(node, life);
        }
        let mut state = self.state();
        state.cuts.clear();
        state.faults_on = false;
        state.dependency_degraded = false;
        drop(state);
        self.record(Node::World, Event::FaultsHealed {});
    }
}
