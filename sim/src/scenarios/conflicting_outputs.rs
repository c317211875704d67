//! `conflicting-outputs`: a dependency writes two different outputs for one operation; the
//! reclaim that finds them stops its batch and quarantines the job, with an alert.

use super::draw::{jobs, script};
use super::{Definition, Params};
use crate::faults::{Point, Strike};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "conflicting-outputs",
    about: "two outputs for one operation: the batch stops, the job is quarantined, alert",
    situations: &["batch_stopped_on_conflict", "quarantined"],
    label: None,
    draw,
};

/// Jobs 0 to 2 get a rival output, and the workers of jobs 0 to 7 crash after their effects, so
/// that reclaims find the rivals; more rivals and after-effect crashes at drawn rates.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    params.table.batch_max = rng.gen_range(2..=8);
    params.rival_jobs = jobs(0..3).collect();
    script(params, jobs(0..8), Point::AfterEffect, Strike::Crash);
    params.dependency.rival_rate = rng.gen_range(0.02..0.1);
    params.crash.after_effect = rng.gen_range(0.05..0.2);
}
