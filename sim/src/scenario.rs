//! Scenarios, and the parameters each one chooses for a seed.
//!
//! Every parameter of a run comes from the seed, through its own stream, so a seed replays
//! exactly. `swarm` is swarm testing as in FoundationDB and TigerBeetle's VOPR: each seed switches
//! every fault kind on or off at random and picks its own rates, so that across a sweep some seeds
//! hammer one mechanism hard while others combine everything.

use crate::clock::{LocalClock, DRIFT_PPM_MAX};
use crate::faults::decide::Keyed;
use crate::faults::plan::Arrival;
use crate::faults::{
    CrashRates, Dependency, Fault, Point, Scripted, StallRates, Strike, Surge, WindowFaults, WINDOW_FAULT_MIN_US,
};
use crate::history::Node;
use lease_core::{Bug, ReclaimerConfig, Span, TableConfig, WorkerConfig};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::fmt::Write;

/// One-way network latency outside the fault phase.
pub const CALM_LATENCY_US: (u64, u64) = (1_000, 10_000);

/// Everything one run needs, chosen from the seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The seed.
    pub seed: u64,
    /// The scenario's name.
    pub scenario: String,
    /// The planted bug, if any.
    pub bug: Option<Bug>,
    /// Jobs the arrival generator offers.
    pub jobs: u32,
    /// Worker count.
    pub workers: u32,
    /// Reclaimer count.
    pub reclaimers: u32,
    /// The table's limits.
    pub table: TableConfig,
    /// Workers' timing.
    pub worker: WorkerConfig,
    /// Reclaimers' timing.
    pub reclaimer: ReclaimerConfig,
    /// Mean time between arrivals (Poisson).
    pub arrival_mean_us: u64,
    /// The dependency during the fault phase (it turns fast and reliable at the heal).
    pub dependency: Dependency,
    /// Packet loss during the fault phase.
    pub loss_rate: f64,
    /// One-way network latency range.
    pub latency_us: (u64, u64),
    /// Each worker's clock.
    pub worker_clocks: Vec<LocalClock>,
    /// Each reclaimer's clock.
    pub reclaimer_clocks: Vec<LocalClock>,
    /// Crash chances at protocol points.
    pub crash: CrashRates,
    /// Stall chances at protocol points.
    pub stall: StallRates,
    /// Faults aimed at the protocol's windows.
    pub windows: WindowFaults,
    /// Scripted strikes, and jobs whose dependency call also writes a rival output.
    pub script: Vec<Scripted>,
    /// Jobs whose first dependency call writes a second, different output (scripted conflicts).
    pub rival_jobs: Vec<lease_core::JobId>,
    /// How long a node crashed at a protocol point stays down.
    pub restart_delay_us: u64,
    /// Faults at fixed times, in time order.
    pub schedule: Vec<(u64, Fault)>,
    /// An arrival surge, if any.
    pub surge: Option<Surge>,
    /// When the faults heal.
    pub fault_phase_us: u64,
    /// How long after the heal every accepted job has to reach a terminal outcome.
    pub liveness_budget_us: u64,
    /// The jobs to offer and when, from a plan; `None` draws Poisson arrivals from the seed.
    pub arrivals: Option<Vec<Arrival>>,
    /// A plan's keyed faults: when set, every fault decision is looked up here and nothing is
    /// drawn (every rate is zero).
    pub planned: Option<std::sync::Arc<Vec<Keyed>>>,
}

/// The scenarios `lease-sim` knows. Each has a scripted part (the exact situation, struck at
/// fixed jobs) and a swept part (random faults around it, drawn from the seed). The tests and the
/// long-form description of each live in the `lease-scenarios` crate, one module per scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// Every fault kind on; each seed picks its own mix and rates.
    Swarm,
    /// A worker crashes after its effect was accepted, before it acknowledged; a reclaim adopts.
    CrashAfterEffect,
    /// Several reclaimers race for the same expired leases.
    ReclaimerRace,
    /// A worker stalls past its lease between deciding and acting; it wakes to find it reclaimed.
    PausedWorker,
    /// Workers and reclaimers run fast and slow clocks with offsets.
    ClockDrift,
    /// A dependency writes two different outputs for one operation; a reclaim finds them.
    ConflictingOutputs,
    /// Every worker crashes at once; the expired leases are reclaimed in bounded batches.
    MassExpiry,
    /// Workers are cut off from the table while the ledger stays reachable.
    CutFromTable,
    /// Workers are cut off from the ledger while the table stays reachable.
    CutFromLedger,
    /// The dependency is slow: calls outlive leases.
    SlowDependency,
    /// The dependency fails, sometimes after the effect happened.
    FailingDependency,
    /// Arrivals surge far past the queue's capacity.
    ArrivalSurge,
    /// No faults at all: the baseline.
    Calm,
}

