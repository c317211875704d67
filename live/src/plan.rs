//! A live run's plan: its shape, its timing, the arrivals and the fault schedule, all drawn from
//! the seed before any process starts, and written to `DIR/live.json` for every child to read.
//!
//! The seed fixes the schedule (what strikes whom, when, for how long), not the interleaving: the
//! processes run on real clocks, and the operating system schedules them.

use lease_core::{ReclaimerConfig, Span, TableConfig, WorkerConfig};
use lease_history::Point;
use lease_store::Place;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

/// The fault kinds `--faults` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL a worker or a reclaimer (right after an accepted effect among them), then restart it.
    Kill,
    /// SIGSTOP a worker for longer than the ttl, then SIGCONT.
    Pause,
    /// The dependency answers slowly for a window.
    Slow,
    /// The dependency fails calls for a window.
    Fail,
    /// Arrivals come faster than the fleet serves, past the queue's capacity.
    Surge,
}

impl FaultKind {
    /// Every kind, in `--faults` order.
    pub const ALL: [FaultKind; 5] =
        [FaultKind::Kill, FaultKind::Pause, FaultKind::Slow, FaultKind::Fail, FaultKind::Surge];

    /// The name `--faults` uses.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Slow => "slow",
            FaultKind::Fail => "fail",
            FaultKind::Surge => "surge",
        }
    }

    /// Parses `kill,pause,...` (or `none`).
    pub fn parse_list(text: &str) -> Result<Vec<FaultKind>, String> {
        if text.trim() == "none" {
            return Ok(Vec::new());
        }
        let mut kinds = Vec::new();
        for name in text.split(',').map(str::trim) {
            let kind = FaultKind::ALL.into_iter().find(|kind| kind.name() == name).ok_or_else(|| {
                format!("unknown fault {name:?}; known faults: kill, pause, slow, fail, surge (or none)")
            })?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        kinds.sort();
        Ok(kinds)
    }
}

/// A process the orchestrator strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Worker `n`.
    Worker,
    /// Reclaimer `n`.
    Reclaimer,
}

/// One scheduled strike on a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalStrike {
    /// When it is dealt (for a signalled point: when the target is armed), from the start.
    pub at_us: u64,
    /// Kill (then restart after `len_us`) or pause (for `len_us`).
    pub kind: FaultKind,
    /// Worker or reclaimer.
    pub role: Role,
    /// Its index.
    pub index: u32,
    /// Where.
    /// Where: `after_effect` and `during_ack` (a worker signals the point and waits for the
    /// orchestrator), `mid_reclaim` (a reclaimer that just won a fence), or `at_random`.
    pub point: Point,
    /// The pause's length, or the time a killed process stays down.
    pub len_us: u64,
}

/// A window in which the dependency is slow or failing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DependencyWindow {
    /// From (since the start).
    pub from_us: u64,
    /// To.
    pub to_us: u64,
    /// Calls take this many times longer.
    pub slow_factor: u64,
    /// The share of calls that fail before any effect.
    pub fail_rate: f64,
}

/// What the dependency does while one or more windows are in force.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Degraded {
    /// Calls take this many times longer (1: not slow).
    pub slow_factor: u64,
    /// The share of calls that fail before any effect.
    pub fail_rate: f64,
}

/// An arrival surge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Surge {
    /// From (since the start).
    pub at_us: u64,
    /// How long.
    pub len_us: u64,
    /// Arrivals come this many times faster.
    pub factor: u64,
}

/// The dependency stub's ordinary behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Dependency {
    /// The shortest call.
    pub latency_min_us: u64,
    /// The longest ordinary call.
    pub latency_max_us: u64,
    /// The share of calls that fail outside any window.
    pub fail_rate: f64,
}

