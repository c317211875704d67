//! The draws that scenarios share: the base world every scenario starts from, and the fault
//! kinds several of them use (scripted strikes, packet loss, pauses, clock drift). Each takes the
//! scenario's stream, so the order of the calls is the order of the draws.

use super::params::worker_timing;
use super::Params;
use crate::clock::{LocalClock, DRIFT_PPM_MAX};
use crate::faults::{Fault, Point, Scripted, Strike};
use crate::history::Node;
use lease_core::{Bug, JobId, ReclaimerConfig, Span, TableConfig};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The fault-free parameters every scenario starts from.
pub(super) fn base(scenario: &'static str, seed: u64, bug: Option<Bug>, rng: &mut Xoshiro256PlusPlus) -> Params {
    let lease_ttl = Span::from_ms(rng.gen_range(200..=800));
    let workers = rng.gen_range(2..=6);
    let reclaimers = rng.gen_range(1..=3);
    let mut params = Params::quiet(scenario.to_string(), seed, bug);
    params.workers = workers;
    params.reclaimers = reclaimers;
    params.worker_clocks = vec![LocalClock::EXACT; workers as usize];
    params.reclaimer_clocks = vec![LocalClock::EXACT; reclaimers as usize];
    params.table = TableConfig {
        capacity: rng.gen_range(20..=120),
        lease_ttl,
        batch_max: rng.gen_range(1..=8),
        attempts_max: rng.gen_range(2..=6),
    };
    params.worker = worker_timing(lease_ttl);
    params.reclaimer = ReclaimerConfig {
        scan_every: lease_ttl / rng.gen_range(2..=8),
        request_timeout: lease_ttl / 6,
        retries_max: 3,
    };
    params.arrival_mean_us = rng.gen_range(4_000..=20_000);
    params.dependency.latency_max_us = rng.gen_range(5_000..=40_000);
    params.windows.near_us = lease_ttl.as_us() / 8;
    params.windows.far_us = lease_ttl.as_us() / 4;
    params.restart_delay_us = lease_ttl.as_us();
    params
}

/// Strikes `strike` at `point` once for each of `jobs`.
pub(super) fn script(params: &mut Params, jobs: impl Iterator<Item = JobId>, point: Point, strike: Strike) {
    params.script.extend(jobs.map(|job| Scripted { job, point, strike }));
}

/// Packet loss up to 3%, and one-way latency up to 10 to 30 ms, during the fault phase.
pub(super) fn lossy(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    params.loss_rate = rng.gen_range(0.0..0.03);
    params.latency_us = (1_000, rng.gen_range(10_000..=30_000));
}

/// One to three pauses of random workers, each for half a lease to three lease lengths.
pub(super) fn pauses(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    for _ in 0..rng.gen_range(1..=3) {
        let at = rng.gen_range(0..params.fault_phase_us);
        let node = Node::Worker(rng.gen_range(0..params.workers));
        params.schedule.push((at, Fault::Pause { node, len_us: rng.gen_range(ttl_us / 2..=ttl_us * 3) }));
    }
}

/// Clock drift and offset for every worker and reclaimer. Offsets go either way, from a few
/// milliseconds up to two lease lengths: the size at which a clock that decided expiry would
/// reclaim live leases, or never reclaim at all. The worker's margin is ttl/8 and the drift stays
/// within ±5%, inside it: beyond the margin, self-fencing could not hold.
pub(super) fn drift(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    let mut clock = || {
        let magnitude = rng.gen_range(OFFSET_MIN_US..=(2 * ttl_us).max(OFFSET_MIN_US)) as i64;
        let offset_us = if rng.gen_bool(0.5) { magnitude } else { -magnitude };
        LocalClock::new(offset_us, rng.gen_range(-DRIFT_PPM_MAX..=DRIFT_PPM_MAX))
    };
    params.worker_clocks = (0..params.workers).map(|_| clock()).collect();
    params.reclaimer_clocks = (0..params.reclaimers).map(|_| clock()).collect();
}

/// Jobs `range`, for a script.
pub(super) fn jobs(range: std::ops::Range<u64>) -> impl Iterator<Item = JobId> {
    range.map(JobId)
}

/// Two to four cuts of single worker links to `peer` (the table or the ledger), each for one to
/// four lease lengths, at random times of the fault phase.
pub(super) fn cut_workers_from(params: &mut Params, rng: &mut Xoshiro256PlusPlus, peer: Node) {
    let ttl_us = params.table.lease_ttl.as_us();
    for _ in 0..rng.gen_range(2..=4) {
        let at = rng.gen_range(0..params.fault_phase_us);
        let node = Node::Worker(rng.gen_range(0..params.workers));
        let len_us = rng.gen_range(ttl_us..=ttl_us * 4);
        params.schedule.push((at, Fault::CutLink { a: node, b: peer, len_us }));
    }
}

/// The smallest clock offset a drifting clock gets: a few milliseconds.
pub(super) const OFFSET_MIN_US: u64 = 2_000;

#[cfg(test)]
mod tests {
    use super::OFFSET_MIN_US;
    use crate::clock::DRIFT_PPM_MAX;
    use crate::scenarios::Scenario;

    // Proves drifting clocks go both ways within their bounds, and that the parameter line names
    // every one of them with its sign: over clock-drift seeds, every worker and reclaimer clock is
    // offset by 2 ms to two lease lengths, ahead or behind, drifting at most ±5%, each printed as
    // `clock_<node>=<±offset>us<±drift>ppm`; across the seeds some clocks run behind.
    #[test]
    fn drifting_clocks_run_ahead_and_behind_and_every_one_is_described() {
        let mut behind = 0;
        for seed in 0..50 {
            let params = Scenario::CLOCK_DRIFT.params(seed, None);
            let ttl_us = params.table.lease_ttl.as_us() as i64;
            let describe = params.describe_faults();
            let workers = params.worker_clocks.iter().enumerate().map(|(n, clock)| (format!("w{n}"), clock));
            let reclaimers = params.reclaimer_clocks.iter().enumerate().map(|(n, clock)| (format!("r{n}"), clock));
            let clocks: Vec<_> = workers.chain(reclaimers).collect();
            assert_eq!(clocks.len(), (params.workers + params.reclaimers) as usize);
            for (node, clock) in clocks {
                let offset = clock.offset_us.abs();
                assert!((OFFSET_MIN_US as i64..=2 * ttl_us).contains(&offset), "seed {seed} {node}: {clock:?}");
                assert!(clock.drift_ppm.abs() <= DRIFT_PPM_MAX, "seed {seed} {node}: {clock:?}");
                let printed = format!(" clock_{node}={:+}us{:+}ppm", clock.offset_us, clock.drift_ppm);
                assert!(describe.contains(&printed), "seed {seed}: {printed:?} missing from {describe}");
                behind += usize::from(clock.offset_us < 0);
            }
        }
        assert!(behind > 0, "no clock ran behind the table");
    }
}
