//! `swarm`: swarm testing as in FoundationDB and TigerBeetle's VOPR. Each seed switches every
//! fault kind on or off at random and picks its own rates, so that across a sweep some seeds hammer
//! one mechanism hard while others combine everything; on top of these it aims at the protocol's
//! windows. The default scenario, and the one that must reach every window.

use super::draw::{drift, lossy, pauses};
use super::{Definition, Params};
use crate::faults::{CrashRates, Fault, StallRates, Surge};
use lease_history::Node;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "swarm",
    about: "every fault kind on; each seed picks its own mix and rates (the default)",
    situations: &[
        "crash_after_effect_adopted",
        "adopted_by_reclaimer",
        "adopted_by_worker",
        "reclaimer_lost_race",
        "stale_effect_fenced",
        "stale_write_refused",
        "batch_stopped_on_conflict",
        "paused_worker_woke_after_expiry",
        "dead_lettered",
        "rejected_arrival",
        "grant_released",
        "reclaimer_gave_up",
        "reclaim_storm",
        "line_committed_unknown",
        "line_stalled_past_lease",
        "window_list_to_fence",
        "window_fence_to_lookup",
        "window_renew_in_flight",
        "window_effect_to_ack",
        "window_stale_hand_back",
        "window_late_duplicate",
        "window_expiry_boundary",
    ],
    label: None,
    draw,
};

/// Switches each fault kind on with probability one half, with rates drawn per seed.
pub(super) fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    params.table.batch_max = rng.gen_range(1..=4);
    let mut on = || rng.gen_bool(0.5);
    let (crashes, partitions, loss, pausing, drifting, slow, failing, surge, rivals) =
        (on(), on(), on(), on(), on(), on(), on(), on(), on());
    if crashes {
        params.crash = CrashRates {
            before_effect: rng.gen_range(0.0..0.05),
            after_effect: rng.gen_range(0.0..0.15),
            during_ack: rng.gen_range(0.0..0.05),
            mid_reclaim: rng.gen_range(0.0..0.15),
        };
        params.restart_delay_us = rng.gen_range(ttl_us / 4..=ttl_us * 3);
        if rng.gen_bool(0.6) {
            // Every worker at once, while jobs still arrive: a wave of expiries for the batches.
            let arrivals_us = params.arrival_mean_us * params.jobs as u64;
            let at = rng.gen_range(0..arrivals_us.min(params.fault_phase_us));
            let down_us = rng.gen_range(ttl_us..=ttl_us * 3);
            for n in 0..params.workers {
                params.schedule.push((at, Fault::Crash { node: Node::Worker(n), down_us }));
            }
        }
        for _ in 0..rng.gen_range(0..=2) {
            let node = random_node(params, rng);
            let at = rng.gen_range(0..params.fault_phase_us);
            params.schedule.push((at, Fault::Crash { node, down_us: rng.gen_range(ttl_us / 2..=ttl_us * 3) }));
        }
    }
    if partitions {
        for _ in 0..rng.gen_range(1..=3) {
            let at = rng.gen_range(0..params.fault_phase_us);
            let len_us = rng.gen_range(ttl_us / 2..=ttl_us * 4);
            let a = random_node(params, rng);
            let fault = if rng.gen_bool(0.5) {
                Fault::Partition { node: a, len_us }
            } else {
                let b = if rng.gen_bool(0.5) { Node::Table } else { Node::Ledger };
                // The table or the ledger cut off from the other, never from itself.
                let b = match (a, b) {
                    (Node::Table, Node::Table) => Node::Ledger,
                    (Node::Ledger, Node::Ledger) => Node::Table,
                    _ => b,
                };
                Fault::CutLink { a, b, len_us }
            };
            params.schedule.push((at, fault));
        }
    }
    if loss {
        lossy(params, rng);
    }
    if pausing {
        pauses(params, rng);
        let ttl_us = params.table.lease_ttl.as_us();
        params.stall = StallRates {
            before_effect: rng.gen_range(0.0..0.05),
            before_ack: rng.gen_range(0.0..0.05),
            before_renew: rng.gen_range(0.0..0.2),
            len_us: (ttl_us / 2, ttl_us * 3),
        };
    }
    if drifting {
        drift(params, rng);
    }
    if slow {
        params.dependency.slow_rate = rng.gen_range(0.0..0.2);
        params.dependency.slow_factor = rng.gen_range(5..=40);
    }
    if failing {
        params.dependency.fail_rate = rng.gen_range(0.0..0.4);
        params.dependency.lost_reply_rate = rng.gen_range(0.0..0.15);
    }
    if surge {
        let at_us = rng.gen_range(0..params.fault_phase_us / 2);
        params.surge = Some(Surge { at_us, len_us: rng.gen_range(100_000..=500_000), factor: rng.gen_range(5..=20) });
    }
    if rivals {
        params.dependency.rival_rate = rng.gen_range(0.0..0.05);
    }
    // Drawn after every older switch, so that a seed keeps the faults it had before these.
    let (messages, aimed, late_copies) = (rng.gen_bool(0.5), rng.gen_bool(0.5), rng.gen_bool(0.85));
    aim_at_windows(params, rng, messages, aimed, late_copies);
    // Drawn last, after every older draw, so that a seed keeps its faults: half the seeds run
    // today's protocol (one slot a process, each request alone), the others worker processes of
    // 2 to 16 slots that batch as many requests a call. (Once 2 to 4: with one receive pending,
    // the table node took a message a millisecond and madsim's mailbox handed out the newest
    // first, so a larger fleet's polls starved a release for seconds. It keeps
    // `node::RECEIVES` pending now.)
    if rng.gen_bool(0.5) {
        let batch = rng.gen_range(2..=16u32);
        params.slots = batch;
        params.batch = batch as usize;
    }
    // Drawn after that: a fifth of the seeds hold a message now and then past a whole lease (a
    // request queued behind a slow proxy, a TCP retransmission), which no window's hold reaches.
    if rng.gen_bool(0.2) {
        params.windows.past_lease_rate = rng.gen_range(0.000_5..0.005);
    }
    // Drawn after that: a quarter of the seeds aim several faults into one reclaim now and then
    // (a conflict, the first reclaimer stalled past its own lease, a second reclaimer's fence).
    if rng.gen_bool(0.25) {
        params.windows.reclaim_storm_rate = rng.gen_range(0.01..0.05);
    }
    // Drawn after that: a fifth of the seeds fail a worker runtime's write of its `executing`
    // lines now and then (the store unreachable, or failing over mid-commit).
    if rng.gen_bool(0.2) {
        params.windows.line_loss_rate = rng.gen_range(0.02..0.2);
    }
    // Drawn after that: a fifth of the seeds stall a worker process now and then with its
    // `executing` lines on their way to the store (a write waiting for the store's lock), until
    // about its lease's expiry: the store refuses a line that lands after it. Drawn from a copy
    // of the stream, which the stream itself never moves past: a scenario that draws more after
    // the swarm's draw (service-handlers) keeps every draw it had.
    let mut fork = rng.clone();
    if fork.gen_bool(0.2) {
        params.windows.line_stall_rate = fork.gen_range(0.01..0.1);
    }
    // Drawn after that, from the same copy: where `batch_max` is 2 or more, a third of the seeds
    // offer their arrivals in batches of 2 to `batch_max` (`arrival-bursts` takes them further).
    if params.table.batch_max > 1 && fork.gen_bool(1.0 / 3.0) {
        params.enqueue_batch = fork.gen_range(2..=params.table.batch_max);
    }
    // Drawn after that, from the same copy: half the seeds reclaim in waves of 2 to 16 leases
    // (fenced, looked up and finished together), the others one lease at a time.
    if fork.gen_bool(0.5) {
        params.reclaimer.wave = fork.gen_range(2..=16);
    }
}

