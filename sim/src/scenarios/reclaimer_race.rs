//! `reclaimer-race`: several reclaimers race for the same expired leases; the table's
//! compare-and-set lets exactly one win each.

use super::draw::{jobs, script};
use super::{Definition, Params};
use crate::clock::LocalClock;
use crate::faults::{Point, Strike};
use lease_core::Span;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "reclaimer-race",
    about: "reclaimers race for one expired lease: one wins, the others record a lost race",
    situations: &["reclaimer_lost_race", "reclaimed"],
    label: None,
    draw,
};

/// Three to five reclaimers scanning often, at one cadence; the workers of jobs 0 to 5 crash
/// before their effects, so that expired leases appear for them to race for.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    params.reclaimers = rng.gen_range(3..=5);
    params.reclaimer_clocks = vec![LocalClock::EXACT; params.reclaimers as usize];
    // Scans at the same cadence, so that reclaimers find the same leases together.
    params.reclaimer.scan_every = Span::from_ms(rng.gen_range(5..=30));
    params.table.batch_max = rng.gen_range(1..=4);
    script(params, jobs(0..6), Point::BeforeEffect, Strike::Crash);
    params.crash.before_effect = rng.gen_range(0.05..0.2);
    params.crash.mid_reclaim = rng.gen_range(0.0..0.1);
}
