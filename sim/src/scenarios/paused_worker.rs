//! `paused-worker`: a worker stalls past its lease between deciding and acting; it wakes to find
//! the lease reclaimed, and every write it makes is fenced.

use super::draw::{jobs, pauses, script};
use super::{Definition, Params};
use crate::faults::{Point, StallRates, Strike};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "paused-worker",
    about: "a worker stalls past its lease and wakes: every write it makes is fenced",
    situations: &["paused_worker_woke_after_expiry", "stale_effect_fenced", "stale_write_refused"],
    label: None,
    draw,
};

/// The workers of jobs 0 to 2 stall for two lease lengths before their effects, those of jobs 3
/// to 5 during their acks; more stalls at drawn rates, and pauses of whole processes.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    let stall = (ttl_us * 3 / 2, ttl_us * 4);
    script(params, jobs(0..3), Point::BeforeEffect, Strike::Stall(ttl_us * 2));
    script(params, jobs(3..6), Point::DuringAck, Strike::Stall(ttl_us * 2));
    params.stall = StallRates {
        before_effect: rng.gen_range(0.02..0.1),
        before_ack: rng.gen_range(0.02..0.1),
        before_renew: rng.gen_range(0.0..0.02),
        len_us: stall,
    };
    pauses(params, rng);
}
