//! `calm`: no faults at all, the baseline the others are measured against, and the labelled
//! world's calm case: a report must find no incident in it.

use super::draw::labelled_world;
use super::{Definition, Params};
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "calm",
    about: "no faults: the baseline, and the labelled world with no cause",
    situations: &[],
    label: Some(&[]),
    draw,
};

/// The labelled world, with nothing in its window.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    labelled_world(params, rng, 1);
}
