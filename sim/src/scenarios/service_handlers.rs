//! `service-handlers`: the swarm's faults over the handlers a service writes. Each seed gives
//! some or all of its workers a recording handler (its dependency takes no fencing token and
//! records nothing: the runtime records the output under the epoch, as a service's does for
//! `Ok(bytes)`), the others the fenced dependency; and a share of its jobs are poison (the
//! dependency refuses them for good, and their worker dead-letters them after one try). Half the
//! seeds deploy meanwhile: workers (now and then a reclaimer) are told to stop, as a rolling
//! restart's `SIGTERM` does, drain within a grace drawn from none to two leases, exit and come
//! back; and half give the handlers a timeout, from a quarter of a lease to two, which the
//! dependency's slow calls run past.
//!
//! A separate scenario, not the swarm's own draws, so that every swarm seed keeps its world and
//! the hunt's budgets keep their meaning.

use super::{Definition, Params};
use crate::faults::Fault;
use lease_history::Node;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "service-handlers",
    about: "the swarm's faults; recording handlers, jobs refused for good, deploys and handler timeouts",
    situations: &[
        "crash_after_effect_adopted",
        "adopted_by_reclaimer",
        "adopted_by_worker",
        "stale_effect_fenced",
        "stale_write_refused",
        "dead_lettered",
        "dead_lettered_for_good",
        "handed_back_at_shutdown",
        "window_effect_to_ack",
        "window_renew_in_flight",
        "window_fence_to_lookup",
    ],
    label: None,
    draw,
};

/// The swarm's draw, then the handlers' shape and the poison jobs, then the deploys and the
/// handlers' timeout.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    super::swarm::draw(params, rng);
    params.recorders = rng.gen_range(1..=params.workers);
    params.poison_ppm = rng.gen_range(10_000..100_000);
    let ttl_us = params.table.lease_ttl.as_us();
    if rng.gen_bool(0.5) {
        params.shutdown_grace_us = Some(rng.gen_range(0..=2 * ttl_us));
        let mut stops = Vec::new();
        if rng.gen_bool(0.5) {
            // A rolling restart: each worker in turn, the next told once the last is back.
            let down_us = rng.gen_range(ttl_us / 4..=ttl_us);
            let mut at = rng.gen_range(0..params.fault_phase_us / 2);
            for n in 0..params.workers {
                stops.push((at, Fault::Shutdown { node: Node::Worker(n), down_us }));
                at += down_us + rng.gen_range(ttl_us..=3 * ttl_us);
            }
        }
        for _ in 0..rng.gen_range(1..=3) {
            let node = if rng.gen_bool(0.8) {
                Node::Worker(rng.gen_range(0..params.workers))
            } else {
                Node::Reclaimer(rng.gen_range(0..params.reclaimers))
            };
            let at = rng.gen_range(0..params.fault_phase_us);
            stops.push((at, Fault::Shutdown { node, down_us: rng.gen_range(ttl_us / 4..=2 * ttl_us) }));
        }
        // Within the fault phase: a plan refuses a fault after the heal.
        stops.retain(|&(at, _)| at <= params.fault_phase_us);
        params.schedule.extend(stops);
        params.schedule.sort_by_key(|&(at, _)| at);
    }
    if rng.gen_bool(0.5) {
        params.handler_timeout_us = Some(rng.gen_range(ttl_us / 4..=2 * ttl_us));
    }
}
