//! The baseline, the incidents and their causes, the customers' delay, the recovery, and
//! Little's law as a check on the report's own bookkeeping. docs/reports.md, "The method",
//! states the method; the constants here are its thresholds.

use super::series::{Series, Window};
use super::Cause;
use crate::figures::Spread;
use lease_core::JobId;
use lease_history::OutcomeKind;
use serde::Serialize;

/// Backlog growth in this many windows in a row opens an incident...
pub const GROWTH_WINDOWS: usize = 2;
/// ...once the backlog is above `BACKLOG_FACTOR` × the baseline backlog, and at least
/// `BACKLOG_MARGIN` jobs above it.
pub const BACKLOG_FACTOR: f64 = 2.0;
/// See [`BACKLOG_FACTOR`].
pub const BACKLOG_MARGIN: f64 = 4.0;
/// The oldest waiting job's age opens an incident past `AGE_FACTOR` × its baseline, and never
/// below half a lease ttl, the age that ends a calm window.
pub const AGE_FACTOR: f64 = 3.0;
/// A cause is named when its term of the load's rise is at least ln(`TERM_MIN`)...
pub const TERM_MIN: f64 = 1.3;
/// ...and at least this share of the largest term.
pub const TERM_SHARE: f64 = 0.25;
/// The baseline needs this many calm windows; with fewer, it is taken over every window while
/// jobs arrive, and the thresholds fall back to their floors (marked `calm: false`).
pub const BASELINE_WINDOWS_MIN: usize = 3;
/// A change in the arrivals is named only when the offered count is this many standard deviations
/// of a Poisson count above the baseline's expectation, so that the noise of a few windows' counts
/// is not a cause.
pub const ARRIVALS_Z_MIN: f64 = 3.0;
/// Little's law is judged over at least this many steady windows.
const LITTLE_WINDOWS_MIN: usize = 4;
/// ... and at least this many jobs that arrived in them and ended.
const LITTLE_JOBS_MIN: usize = 20;
/// Little's law is taken to hold when L / (λW) is within this of 1.
pub const LITTLE_TOLERANCE: f64 = 0.15;

/// The calm figures an incident is measured against: medians over the windows outside incidents
/// while jobs arrive, so a fault that lasts less than half the history does not move them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// How many windows the medians are over.
    pub windows: usize,
    /// Whether they are calm windows (jobs arriving, the oldest younger than half a lease); false
    /// when the history has too few, and the baseline is over every window while jobs arrive.
    pub calm: bool,
    /// Offered arrivals (accepted and rejected) per second.
    pub arrival_rate: f64,
    /// The mean backlog.
    pub backlog: f64,
    /// The oldest waiting job's age, µs.
    pub oldest_age_us: u64,
    /// Workers the history names: the fleet when nothing is down.
    pub live_workers: f64,
    /// Mean dependency latency, µs.
    pub dependency_mean_us: f64,
    /// The dependency's p99, µs.
    pub dependency_p99_us: u64,
    /// Failed calls over calls.
    pub failure_rate: f64,
    /// Grant to completion, µs.
    pub service_us: f64,
    /// The load: arrival rate × service time / (live workers × successful share of calls).
    pub load: f64,
    /// An incident opens above this backlog (with growth).
    pub backlog_threshold: f64,
    /// An incident opens above this oldest-job age, µs.
    pub age_threshold_us: u64,
}

/// What an incident is put down to, with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attribution {
    /// `arrivals`, `workers`, `dependency`, `mixed` or `unknown`.
    pub cause: String,
    /// The causes named (two or more: `mixed`; none: `unknown`).
    pub causes: Vec<Cause>,
    /// Each factor's share of the load's rise: ln(arrival rate ratio), ln(fleet / live workers),
    /// ln(service time ratio × failure ratio). They add up to ln(load during / load before).
    pub terms: Terms,
    /// The load over the incident's onset (1 is the fleet's capacity).
    pub load: f64,
    /// One sentence per factor, with its figures.
    pub evidence: Vec<String>,
}

