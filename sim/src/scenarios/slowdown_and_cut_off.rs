//! `slowdown-and-cut-off`: two causes at once: a slow dependency, and workers cut off.

use super::draw::{cut_off, labelled_world, slowdown};
use super::{Definition, Params};
use lease_check::report::Cause;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "slowdown-and-cut-off",
    about:
        "labelled dependency and workers: calls 5 to 10 times slower, and two of three workers cut off from the table",
    situations: &[],
    label: Some(&[Cause::Dependency, Cause::Workers]),
    draw,
};

/// The labelled world, with every dependency call 5 to 10 times slower and two of its three
/// workers cut off from the table, both through the window.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let window = labelled_world(params, rng, 1);
    slowdown(params, rng, window);
    cut_off(params, window, 2);
}
