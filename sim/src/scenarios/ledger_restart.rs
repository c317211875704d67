//! `ledger-restart`: the ledger (and the dependency in front of it) crashes and restarts mid-run.
//! The calls in flight die with it. Their workers keep their leases, for the table is reachable
//! and renewals go on, and retry the same call until the restarted ledger answers it. The
//! ledger's records are durable, so a retry of a call it already applied is answered
//! `already_applied`, and nothing is applied twice.

use super::{Definition, Params};
use crate::faults::Fault;
use lease_history::Node;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "ledger-restart",
    about:
        "the ledger crashes and restarts mid-run: every call in flight is answered or retried, nothing is duplicated",
    situations: &["lease_renewed", "window_late_duplicate"],
    label: None,
    draw,
};

/// Calls of 20 to 120 ms, so that a crash finds some in flight, and two to four ledger crashes:
/// the first within the first 100 ms, while the first calls are in flight, the others while jobs
/// still arrive. Each is down from a quarter of a lease to two leases: the workers keep their
/// leases (the table is reachable) and retry their calls until the ledger answers.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    params.dependency.latency_min_us = 20_000;
    params.dependency.latency_max_us = rng.gen_range(40_000..=120_000);
    let arrivals_us = (params.arrival_mean_us * params.jobs as u64).min(params.fault_phase_us);
    let first = rng.gen_range(20_000..=100_000);
    let others: Vec<u64> = (0..rng.gen_range(1..=3)).map(|_| rng.gen_range(0..arrivals_us)).collect();
    for at in std::iter::once(first).chain(others) {
        let down_us = rng.gen_range(ttl_us / 4..=ttl_us * 2);
        params.schedule.push((at, Fault::Crash { node: Node::Ledger, down_us }));
    }
}
