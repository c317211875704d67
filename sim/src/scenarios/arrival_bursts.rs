//! `arrival-bursts`: arrivals come faster than one enqueue's round trip and are offered in
//! batches that cross the queue's capacity, over a lossy network and crashing workers and table;
//! each job of a batch is judged on its own, and nothing accepted is lost.

use super::draw::lossy;
use super::{Definition, Params};
use crate::faults::{Fault, Surge};
use lease_history::Node;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "arrival-bursts",
    about:
        "arrivals offered in batches of 2 to 16 past capacity, the table and workers crashing: each job judged alone",
    situations: &["rejected_arrival", "worker_crashed", "reclaimed"],
    label: None,
    draw,
};

/// A queue of 5 to 30 jobs; `batch_max` 2 to 16 and the generator offering up to that many jobs
/// at once; a surge of 20 to 50 times the arrival rate in the first third of the fault phase, so
/// that many jobs fall due while an offer waits for its answer; packet loss (a lost batch is
/// offered again, and answered duplicate for those already in); the table and a worker each
/// crashed once while jobs arrive.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    params.table.capacity = rng.gen_range(5..=30);
    params.table.batch_max = rng.gen_range(2..=16);
    params.enqueue_batch = rng.gen_range(2..=params.table.batch_max);
    let at_us = rng.gen_range(0..params.fault_phase_us / 3);
    params.surge = Some(Surge { at_us, len_us: rng.gen_range(300_000..=1_000_000), factor: rng.gen_range(20..=50) });
    lossy(params, rng);
    let ttl_us = params.table.lease_ttl.as_us();
    let arrivals_us = params.arrival_mean_us * params.jobs as u64;
    for node in [Node::Table, Node::Worker(rng.gen_range(0..params.workers))] {
        let at = rng.gen_range(0..arrivals_us.min(params.fault_phase_us));
        params.schedule.push((at, Fault::Crash { node, down_us: rng.gen_range(ttl_us / 4..=ttl_us) }));
    }
}
