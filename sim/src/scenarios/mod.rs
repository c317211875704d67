//! Scenarios, and the parameters each one chooses for a seed.
//!
//! Every parameter of a run comes from the seed, through its own stream, so a seed replays
//! exactly. `swarm` is swarm testing as in FoundationDB and TigerBeetle's VOPR: each seed switches
//! every fault kind on or off at random and picks its own rates, so that across a sweep some seeds
//! hammer one mechanism hard while others combine everything.

mod draw;
mod params;

pub use params::{Params, CALM_LATENCY_US};

use crate::clock::LocalClock;
use crate::faults::{CrashRates, Fault, Point, StallRates, Strike, Surge};
use crate::history::Node;
use draw::{base, drift, lossy, pauses, script};
use lease_core::{Bug, Span};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

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
