//! The draws that scenarios share: the base world every scenario starts from, and the fault
//! kinds several of them use (scripted strikes, packet loss, pauses, clock drift). Each takes the
//! scenario's stream, so the order of the calls is the order of the draws.

use super::Params;
use crate::clock::{LocalClock, DRIFT_PPM_MAX};
use crate::faults::{Fault, Point, Scripted, Strike};
use crate::world::params::worker_timing;
use lease_core::{Bug, JobId, ReclaimerConfig, Span, TableConfig};
use lease_history::Node;
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
        wave: 1,
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

/// The window in which a labelled scenario's fault is on: from the end of the calm lead-in to
/// the heal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    /// When the fault starts: the calm lead-in's end.
    pub from_us: u64,
    /// How long it lasts; it ends at the heal.
    pub len_us: u64,
}

impl Window {
    /// When it ends: the heal.
    pub fn to_us(self) -> u64 {
        self.from_us + self.len_us
    }
}

/// The labelled world's lease ttl: long enough that a worker's request timeout (ttl/6, 120 ms)
/// outlasts a calm call and its round trip; a lead-in of 2 s is nearly three of them.
const LABELLED_TTL_MS: u64 = 720;
/// The labelled world's workers.
pub(super) const LABELLED_WORKERS: u32 = 3;

/// The world the labelled scenarios share, over the base one, for a report to read a calm
/// baseline, a fault and a recovery in: three workers and one reclaimer with leases of 720 ms,
/// a queue far larger than any backlog (1,000), Poisson arrivals at about half the fleet's
/// capacity (dependency calls of 60 to 100 ms), and a calm network. A calm lead-in of 2 to 2.5 s (about three lease
/// lengths), then the fault window of 1 to 2 s, which ends at the heal; arrivals go on at the
/// calm rate for 2 to 2.5 s more (and twice the window more after a surge), then stop, and the run ends when every job is terminal. It
/// draws no fault: the scenario deals its own in the window it returns. `surge_factor` (1: no
/// surge) adds the jobs a surge over the whole window brings, so that the tail keeps its length.
pub(super) fn labelled_world(params: &mut Params, rng: &mut Xoshiro256PlusPlus, surge_factor: u64) -> Window {
    let lease_ttl = Span::from_ms(LABELLED_TTL_MS);
    params.workers = LABELLED_WORKERS;
    params.reclaimers = 1;
    params.worker_clocks = vec![LocalClock::EXACT; params.workers as usize];
    params.reclaimer_clocks = vec![LocalClock::EXACT; params.reclaimers as usize];
    params.table = TableConfig { capacity: 1_000, lease_ttl, batch_max: 8, attempts_max: 20 };
    params.worker = worker_timing(lease_ttl);
    params.reclaimer =
        ReclaimerConfig { scan_every: lease_ttl / 4, request_timeout: lease_ttl / 6, retries_max: 3, wave: 1 };
    params.restart_delay_us = lease_ttl.as_us();
    params.windows.near_us = lease_ttl.as_us() / 8;
    params.windows.far_us = lease_ttl.as_us() / 4;
    params.latency_us = crate::world::CALM_LATENCY_US;
    params.dependency.latency_min_us = 60_000;
    params.dependency.latency_max_us = 100_000;
    params.arrival_mean_us = rng.gen_range(LABELLED_ARRIVAL_MEAN_US);
    let window = Window { from_us: rng.gen_range(2_000_000..=2_500_000), len_us: rng.gen_range(1_000_000..=2_000_000) };
    // A surge leaves a backlog that takes longer to drain than a lost worker's: its tail is longer
    // by twice the window, so that the queue is calm again before arrivals stop.
    let drain_us = if surge_factor > 1 { 2 * window.len_us } else { 0 };
    let tail_us = rng.gen_range(2_000_000..=2_500_000) + drain_us;
    params.fault_phase_us = window.to_us();
    // The generator waits for the table's answer to each offer (a round trip) before it draws
    // the next gap: the jobs the world offers in its time, a surge's included.
    let gap_us = |mean_us: u64| mean_us + ENQUEUE_ROUND_TRIP_US;
    let calm_jobs = (window.to_us() + tail_us) / gap_us(params.arrival_mean_us);
    let surge_jobs = (window.len_us / gap_us(params.arrival_mean_us / surge_factor.max(1)))
        .saturating_sub(window.len_us / gap_us(params.arrival_mean_us));
    params.jobs = (calm_jobs + surge_jobs) as u32;
    window
}

/// The labelled world's mean gap between arrivals: with the enqueue's round trip, 11 to 13 jobs
/// a second, about half of what three workers serve with calls of 60 to 100 ms.
pub(super) const LABELLED_ARRIVAL_MEAN_US: std::ops::RangeInclusive<u64> = 65_000..=75_000;

/// An enqueue's round trip in the calm network: two one-way latencies of 1 to 10 ms and
/// madsim's millisecond per send and per receive.
const ENQUEUE_ROUND_TRIP_US: u64 = 13_000;

/// `count` of the labelled world's workers, crashed again and again through `window`: each
/// stays down 150 to 300 ms, is back for 50 to 150 ms, and crashes again.
pub(super) fn crash_loop(params: &mut Params, rng: &mut Xoshiro256PlusPlus, window: Window, count: u32) {
    for n in 0..count {
        let mut at = window.from_us + rng.gen_range(0..100_000);
        while at < window.to_us() {
            let down_us = rng.gen_range(150_000..=300_000);
            params.schedule.push((at, Fault::Crash { node: Node::Worker(n), down_us }));
            at += down_us + rng.gen_range(50_000..=150_000);
        }
    }
}

/// `count` of the labelled world's workers cut off from the table for the whole window.
pub(super) fn cut_off(params: &mut Params, window: Window, count: u32) {
    for n in 0..count {
        params
            .schedule
            .push((window.from_us, Fault::CutLink { a: Node::Worker(n), b: Node::Table, len_us: window.len_us }));
    }
}

/// Every dependency call 5 to 10 times slower through `window`; none fails.
pub(super) fn slowdown(params: &mut Params, rng: &mut Xoshiro256PlusPlus, window: Window) {
    params.dependency.slow_rate = 1.0;
    params.dependency.slow_factor = rng.gen_range(5..=10);
    params.dependency_window = Some((window.from_us, window.len_us));
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