impl Scenario {
    /// Every scenario, `swarm` first.
    pub const ALL: [Scenario; 13] = [
        Scenario::Swarm,
        Scenario::CrashAfterEffect,
        Scenario::ReclaimerRace,
        Scenario::PausedWorker,
        Scenario::ClockDrift,
        Scenario::ConflictingOutputs,
        Scenario::MassExpiry,
        Scenario::CutFromTable,
        Scenario::CutFromLedger,
        Scenario::SlowDependency,
        Scenario::FailingDependency,
        Scenario::ArrivalSurge,
        Scenario::Calm,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Swarm => "swarm",
            Scenario::CrashAfterEffect => "crash-after-effect",
            Scenario::ReclaimerRace => "reclaimer-race",
            Scenario::PausedWorker => "paused-worker",
            Scenario::ClockDrift => "clock-drift",
            Scenario::ConflictingOutputs => "conflicting-outputs",
            Scenario::MassExpiry => "mass-expiry",
            Scenario::CutFromTable => "cut-from-table",
            Scenario::CutFromLedger => "cut-from-ledger",
            Scenario::SlowDependency => "slow-dependency",
            Scenario::FailingDependency => "failing-dependency",
            Scenario::ArrivalSurge => "arrival-surge",
            Scenario::Calm => "calm",
        }
    }

    /// One line on what it shows.
    pub fn about(self) -> &'static str {
        match self {
            Scenario::Swarm => "every fault kind on; each seed picks its own mix and rates (the default)",
            Scenario::CrashAfterEffect => {
                "crash after the effect, before the ack: the output is adopted, never repeated"
            }
            Scenario::ReclaimerRace => "reclaimers race for one expired lease: one wins, the others record a lost race",
            Scenario::PausedWorker => "a worker stalls past its lease and wakes: every write it makes is fenced",
            Scenario::ClockDrift => "fast and slow clocks: no unexpired lease is reclaimed, no stale effect applied",
            Scenario::ConflictingOutputs => {
                "two outputs for one operation: the batch stops, the job is quarantined, alert"
            }
            Scenario::MassExpiry => "every worker crashes at once: reclaimed in batches of at most batch_max, drained",
            Scenario::CutFromTable => "workers cut off from the table, ledger reachable: every invariant holds",
            Scenario::CutFromLedger => "workers cut off from the ledger, table reachable: every invariant holds",
            Scenario::SlowDependency => "calls outlive leases: attempts counted, no effect duplicated",
            Scenario::FailingDependency => {
                "failing calls: attempts counted, dead-letter after attempts_max, no duplicate"
            }
            Scenario::ArrivalSurge => "arrivals surge past capacity: rejections counted, nothing accepted is lost",
            Scenario::Calm => "no faults: the baseline",
        }
    }

    /// The interesting situations a sweep of this scenario must reach (coverage names).
    pub fn situations(self) -> &'static [&'static str] {
        match self {
            Scenario::Swarm => &[
                "crash_after_effect_adopted",
                "adopted_by_reclaimer",
                "adopted_by_worker",
                "reclaimer_lost_race",
                "stale_effect_fenced",
                "stale_write_refused",
                "batch_stopped_on_conflict",
                "paused_worker_woke_after_expiry",
                "dead_lettered",
                "rejected_arrival",
                "grant_released",
                "window_list_to_fence",
                "window_fence_to_lookup",
                "window_renew_in_flight",
                "window_effect_to_ack",
                "window_stale_hand_back",
                "window_late_duplicate",
                "window_expiry_boundary",
            ],
            Scenario::CrashAfterEffect => &["crash_after_effect_adopted", "adopted_by_reclaimer"],
            Scenario::ReclaimerRace => &["reclaimer_lost_race", "reclaimed"],
            Scenario::PausedWorker => {
                &["paused_worker_woke_after_expiry", "stale_effect_fenced", "stale_write_refused"]
            }
            Scenario::ClockDrift => &["reclaimed", "lease_renewed", "self_fenced"],
            Scenario::ConflictingOutputs => &["batch_stopped_on_conflict", "quarantined"],
            Scenario::MassExpiry => &["full_batch", "reclaimed", "worker_crashed"],
            Scenario::CutFromTable => &["reclaimed", "adopted_by_reclaimer", "self_fenced"],
            Scenario::CutFromLedger => &["reclaimed", "self_fenced"],
            Scenario::SlowDependency => &["reclaimed", "stale_effect_fenced", "adopted_by_reclaimer"],
            Scenario::FailingDependency => &["dependency_failed", "dead_lettered", "adopted_by_worker"],
            Scenario::ArrivalSurge => &["rejected_arrival"],
            Scenario::Calm => &[],
        }
    }

    /// Looks a scenario up by name.
    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|scenario| scenario.name() == name)
    }

    /// The parameters this scenario chooses for `seed`.
    pub fn params(self, seed: u64, bug: Option<Bug>) -> Params {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5eed_1ea5e);
        let mut params = base(self.name(), seed, bug, &mut rng);
        let ttl_us = params.table.lease_ttl.as_us();
        let jobs = |range: std::ops::Range<u64>| range.map(lease_core::JobId);
        match self {
            Scenario::Swarm => swarm(&mut params, &mut rng),
            Scenario::Calm => {}
            Scenario::CrashAfterEffect => {
                script(&mut params, jobs(0..4), Point::AfterEffect, Strike::Crash);
                params.crash.after_effect = rng.gen_range(0.05..0.3);
                params.restart_delay_us = rng.gen_range(ttl_us / 4..=ttl_us * 2);
                lossy(&mut params, &mut rng);
            }
            Scenario::ReclaimerRace => {
                params.reclaimers = rng.gen_range(3..=5);
                params.reclaimer_clocks = vec![LocalClock::EXACT; params.reclaimers as usize];
                // Scans at the same cadence, so that reclaimers find the same leases together.
                params.reclaimer.scan_every = Span::from_ms(rng.gen_range(5..=30));
                params.table.batch_max = rng.gen_range(1..=4);
                script(&mut params, jobs(0..6), Point::BeforeEffect, Strike::Crash);
                params.crash.before_effect = rng.gen_range(0.05..0.2);
                params.crash.mid_reclaim = rng.gen_range(0.0..0.1);
            }
            Scenario::PausedWorker => {
                let stall = (ttl_us * 3 / 2, ttl_us * 4);
                script(&mut params, jobs(0..3), Point::BeforeEffect, Strike::Stall(ttl_us * 2));
                script(&mut params, jobs(3..6), Point::DuringAck, Strike::Stall(ttl_us * 2));
                params.stall = StallRates {
                    before_effect: rng.gen_range(0.02..0.1),
                    before_ack: rng.gen_range(0.02..0.1),
                    before_renew: rng.gen_range(0.0..0.02),
                    len_us: stall,
                };
                pauses(&mut params, &mut rng);
            }
            Scenario::ClockDrift => {
                drift(&mut params, &mut rng);
                params.crash.before_effect = rng.gen_range(0.0..0.1);
                pauses(&mut params, &mut rng);
                lossy(&mut params, &mut rng);
            }
            Scenario::ConflictingOutputs => {
                params.table.batch_max = rng.gen_range(2..=8);
                params.rival_jobs = jobs(0..3).collect();
                script(&mut params, jobs(0..8), Point::AfterEffect, Strike::Crash);
                params.dependency.rival_rate = rng.gen_range(0.02..0.1);
                params.crash.after_effect = rng.gen_range(0.05..0.2);
            }
            Scenario::MassExpiry => {
                // Many busy workers (slow calls keep each holding a lease), a roomy queue, a
                // small batch: when they all crash at once, the expiries come in a wave.
                params.workers = rng.gen_range(6..=10);
                params.worker_clocks = vec![LocalClock::EXACT; params.workers as usize];
                params.table.batch_max = rng.gen_range(1..=3);
                // A scan per lease length: the wave's expiries pile up between scans.
                params.reclaimer.scan_every = params.table.lease_ttl;
                params.table.capacity = 200;
                params.dependency.latency_min_us = 50_000;
                params.dependency.latency_max_us = rng.gen_range(100_000..=200_000);
                params.arrival_mean_us = rng.gen_range(1_000..=4_000);
                let at = rng.gen_range(200_000..=600_000);
                let down_us = rng.gen_range(ttl_us * 2..=ttl_us * 4);
                for n in 0..params.workers {
                    params.schedule.push((at, Fault::Crash { node: Node::Worker(n), down_us }));
                }
                lossy(&mut params, &mut rng);
            }
            Scenario::CutFromTable | Scenario::CutFromLedger => {
                let peer = if self == Scenario::CutFromTable { Node::Table } else { Node::Ledger };
                for _ in 0..rng.gen_range(2..=4) {
                    let at = rng.gen_range(0..params.fault_phase_us);
                    let node = Node::Worker(rng.gen_range(0..params.workers));
                    let len_us = rng.gen_range(ttl_us..=ttl_us * 4);
                    params.schedule.push((at, Fault::CutLink { a: node, b: peer, len_us }));
                }
                lossy(&mut params, &mut rng);
            }
            Scenario::SlowDependency => {
                // Heartbeats keep a slow call's lease alive; it outlives the lease when its worker
                // dies or loses the table while the call is in flight.
                params.dependency.slow_rate = rng.gen_range(0.1..0.4);
                params.dependency.slow_factor = rng.gen_range(10..=60);
                params.dependency.latency_max_us = rng.gen_range(20_000..=80_000);
                for _ in 0..rng.gen_range(3..=6) {
                    let at = rng.gen_range(0..params.fault_phase_us);
                    let node = Node::Worker(rng.gen_range(0..params.workers));
                    let fault = if rng.gen_bool(0.5) {
                        Fault::Crash { node, down_us: rng.gen_range(ttl_us / 2..=ttl_us * 2) }
                    } else {
                        Fault::CutLink { a: node, b: Node::Table, len_us: rng.gen_range(ttl_us..=ttl_us * 3) }
                    };
                    params.schedule.push((at, fault));
                }
            }
            Scenario::FailingDependency => {
                params.table.attempts_max = rng.gen_range(1..=3);
                params.dependency.fail_rate = rng.gen_range(0.2..0.6);
                params.dependency.lost_reply_rate = rng.gen_range(0.05..0.3);
            }
            Scenario::ArrivalSurge => {
                params.table.capacity = rng.gen_range(5..=30);
                let at_us = rng.gen_range(0..params.fault_phase_us / 3);
                params.surge =
                    Some(Surge { at_us, len_us: rng.gen_range(300_000..=1_000_000), factor: rng.gen_range(20..=50) });
            }
        }
        params.schedule.sort_by_key(|&(at, _)| at);
        params
    }
}

