//! The parameters of one run: everything a world needs, chosen from the seed (or read from a
//! plan), and how `run` and the history describe them.

use crate::clock::LocalClock;
use crate::faults::decide::Keyed;
use crate::faults::{
    CrashRates, Degradation, Dependency, Fault, Scripted, StallRates, Strike, Surge, WindowFaults, WINDOW_FAULT_MIN_US,
};
use lease_core::{Bug, ReclaimerConfig, Span, TableConfig, WorkerConfig};
use lease_history::Node;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// One-way network latency outside the fault phase.
pub const CALM_LATENCY_US: (u64, u64) = (1_000, 10_000);

/// One job offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrival {
    /// The job.
    pub job: u64,
    /// When it is offered: one at a time, the generator waits for each answer before the next;
    /// in batches (`Params::enqueue_batch`), every job due by then goes in the next offer.
    pub at_us: u64,
}

/// Everything one run needs, chosen from the seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The seed.
    pub seed: u64,
    /// The scenario's name.
    pub scenario: String,
    /// The planted bug, if any.
    pub bug: Option<Bug>,
    /// Where the table and ledger keep their state.
    pub store: super::durable::StoreKind,
    /// Jobs the arrival generator offers.
    pub jobs: u32,
    /// Worker count.
    pub workers: u32,
    /// Reclaimer count.
    pub reclaimers: u32,
    /// Workers (the first ones, `w0` up) whose handler is a recording one: its dependency call
    /// produces the output and records nothing, and the runtime records it in the ledger under
    /// the epoch ([`lease_runtime::Output::Named`]), the path of a service whose dependency takes
    /// no fencing token. The others' is a fenced dependency, which records its output itself.
    pub recorders: u32,
    /// The share of jobs, in parts per million, that the dependency refuses for good (a malformed
    /// request): a job is one by a hash of the seed and its id, never by a draw, and every call
    /// for it is refused at once, heal or not. Its worker dead-letters it after one try.
    pub poison_ppm: u32,
    /// How long a worker told to stop ([`Fault::Shutdown`]) lets its handlers in flight finish;
    /// `None`: the runtime's default, a lease.
    pub shutdown_grace_us: Option<u64>,
    /// The longest a worker's handler may run before the runtime drops it and the job takes the
    /// requeue path, as after a retryable failure; `None`: no limit.
    pub handler_timeout_us: Option<u64>,
    /// Jobs in flight per worker process: its runtime's slots, worker ids `n + k × workers` for
    /// `k` below this (1: the process is the one worker `n`). Every fault of the process strikes
    /// them all, one line each.
    pub slots: u32,
    /// The most requests of a kind one call of a worker process carries ([`lease_runtime::WorkerOptions::batch`]
    /// of `lease-runtime`; 1: each alone). At most the table's `batch_max`.
    pub batch: usize,
    /// How long a worker process's batch that is not full waits for more
    /// ([`lease_runtime::WorkerOptions::linger`]; zero: each turn's requests leave at its end).
    pub linger: Span,
    /// How many handlers a worker process runs at once ([`lease_runtime::WorkerOptions::handlers`];
    /// 0: one per slot). Fewer, and its other slots are a local buffer of granted jobs.
    pub handlers: u32,
    /// The most arrivals the generator offers in one enqueue
    /// ([`lease_store::TableStore::enqueue_batch`]; at most the table's `batch_max`). 0: one at a
    /// time, each job's gap drawn from the last one's answer. Above 0, arrivals keep their own
    /// schedule, and every job due by the time the last offer is answered goes in the next.
    pub enqueue_batch: usize,
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
    /// When the dependency is faulty at `dependency`'s rates: `(from_us, len_us)`, or `None`
    /// for the whole fault phase (from 0 to the heal). Outside it every call is fast and
    /// reliable, though a seeded run still draws at every call (see `faults::decide`).
    pub dependency_window: Option<(u64, u64)>,
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

impl Params {
    /// Gives `node` its clock from the start of the run. Only workers and reclaimers keep clocks
    /// of their own (the table's is the world's); a plan refuses a skew of any other node.
    pub fn skew(&mut self, node: Node, clock: LocalClock) {
        let clocks = match self.process_of(node) {
            Node::Worker(n) => self.worker_clocks.get_mut(n as usize),
            Node::Reclaimer(n) => self.reclaimer_clocks.get_mut(n as usize),
            _ => None,
        };
        if let Some(slot) = clocks {
            *slot = clock;
        }
    }