/// Everything a live run's processes share. See the module doc.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LivePlan {
    /// The seed the schedule was drawn from.
    pub seed: u64,
    /// The database.
    pub db: Place,
    /// The planted bug, if any (by name).
    pub bug: Option<String>,
    /// The table's clock at the start (microseconds since the Unix epoch); the history counts
    /// from it.
    pub t0_us: u64,
    /// Workers.
    pub workers: u32,
    /// Reclaimers.
    pub reclaimers: u32,
    /// Jobs offered.
    pub jobs: u64,
    /// The fault phase's length; the heal comes at its end.
    pub duration_us: u64,
    /// After the heal, the longest the run waits for every accepted job to end.
    pub drain_max_us: u64,
    /// The faults switched on.
    pub faults: Vec<FaultKind>,
    /// Queue capacity.
    pub capacity: usize,
    /// Lease ttl.
    pub lease_ttl_us: u64,
    /// Most leases per reclaim batch.
    pub batch_max: usize,
    /// Worker grants before a job is dead-lettered.
    pub attempts_max: u32,
    /// Worker heartbeat period.
    pub heartbeat_us: u64,
    /// Worker self-fence margin.
    pub drift_margin_us: u64,
    /// How long a worker waits for a reply (the dependency's, in practice) before asking again.
    pub request_timeout_us: u64,
    /// How long an idle worker waits before asking for work again.
    pub idle_backoff_us: u64,
    /// How often a reclaimer scans.
    pub scan_every_us: u64,
    /// How many leases of a batch a reclaimer fences, looks up and finishes together. Absent:
    /// the runtime's default ([`lease_runtime::WAVE`]).
    #[serde(default = "default_wave")]
    pub reclaimer_wave: u32,
    /// The dependency.
    pub dependency: Dependency,
    /// Arrivals: (job, offered at, since the start), in time order.
    pub arrivals: Vec<(u64, u64)>,
    /// The surge, if any.
    pub surge: Option<Surge>,
    /// The dependency's bad windows.
    pub windows: Vec<DependencyWindow>,
    /// Kills and pauses, in time order.
    pub strikes: Vec<SignalStrike>,
    /// Workers start only once the backlog reaches this (the benchmark's preloaded queue).
    #[serde(default)]
    pub start_at_backlog: Option<usize>,
    /// Jobs in flight per worker process: its runtime's slots, worker ids `index + k × workers`
    /// for `k` below this (1: one slot, the process's own index).
    #[serde(default = "one_slot")]
    pub slots: u32,
    /// The most requests of a kind one call of a worker process carries (`WorkerOptions::batch`;
    /// 1: each alone).
    #[serde(default = "one_request")]
    pub batch: usize,
    /// How long a worker process's batch that is not full waits for more, in microseconds
    /// (`WorkerOptions::linger`; 0: each turn's requests leave at its end).
    #[serde(default)]
    pub linger_us: u64,
    /// The workers' handler produces its output in process, after the dependency's latency,
    /// and the runtime records it (the bench's queue alone, beside a bare loop that calls no
    /// dependency); otherwise the stub, a fenced dependency that records its own output.
    #[serde(default)]
    pub dependency_in_process: bool,
}

fn default_wave() -> u32 {
    lease_runtime::WAVE
}

fn one_slot() -> u32 {
    1
}

fn one_request() -> usize {
    1
}

impl LivePlan {
    /// The worker ids of worker process `index`'s slots.
    pub fn slot_ids(&self, index: u32) -> Vec<u32> {
        (0..self.slots).map(|k| index + k * self.workers).collect()
    }
}

/// What `lease-sim live` was asked for, before the draw.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The seed.
    pub seed: u64,
    /// Workers.
    pub workers: u32,
    /// Reclaimers.
    pub reclaimers: u32,
    /// Jobs offered.
    pub jobs: u64,
    /// The fault phase.
    pub duration_us: u64,
    /// Faults switched on.
    pub faults: Vec<FaultKind>,
    /// Jobs in flight per worker process ([`LivePlan::slots`]).
    pub slots: u32,
    /// Requests of a kind per call of a worker process ([`LivePlan::batch`]).
    pub batch: usize,
}

/// The lease ttl of a live run: long against a database round trip and a dependency call, short
/// against the run, so that pauses and kills cost seconds, not minutes.
pub const LEASE_TTL_US: u64 = 1_000_000;
/// The queue's capacity.
pub const CAPACITY: usize = 64;
/// A surge offers this many times the capacity...
const SURGE_CAPACITIES: u64 = 3;
/// ...over this long.
const SURGE_LEN_US: u64 = 300_000;
/// The most strikes per second of fault phase, so that a long run is not a massacre.
const STRIKES_PER_SECOND_MAX: f64 = 0.5;

