//! `dependency-outage`: the dependency alone: most calls fail in the window.

use super::draw::labelled_world;
use super::{Definition, Params};
use lease_check::report::Cause;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "dependency-outage",
    about: "labelled dependency: 60 to 80% of calls fail through the window",
    situations: &["dependency_failed"],
    label: Some(&[Cause::Dependency]),
    draw,
};

/// The labelled world, with 60 to 80% of dependency calls failing (before any effect) through the
/// window. A job gets 20 attempts, so few are dead-lettered.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let window = labelled_world(params, rng, 1);
    params.dependency.fail_rate = rng.gen_range(0.6..0.8);
    params.dependency_window = Some((window.from_us, window.len_us));
}