/// The load's rise, split by factor (natural logarithms).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Terms {
    /// ln(offered arrival rate / baseline).
    pub arrivals: f64,
    /// ln(fleet / mean live workers).
    pub workers: f64,
    /// ln(service time ratio from the dependency's latency) + ln((1 − f₀) / (1 − f)).
    pub dependency: f64,
}

/// A label as it would have read at a window's end, while the incident grew.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Label {
    /// The window's end, µs.
    pub at_us: u64,
    /// The cause named then.
    pub cause: String,
}

/// Outcomes, and what went wrong on the way.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Integrity {
    /// Operations whose effect was applied more than once (must be 0).
    pub duplicate_effects: u64,
    /// Outputs adopted instead of executed again.
    pub adoptions: u64,
    /// Jobs completed.
    pub completed: u64,
    /// Jobs dead-lettered, each with why.
    pub dead_lettered: Vec<Ended>,
    /// Jobs quarantined (two outputs for one operation).
    pub quarantined: Vec<Ended>,
    /// Accepted jobs with no outcome when the history ends.
    pub unfinished: u64,
}

/// The reclaimers' work in an incident: the leases they fenced, over how long, and how long after
/// expiry. A recovery that waits on them shows here: leases fenced long after they expired (the
/// reclaimers were down, cut off, or behind), or one at a time at the store's pace.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Reclaims {
    /// Leases fenced (`reclaimed` lines) in the incident.
    pub leases: u64,
    /// The reclaimers that fenced them.
    pub reclaimers: u64,
    /// The first fence, µs (`None`: none).
    pub first_us: Option<u64>,
    /// The last fence, µs.
    pub last_us: Option<u64>,
    /// How long after its expiry a lease was fenced: the median, µs.
    pub late_p50_us: Option<u64>,
    /// ... and the longest, µs.
    pub late_max_us: Option<u64>,
    /// Fences refused (`lost_race`, `not_expired`): another reclaimer or the holder came first.
    pub lost: u64,
}

/// The reclaimers' work from `from_us` to `to_us`.
fn reclaims(series: &Series, from_us: u64, to_us: u64) -> Reclaims {
    let fences: Vec<_> = series.fences.iter().filter(|fence| (from_us..to_us).contains(&fence.at_us)).collect();
    // The lateness's median as every median of the report (`Spread`).
    let late = Spread::of(fences.iter().map(|fence| fence.late_us).collect());
    let reclaimers: std::collections::BTreeSet<_> = fences.iter().map(|fence| fence.reclaimer).collect();
    let (first_us, last_us) = (fences.first().map(|f| f.at_us), fences.last().map(|f| f.at_us));
    Reclaims {
        leases: fences.len() as u64,
        reclaimers: reclaimers.len() as u64,
        first_us,
        last_us,
        late_p50_us: (late.count > 0).then_some(late.p50_us),
        late_max_us: (late.count > 0).then_some(late.max_us),
        lost: series.fences_lost.iter().filter(|&&at| (from_us..to_us).contains(&at)).count() as u64,
    }
}

/// A job that ended badly, and its attempts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ended {
    /// The job.
    pub job: u64,
    /// When, µs.
    pub at_us: u64,
    /// Worker grants it had.
    pub grants: u32,
    /// Its attempts, by what ended them.
    pub reason: String,
}

/// Little's law, L = λW, over the steady windows; and the report's own bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Little {
    /// The steady windows: outside incidents, while jobs arrive.
    pub windows: usize,
    /// L: the mean backlog over them.
    pub mean_backlog: f64,
    /// λ: accepted jobs per second over them.
    pub arrival_rate: f64,
    /// W: the mean time from acceptance to outcome of the jobs accepted in them, µs.
    pub mean_delay_us: f64,
    /// L / (λW).
    pub ratio: f64,
    /// Whether the ratio is within [`LITTLE_TOLERANCE`] of 1 (`None`: too few steady windows).
    pub holds: Option<bool>,
    /// Why it does not hold, or cannot be judged; `None` when it holds.
    pub why: Option<String>,
    /// The backlog's integral over the history equals the sum of every job's time in it.
    pub integral_matches: bool,
    /// Lines whose `backlog` disagrees with the report's count of accepted, non-terminal jobs.
    pub backlog_mismatches: usize,
}