impl LivePlan {
    /// Draws the plan for `shape` on `db`, starting at `t0_us`.
    pub fn draw(shape: &Shape, db: Place, bug: Option<String>, t0_us: u64) -> LivePlan {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(shape.seed);
        let on = |kind| shape.faults.contains(&kind);
        let duration_us = shape.duration_us;
        // The fault phase keeps a calm second at each end: a start to measure, an end to heal.
        let (calm_us, end_us) = (duration_us.min(10_000_000) / 10, duration_us - duration_us.min(10_000_000) / 10);
        let dependency = Dependency { latency_min_us: 5_000, latency_max_us: 30_000, fail_rate: 0.0 };
        let surge = on(FaultKind::Surge).then(|| {
            let len_us = SURGE_LEN_US;
            let at_us = rng.gen_range(calm_us..(end_us - len_us).max(calm_us + 1));
            // The burst's rate over the steady rate.
            let factor = (SURGE_CAPACITIES * CAPACITY as u64 * end_us / len_us / shape.jobs.max(1)).max(2);
            Surge { at_us, len_us, factor }
        });
        let mut windows = Vec::new();
        for (kind, slow_factor, fail_rate) in [(FaultKind::Slow, 10, 0.0), (FaultKind::Fail, 1, 0.3)] {
            if on(kind) {
                let len_us = (duration_us / 5).clamp(500_000, 20_000_000);
                let from_us = rng.gen_range(calm_us..(end_us - len_us).max(calm_us + 1));
                windows.push(DependencyWindow { from_us, to_us: from_us + len_us, slow_factor, fail_rate });
            }
        }
        windows.sort_by_key(|window| window.from_us);
        let strikes = draw_strikes(&mut rng, shape, calm_us, end_us);
        let arrivals = draw_arrivals(&mut rng, shape.jobs, end_us, surge);
        LivePlan {
            seed: shape.seed,
            db,
            bug,
            t0_us,
            workers: shape.workers,
            reclaimers: shape.reclaimers,
            jobs: shape.jobs,
            duration_us,
            drain_max_us: 30 * LEASE_TTL_US,
            faults: shape.faults.clone(),
            capacity: CAPACITY,
            lease_ttl_us: LEASE_TTL_US,
            batch_max: 8.max(shape.batch),
            attempts_max: 5,
            heartbeat_us: 300_000,
            drift_margin_us: 200_000,
            request_timeout_us: 400_000,
            idle_backoff_us: 50_000,
            scan_every_us: 100_000,
            reclaimer_wave: lease_runtime::WAVE,
            dependency,
            arrivals,
            surge,
            windows,
            strikes,
            start_at_backlog: None,
            slots: shape.slots,
            batch: shape.batch,
            linger_us: 0,
            dependency_in_process: false,
        }
    }

    /// The table's limits.
    pub fn table(&self) -> TableConfig {
        TableConfig {
            capacity: self.capacity,
            lease_ttl: Span(self.lease_ttl_us),
            batch_max: self.batch_max,
            attempts_max: self.attempts_max,
        }
    }

    /// A worker's timing.
    pub fn worker(&self) -> WorkerConfig {
        WorkerConfig {
            lease_ttl: Span(self.lease_ttl_us),
            heartbeat_every: Span(self.heartbeat_us),
            drift_margin: Span(self.drift_margin_us),
            request_timeout: Span(self.request_timeout_us),
            idle_backoff: Span(self.idle_backoff_us),
            acquire_wait: Span::ZERO,
        }
    }

    /// A reclaimer's timing.
    pub fn reclaimer(&self) -> ReclaimerConfig {
        ReclaimerConfig {
            scan_every: Span(self.scan_every_us),
            request_timeout: Span(self.request_timeout_us),
            retries_max: 2,
            wave: self.reclaimer_wave,
        }
    }

    /// The dependency at `since_us` after the start: every window in force at once (windows may
    /// overlap: a slow one and a failing one make a dependency both slow and failing), or `None`
    /// when none is.
    pub fn dependency_at(&self, since_us: u64) -> Option<Degraded> {
        let mut in_force = self.windows.iter().filter(|window| (window.from_us..window.to_us).contains(&since_us));
        let first = in_force.next()?;
        let start = Degraded { slow_factor: first.slow_factor, fail_rate: first.fail_rate };
        Some(in_force.fold(start, |state, window| Degraded {
            slow_factor: state.slow_factor.max(window.slow_factor),
            fail_rate: state.fail_rate.max(window.fail_rate),
        }))
    }

    /// Every change of the dependency over the run: at each window's start and end, what it is
    /// from then on ([`LivePlan::dependency_at`]), in time order, one entry per change.
    pub fn dependency_changes(&self) -> Vec<(u64, Option<Degraded>)> {
        let mut edges: Vec<u64> = self.windows.iter().flat_map(|window| [window.from_us, window.to_us]).collect();
        edges.sort_unstable();
        edges.dedup();
        let mut changes: Vec<(u64, Option<Degraded>)> = Vec::new();
        let mut now: Option<Degraded> = None;
        for at_us in edges {
            let next = self.dependency_at(at_us);
            if next != now {
                changes.push((at_us, next));
                now = next;
            }
        }
        changes
    }

