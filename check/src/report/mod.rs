//! `lease-sim report`: an operator's view of any history. Windows of queue figures, incidents
//! (stretches where the backlog grows or the oldest job ages), their cause, the customers' delay
//! and the recovery, read from the history alone: the report never looks at a scenario, a seed or
//! a fault rate, so it reads a history written outside the simulator as well.
//!
//! - [`series`] reads the history once into windows.
//! - [`diagnose`] finds the baseline and the incidents, and names their causes.
//! - [`text`] and [`svg`] draw it for a person; the [`Report`] itself serialises to `report.json`.
//!
//! The method (which quantities, which baseline, which thresholds, and why) is
//! docs/reports.md, "The method".

mod cause;
pub mod diagnose;
pub mod series;
pub mod svg;
pub mod text;

pub use cause::Cause;
pub use diagnose::{Attribution, Baseline, Incident, Little};
pub use series::{FaultSpan, Window};

use crate::figures::Spread;
use lease_history::{Entry, Event};
use serde::Serialize;

/// The report's format version, in `report.json`. 2: `origin_us`, and every time counts from the
/// history's first line; incidents and the report count `rejections`; Little's law says `why`.
/// 3: `reclaims`, over the whole history and for each incident.
pub const REPORT_VERSION: u32 = 3;

/// A history that cannot be reported on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The first line is not a `run` line.
    #[error("line 1 is not a `run` line: a history starts with one (docs/history.md)")]
    NoRunLine,
    /// Lines out of time order.
    #[error("line {line} is at {t_us}us, before the line above it ({after_us}us): a history is in time order")]
    OutOfOrder {
        /// The line.
        line: usize,
        /// Its time.
        t_us: u64,
        /// The time before it.
        after_us: u64,
    },
    /// A window of zero length.
    #[error("the window must be longer than 0")]
    Window,
    /// The history's span would need more windows than a report lays out.
    #[error(
        "the history spans {span_us}us: windows of {window_us}us would be {windows}, more than the {max} a report \
         lays out; give a longer --window (e.g. --window {suggested}s)",
        suggested = .span_us / .max / 1_000_000 + 1
    )]
    TooManyWindows {
        /// From the first line to the last, µs.
        span_us: u64,
        /// The window asked for, µs.
        window_us: u64,
        /// The windows that would take.
        windows: u64,
        /// [`series::WINDOWS_MAX`].
        max: u64,
    },
}

/// Everything `report.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`REPORT_VERSION`].
    pub report_version: u32,
    /// The history's scenario and seed, as its `run` line says.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// The lease ttl, µs.
    pub lease_ttl_us: u64,
    /// The window length, µs.
    pub window_us: u64,
    /// Lines read.
    pub lines: usize,
    /// The history's last time, µs, counted from its first line (as every time in the report).
    pub end_us: u64,
    /// The first line's own time, µs: add it to a time of the report to find the history's line.
    pub origin_us: u64,
    /// When the faults healed, if the history says.
    pub healed_us: Option<u64>,
    /// Workers the history names.
    pub fleet: u32,
    /// The calm figures incidents are measured against.
    pub baseline: Baseline,
    /// The incidents, in time order.
    pub incidents: Vec<Incident>,
    /// Every customer's delay, arrival to terminal outcome.
    pub delay: Spread,
    /// Jobs that waited longer than the ttl.
    pub waited_over_ttl: u64,
    /// Arrivals the table turned away (queue full) over the whole history.
    pub rejections: u64,
    /// Outcomes over the whole history.
    pub integrity: diagnose::Integrity,
    /// What the reclaimers did over the whole history.
    pub reclaims: diagnose::Reclaims,
    /// Little's law over the steady windows, and the report's own bookkeeping.
    pub little: Little,
    /// The fault windows the history's lines name.
    pub faults: Vec<FaultSpan>,
    /// The windows.
    pub windows: Vec<Window>,
}

impl Report {
    /// The report of `entries`, in windows of `window_us` (default: the lease ttl).
    pub fn of(entries: &[Entry], window_us: Option<u64>) -> Result<Report, ReportError> {
        let Some(Entry { event: Event::Run { seed, scenario, lease_ttl_us, .. }, .. }) = entries.first() else {
            return Err(ReportError::NoRunLine);
        };
        let window_us = window_us.unwrap_or(*lease_ttl_us);
        let series = series::read(entries, window_us)?;
        let diagnosis = diagnose::diagnose(&series, *lease_ttl_us);
        Ok(Report {
            report_version: REPORT_VERSION,
            scenario: scenario.clone(),
            seed: *seed,
            lease_ttl_us: *lease_ttl_us,
            window_us,
            lines: entries.len(),
            end_us: series.end_us,
            origin_us: series.origin_us,
            healed_us: series.healed_us,
            fleet: series.fleet,
            baseline: diagnosis.baseline,
            incidents: diagnosis.incidents,
            delay: diagnosis.delay,
            waited_over_ttl: diagnosis.waited_over_ttl,
            rejections: series.windows.iter().map(|w| w.rejections).sum(),
            integrity: diagnosis.integrity,
            reclaims: diagnosis.reclaims,
            little: diagnosis.little,
            faults: series.faults,
            windows: series.windows,
        })
    }

    /// `report.json`: every figure, pretty-printed, keys as documented in docs/reports.md.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serialises") + "\n"
    }
}

#[cfg(test)]
mod tests;
