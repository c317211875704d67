//! `surge`: arrivals alone push the labelled world past its capacity, over a healthy fleet.

use super::draw::labelled_world;
use super::{Definition, Params};
use crate::faults::Surge;
use lease_check::report::Cause;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "surge",
    about: "labelled arrivals: 3 to 6 times the calm rate over a healthy fleet, then calm again",
    situations: &[],
    label: Some(&[Cause::Arrivals]),
    draw,
};

/// The labelled world, with a surge of 3 to 6 times its arrival rate through the window.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let factor = rng.gen_range(6..=10);
    let window = labelled_world(params, rng, factor);
    params.surge = Some(Surge { at_us: window.from_us, len_us: window.len_us, factor });
}