/// The window faults: single messages held back or doubled (`messages`), and short stalls and
/// boundary timing (`aimed`), at rates drawn per seed.
fn aim_at_windows(params: &mut Params, rng: &mut Xoshiro256PlusPlus, messages: bool, aimed: bool, late_copies: bool) {
    let windows = &mut params.windows;
    if messages {
        windows.delay_rate = rng.gen_range(0.005..0.05);
        windows.duplicate_rate = rng.gen_range(0.005..0.05);
    }
    if late_copies {
        windows.hand_back_copy = rng.gen_range(0.1..0.5);
    }
    if aimed {
        windows.after_listing = rng.gen_range(0.05..0.5);
        windows.after_fence = rng.gen_range(0.05..0.5);
        windows.effect_at_boundary = rng.gen_range(0.01..0.1);
        windows.complete_at_boundary = rng.gen_range(0.02..0.15);
        windows.before_renew_reply = rng.gen_range(0.02..0.2);
        windows.renew_at_boundary = rng.gen_range(0.01..0.1);
        windows.reclaim_at_boundary = rng.gen_range(0.05..0.3);
    }
}

fn random_node(params: &Params, rng: &mut Xoshiro256PlusPlus) -> Node {
    match rng.gen_range(0..10) {
        0 => Node::Table,
        1 => Node::Ledger,
        2 | 3 => Node::Reclaimer(rng.gen_range(0..params.reclaimers)),
        _ => Node::Worker(rng.gen_range(0..params.workers)),
    }
}