    /// The `run` line's `params`: the shape, the timing and the schedule, `name=value`.
    pub fn params(&self) -> String {
        let faults: Vec<_> = self.faults.iter().map(|kind| kind.name()).collect();
        let faults = if faults.is_empty() { "none".to_string() } else { faults.join(",") };
        format!(
            "live=1 store={} workers={} reclaimers={} jobs={} duration_us={} faults={} heartbeat_us={} \
             drift_margin_us={} request_timeout_us={} idle_backoff_us={} scan_every_us={} \
             reclaimer_wave={} dependency_latency_us={}..{} strikes={}",
            self.db.name(),
            self.workers,
            self.reclaimers,
            self.jobs,
            self.duration_us,
            faults,
            self.heartbeat_us,
            self.drift_margin_us,
            self.request_timeout_us,
            self.idle_backoff_us,
            self.scan_every_us,
            self.reclaimer_wave,
            self.dependency.latency_min_us,
            self.dependency.latency_max_us,
            self.strikes.len(),
        )
    }
}

/// Kills and pauses. A run with kills always has one right after an accepted effect, and a run
/// with pauses always has one during an acknowledgement, longer than the ttl: the two windows the
/// protocol exists for. The rest strike at random moments, on workers and reclaimers.
fn draw_strikes(rng: &mut Xoshiro256PlusPlus, shape: &Shape, calm_us: u64, end_us: u64) -> Vec<SignalStrike> {
    let span_us = end_us.saturating_sub(calm_us).max(1);
    let budget = ((span_us as f64 / 1e6) * STRIKES_PER_SECOND_MAX).ceil().max(2.0) as usize;
    let mut strikes = Vec::new();
    let kinds: Vec<FaultKind> =
        shape.faults.iter().copied().filter(|kind| matches!(kind, FaultKind::Kill | FaultKind::Pause)).collect();
    if kinds.is_empty() {
        return strikes;
    }
    for n in 0..budget.max(kinds.len() * 2) {
        let kind = kinds[n % kinds.len()];
        // The first strike of each kind is the signalled one, on a worker, early in the phase.
        let first = n < kinds.len();
        let on_reclaimer = !first && shape.reclaimers > 0 && rng.gen_bool(0.25);
        let (role, index) = if on_reclaimer {
            (Role::Reclaimer, rng.gen_range(0..shape.reclaimers))
        } else {
            (Role::Worker, rng.gen_range(0..shape.workers))
        };
        let point = match (kind, role, first || rng.gen_bool(0.5)) {
            (_, Role::Reclaimer, _) | (_, _, false) => Point::AtRandom,
            (FaultKind::Kill, Role::Worker, true) => Point::AfterEffect,
            (_, Role::Worker, true) => Point::DuringAck,
        };
        let len_us = match kind {
            FaultKind::Pause => rng.gen_range(LEASE_TTL_US * 3 / 2..=LEASE_TTL_US * 5 / 2),
            _ => rng.gen_range(200_000..=800_000),
        };
        let at_us = if first { calm_us + rng.gen_range(0..=span_us / 4) } else { calm_us + rng.gen_range(0..span_us) };
        strikes.push(SignalStrike { at_us, kind, role, index, point, len_us });
    }
    // With the first pause during an acknowledgement, every reclaimer is armed to pause right
    // after its next won fence, longer than that worker's pause: the stale acknowledgement then
    // reaches a job that a reclaimer holds under a newer epoch (River's rescuer window), which a
    // completion guarded by state alone would accept.
    let first_ack = strikes.iter().find(|s| s.point == Point::DuringAck).copied();
    if let Some(ack) = first_ack {
        for index in 0..shape.reclaimers {
            let len_us = LEASE_TTL_US * 3;
            strikes.push(SignalStrike { role: Role::Reclaimer, index, point: Point::MidReclaim, len_us, ..ack });
        }
    }
    strikes.sort_by_key(|strike| strike.at_us);
    strikes
}

