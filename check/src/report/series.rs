//! One pass over a history: the per-window series, every job's arrival and outcome, every
//! dependency call, every worker's down time and every fault window.
//!
//! The pass keeps the queue's state as the table would (accepted and not terminal, leased,
//! waiting), and integrates the time-weighted figures (backlog, jobs in flight, live workers) up
//! to each window boundary before it applies the next line.

use super::ReportError;
use lease_core::JobId;
use lease_history::{Entry, Event, Node, OutcomeKind};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The figures of one window of the history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// The window's start, µs.
    pub from_us: u64,
    /// Its end, µs (exclusive; the last window ends at the history's last line).
    pub to_us: u64,
    /// Jobs accepted in it.
    pub arrivals: u64,
    /// Accepted jobs per second.
    pub arrival_rate: f64,
    /// Jobs that reached a terminal outcome in it (completed, dead-lettered, quarantined).
    pub terminals: u64,
    /// Terminal outcomes per second.
    pub completion_rate: f64,
    /// Arrivals turned away (queue full) in it.
    pub rejections: u64,
    /// Accepted, non-terminal jobs at its end.
    pub backlog: u64,
    /// The backlog, averaged over the window's time.
    pub backlog_mean: f64,
    /// The age of the oldest accepted, non-terminal job at its end, µs (0: none waits).
    pub oldest_age_us: u64,
    /// Jobs under a lease (a worker's or a reclaimer's), averaged over the window's time.
    pub in_flight: f64,
    /// Workers neither crashed, paused nor cut off, averaged over the window's time.
    pub live_workers: f64,
    /// Leases granted to workers in it.
    pub grants: u64,
    /// Leases reclaimed in it (each one a grant that expired before its holder finished).
    pub reclaims: u64,
    /// Dependency calls started in it (`executing`).
    pub calls_started: u64,
    /// Calls started and not yet answered, averaged over the window's time: the dependency's
    /// concurrency. Over calls started, it gives their mean latency by Little's law, counting the
    /// calls still running, which the latencies of answered calls leave out.
    pub calls_outstanding: f64,
    /// Dependency calls answered in it.
    pub calls: u64,
    /// Of those, the ones that failed.
    pub failures: u64,
    /// `failures / calls`, 0 when there were none.
    pub failure_rate: f64,
    /// Median latency of the calls answered in it, µs.
    pub dependency_p50_us: Option<u64>,
    /// 99th percentile latency of the calls answered in it, µs.
    pub dependency_p99_us: Option<u64>,
    /// Mean latency of the calls answered in it, µs.
    pub dependency_mean_us: Option<f64>,
    /// Mean time from a grant to its worker's own completion, over the attempts completed in it,
    /// µs: the service time.
    pub service_mean_us: Option<f64>,
}

/// A job, from its acceptance to its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// When the table accepted it.
    pub arrived_us: u64,
    /// When it reached its terminal outcome, and which.
    pub terminal: Option<(u64, OutcomeKind)>,
    /// Worker grants.
    pub grants: u32,
    /// Its dependency calls that failed.
    pub failed_calls: u32,
    /// Its leases that were reclaimed (expired under a worker).
    pub reclaims: u32,
    /// Its attempts a worker gave up, by reason (`abandoned`'s `why`).
    pub abandoned: BTreeMap<&'static str, u32>,
    /// The two outputs that claimed its operation, when it was quarantined.
    pub identities: Option<[u64; 2]>,
}

/// A window in which a fault was in force, from the history's fault lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultSpan {
    /// `crash`, `shutdown` (from the exit to the restart), `pause`, `partition`,
    /// `slow_dependency`, `failing_dependency`, `surge`.
    pub kind: &'static str,
    /// The node it struck (`dependency` and `arrivals` for the last three).
    pub target: String,
    /// The other end of a cut link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// Its start, µs.
    pub from_us: u64,
    /// Its end, µs: the line that undid it, the heal, or the history's end.
    pub to_us: u64,
}

