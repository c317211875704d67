//! `large-batches`: worker processes of 8 to 16 slots that batch as many calls a message, and
//! reclaimers that take a whole batch as one wave, under
//! the faults a batch is exposed to: a whole process stalls past its leases while its renewals or
//! its completions wait to leave, so the batch it sends on waking names leases that reclaimers
//! took (and other processes were granted) meanwhile; and processes crash after one slot's effect
//! while its siblings' effects of the same turn are still in flight.
//!
//! A scenario of its own, not the swarm's draws, so that every swarm seed keeps its world: the
//! swarm draws a batch of 2 to 16 slots for half its seeds, among all its other faults; this one
//! draws only large ones, and the faults aimed at them, a local buffer for a third of them, and
//! deploys (processes told to stop, which drain and come back) for half.

use super::{Definition, Params};
use crate::faults::{CrashRates, Fault, StallRates};
use lease_history::Node;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "large-batches",
    about:
        "processes of 8 to 16 slots batching; whole-process stalls before renewals and acks, crashes mid-batch, deploys",
    situations: &[
        "crash_after_effect_adopted",
        "stale_effect_fenced",
        "stale_write_refused",
        "paused_worker_woke_after_expiry",
        "window_batch_crash_between_effects",
        "window_batch_stale_completion",
        "window_batch_renewal_after_reclaim",
    ],
    label: None,
    draw,
};

/// Large batches (slots, the batch and the table's `batch_max` drawn together), a fleet that
/// always has a process awake to take what was reclaimed, reclaimers that scan often, stalls of
/// one to three leases before renewals and acknowledgements, and crashes after effects.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    let batch = rng.gen_range(8..=16u32);
    params.slots = batch;
    params.batch = batch as usize;
    params.table.batch_max = batch as usize;
    // The reclaimers take theirs a wave of a whole batch at a time, so a crash mid-reclaim
    // leaves a wave fenced, or fenced and looked up, and unfinished.
    params.reclaimer.wave = batch;
    // Two to four processes, and idle slots that poll every quarter lease. (Chosen when the
    // simulated table took one message a millisecond: a fleet of a hundred slots polling every
    // few milliseconds then starved a release for a whole lease, seeds 251 and 352 of an earlier
    // draw. It takes up to `node::RECEIVES` a millisecond now; the draw stays, so seeds keep
    // their worlds.)
    params.workers = rng.gen_range(2..=4);
    params.worker_clocks.resize(params.workers as usize, crate::clock::LocalClock::EXACT);
    params.worker.idle_backoff = params.table.lease_ttl / 4;
    params.jobs = rng.gen_range(100..=300);
    params.table.capacity = params.table.capacity.max(params.jobs as usize);
    // Jobs arrive at a pace the simulated table keeps up with, and the slow calls below keep
    // many of them in flight, so a process holds many leases at once.
    params.arrival_mean_us = rng.gen_range(4_000..=10_000);
    params.reclaimer.scan_every = params.table.lease_ttl / rng.gen_range(4..=10);
    params.stall = StallRates {
        before_effect: rng.gen_range(0.0..0.02),
        before_ack: rng.gen_range(0.05..0.2),
        before_renew: rng.gen_range(0.01..0.08),
        len_us: (ttl_us / 2, ttl_us * 2),
    };
    params.crash = CrashRates {
        before_effect: rng.gen_range(0.0..0.002),
        after_effect: rng.gen_range(0.001..0.01),
        during_ack: rng.gen_range(0.0..0.002),
        mid_reclaim: rng.gen_range(0.05..0.2),
    };
    // A reclaimer that fenced a lease and stalls or crashes before it adopts what it found holds
    // the job under its own epoch: the lease a woken process's stale completion then names.
    params.windows.after_fence = rng.gen_range(0.1..0.5);
    params.windows.far_us = ttl_us;
    // And a reclaimer cut off from the ledger fences leases it cannot look up: it holds each job
    // under its epoch until it gives the batch up, or the lease it took expires.
    for _ in 0..rng.gen_range(1..=3) {
        let at = rng.gen_range(0..params.fault_phase_us);
        let node = Node::Reclaimer(rng.gen_range(0..params.reclaimers));
        let len_us = rng.gen_range(ttl_us..=ttl_us * 3);
        params.schedule.push((at, Fault::CutLink { a: node, b: Node::Ledger, len_us }));
    }
    // Short pauses of whole processes, inside their leases: the handlers' ends that came
    // meanwhile are taken at one turn on waking, and their completions leave as one batch.
    for _ in 0..rng.gen_range(3..=8) {
        let at = rng.gen_range(0..params.fault_phase_us);
        let node = Node::Worker(rng.gen_range(0..params.workers));
        params.schedule.push((at, Fault::Pause { node, len_us: rng.gen_range(ttl_us / 8..=ttl_us / 2) }));
    }
    params.schedule.sort_by_key(|&(at, _)| at);
    // Slow calls, so that a slot's job outlives a heartbeat and its process renews in batches.
    params.dependency.slow_rate = rng.gen_range(0.2..0.6);
    params.dependency.slow_factor = rng.gen_range(10..=40);
    params.restart_delay_us = rng.gen_range(ttl_us / 4..=ttl_us * 2);
    // Drawn last, so every draw above keeps its value: half the seeds' processes hold a batch
    // that is not full for a linger (the completer's timer a service runs with), from a
    // millisecond to half a request's timeout, the most the runtime allows.
    if rng.gen_bool(0.5) {
        let most = (params.worker.request_timeout.as_us() / 2).max(1_000);
        params.linger = lease_core::Span(rng.gen_range(1_000..=most));
    }
    // Drawn after the linger: half the seeds' dependency refuses a few calls (retryably), so that
    // the handlers' failures of one turn leave as a batch of requeues, judged job by job like the
    // others (without it no world ever sent one: a core whose batched requeue answered nothing
    // went unseen).
    if rng.gen_bool(0.5) {
        params.dependency.fail_rate = rng.gen_range(0.02..0.1);
    }
    // Drawn after the refusals: a third of the seeds' processes run fewer handlers than slots
    // (`WorkerOptions::handlers`, a local buffer of granted jobs, as River's fetcher keeps): the
    // slots beyond the handlers acquire and look up ahead, their leases kept by heartbeats while
    // they wait, and a lease given up while it waited is released, never run late. (This draw
    // once found grants wasted after the heal, 6 seeds of 1,000: the simulated table took one
    // message a millisecond, and madsim's mailbox kept a process's renewals waiting behind newer
    // messages until their leases self-fenced. The nodes now keep several receives pending and
    // answer without waiting for the answer to leave: `node::RECEIVES`.)
    if rng.gen_bool(1.0 / 3.0) {
        params.handlers = rng.gen_range(1..params.slots);
    }
    // Drawn after the buffer: half the seeds deploy. One to three processes are told to stop
    // in the fault phase, drain within a grace of up to a lease (their buffers handed back at
    // once, their handlers let finish), and come back later. Only a runtime that returns is
    // audited against its history, so without a deploy no buffered process ever was, and a
    // buffer that miscounted its hand-backs went unseen.
    if rng.gen_bool(0.5) {
        params.shutdown_grace_us = Some(rng.gen_range(0..=ttl_us));
        for _ in 0..rng.gen_range(1..=3) {
            let node = Node::Worker(rng.gen_range(0..params.workers));
            let at = rng.gen_range(0..params.fault_phase_us);
            params.schedule.push((at, Fault::Shutdown { node, down_us: rng.gen_range(ttl_us / 4..=ttl_us) }));
        }
        params.schedule.sort_by_key(|&(at, _)| at);
    }
}