fn script(params: &mut Params, jobs: impl Iterator<Item = lease_core::JobId>, point: Point, strike: Strike) {
    params.script.extend(jobs.map(|job| Scripted { job, point, strike }));
}

fn lossy(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    params.loss_rate = rng.gen_range(0.0..0.03);
    params.latency_us = (1_000, rng.gen_range(10_000..=30_000));
}

fn pauses(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
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
fn drift(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    let mut clock = || {
        let magnitude = rng.gen_range(OFFSET_MIN_US..=(2 * ttl_us).max(OFFSET_MIN_US)) as i64;
        let offset_us = if rng.gen_bool(0.5) { magnitude } else { -magnitude };
        LocalClock::new(offset_us, rng.gen_range(-DRIFT_PPM_MAX..=DRIFT_PPM_MAX))
    };
    params.worker_clocks = (0..params.workers).map(|_| clock()).collect();
    params.reclaimer_clocks = (0..params.reclaimers).map(|_| clock()).collect();
}

/// The smallest clock offset a drifting clock gets: a few milliseconds.
const OFFSET_MIN_US: u64 = 2_000;

/// The fault-free parameters every scenario starts from.
fn base(scenario: &'static str, seed: u64, bug: Option<Bug>, rng: &mut Xoshiro256PlusPlus) -> Params {
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

/// A worker's timing for leases of `lease_ttl`.
fn worker_timing(lease_ttl: Span) -> WorkerConfig {
    WorkerConfig {
        lease_ttl,
        heartbeat_every: lease_ttl / 4,
        drift_margin: lease_ttl / 8,
        request_timeout: lease_ttl / 6,
        idle_backoff: Span::from_ms(5),
        // Long polling, held far shorter than a grant stays usable (ttl - margin = 7/8 ttl): a
        // grant made at the end of a hold, answered within a round trip (ttl/6), leaves most of
        // the lease to act in, and so does one to the acquire's first retry.
        acquire_wait: lease_ttl / 8,
    }
}

/// Switches each fault kind on with probability one half, with rates drawn per seed.
fn swarm(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    let ttl_us = params.table.lease_ttl.as_us();
    params.table.batch_max = rng.gen_range(1..=4);
    let mut on = || rng.gen_bool(0.5);
    let (crashes, partitions, loss, pausing, drifting, slow, failing, surge, rivals) =
        (on(), on(), on(), on(), on(), on(), on(), on(), on());
    if crashes {
        params.crash = CrashRates {
            before_effect: rng.gen_range(0.0..0.05),
            after_effect: rng.gen_range(0.0..0.15),
            during_ack: rng.gen_range(0.0..0.05),
            mid_reclaim: rng.gen_range(0.0..0.15),
        };
        params.restart_delay_us = rng.gen_range(ttl_us / 4..=ttl_us * 3);
        if rng.gen_bool(0.6) {
            // Every worker at once, while jobs still arrive: a wave of expiries for the batches.
            let arrivals_us = params.arrival_mean_us * params.jobs as u64;
            let at = rng.gen_range(0..arrivals_us.min(params.fault_phase_us));
            let down_us = rng.gen_range(ttl_us..=ttl_us * 3);
            for n in 0..params.workers {
                params.schedule.push((at, Fault::Crash { node: Node::Worker(n), down_us }));
            }
        }
        for _ in 0..rng.gen_range(0..=2) {
            let node = random_node(params, rng);
            let at = rng.gen_range(0..params.fault_phase_us);
            params.schedule.push((at, Fault::Crash { node, down_us: rng.gen_range(ttl_us / 2..=ttl_us * 3) }));
        }
    }
    if partitions {
        for _ in 0..rng.gen_range(1..=3) {
            let at = rng.gen_range(0..params.fault_phase_us);
            let len_us = rng.gen_range(ttl_us / 2..=ttl_us * 4);
            let a = random_node(params, rng);
            let fault = if rng.gen_bool(0.5) {
                Fault::Partition { node: a, len_us }
            } else {
                let b = if rng.gen_bool(0.5) { Node::Table } else { Node::Ledger };
                // The table or the ledger cut off from the other, never from itself.
                let b = match (a, b) {
                    (Node::Table, Node::Table) => Node::Ledger,
                    (Node::Ledger, Node::Ledger) => Node::Table,
                    _ => b,
                };
                Fault::CutLink { a, b, len_us }
            };
            params.schedule.push((at, fault));
        }
    }
    if loss {
        lossy(params, rng);
    }
    if pausing {
        pauses(params, rng);
        let ttl_us = params.table.lease_ttl.as_us();
        params.stall = StallRates {
            before_effect: rng.gen_range(0.0..0.05),
            before_ack: rng.gen_range(0.0..0.05),
            before_renew: rng.gen_range(0.0..0.2),
            len_us: (ttl_us / 2, ttl_us * 3),
        };
    }
    if drifting {
        drift(params, rng);
    }
    if slow {
        params.dependency.slow_rate = rng.gen_range(0.0..0.2);
        params.dependency.slow_factor = rng.gen_range(5..=40);
    }
    if failing {
        params.dependency.fail_rate = rng.gen_range(0.0..0.4);
        params.dependency.lost_reply_rate = rng.gen_range(0.0..0.15);
    }
    if surge {
        let at_us = rng.gen_range(0..params.fault_phase_us / 2);
        params.surge = Some(Surge { at_us, len_us: rng.gen_range(100_000..=500_000), factor: rng.gen_range(5..=20) });
    }
    if rivals {
        params.dependency.rival_rate = rng.gen_range(0.0..0.05);
    }
    // Drawn after every older switch, so that a seed keeps the faults it had before these.
    let (messages, aimed, late_copies) = (rng.gen_bool(0.5), rng.gen_bool(0.5), rng.gen_bool(0.85));
    aim_at_windows(params, rng, messages, aimed, late_copies);
}

/// The window faults: single messages held back or doubled (`messages`), and short stalls and
/// boundary timing (`aimed`), at rates drawn per seed.
fn aim_at_windows(params: &mut Params, rng: &mut Xoshiro256PlusPlus, messages: bool, aimed: bool, late_copies: bool) {
    let windows = &mut params.windows;
    if messages {
        windows.delay_rate = rng.gen_range(0.005..0.05);
        windows.duplicate_rate = rng.gen_range(0.005..0.05);
    }
    if late_copies {
        windows.hand_back_copy = rng.gen_range(0.1..0.5);
    }
    if aimed {
        windows.after_listing = rng.gen_range(0.05..0.5);
        windows.after_fence = rng.gen_range(0.05..0.5);
        windows.effect_at_boundary = rng.gen_range(0.01..0.1);
        windows.complete_at_boundary = rng.gen_range(0.02..0.15);
        windows.before_renew_reply = rng.gen_range(0.02..0.2);
        windows.renew_at_boundary = rng.gen_range(0.01..0.1);
        windows.reclaim_at_boundary = rng.gen_range(0.05..0.3);
    }
}

fn random_node(params: &Params, rng: &mut Xoshiro256PlusPlus) -> Node {
    match rng.gen_range(0..10) {
        0 => Node::Table,
        1 => Node::Ledger,
        2 | 3 => Node::Reclaimer(rng.gen_range(0..params.reclaimers)),
        _ => Node::Worker(rng.gen_range(0..params.workers)),
    }
}

impl Params {
    /// A calm world of 100 jobs, 2 workers and 1 reclaimer, with leases of 400 ms and no fault of
    /// any kind: what a scenario draws its own world over, and a plan its own.
    pub fn quiet(scenario: String, seed: u64, bug: Option<Bug>) -> Params {
        let lease_ttl = Span::from_ms(400);
        Params {
            seed,
            scenario,
            bug,
            jobs: 100,
            workers: 2,
            reclaimers: 1,
            table: TableConfig { capacity: 100, lease_ttl, batch_max: 4, attempts_max: 3 },
            worker: worker_timing(lease_ttl),
            reclaimer: ReclaimerConfig { scan_every: lease_ttl / 4, request_timeout: lease_ttl / 6, retries_max: 3 },
            arrival_mean_us: 10_000,
            dependency: Dependency {
                latency_min_us: 2_000,
                latency_max_us: 20_000,
                slow_rate: 0.0,
                slow_factor: 1,
                fail_rate: 0.0,
                lost_reply_rate: 0.0,
                rival_rate: 0.0,
            },
            loss_rate: 0.0,
            latency_us: CALM_LATENCY_US,
            worker_clocks: vec![LocalClock::EXACT; 2],
            reclaimer_clocks: vec![LocalClock::EXACT; 1],
            crash: CrashRates::default(),
            stall: StallRates::default(),
            windows: WindowFaults {
                near_us: lease_ttl.as_us() / 8,
                far_us: lease_ttl.as_us() / 4,
                ..WindowFaults::default()
            },
            script: Vec::new(),
            rival_jobs: Vec::new(),
            restart_delay_us: lease_ttl.as_us(),
            schedule: Vec::new(),
            surge: None,
            fault_phase_us: 3_000_000,
            liveness_budget_us: 30_000_000,
            arrivals: None,
            planned: None,
        }
    }

    /// The same world offering `jobs` jobs, with the fault phase and the liveness budget
    /// stretched to the time the arrivals take, so that a larger world is the same world for
    /// longer, not a more overloaded one.
    pub fn with_jobs(mut self, jobs: u32) -> Params {
        assert!(jobs > 0, "a world needs a job");
        let arrivals_us = self.arrival_mean_us * jobs as u64;
        self.jobs = jobs;
        self.fault_phase_us = self.fault_phase_us.max(arrivals_us + arrivals_us / 5);
        self.liveness_budget_us += jobs as u64 * 10_000;
        self
    }

    /// The world's shape and timing as `name=value` pairs: the `run` line's `params`. The same
    /// for a seeded run and for its plan's replay, which draws nothing.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let d = &self.dependency;
        let _ = write!(
            out,
            "jobs={} workers={} reclaimers={} lease_ttl_us={} batch_max={} capacity={} attempts_max={} \
             heartbeat_us={} drift_margin_us={} scan_every_us={} arrival_mean_us={} dep_latency_us={}..{} \
             latency_us={}..{} fault_phase_us={} liveness_budget_us={} acquire_wait_us={} \
             worker_request_timeout_us={} idle_backoff_us={} reclaimer_request_timeout_us={} \
             reclaimer_retries_max={}",
            self.jobs,
            self.workers,
            self.reclaimers,
            self.table.lease_ttl.as_us(),
            self.table.batch_max,
            self.table.capacity,
            self.table.attempts_max,
            self.worker.heartbeat_every.as_us(),
            self.worker.drift_margin.as_us(),
            self.reclaimer.scan_every.as_us(),
            self.arrival_mean_us,
            d.latency_min_us,
            d.latency_max_us,
            self.latency_us.0,
            self.latency_us.1,
            self.fault_phase_us,
            self.liveness_budget_us,
            self.worker.acquire_wait.as_us(),
            self.worker.request_timeout.as_us(),
            self.worker.idle_backoff.as_us(),
            self.reclaimer.request_timeout.as_us(),
            self.reclaimer.retries_max,
        );
        out
    }

    /// The rates and scripts a seeded run draws its faults with, as `name=value` pairs: what
    /// `run` prints under the world's `params`. A plan's replay has none.
    pub fn describe_faults(&self) -> String {
        let mut out = String::new();
        let d = &self.dependency;
        let c = &self.crash;
        let _ = write!(
            out,
            "dep_slow={:.3}x{} dep_fail={:.3} dep_lost_reply={:.3} dep_rival={:.3} loss={:.3} crash_before={:.3} \
             crash_after={:.3} crash_ack={:.3} crash_reclaim={:.3} restart_delay_us={}",
            d.slow_rate,
            d.slow_factor,
            d.fail_rate,
            d.lost_reply_rate,
            d.rival_rate,
            self.loss_rate,
            c.before_effect,
            c.after_effect,
            c.during_ack,
            c.mid_reclaim,
            self.restart_delay_us,
        );
        let clocks = self.worker_clocks.iter().enumerate().map(|(n, c)| (format!("w{n}"), c));
        let clocks = clocks.chain(self.reclaimer_clocks.iter().enumerate().map(|(n, c)| (format!("r{n}"), c)));
        for (node, clock) in clocks.filter(|(_, clock)| **clock != LocalClock::EXACT) {
            let _ = write!(out, " clock_{node}={:+}us{:+}ppm", clock.offset_us, clock.drift_ppm);
        }
        if self.stall != StallRates::default() {
            let st = &self.stall;
            let _ = write!(
                out,
                " stall_effect={:.3} stall_ack={:.3} stall_renew={:.3} stall_us={}..{}",
                st.before_effect, st.before_ack, st.before_renew, st.len_us.0, st.len_us.1
            );
        }
        if self.windows.delay_rate > 0.0 || self.windows.duplicate_rate > 0.0 {
            let w = &self.windows;
            let _ = write!(out, " msg_delay={:.3} msg_duplicate={:.3}", w.delay_rate, w.duplicate_rate);
        }
        if self.windows.hand_back_copy > 0.0 {
            let _ = write!(out, " msg_hand_back_copy={:.3}", self.windows.hand_back_copy);
        }
        let w = &self.windows;
        let aimed = [w.after_listing, w.after_fence, w.before_renew_reply, w.renew_at_boundary];
        let boundary = [w.reclaim_at_boundary, w.effect_at_boundary, w.complete_at_boundary];
        if aimed.into_iter().chain(boundary).any(|rate| rate > 0.0) {
            let _ = write!(
                out,
                " stall_listing={:.3} stall_fence={:.3} stall_renew_reply={:.3} aim_renew={:.3} aim_reclaim={:.3} \
                 aim_effect={:.3} aim_complete={:.3}",
                w.after_listing,
                w.after_fence,
                w.before_renew_reply,
                w.renew_at_boundary,
                w.reclaim_at_boundary,
                w.effect_at_boundary,
                w.complete_at_boundary
            );
        }
        let any = [w.delay_rate, w.duplicate_rate, w.after_listing, w.after_fence, w.before_renew_reply];
        if any.iter().any(|&rate| rate > 0.0) {
            let _ = write!(out, " window_us={}..{}..{}", WINDOW_FAULT_MIN_US, w.near_us, w.far_us);
        }
        for scripted in &self.script {
            let strike = match scripted.strike {
                Strike::Crash => "crash".to_string(),
                Strike::Stall(us) => format!("stall{us}us"),
            };
            let _ = write!(out, " script={}@{}:{strike}", scripted.job, scripted.point.name());
        }
        for job in &self.rival_jobs {
            let _ = write!(out, " rival={job}");
        }
        if let Some(surge) = self.surge {
            let _ = write!(out, " surge={}us+{}us*{}", surge.at_us, surge.len_us, surge.factor);
        }
        for (at, fault) in &self.schedule {
            let _ = match fault {
                Fault::Partition { node, len_us } => write!(out, " partition@{at}={node}+{len_us}us"),
                Fault::CutLink { a, b, len_us } => write!(out, " cut@{at}={a}-{b}+{len_us}us"),
                Fault::Pause { node, len_us } => write!(out, " pause@{at}={node}+{len_us}us"),
                Fault::Crash { node, down_us } => write!(out, " crash@{at}={node}+{down_us}us"),
            };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves drifting clocks go both ways within their bounds, and that the parameter line names
    // every one of them with its sign: over clock-drift seeds, every worker and reclaimer clock is
    // offset by 2 ms to two lease lengths, ahead or behind, drifting at most ±5%, each printed as
    // `clock_<node>=<±offset>us<±drift>ppm`; across the seeds some clocks run behind.
    #[test]
    fn drifting_clocks_run_ahead_and_behind_and_every_one_is_described() {
        let mut behind = 0;
        for seed in 0..50 {
            let params = Scenario::ClockDrift.params(seed, None);
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

#[cfg(test)]
mod describe_tests {
    use super::Scenario;

    // Proves `describe` (the `run` line's `params` and the header `run` prints before the world
    // starts) names every timing a replay needs, the ones a reader asks first about included.
    #[test]
    fn describe_names_every_timing() {
        for scenario in Scenario::ALL {
            let params = scenario.params(7, None);
            let text = format!("{} {}", params.describe(), params.describe_faults());
            let expected = [
                ("lease_ttl_us", params.table.lease_ttl.as_us()),
                ("heartbeat_us", params.worker.heartbeat_every.as_us()),
                ("drift_margin_us", params.worker.drift_margin.as_us()),
                ("acquire_wait_us", params.worker.acquire_wait.as_us()),
                ("worker_request_timeout_us", params.worker.request_timeout.as_us()),
                ("idle_backoff_us", params.worker.idle_backoff.as_us()),
                ("scan_every_us", params.reclaimer.scan_every.as_us()),
                ("reclaimer_request_timeout_us", params.reclaimer.request_timeout.as_us()),
                ("reclaimer_retries_max", u64::from(params.reclaimer.retries_max)),
                ("restart_delay_us", params.restart_delay_us),
                ("fault_phase_us", params.fault_phase_us),
                ("liveness_budget_us", params.liveness_budget_us),
            ];
            for (name, value) in expected {
                let pair = format!("{name}={value}");
                assert!(text.split(' ').any(|word| word == pair), "{}: no {pair} in {text}", scenario.name());
            }
        }
    }
}