/// Everything the pass gathered.
#[derive(Debug, Clone)]
pub struct Series {
    /// The windows, from 0 to the last line.
    pub windows: Vec<Window>,
    /// Every accepted job.
    pub jobs: BTreeMap<JobId, Job>,
    /// Every fault window.
    pub faults: Vec<FaultSpan>,
    /// The workers the history names.
    pub fleet: u32,
    /// When the faults healed, if the history says.
    pub healed_us: Option<u64>,
    /// The history's last time, counted from its first line.
    pub end_us: u64,
    /// The first line's time, from which every time of the series counts.
    pub origin_us: u64,
    /// The integral of the backlog over the history, in job·µs.
    pub backlog_integral: u128,
    /// Lines whose `backlog` disagreed with the report's own count: (line, table's, ours).
    pub backlog_mismatches: Vec<(usize, u64, u64)>,
    /// Effects applied, per operation (a count above 1 is a duplicate effect).
    pub effects: BTreeMap<(JobId, u32), u32>,
    /// Adoptions.
    pub adoptions: Vec<(u64, JobId)>,
    /// Every lease a reclaimer fenced: when, how long after the lease had expired, and by whom.
    pub fences: Vec<Fence>,
    /// When a reclaimer's fence was refused (`lost_race`, `not_expired`).
    pub fences_lost: Vec<u64>,
}

/// A lease a reclaimer fenced (a `reclaimed` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// When, µs from the history's first line.
    pub at_us: u64,
    /// How long after the lease's expiry (by the table's clock), µs.
    pub late_us: u64,
    /// The reclaimer.
    pub reclaimer: Node,
}

/// Why a worker is not live: crashed, paused, cut off (counted, since windows can overlap).
#[derive(Debug, Clone, Copy, Default)]
struct Down {
    crashed: bool,
    paused: bool,
    cuts: u32,
}

impl Down {
    fn is_down(self) -> bool {
        self.crashed || self.paused || self.cuts > 0
    }
}

/// The state the pass carries from line to line.
struct Pass {
    window_us: u64,
    windows: Vec<Window>,
    /// The open window's accumulators.
    open: Window,
    latencies: Vec<u64>,
    services: Vec<u64>,
    backlog_time: u128,
    in_flight_time: u128,
    outstanding_time: u128,
    /// Calls started and not answered: (job, step, epoch) to when, and who called.
    outstanding: BTreeMap<(JobId, u32, u64), (u64, Node)>,
    live_time: u128,
    /// The last time integrated to.
    at_us: u64,
    backlog: u64,
    leased: BTreeSet<JobId>,
    waiting: BTreeSet<(u64, JobId)>,
    down: BTreeMap<u32, Down>,
    fleet: BTreeSet<u32>,
    backlog_integral: u128,
}

impl Pass {
    fn live(&self) -> u64 {
        let down = self.down.values().filter(|down| down.is_down()).count() as u64;
        (self.fleet.len() as u64).saturating_sub(down)
    }

    /// Integrates the time-weighted figures up to `t_us`, closing every window that ends before.
    fn advance(&mut self, t_us: u64) {
        while t_us >= self.open.to_us {
            let to = self.open.to_us;
            self.integrate(to);
            self.close();
        }
        self.integrate(t_us);
    }

    fn integrate(&mut self, t_us: u64) {
        let dt = u128::from(t_us.saturating_sub(self.at_us));
        self.backlog_time += dt * u128::from(self.backlog);
        self.backlog_integral += dt * u128::from(self.backlog);
        self.in_flight_time += dt * self.leased.len() as u128;
        self.outstanding_time += dt * self.outstanding.len() as u128;
        self.live_time += dt * u128::from(self.live());
        self.at_us = self.at_us.max(t_us);
    }

    fn close(&mut self) {
        let next = self.open.to_us;
        let mut window = std::mem::replace(&mut self.open, empty(next, next + self.window_us));
        finish(&mut window, self, next);
        self.windows.push(window);
    }
}

