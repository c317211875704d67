//! `calm`: no faults at all, the baseline the others are measured against.

use super::{Definition, Params};
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition =
    Definition { name: "calm", about: "no faults: the baseline", situations: &[], draw };

/// Nothing: the base world, fault-free.
fn draw(_params: &mut Params, _rng: &mut Xoshiro256PlusPlus) {}
