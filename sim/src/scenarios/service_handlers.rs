//! `service-handlers`: the swarm's faults over the handlers a service writes. Each seed gives
//! some or all of its workers a recording handler (its dependency takes no fencing token and
//! records nothing: the runtime records the output under the epoch, as a service's does for
//! `Ok(bytes)`), the others the fenced dependency; and a share of its jobs are poison (the
//! dependency refuses them for good, and their worker dead-letters them after one try).
//!
//! A separate scenario, not the swarm's own draws, so that every swarm seed keeps its world and
//! the hunt's budgets keep their meaning.

use super::{Definition, Params};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "service-handlers",
    about: "the swarm's faults; workers that record their handler's output, and jobs refused for good",
    situations: &[
        "crash_after_effect_adopted",
        "adopted_by_reclaimer",
        "adopted_by_worker",
        "stale_effect_fenced",
        "stale_write_refused",
        "dead_lettered",
        "dead_lettered_for_good",
        "window_effect_to_ack",
        "window_renew_in_flight",
        "window_fence_to_lookup",
    ],
    label: None,
    draw,
};

/// The swarm's draw, then the handlers' shape and the poison jobs.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    super::swarm::draw(params, rng);
    params.recorders = rng.gen_range(1..=params.workers);
    params.poison_ppm = rng.gen_range(10_000..100_000);
}