    /// A calm world of 100 jobs, 2 workers and 1 reclaimer, with leases of 400 ms and no fault of
    /// any kind: what a scenario draws its own world over, and a plan its own.
    pub fn quiet(scenario: String, seed: u64, bug: Option<Bug>) -> Params {
        let lease_ttl = Span::from_ms(400);
        Params {
            seed,
            scenario,
            bug,
            store: super::durable::StoreKind::Memory,
            jobs: 100,
            workers: 2,
            reclaimers: 1,
            recorders: 0,
            poison_ppm: 0,
            shutdown_grace_us: None,
            handler_timeout_us: None,
            slots: 1,
            batch: 1,
            linger: Span::ZERO,
            handlers: 0,
            enqueue_batch: 0,
            table: TableConfig { capacity: 100, lease_ttl, batch_max: 4, attempts_max: 3 },
            worker: worker_timing(lease_ttl),
            reclaimer: ReclaimerConfig {
                scan_every: lease_ttl / 4,
                request_timeout: lease_ttl / 6,
                retries_max: 3,
                wave: 1,
            },
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
            dependency_window: None,
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

    /// Puts the windows of the faults on no single node into the schedule, so that the
    /// supervisor writes them on the history and a plan keeps them: the dependency's
    /// (`Fault::Degrade`, when any of its rates is above zero) and the surge's (`Fault::Surge`).
    /// [`Scenario::params`](crate::scenarios::Scenario::params) calls it after every draw, so it changes no
    /// scenario's draws.
    pub fn schedule_windows(&mut self) {
        let rates = Degradation::of(&self.dependency);
        if rates.any() {
            let (at_us, len_us) = match self.dependency_window {
                Some((from_us, len_us)) => (from_us, Some(len_us)),
                None => (0, None),
            };
            self.schedule.push((at_us, Fault::Degrade { len_us, rates }));
        }
        if let Some(surge) = self.surge {
            self.schedule.push((surge.at_us, Fault::Surge { len_us: surge.len_us, factor: surge.factor }));
        }
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
        if self.recorders > 0 {
            let _ = write!(out, " recorders={}", self.recorders);
        }
        if let Some(grace_us) = self.shutdown_grace_us {
            let _ = write!(out, " grace={}ms", grace_us / 1000);
        }
        if let Some(timeout_us) = self.handler_timeout_us {
            let _ = write!(out, " handler_timeout={}ms", timeout_us / 1000);
        }
        if self.poison_ppm > 0 {
            let _ = write!(out, " poison_ppm={}", self.poison_ppm);
        }
        if self.slots > 1 || self.batch > 1 {
            let _ = write!(out, " slots={} batch={}", self.slots, self.batch);
        }
        if self.reclaimer.wave > 1 {
            let _ = write!(out, " reclaimer_wave={}", self.reclaimer.wave);
        }
        if self.linger > Span::ZERO {
            let _ = write!(out, " linger_us={}", self.linger.as_us());
        }
        if self.handlers > 0 {
            let _ = write!(out, " handlers={}", self.handlers);
        }
        if self.enqueue_batch > 0 {
            let _ = write!(out, " enqueue_batch={}", self.enqueue_batch);
        }
        out
    }

    /// The process a node runs in: a worker slot's id `n + k × workers` is worker process `n`'s;
    /// every other node is its own.
    pub fn process_of(&self, node: Node) -> Node {
        match node {
            Node::Worker(id) if self.workers > 0 => Node::Worker(id % self.workers),
            other => other,
        }
    }

    /// The nodes a process is on the history: a worker process's slots, each a worker of its
    /// own; any other node, itself.
    pub fn slot_nodes(&self, process: Node) -> Vec<Node> {
        match self.process_of(process) {
            Node::Worker(n) => (0..self.slots.max(1)).map(|k| Node::Worker(n + k * self.workers)).collect(),
            other => vec![other],
        }
    }

    /// Whether the dependency refuses `job` for good ([`Params::poison_ppm`]).
    pub fn is_poison(&self, job: lease_core::JobId) -> bool {
        self.poison_ppm > 0
            && crate::world::ctx::mix(self.seed, &("poison", job)) % 1_000_000 < u64::from(self.poison_ppm)
    }

    /// Whether worker `n`'s handler records its output through the runtime ([`Params::recorders`]).
    pub fn records_itself(&self, n: u32) -> bool {
        n < self.recorders
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
        if self.windows.past_lease_rate > 0.0 {
            let _ = write!(out, " msg_past_lease={:.4}", self.windows.past_lease_rate);
        }
        if self.windows.reclaim_storm_rate > 0.0 {
            let _ = write!(out, " reclaim_storm={:.3}", self.windows.reclaim_storm_rate);
        }
        if self.windows.line_loss_rate > 0.0 {
            let _ = write!(out, " line_loss={:.3}", self.windows.line_loss_rate);
        }
        if self.windows.line_stall_rate > 0.0 {
            let _ = write!(out, " line_stall={:.3}", self.windows.line_stall_rate);
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
                Fault::Shutdown { node, down_us } => write!(out, " shutdown@{at}={node}+{down_us}us"),
                Fault::Surge { len_us, factor } => write!(out, " surge@{at}=x{factor}+{len_us}us"),
                Fault::Degrade { len_us: Some(len_us), .. } => write!(out, " degrade@{at}=+{len_us}us"),
                Fault::Degrade { len_us: None, .. } => write!(out, " degrade@{at}=until_heal"),
            };
        }
        out
    }
}

/// A worker's timing for leases of `lease_ttl`.
pub(crate) fn worker_timing(lease_ttl: Span) -> WorkerConfig {
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

#[cfg(test)]
mod tests {
    use crate::scenarios::Scenario;

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
