//! `dependency-slowdown`: the dependency alone: every call is many times slower in the window.

use super::draw::{labelled_world, slowdown};
use super::{Definition, Params};
use lease_check::report::Cause;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "dependency-slowdown",
    about: "labelled dependency: every call 5 to 10 times slower through the window, none failing",
    situations: &[],
    label: Some(&[Cause::Dependency]),
    draw,
};

/// The labelled world, with every dependency call 5 to 10 times slower through the window.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let window = labelled_world(params, rng, 1);
    slowdown(params, rng, window);
}
