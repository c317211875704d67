//! `crash-loop`: workers alone: most of the labelled world's workers crash again and again.

use super::draw::{crash_loop, labelled_world};
use super::{Definition, Params};
use lease_check::report::Cause;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "crash-loop",
    about: "labelled workers: two or three of three workers crash again and again through the window",
    situations: &["worker_crashed", "reclaimed"],
    label: Some(&[Cause::Workers]),
    draw,
};

/// The labelled world, with two or three of its three workers in a crash loop through the window.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let window = labelled_world(params, rng, 1);
    let count = rng.gen_range(2..=3);
    crash_loop(params, rng, window, count);
}
