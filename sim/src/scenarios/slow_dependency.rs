//! `slow-dependency`: the dependency is slow, and calls outlive leases; a late apply is fenced at
//! the ledger, or adopted if it landed first, never duplicated.

use super::{Definition, Params};
use crate::faults::Fault;
use lease_history::Node;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "slow-dependency",
    about: "calls outlive leases: attempts counted, no effect duplicated",
    situations: &["reclaimed", "stale_effect_fenced", "adopted_by_reclaimer"],
    label: None,
    draw,
};

/// A tenth to two fifths of calls slowed ten to sixty times, and three to six workers crashed or
/// cut off from the table while their calls are in flight.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    // Heartbeats keep a slow call's lease alive; it outlives the lease when its worker dies or
    // loses the table while the call is in flight.
    params.dependency.slow_rate = rng.gen_range(0.1..0.4);
    params.dependency.slow_factor = rng.gen_range(10..=60);
    params.dependency.latency_max_us = rng.gen_range(20_000..=80_000);
    for _ in 0..rng.gen_range(3..=6) {
        let at = rng.gen_range(0..params.fault_phase_us);
        let node = Node::Worker(rng.gen_range(0..params.workers));
        let fault = if rng.gen_bool(0.5) {
            Fault::Crash { node, down_us: rng.gen_range(ttl_us / 2..=ttl_us * 2) }
        } else {
            Fault::CutLink { a: node, b: Node::Table, len_us: rng.gen_range(ttl_us..=ttl_us * 3) }
        };
        params.schedule.push((at, fault));
    }
}
