//! `fleet-cut-off`: workers alone: most of the labelled world's workers lose the table.

use super::draw::{cut_off, labelled_world};
use super::{Definition, Params};
use lease_check::report::Cause;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "fleet-cut-off",
    about: "labelled workers: two or three of three workers cut off from the table through the window",
    situations: &[],
    label: Some(&[Cause::Workers]),
    draw,
};

/// The labelled world, with two or three of its three workers cut off from the table through the
/// window.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let window = labelled_world(params, rng, 1);
    let count = rng.gen_range(2..=3);
    cut_off(params, window, count);
}
