//! `crash-after-effect`: a worker crashes after the ledger accepted its effect, before it
//! acknowledged; the lease expires and a reclaim adopts the output instead of repeating it.

use super::draw::{jobs, lossy, script};
use super::{Definition, Params};
use crate::faults::{Point, Strike};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "crash-after-effect",
    about: "crash after the effect, before the ack: the output is adopted, never repeated",
    situations: &["crash_after_effect_adopted", "adopted_by_reclaimer"],
    label: None,
    draw,
};

/// The workers of jobs 0 to 3 crash right after their effects; more after-effect crashes at a
/// drawn rate, down for a quarter to two lease lengths, with packet loss and latency.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    script(params, jobs(0..4), Point::AfterEffect, Strike::Crash);
    params.crash.after_effect = rng.gen_range(0.05..0.3);
    params.restart_delay_us = rng.gen_range(ttl_us / 4..=ttl_us * 2);
    lossy(params, rng);
}
