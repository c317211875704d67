//! `arrival-surge`: arrivals surge far past the queue's capacity; the excess is rejected visibly,
//! and nothing accepted is lost.

use super::{Definition, Params};
use crate::faults::Surge;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "arrival-surge",
    about: "arrivals surge past capacity: rejections counted, nothing accepted is lost",
    situations: &["rejected_arrival"],
    label: None,
    draw,
};

/// A queue of 5 to 30 jobs, and a surge of 20 to 50 times the arrival rate in the first third of
/// the fault phase.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    params.table.capacity = rng.gen_range(5..=30);
    let at_us = rng.gen_range(0..params.fault_phase_us / 3);
    params.surge = Some(Surge { at_us, len_us: rng.gen_range(300_000..=1_000_000), factor: rng.gen_range(20..=50) });
}
