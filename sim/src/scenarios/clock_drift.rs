//! `clock-drift`: workers and reclaimers run fast and slow clocks with offsets; expiry is the
//! table's clock alone, so no unexpired lease is reclaimed.

use super::draw::{drift, lossy, pauses};
use super::{Definition, Params};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "clock-drift",
    about: "fast and slow clocks: no unexpired lease is reclaimed, no stale effect applied",
    situations: &["reclaimed", "lease_renewed", "self_fenced"],
    label: None,
    draw,
};

/// Every worker and reclaimer clock drifts and is offset, with crashes before effects, pauses,
/// packet loss and latency around them.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    drift(params, rng);
    params.crash.before_effect = rng.gen_range(0.0..0.1);
    pauses(params, rng);
    lossy(params, rng);
}
