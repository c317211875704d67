//! `surge-and-crash-loop`: two causes at once: a surge, and workers in a crash loop.

use super::draw::{crash_loop, labelled_world};
use super::{Definition, Params};
use crate::faults::Surge;
use lease_check::report::Cause;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "surge-and-crash-loop",
    about: "labelled arrivals and workers: a surge of 3 to 5 times, and two of three workers in a crash loop",
    situations: &["worker_crashed"],
    label: Some(&[Cause::Arrivals, Cause::Workers]),
    draw,
};

/// The labelled world, with a surge of 3 to 5 times its arrival rate and two of its three workers
/// in a crash loop, both through the window.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let factor = rng.gen_range(5..=8);
    let window = labelled_world(params, rng, factor);
    params.surge = Some(Surge { at_us: window.from_us, len_us: window.len_us, factor });
    crash_loop(params, rng, window, 2);
}