fn empty(from_us: u64, to_us: u64) -> Window {
    Window {
        from_us,
        to_us,
        arrivals: 0,
        arrival_rate: 0.0,
        terminals: 0,
        completion_rate: 0.0,
        rejections: 0,
        backlog: 0,
        backlog_mean: 0.0,
        oldest_age_us: 0,
        in_flight: 0.0,
        live_workers: 0.0,
        grants: 0,
        reclaims: 0,
        calls_started: 0,
        calls_outstanding: 0.0,
        calls: 0,
        failures: 0,
        failure_rate: 0.0,
        dependency_p50_us: None,
        dependency_p99_us: None,
        dependency_mean_us: None,
        service_mean_us: None,
    }
}

/// Closes `window` at `to_us` with the pass's accumulators, and resets them.
fn finish(window: &mut Window, pass: &mut Pass, to_us: u64) {
    window.to_us = to_us;
    let len = to_us.saturating_sub(window.from_us).max(1) as f64;
    let per_s = 1e6 / len;
    window.arrival_rate = window.arrivals as f64 * per_s;
    window.completion_rate = window.terminals as f64 * per_s;
    window.backlog = pass.backlog;
    window.backlog_mean = std::mem::take(&mut pass.backlog_time) as f64 / len;
    window.in_flight = std::mem::take(&mut pass.in_flight_time) as f64 / len;
    window.calls_outstanding = std::mem::take(&mut pass.outstanding_time) as f64 / len;
    window.live_workers = std::mem::take(&mut pass.live_time) as f64 / len;
    window.oldest_age_us = pass.waiting.first().map_or(0, |&(arrived, _)| to_us.saturating_sub(arrived));
    window.failure_rate = if window.calls == 0 { 0.0 } else { window.failures as f64 / window.calls as f64 };
    let services = std::mem::take(&mut pass.services);
    if !services.is_empty() {
        window.service_mean_us = Some(services.iter().sum::<u64>() as f64 / services.len() as f64);
    }
    let mut latencies = std::mem::take(&mut pass.latencies);
    if !latencies.is_empty() {
        latencies.sort_unstable();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        window.dependency_p50_us = Some(at(0.5));
        window.dependency_p99_us = Some(at(0.99));
        window.dependency_mean_us = Some(latencies.iter().sum::<u64>() as f64 / latencies.len() as f64);
    }
}

