//! The verbs that deal faults, acting through the world's `Ctx`: each records what it does in
//! the history, so that a reader sees every fault where it struck.
//!
//! - `crash` a node, and `restart` it after its downtime;
//! - `partition` a node from everyone or from one peer, and `repair` it;
//! - `pause` a node's process, and `resume` it;
//! - `stall` a node at a protocol point (it does nothing, not even heartbeat);
//! - `skew` a node's clock;
//! - `slow` a dependency call, or make it `fail`;
//! - `degrade` the dependency for a window, and `restore` it.
//!
//! `inject` plays a scheduled [`Fault`] with these verbs, and `heal` ends the fault phase.

use super::{Degradation, Fault, Point};
use crate::clock::LocalClock;
use crate::scenarios::Params;
use crate::world::ctx::Ctx;
use lease_core::{Epoch, Execution, JobId, OpId};
use lease_history::{CrashPoint, Event, Node};
use madsim::runtime::Handle;
use std::sync::Arc;
use tracing::Instrument;

/// Crashes `node` (at protocol point `point` for `job`, or wherever it was), and has the world
/// restart it after `restart_after_us`. A node crashed at a point must not touch the network
/// again: its task is dropped at its next await. Nothing happens to a node already down.
pub(crate) fn crash(ctx: &Ctx, node: Node, point: CrashPoint, job: Option<JobId>, restart_after_us: u64) {
    if ctx.is_down(node) {
        return;
    }
    ctx.record(Node::World, Event::Crashed { target: node, point, job });
    let (id, life) = {
        let mut state = ctx.state();
        let life = state.incarnations.get(&node).copied().unwrap_or(0);
        state.down.insert(node, life);
        (state.nodes[&node], life)
    };
    Handle::current().kill(id);
    let ctx2 = ctx.self_arc();
    let restarting = async move {
        ctx2.sleep_us(restart_after_us).await;
        restart(&ctx2, node, life);
    };
    ctx.chaos.spawn(crate::panics::contained(restarting.instrument(crate::logs::world_span())));
}

/// Restarts `node` if it is still down from the crash of life `life`.
pub(crate) fn restart(ctx: &Ctx, node: Node, life: u64) {
    let id = {
        let mut state = ctx.state();
        if state.down.get(&node) != Some(&life) {
            return;
        }
        state.down.remove(&node);
        state.nodes[&node]
    };
    ctx.record(Node::World, Event::Restarted { target: node });
    Handle::current().restart(id);
}

/// Cuts `node` off from everyone (`peer` none), or from `peer` both ways.
pub(crate) fn partition(ctx: &Ctx, node: Node, peer: Option<Node>) {
    let net = madsim::net::NetSim::current();
    ctx.record(Node::World, Event::Partitioned { target: node, peer });
    ctx.state().cuts.insert((node, peer));
    match peer {
        None => net.clog_node(ctx.sim_id(node)),
        Some(peer) => {
            net.clog_link(ctx.sim_id(node), ctx.sim_id(peer));
            net.clog_link(ctx.sim_id(peer), ctx.sim_id(node));
        }
    }
}

/// Repairs a partition that [`partition`] made.
pub(crate) fn repair(ctx: &Ctx, node: Node, peer: Option<Node>) {
    let net = madsim::net::NetSim::current();
    ctx.state().cuts.remove(&(node, peer));
    match peer {
        None => net.unclog_node(ctx.sim_id(node)),
        Some(peer) => {
            net.unclog_link(ctx.sim_id(node), ctx.sim_id(peer));
            net.unclog_link(ctx.sim_id(peer), ctx.sim_id(node));
        }
    }
    ctx.record(Node::World, Event::Healed { target: node, peer });
}

/// Pauses `node`'s process (a GC or VM stall). False, and nothing happens, when it is down or
/// already paused.
pub(crate) fn pause(ctx: &Ctx, node: Node) -> bool {
    if ctx.is_down(node) || !ctx.state().paused.insert(node) {
        return false;
    }
    ctx.record(Node::World, Event::Paused { target: node, point: None, job: None });
    Handle::current().pause(ctx.sim_id(node));
    true
}

/// Resumes `node` if it is paused.
pub(crate) fn resume(ctx: &Ctx, node: Node) {
    if !ctx.state().paused.remove(&node) {
        return;
    }
    Handle::current().resume(ctx.sim_id(node));
    ctx.record(Node::World, Event::Resumed { target: node });
}