/// Poisson arrivals over the fault phase, `jobs` of them; a surge adds a burst past the queue's
/// capacity: `SURGE_CAPACITIES` times the capacity, offered evenly over the surge (far faster than
/// the fleet serves). Jobs are numbered in the order they are offered.
fn draw_arrivals(rng: &mut Xoshiro256PlusPlus, jobs: u64, end_us: u64, surge: Option<Surge>) -> Vec<(u64, u64)> {
    let mean_us = (end_us as f64 / jobs.max(1) as f64).max(1.0);
    let mut at = 0f64;
    let mut times = Vec::with_capacity(jobs as usize);
    for _ in 0..jobs {
        let uniform: f64 = rng.gen_range(0.0..1.0);
        at += -(1.0 - uniform).ln() * mean_us;
        times.push(at as u64);
    }
    if let Some(surge) = surge {
        let burst = SURGE_CAPACITIES * CAPACITY as u64;
        times.extend((0..burst).map(|k| surge.at_us + k * surge.len_us / burst));
    }
    times.sort_unstable();
    times.into_iter().enumerate().map(|(job, at_us)| (job as u64, at_us)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(faults: &[FaultKind]) -> Shape {
        Shape {
            seed: 7,
            workers: 4,
            reclaimers: 2,
            jobs: 200,
            duration_us: 10_000_000,
            faults: faults.to_vec(),
            slots: 1,
            batch: 1,
        }
    }

    // Proves overlapping windows are each opened and closed by a change of their own: a slow
    // window over 1..3 s and a failing one over 2..4 s make the dependency slow, then slow and
    // failing, then failing only (the slow window's end), then calm (the failing one's end). A
    // single restore at 3 s, as the live run once wrote, closed both.
    #[test]
    fn overlapping_dependency_windows_change_the_dependency_at_each_edge() {
        let mut plan = LivePlan::draw(&shape(&[]), Place::Sqlite { path: "x".into() }, None, 0);
        plan.windows = vec![
            DependencyWindow { from_us: 1_000_000, to_us: 3_000_000, slow_factor: 8, fail_rate: 0.0 },
            DependencyWindow { from_us: 2_000_000, to_us: 4_000_000, slow_factor: 1, fail_rate: 0.4 },
        ];
        let slow = Degraded { slow_factor: 8, fail_rate: 0.0 };
        let both = Degraded { slow_factor: 8, fail_rate: 0.4 };
        let failing = Degraded { slow_factor: 1, fail_rate: 0.4 };
        let expected =
            vec![(1_000_000, Some(slow)), (2_000_000, Some(both)), (3_000_000, Some(failing)), (4_000_000, None)];
        assert_eq!(plan.dependency_changes(), expected);
        assert_eq!(plan.dependency_at(2_500_000), Some(both), "the stub fails and slows calls at once");
        assert_eq!(plan.dependency_at(999_999), None);
    }

    // Proves the seed fixes the schedule, and that a run with kills and pauses always has the two
    // signalled strikes the protocol exists for: a kill after an accepted effect and a pause
    // during an acknowledgement longer than the ttl.
    #[test]
    fn the_seed_fixes_the_schedule_with_both_signalled_strikes() {
        let db = Place::Sqlite { path: "x".into() };
        let a = LivePlan::draw(&shape(&FaultKind::ALL), db.clone(), None, 0);
        let b = LivePlan::draw(&shape(&FaultKind::ALL), db.clone(), None, 0);
        assert_eq!(a, b);
        let has = |kind, point| a.strikes.iter().any(|s| s.kind == kind && s.point == point && s.role == Role::Worker);
        assert!(has(FaultKind::Kill, Point::AfterEffect));
        assert!(has(FaultKind::Pause, Point::DuringAck));
        assert!(a.strikes.iter().filter(|s| s.kind == FaultKind::Pause).all(|s| s.len_us > LEASE_TTL_US));
        assert!(a.strikes.iter().all(|s| s.at_us < a.duration_us));
        assert_eq!(a.arrivals.len(), 200 + 3 * CAPACITY);
        assert!(a.arrivals.windows(2).all(|w| w[0].1 <= w[1].1));
        let calm = LivePlan::draw(&shape(&[]), db, None, 0);
        assert!(calm.strikes.is_empty() && calm.windows.is_empty() && calm.surge.is_none());
    }

    // Proves `--faults` reads every kind, `none`, and refuses an unknown name with the list.
    #[test]
    fn fault_lists_parse_and_refuse() {
        assert_eq!(FaultKind::parse_list("surge,kill").unwrap(), vec![FaultKind::Kill, FaultKind::Surge]);
        assert_eq!(FaultKind::parse_list("none").unwrap(), vec![]);
        assert!(FaultKind::parse_list("kill,flood").unwrap_err().contains("known faults"));
    }
}