/// An open fault window, keyed by what undoes it.
type OpenFaults = BTreeMap<(&'static str, String, Option<String>), u64>;

/// The most windows a report lays out. A window holds about 200 bytes of figures, so this bounds
/// the report's own memory at a few tens of MB whatever a history's times say: a history stamped
/// in microseconds since 1970, read from 0, would otherwise ask for billions of windows.
pub const WINDOWS_MAX: u64 = 100_000;

/// Reads `entries` (a history, `run` line first) in windows of `window_us`, laid out from the
/// first line's time: every time in the series counts from it.
pub fn read(entries: &[Entry], window_us: u64) -> Result<Series, ReportError> {
    if window_us == 0 {
        return Err(ReportError::Window);
    }
    // Time order first, over the whole history: a line far in the future, then the others, must
    // be refused before any window is laid out up to it.
    let origin_us = entries.first().map_or(0, |entry| entry.t_us);
    for (index, pair) in entries.windows(2).enumerate() {
        if pair[1].t_us < pair[0].t_us {
            return Err(ReportError::OutOfOrder { line: index + 2, t_us: pair[1].t_us, after_us: pair[0].t_us });
        }
    }
    let span_us = entries.last().map_or(0, |entry| entry.t_us - origin_us);
    let windows = span_us / window_us + 1;
    if windows > WINDOWS_MAX {
        return Err(ReportError::TooManyWindows { span_us, window_us, windows, max: WINDOWS_MAX });
    }
    let fleet = workers_named(entries);
    // The calls the dependency answered, at any time: a call that never is, whose caller crashed
    // with it outstanding, died with its caller (it never left), and stops counting then.
    let answered: BTreeSet<(JobId, u32, u64)> = entries
        .iter()
        .filter_map(|entry| match &entry.event {
            Event::EffectApplied { job, op, epoch, .. }
            | Event::EffectRejected { job, op, epoch, .. }
            | Event::DependencyFailed { job, op, epoch, .. } => Some((*job, op.step, epoch.0)),
            _ => None,
        })
        .collect();
    let mut pass = Pass {
        window_us,
        windows: Vec::new(),
        open: empty(0, window_us),
        latencies: Vec::new(),
        services: Vec::new(),
        backlog_time: 0,
        in_flight_time: 0,
        outstanding_time: 0,
        outstanding: BTreeMap::new(),
        live_time: 0,
        at_us: 0,
        backlog: 0,
        leased: BTreeSet::new(),
        waiting: BTreeSet::new(),
        down: fleet.iter().map(|&worker| (worker, Down::default())).collect(),
        fleet: fleet.clone(),
        backlog_integral: 0,
    };
    let mut jobs: BTreeMap<JobId, Job> = BTreeMap::new();
    let mut granted: BTreeMap<(JobId, u64), (Node, u64)> = BTreeMap::new();
    let mut effects: BTreeMap<(JobId, u32), u32> = BTreeMap::new();
    let mut adoptions = Vec::new();
    let (mut fences, mut fences_lost) = (Vec::new(), Vec::new());
    let mut faults = Vec::new();
    let mut open: OpenFaults = BTreeMap::new();
    let mut mismatches = Vec::new();
    let mut healed_us = None;
    let mut last_us = 0;
    for (index, entry) in entries.iter().enumerate() {
        let Some(t) = entry.t_us.checked_sub(origin_us).filter(|&t| t >= last_us) else {
            let after_us = origin_us + last_us;
            return Err(ReportError::OutOfOrder { line: index + 1, t_us: entry.t_us, after_us });
        };
        last_us = t;
        pass.advance(t);
        match &entry.event {
            Event::Arrived { job, backlog } => {
                pass.backlog += 1;
                pass.open.arrivals += 1;
                pass.waiting.insert((t, *job));
                jobs.insert(
                    *job,
                    Job {
                        arrived_us: t,
                        terminal: None,
                        grants: 0,
                        failed_calls: 0,
                        reclaims: 0,
                        abandoned: BTreeMap::new(),
                        identities: None,
                    },
                );
                if *backlog as u64 != pass.backlog {
                    mismatches.push((index + 1, *backlog as u64, pass.backlog));
                }
            }
            Event::Rejected { .. } => pass.open.rejections += 1,
            Event::Granted { job, epoch, owner, .. } => {
                granted.insert((*job, epoch.0), (*owner, t));
                pass.open.grants += 1;
                pass.leased.insert(*job);
                if let Some(job) = jobs.get_mut(job) {
                    job.grants += 1;
                }
            }
            Event::Reclaimed { job, expires_at_us, reclaimer, .. } => {
                let late_us = entry.t_us.saturating_sub(*expires_at_us);
                fences.push(Fence { at_us: t, late_us, reclaimer: *reclaimer });
                pass.open.reclaims += 1;
                pass.leased.insert(*job);
                if let Some(job) = jobs.get_mut(job) {
                    job.reclaims += 1;
                }
            }
            Event::Requeued { job, .. } | Event::Released { job, .. } => {
                pass.leased.remove(job);
            }
            Event::Terminal { from, job, outcome, epoch, identities, .. } => {
                pass.leased.remove(job);
                pass.outstanding.retain(|&(j, ..), _| j != *job);
                if let Some((owner, at)) = granted.remove(&(*job, epoch.0)) {
                    if owner == *from {
                        pass.services.push(t - at);
                    }
                }
                if let Some(record) = jobs.get_mut(job) {
                    if record.terminal.is_none() {
                        record.terminal = Some((t, *outcome));
                        record.identities = identities.map(|pair| pair.map(|output| output.0));
                        pass.backlog = pass.backlog.saturating_sub(1);
                        pass.waiting.remove(&(record.arrived_us, *job));
                        pass.open.terminals += 1;
                    }
                }
            }
            Event::Executing { job, op, epoch } => {
                // A call under a newer epoch ends the wait for the older ones: their workers left.
                pass.outstanding.retain(|&(j, step, e), _| !(j == *job && step == op.step && e < epoch.0));
                if let std::collections::btree_map::Entry::Vacant(call) =
                    pass.outstanding.entry((*job, op.step, epoch.0))
                {
                    call.insert((t, entry.node));
                    pass.open.calls_started += 1;
                }
            }
            Event::EffectApplied { from, job, op, epoch, .. }
            | Event::EffectRejected { from, job, op, epoch, .. }
            | Event::DependencyFailed { from, job, op, epoch, .. } => {
                let failed = matches!(entry.event, Event::DependencyFailed { .. });
                if matches!(entry.event, Event::EffectApplied { .. }) && *from != Node::Ledger {
                    *effects.entry((*job, op.step)).or_default() += 1;
                }
                if let Some((started, _)) = pass.outstanding.remove(&(*job, op.step, epoch.0)) {
                    pass.open.calls += 1;
                    pass.latencies.push(t - started);
                    if failed {
                        pass.open.failures += 1;
                    }
                }
                if failed {
                    if let Some(job) = jobs.get_mut(job) {
                        job.failed_calls += 1;
                    }
                }
            }
            Event::Adopted { job, .. } => adoptions.push((t, *job)),
            Event::LostRace { .. } | Event::NotExpired { .. } => fences_lost.push(t),
            Event::Abandoned { job, why, .. } => {
                if let Some(job) = jobs.get_mut(job) {
                    *job.abandoned.entry(why.name()).or_default() += 1;
                }
            }
            Event::Crashed { target, .. } => {
                pass.outstanding.retain(|call, (_, caller)| caller != target || answered.contains(call));
                set_down(&mut pass, *target, |down| down.crashed = true);
                open.entry(("crash", target.to_string(), None)).or_insert(t);
            }
            // A worker told to stop works on while it drains: it is down once it has exited.
            Event::Stopped { target } => {
                pass.outstanding.retain(|call, (_, caller)| caller != target || answered.contains(call));
                set_down(&mut pass, *target, |down| down.crashed = true);
                open.entry(("shutdown", target.to_string(), None)).or_insert(t);
            }
            Event::Restarted { target } => {
                set_down(&mut pass, *target, |down| down.crashed = false);
                close_fault(&mut open, &mut faults, ("crash", target.to_string(), None), t);
                close_fault(&mut open, &mut faults, ("shutdown", target.to_string(), None), t);
            }
            Event::Paused { target, .. } => {
                set_down(&mut pass, *target, |down| down.paused = true);
                open.entry(("pause", target.to_string(), None)).or_insert(t);
            }
            Event::Resumed { target } => {
                set_down(&mut pass, *target, |down| down.paused = false);
                close_fault(&mut open, &mut faults, ("pause", target.to_string(), None), t);
            }
            Event::Partitioned { target, peer } => {
                for worker in cut_workers(&fleet, *target, *peer) {
                    set_down(&mut pass, Node::Worker(worker), |down| down.cuts += 1);
                }
                open.entry(("partition", target.to_string(), peer.map(|peer| peer.to_string()))).or_insert(t);
            }
            Event::Healed { target, peer } => {
                for worker in cut_workers(&fleet, *target, *peer) {
                    set_down(&mut pass, Node::Worker(worker), |down| down.cuts = down.cuts.saturating_sub(1));
                }
                let key = ("partition", target.to_string(), peer.map(|peer| peer.to_string()));
                close_fault(&mut open, &mut faults, key, t);
            }
            Event::DependencyDegraded { slow_rate, fail_rate, lost_reply_rate, rival_rate, .. } => {
                // Each line states the dependency's rates from now on: a kind at zero is a window
                // that this line closes, so a slow window and a failing one that overlap are two
                // windows, each ended by its own line.
                let failing = fail_rate.0 + lost_reply_rate.0 + rival_rate.0 > 0.0;
                for (kind, on) in [("slow_dependency", slow_rate.0 > 0.0), ("failing_dependency", failing)] {
                    let key = (kind, "dependency".to_string(), None);
                    if on {
                        open.entry(key).or_insert(t);
                    } else {
                        close_fault(&mut open, &mut faults, key, t);
                    }
                }
            }
            Event::DependencyRestored {} => {
                for kind in ["slow_dependency", "failing_dependency"] {
                    close_fault(&mut open, &mut faults, (kind, "dependency".to_string(), None), t);
                }
            }
            Event::SurgeStarted { .. } => {
                open.entry(("surge", "arrivals".to_string(), None)).or_insert(t);
            }
            Event::SurgeEnded {} => close_fault(&mut open, &mut faults, ("surge", "arrivals".to_string(), None), t),
            Event::FaultsHealed {} => {
                healed_us = Some(t);
                for down in pass.down.values_mut() {
                    down.paused = false;
                    down.cuts = 0;
                }
                for (key, from_us) in std::mem::take(&mut open) {
                    if key.0 != "crash" && key.0 != "shutdown" {
                        faults.push(span(key, from_us, t));
                    } else {
                        open.insert(key, from_us);
                    }
                }
            }
            _ => {}
        }
    }
    let end_us = last_us;
    // The last window ends at the last line.
    pass.integrate(end_us);
    if pass.open.arrivals + pass.open.terminals + pass.open.grants + pass.open.calls > 0
        || pass.open.from_us < end_us
        || pass.windows.is_empty()
    {
        let mut window = empty(pass.open.from_us, end_us);
        std::mem::swap(&mut window, &mut pass.open);
        let to_us = end_us.max(window.from_us);
        finish(&mut window, &mut pass, to_us);
        pass.windows.push(window);
    }
    for (key, from_us) in open {
        faults.push(span(key, from_us, end_us));
    }
    faults.sort_by(|a, b| (a.from_us, a.kind, &a.target).cmp(&(b.from_us, b.kind, &b.target)));
    Ok(Series {
        windows: pass.windows,
        jobs,
        faults,
        fleet: fleet.len() as u32,
        healed_us,
        end_us,
        origin_us,
        backlog_integral: pass.backlog_integral,
        backlog_mismatches: mismatches,
        effects,
        adoptions,
        fences,
        fences_lost,
    })
}

fn span(key: (&'static str, String, Option<String>), from_us: u64, to_us: u64) -> FaultSpan {
    FaultSpan { kind: key.0, target: key.1, peer: key.2, from_us, to_us }
}

fn close_fault(
    open: &mut OpenFaults,
    faults: &mut Vec<FaultSpan>,
    key: (&'static str, String, Option<String>),
    t_us: u64,
) {
    if let Some(from_us) = open.remove(&key) {
        faults.push(span(key, from_us, t_us));
    }
}

fn set_down(pass: &mut Pass, target: Node, change: impl FnOnce(&mut Down)) {
    if let Node::Worker(worker) = target {
        if let Some(down) = pass.down.get_mut(&worker) {
            change(down);
        }
    }
}

/// The workers a cut leaves unable to work: a worker cut off from everyone, from the table or
/// from the ledger; every worker when the table or the ledger is cut off from everyone.
fn cut_workers(fleet: &BTreeSet<u32>, target: Node, peer: Option<Node>) -> Vec<u32> {
    match (target, peer) {
        (Node::Worker(worker), None | Some(Node::Table | Node::Ledger)) => vec![worker],
        (Node::Table | Node::Ledger, Some(Node::Worker(worker))) => vec![worker],
        (Node::Table | Node::Ledger, None) => fleet.iter().copied().collect(),
        _ => Vec::new(),
    }
}

/// Every worker the history names, as a grant's owner or a line's node or target.
fn workers_named(entries: &[Entry]) -> BTreeSet<u32> {
    let mut workers = BTreeSet::new();
    for entry in entries {
        let mut note = |node: Node| {
            if let Node::Worker(worker) = node {
                workers.insert(worker);
            }
        };
        note(entry.node);
        match &entry.event {
            Event::Granted { owner, .. } | Event::AcquireEmpty { owner } | Event::AcquireSpent { owner, .. } => {
                note(*owner)
            }
            Event::Crashed { target, .. }
            | Event::Stopping { target, .. }
            | Event::Stopped { target }
            | Event::Restarted { target }
            | Event::Paused { target, .. }
            | Event::Resumed { target }
            | Event::Partitioned { target, .. }
            | Event::Healed { target, .. } => note(*target),
            _ => {}
        }
    }
    workers
}