/// One incident.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Incident {
    /// Its start: the start of its first window, µs.
    pub from_us: u64,
    /// Its end: the end of its last window, when the backlog and the oldest age were back under
    /// their thresholds, µs.
    pub to_us: u64,
    /// Whether it ended before the history did.
    pub recovered: bool,
    /// The most jobs waiting, and when (the end of that window).
    pub peak_backlog: u64,
    /// See `peak_backlog`.
    pub peak_us: u64,
    /// The oldest age reached, µs.
    pub peak_age_us: u64,
    /// Its cause.
    pub verdict: Attribution,
    /// The cause as it read at each window's end while the backlog grew, when it changed.
    pub labels: Vec<Label>,
    /// The customers' delay: jobs waiting at some time in it, arrival to outcome.
    pub delay: Spread,
    /// Of those, the ones that waited longer than the ttl.
    pub waited_over_ttl: u64,
    /// Arrivals the table turned away (queue full) in it: customers who got no service at all.
    pub rejections: u64,
    /// Outcomes of the jobs that ended in it.
    pub integrity: Integrity,
    /// What the reclaimers did in it.
    pub reclaims: Reclaims,
    /// The end of the last fault window that overlapped it, µs, if the history names one.
    pub fault_end_us: Option<u64>,
    /// From that end (or the peak, when there is none) to the end of the incident, µs.
    pub recovery_us: Option<u64>,
    /// Jobs per second the backlog fell by, from the peak to the end.
    pub drain_rate: f64,
}

/// What [`diagnose`] finds.
pub struct Diagnosis {
    pub(super) baseline: Baseline,
    pub(super) incidents: Vec<Incident>,
    pub(super) delay: Spread,
    pub(super) waited_over_ttl: u64,
    pub(super) integrity: Integrity,
    pub(super) reclaims: Reclaims,
    pub(super) little: Little,
}

/// Finds the baseline and the incidents of `series`.
pub fn diagnose(series: &Series, ttl_us: u64) -> Diagnosis {
    let windows = &series.windows;
    let span = arrival_span(windows);
    // Calm windows: jobs arrive, and the oldest waiting job is younger than half a lease. The
    // baseline is over them, then again over those outside the incidents it finds.
    let calm: Vec<usize> = span.clone().filter(|&k| windows[k].oldest_age_us <= ttl_us / 2).collect();
    let mut baseline = if calm.len() >= BASELINE_WINDOWS_MIN {
        baseline_over(series, ttl_us, &calm, true)
    } else {
        baseline_over(series, ttl_us, &span.clone().collect::<Vec<_>>(), false)
    };
    let mut flagged = flag(windows, &baseline);
    let quiet: Vec<usize> = calm.iter().copied().filter(|&k| !near(&flagged, k)).collect();
    if quiet.len() >= BASELINE_WINDOWS_MIN {
        baseline = baseline_over(series, ttl_us, &quiet, true);
        flagged = flag(windows, &baseline);
    }
    let incidents: Vec<Incident> =
        runs(&flagged).into_iter().map(|(first, last)| incident(series, &baseline, ttl_us, first, last)).collect();
    let steady: Vec<usize> = calm.iter().copied().filter(|&k| !near(&flagged, k)).collect();
    let (delay, waited_over_ttl) = delays(series, ttl_us, 0, u64::MAX);
    Diagnosis {
        little: little(series, &steady),
        integrity: integrity(series, 0, u64::MAX),
        reclaims: reclaims(series, 0, u64::MAX),
        baseline,
        incidents,
        delay,
        waited_over_ttl,
    }
}

/// The windows from the first to the last with an arrival or a rejection.
fn arrival_span(windows: &[Window]) -> std::ops::Range<usize> {
    let offered = |w: &Window| w.arrivals + w.rejections > 0;
    let first = windows.iter().position(offered).unwrap_or(0);
    let last = windows.iter().rposition(offered).map_or(0, |last| last + 1);
    first..last.max(first)
}

