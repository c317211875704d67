//! `mass-expiry`: every worker crashes at once; the expired leases are reclaimed in batches of at
//! most `batch_max`, and the backlog drains once the workers are back.

use super::draw::lossy;
use super::{Definition, Params};
use crate::clock::LocalClock;
use crate::faults::Fault;
use lease_history::Node;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "mass-expiry",
    about: "every worker crashes at once: reclaimed in batches of at most batch_max, drained",
    situations: &["full_batch", "reclaimed", "worker_crashed"],
    label: None,
    draw,
};

/// Six to ten busy workers all crash at one instant and stay down for two to four lease lengths,
/// with a small batch and one scan per lease length.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    // Many busy workers (slow calls keep each holding a lease), a roomy queue, a small batch:
    // when they all crash at once, the expiries come in a wave.
    params.workers = rng.gen_range(6..=10);
    params.worker_clocks = vec![LocalClock::EXACT; params.workers as usize];
    params.table.batch_max = rng.gen_range(1..=3);
    // A scan per lease length: the wave's expiries pile up between scans.
    params.reclaimer.scan_every = params.table.lease_ttl;
    params.table.capacity = 200;
    params.dependency.latency_min_us = 50_000;
    params.dependency.latency_max_us = rng.gen_range(100_000..=200_000);
    params.arrival_mean_us = rng.gen_range(1_000..=4_000);
    let at = rng.gen_range(200_000..=600_000);
    let down_us = rng.gen_range(ttl_us * 2..=ttl_us * 4);
    for n in 0..params.workers {
        params.schedule.push((at, Fault::Crash { node: Node::Worker(n), down_us }));
    }
    lossy(params, rng);
}