/// Stalls the calling node's process for `len_us` at `point`, working on `job` (none for a
/// scan): it does nothing, not even heartbeat. A scan held back is the reclaimer's own timing, and
/// the history does not show it.
pub(crate) async fn stall(ctx: &Ctx, node: Node, point: Point, job: Option<JobId>, len_us: u64) {
    if point == Point::BeforeListing {
        return ctx.sleep_us(len_us).await;
    }
    ctx.record(Node::World, Event::Paused { target: node, point: Some(point.into()), job });
    ctx.sleep_us(len_us).await;
    ctx.record(Node::World, Event::Resumed { target: node });
}

/// Gives `node` its clock from the start of the run. Only workers and reclaimers keep clocks of
/// their own (the table's is the world's); a plan refuses a skew of any other node.
pub(crate) fn skew(params: &mut Params, node: Node, clock: LocalClock) {
    let clocks = match node {
        Node::Worker(n) => params.worker_clocks.get_mut(n as usize),
        Node::Reclaimer(n) => params.reclaimer_clocks.get_mut(n as usize),
        _ => None,
    };
    if let Some(slot) = clocks {
        *slot = clock;
    }
}

/// A dependency call's latency, `factor` times slower.
pub(crate) fn slow(latency_us: u64, factor: u64) -> u64 {
    latency_us.saturating_mul(factor)
}

/// Fails a dependency call of `caller` for `op` under `epoch`, before or after its effect.
pub(crate) fn fail(ctx: &Ctx, caller: Node, op: OpId, epoch: Epoch, after_effect: bool) -> Execution {
    ctx.record(Node::Ledger, Event::DependencyFailed { from: caller, job: op.job, op, epoch, after_effect });
    Execution::Failed
}

/// Plays a scheduled fault now, and has the world undo it when it is due.
pub(crate) fn inject(ctx: &Arc<Ctx>, fault: Fault) {
    match fault {
        Fault::Partition { node, len_us } => {
            partition(ctx, node, None);
            undo_later(ctx, len_us, move |ctx| repair(ctx, node, None));
        }
        Fault::CutLink { a, b, len_us } => {
            if a == b {
                return;
            }
            partition(ctx, a, Some(b));
            undo_later(ctx, len_us, move |ctx| repair(ctx, a, Some(b)));
        }
        Fault::Pause { node, len_us } => {
            if pause(ctx, node) {
                undo_later(ctx, len_us, move |ctx| resume(ctx, node));
            }
        }
        Fault::Crash { node, down_us } => crash(ctx, node, CrashPoint::AtRandom, None, down_us),
        Fault::Surge { len_us, factor } => {
            ctx.record(Node::World, Event::SurgeStarted { factor, len_us });
            undo_later(ctx, len_us, |ctx| ctx.record(Node::World, Event::SurgeEnded {}));
        }
        Fault::Degrade { len_us, rates } => {
            degrade(ctx, rates);
            if let Some(len_us) = len_us {
                undo_later(ctx, len_us, restore);
            }
        }
    }
}

/// Turns the dependency faulty at `rates`: a seeded run draws its faults from now on.
pub(crate) fn degrade(ctx: &Ctx, rates: Degradation) {
    let Degradation { slow_rate, slow_factor, fail_rate, lost_reply_rate, rival_rate } = rates;
    ctx.record(
        Node::World,
        Event::DependencyDegraded { slow_rate, slow_factor, fail_rate, lost_reply_rate, rival_rate },
    );
    ctx.state().dependency_degraded = true;
}

/// Makes the dependency reliable again, before the heal.
pub(crate) fn restore(ctx: &Ctx) {
    ctx.state().dependency_degraded = false;
    ctx.record(Node::World, Event::DependencyRestored {});
}

/// Runs `undo` on the world's own node `after_us` from now, unless the faults healed first.
fn undo_later(ctx: &Arc<Ctx>, after_us: u64, undo: impl FnOnce(&Ctx) + Send + 'static) {
    let ctx2 = ctx.clone();
    let undoing = async move {
        ctx2.sleep_us(after_us).await;
        if ctx2.state().faults_on {
            undo(&ctx2);
        }
    };
    ctx.chaos.spawn(crate::panics::contained(undoing.instrument(crate::logs::world_span())));
}

/// Ends the fault phase: every partition closes, paused nodes resume, crashed nodes restart, the
/// network turns calm, and the dependency's and a surge's windows close (without lines of their
/// own: `faults_healed` ends them). Nothing strikes after this.
pub(crate) fn heal(ctx: &Arc<Ctx>) {
    let net = madsim::net::NetSim::current();
    let nodes: Vec<(Node, madsim::task::NodeId)> = ctx.state().nodes.iter().map(|(n, id)| (*n, *id)).collect();
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
        restart(ctx, node, life);
    }
    let mut state = ctx.state();
    state.cuts.clear();
    state.faults_on = false;
    state.dependency_degraded = false;
    drop(state);
    ctx.record(Node::World, Event::FaultsHealed {});
}