fn near(flagged: &[bool], k: usize) -> bool {
    flagged[k] || flagged.get(k + 1).copied().unwrap_or(false) || (k > 0 && flagged[k - 1])
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

fn baseline_over(series: &Series, ttl_us: u64, over: &[usize], calm: bool) -> Baseline {
    let windows: Vec<&Window> = over.iter().map(|&k| &series.windows[k]).collect();
    // Rates pooled over the windows (counts over time): a median of a few windows' small Poisson
    // counts is noisier than their sum.
    let time_us: u64 = windows.iter().map(|w| w.to_us - w.from_us).sum();
    let arrival_rate =
        windows.iter().map(|w| w.arrivals + w.rejections).sum::<u64>() as f64 * 1e6 / time_us.max(1) as f64;
    let backlog = median(windows.iter().map(|w| w.backlog_mean).collect()).unwrap_or(0.0);
    let oldest_age_us = median(windows.iter().map(|w| w.oldest_age_us as f64).collect()).unwrap_or(0.0) as u64;
    let with_calls: Vec<&&Window> = windows.iter().filter(|w| w.calls > 0).collect();
    let dependency_mean_us = call_latency_us(&windows).unwrap_or(0.0);
    let dependency_p99_us =
        median(with_calls.iter().filter_map(|w| w.dependency_p99_us.map(|p| p as f64)).collect()).unwrap_or(0.0) as u64;
    let calls: u64 = windows.iter().map(|w| w.calls).sum();
    let failure_rate = windows.iter().map(|w| w.failures).sum::<u64>() as f64 / calls.max(1) as f64;
    let service_us =
        median(windows.iter().filter_map(|w| w.service_mean_us).collect()).unwrap_or(dependency_mean_us).max(1.0);
    let live_workers = f64::from(series.fleet.max(1));
    let load = arrival_rate * service_us / 1e6 / (live_workers * (1.0 - failure_rate.min(0.95)));
    // Without calm windows the medians are of a queue under pressure: the thresholds take their
    // floors instead (a lease for the age, the margin over an idle queue for the backlog).
    let (threshold_backlog, threshold_age) = if calm { (backlog, oldest_age_us) } else { (0.0, 0) };
    Baseline {
        windows: windows.len(),
        calm,
        arrival_rate,
        backlog,
        oldest_age_us,
        live_workers,
        dependency_mean_us,
        dependency_p99_us,
        failure_rate,
        service_us,
        load,
        backlog_threshold: (threshold_backlog * BACKLOG_FACTOR).max(threshold_backlog + BACKLOG_MARGIN),
        age_threshold_us: ((threshold_age as f64 * AGE_FACTOR) as u64).max(ttl_us / 2),
    }
}

/// The windows under pressure: the backlog grew [`GROWTH_WINDOWS`] in a row to above its
/// threshold (those of them above the usual backlog flagged), the oldest job is older than its
/// threshold, or arrivals were turned away.
fn flag(windows: &[Window], baseline: &Baseline) -> Vec<bool> {
    // A window that turned arrivals away is under pressure whatever its backlog: those customers
    // got no service at all.
    let mut flagged: Vec<bool> =
        windows.iter().map(|w| w.oldest_age_us > baseline.age_threshold_us || w.rejections > 0).collect();
    for k in GROWTH_WINDOWS..windows.len() {
        let grew = (k + 1 - GROWTH_WINDOWS..=k).all(|j| windows[j].backlog > windows[j - 1].backlog);
        if grew && windows[k].backlog as f64 > baseline.backlog_threshold {
            // The growth is dated from its first window already above the usual backlog.
            for j in k + 1 - GROWTH_WINDOWS..=k {
                flagged[j] |= windows[j].backlog as f64 > baseline.backlog + 1.0;
            }
        }
    }
    // Under pressure until the backlog is back under its threshold too.
    for k in 1..windows.len() {
        if flagged[k - 1] && !flagged[k] && windows[k].backlog as f64 > baseline.backlog_threshold {
            flagged[k] = true;
        }
    }
    flagged
}

/// Runs of flagged windows, a single quiet window between two runs joining them.
fn runs(flagged: &[bool]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (k, &on) in flagged.iter().enumerate() {
        if !on {
            continue;
        }
        match runs.last_mut() {
            Some((_, last)) if k <= *last + 2 => *last = k,
            _ => runs.push((k, k)),
        }
    }
    runs
}

/// The mean latency of the dependency's calls over `windows`, by Little's law: the time-averaged
/// calls outstanding over the calls started. Unlike the latencies of the calls answered, it counts
/// the calls still running, which are the slow ones. `None` when no call started or ran.
fn call_latency_us(windows: &[&Window]) -> Option<f64> {
    let outstanding: f64 = windows.iter().map(|w| w.calls_outstanding * (w.to_us - w.from_us) as f64).sum();
    let started: u64 = windows.iter().map(|w| w.calls_started).sum();
    (outstanding > 0.0).then(|| outstanding / started.max(1) as f64)
}

/// The verdict over windows `from..=to`.
fn verdict(series: &Series, baseline: &Baseline, from: usize, to: usize) -> Attribution {
    let windows = &series.windows[from..=to];
    let time_us = (windows.last().unwrap().to_us - windows[0].from_us).max(1) as f64;
    let offered: u64 = windows.iter().map(|w| w.arrivals + w.rejections).sum();
    let arrival_rate = offered as f64 * 1e6 / time_us;
    let live = windows.iter().map(|w| w.live_workers * (w.to_us - w.from_us) as f64).sum::<f64>() / time_us;
    let calls: u64 = windows.iter().map(|w| w.calls).sum();
    let failures: u64 = windows.iter().map(|w| w.failures).sum();
    let failure_rate = if calls == 0 { baseline.failure_rate } else { failures as f64 / calls as f64 };
    let latency = call_latency_us(&windows.iter().collect::<Vec<_>>()).unwrap_or(baseline.dependency_mean_us);
    let p99 = windows.iter().filter_map(|w| w.dependency_p99_us).max().unwrap_or(0);
    let overhead = (baseline.service_us - baseline.dependency_mean_us).max(0.0);
    let service_ratio = (overhead + latency) / (overhead + baseline.dependency_mean_us).max(1.0);
    let ln = |x: f64| x.max(1e-9).ln();
    let terms = Terms {
        arrivals: ln(arrival_rate / baseline.arrival_rate.max(1e-9)),
        workers: ln(baseline.live_workers / live.max(baseline.live_workers / 8.0)),
        dependency: ln(service_ratio) + ln((1.0 - baseline.failure_rate.min(0.95)) / (1.0 - failure_rate.min(0.95))),
    };
    let load = baseline.load * (terms.arrivals + terms.workers + terms.dependency).exp();
    // Poisson noise: how far the offered count is above what the baseline rate expects.
    let expected = baseline.arrival_rate * time_us / 1e6;
    let arrivals_z = (offered as f64 - expected) / expected.max(1.0).sqrt();
    let by_cause =
        [(Cause::Arrivals, terms.arrivals), (Cause::Workers, terms.workers), (Cause::Dependency, terms.dependency)];
    let largest = by_cause.iter().map(|&(_, term)| term).fold(0.0, f64::max);
    let causes: Vec<Cause> = by_cause
        .iter()
        .filter(|&&(cause, term)| {
            term >= TERM_MIN.ln()
                && term >= TERM_SHARE * largest
                && (cause != Cause::Arrivals || arrivals_z >= ARRIVALS_Z_MIN)
        })
        .map(|&(cause, _)| cause)
        .collect();
    let cause = match causes.as_slice() {
        [] => "unknown".to_string(),
        [one] => one.name().to_string(),
        _ => "mixed".to_string(),
    };
    let from_s = windows[0].from_us as f64 / 1e6;
    let evidence = vec![
        format!(
            "arrivals: {:.0}/s offered, {:.1}x the calm {:.0}/s ({offered} offered where {expected:.0} were expected, \
             {arrivals_z:+.1} standard deviations)",
            arrival_rate,
            arrival_rate / baseline.arrival_rate.max(1e-9),
            baseline.arrival_rate
        ),
        format!(
            "workers: {live:.1} of {:.0} live on average from {from_s:.3} s to {:.3} s",
            baseline.live_workers,
            windows.last().unwrap().to_us as f64 / 1e6
        ),
        format!(
            "dependency: mean {:.1} ms, {:.1}x the calm {:.1} ms (p99 {:.1} ms), failures {:.0}% (calm {:.0}%)",
            latency / 1e3,
            latency / baseline.dependency_mean_us.max(1.0),
            baseline.dependency_mean_us / 1e3,
            p99 as f64 / 1e3,
            failure_rate * 100.0,
            baseline.failure_rate * 100.0
        ),
    ];
    Attribution { cause, causes, terms, load, evidence }
}

fn incident(series: &Series, baseline: &Baseline, ttl_us: u64, first: usize, last: usize) -> Incident {
    let windows = &series.windows;
    let peak = (first..=last).max_by_key(|&k| (windows[k].backlog, std::cmp::Reverse(k))).unwrap_or(first);
    let onset = first;
    let verdict = verdict(series, baseline, onset, peak.max(first));
    let mut labels: Vec<Label> = Vec::new();
    for (k, window) in windows.iter().enumerate().take(peak.max(first) + 1).skip(first) {
        let cause = self::verdict(series, baseline, onset, k).cause;
        if labels.last().is_none_or(|label| label.cause != cause) {
            labels.push(Label { at_us: window.to_us, cause });
        }
    }
    // It ends with the first window after the pressure: the one at whose end the backlog and the
    // oldest job were back under their thresholds (or the history's last, if none is).
    let recovered = last + 1 < windows.len();
    let last = if recovered { last + 1 } else { last };
    let from_us = windows[first].from_us;
    let to_us = windows[last].to_us;
    let fault_end_us = series
        .faults
        .iter()
        .filter(|fault| fault.from_us < to_us && fault.to_us + series.windows[0].to_us >= from_us)
        .map(|fault| fault.to_us)
        .max();
    let recovery_from = fault_end_us.unwrap_or(windows[peak].to_us);
    let recovery_us = recovered.then(|| to_us.saturating_sub(recovery_from));
    let drained = windows[peak].backlog.saturating_sub(windows[last].backlog);
    let drain_time = (windows[last].to_us.saturating_sub(windows[peak].to_us)).max(1);
    let (delay, waited_over_ttl) = delays(series, ttl_us, from_us, to_us);
    Incident {
        from_us,
        to_us,
        recovered,
        peak_backlog: windows[peak].backlog,
        peak_us: windows[peak].to_us,
        peak_age_us: windows[first..=last].iter().map(|w| w.oldest_age_us).max().unwrap_or(0),
        verdict,
        labels,
        delay,
        waited_over_ttl,
        rejections: windows[first..=last].iter().map(|w| w.rejections).sum(),
        integrity: integrity(series, from_us, to_us),
        reclaims: reclaims(series, from_us, to_us),
        fault_end_us,
        recovery_us,
        drain_rate: drained as f64 * 1e6 / drain_time as f64,
    }
}

/// The delay of every job waiting at some time in `from_us..to_us` that reached an outcome, and
/// how many of them waited longer than the ttl (those still waiting at the end included).
fn delays(series: &Series, ttl_us: u64, from_us: u64, to_us: u64) -> (Spread, u64) {
    let mut values = Vec::new();
    let mut over = 0;
    for job in series.jobs.values() {
        let end = job.terminal.map_or(series.end_us, |(at, _)| at);
        if job.arrived_us >= to_us || end < from_us {
            continue;
        }
        let waited = end - job.arrived_us;
        over += u64::from(waited > ttl_us);
        if job.terminal.is_some() {
            values.push(waited);
        }
    }
    (Spread::of(values), over)
}

fn integrity(series: &Series, from_us: u64, to_us: u64) -> Integrity {
    let mut integrity = Integrity {
        duplicate_effects: series
            .effects
            .iter()
            .filter(|&(&(job, _), &count)| {
                count > 1
                    && series.jobs.get(&job).is_some_and(|j| {
                        j.arrived_us < to_us && j.terminal.map_or(series.end_us, |(at, _)| at) >= from_us
                    })
            })
            .count() as u64,
        adoptions: series.adoptions.iter().filter(|&&(at, _)| (from_us..to_us).contains(&at)).count() as u64,
        ..Integrity::default()
    };
    for (&JobId(job), record) in &series.jobs {
        let Some((at_us, outcome)) = record.terminal else {
            integrity.unfinished += u64::from(from_us == 0);
            continue;
        };
        if !(from_us..to_us.max(from_us + 1)).contains(&at_us) {
            continue;
        }
        let ended = || Ended { job, at_us, grants: record.grants, reason: reason(record) };
        match outcome {
            OutcomeKind::Completed => integrity.completed += 1,
            OutcomeKind::DeadLettered => integrity.dead_lettered.push(ended()),
            OutcomeKind::Quarantined => integrity.quarantined.push(ended()),
        }
    }
    integrity
}

/// What ended a job's attempts: failed calls, reclaimed leases, and what its workers gave up for.
fn reason(job: &super::series::Job) -> String {
    let mut parts = Vec::new();
    if job.failed_calls > 0 {
        parts.push(format!("{} failed dependency call(s)", job.failed_calls));
    }
    if job.reclaims > 0 {
        parts.push(format!("{} lease(s) expired and reclaimed", job.reclaims));
    }
    for (why, count) in &job.abandoned {
        parts.push(format!("{count} abandoned ({why})"));
    }
    let outputs =
        job.identities.map_or(String::new(), |[a, b]| format!("outputs {a} and {b} both claim its operation; "));
    if parts.is_empty() {
        format!("{outputs}no attempt failed on the history")
    } else {
        format!("{outputs}{} grant(s): {}", job.grants, parts.join(", "))
    }
}

fn little(series: &Series, steady: &[usize]) -> Little {
    let windows: Vec<&Window> = steady.iter().map(|&k| &series.windows[k]).collect();
    let time_us: u64 = windows.iter().map(|w| w.to_us - w.from_us).sum();
    let mean_backlog =
        windows.iter().map(|w| w.backlog_mean * (w.to_us - w.from_us) as f64).sum::<f64>() / time_us.max(1) as f64;
    let arrivals: u64 = windows.iter().map(|w| w.arrivals).sum();
    let arrival_rate = arrivals as f64 * 1e6 / time_us.max(1) as f64;
    let delays: Vec<u64> = series
        .jobs
        .values()
        .filter(|job| windows.iter().any(|w| (w.from_us..w.to_us).contains(&job.arrived_us)))
        .filter_map(|job| job.terminal.map(|(at, _)| at - job.arrived_us))
        .collect();
    let mean_delay_us = delays.iter().sum::<u64>() as f64 / delays.len().max(1) as f64;
    let ratio = mean_backlog / (arrival_rate * mean_delay_us / 1e6).max(1e-9);
    let sojourns: u128 = series
        .jobs
        .values()
        .map(|job| u128::from(job.terminal.map_or(series.end_us, |(at, _)| at) - job.arrived_us))
        .sum();
    let holds = (windows.len() >= LITTLE_WINDOWS_MIN && delays.len() >= LITTLE_JOBS_MIN)
        .then_some((ratio - 1.0).abs() <= LITTLE_TOLERANCE);
    let integral_matches = sojourns == series.backlog_integral;
    let backlog_mismatches = series.backlog_mismatches.len();
    let why = match holds {
        Some(true) => None,
        None => Some(format!(
            "too few to judge: {} steady windows and {} jobs that arrived in them and ended (it needs \
             {LITTLE_WINDOWS_MIN} and {LITTLE_JOBS_MIN})",
            windows.len(),
            delays.len()
        )),
        Some(false) if !integral_matches || backlog_mismatches > 0 => {
            Some("the report's bookkeeping disagrees with the history (below): the count itself is off".to_string())
        }
        Some(false) => Some(format!(
            "the bookkeeping agrees, so the count is sound: the {} steady windows are not a steady state. \
             Their jobs stayed {:.0} ms on average, against windows of {:.0} ms: a stay that runs on into an \
             incident, or a backlog carried in from one, breaks L = lambda W over a sample",
            windows.len(),
            mean_delay_us / 1e3,
            time_us as f64 / windows.len().max(1) as f64 / 1e3
        )),
    };
    Little {
        windows: windows.len(),
        mean_backlog,
        arrival_rate,
        mean_delay_us,
        ratio,
        holds,
        why,
        integral_matches,
        backlog_mismatches,
    }
}
