//! Customer-facing figures of a run, read from its history: what the people whose documents
//! these are would notice.

use lease_history::{Entry, Event, OutcomeKind};
use serde::Serialize;
use std::collections::BTreeMap;

/// p50, p99 and max of a set of durations, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Spread {
    /// How many values.
    pub count: u64,
    /// The median.
    pub p50_us: u64,
    /// The 99th percentile.
    pub p99_us: u64,
    /// The largest.
    pub max_us: u64,
}

impl Spread {
    /// The spread of `values` (sorted here).
    pub fn of(mut values: Vec<u64>) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        values.sort_unstable();
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        Spread { count: values.len() as u64, p50_us: at(0.50), p99_us: at(0.99), max_us: *values.last().unwrap() }
    }
}

/// What a run did, counted.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Figures {
    /// Jobs accepted into the queue.
    pub accepted: u64,
    /// Jobs turned away (queue full).
    pub rejected: u64,
    /// Jobs completed.
    pub completed: u64,
    /// Jobs dead-lettered.
    pub dead_lettered: u64,
    /// Jobs quarantined.
    pub quarantined: u64,
    /// Worker grants, all jobs together.
    pub attempts: u64,
    /// Effects started (calls to the dependency).
    pub executions: u64,
    /// Re-executions avoided: outputs adopted instead of executed again.
    pub adoptions: u64,
    /// Leases reclaimed.
    pub reclaims: u64,
    /// Crashes, at protocol points or at random.
    pub crashes: u64,
    /// Grants never acted on: the lease expired before its worker looked the job up or started
    /// the effect (see [`crate::useful_grants`]). Each one is a job that waited a whole
    /// lease for nothing, and an attempt spent towards its dead-letter.
    pub wasted_grants: u64,
    /// The wasted grants made after the faults healed, when none should be.
    pub wasted_grants_after_heal: u64,
    /// From arrival to first grant.
    pub queue_wait: Spread,
    /// From arrival to terminal outcome.
    pub end_to_end: Spread,
    /// History lines.
    pub events: u64,
}

impl Figures {
    /// Reads the figures from a history alone (a file, an outside run).
    pub fn of(history: &[Entry]) -> Figures {
        let mut figures = Figures::counted(history);
        (figures.wasted_grants, figures.wasted_grants_after_heal) = crate::useful_grants::wasted(history);
        figures
    }

    /// The figures of a history whose wasted grants (all, and after the heal) were already
    /// counted, by the checkers that followed it as it was written, so that it is not followed a
    /// second time for them.
    pub fn with_wasted(history: &[Entry], wasted_grants: (u64, u64)) -> Figures {
        let mut figures = Figures::counted(history);
        (figures.wasted_grants, figures.wasted_grants_after_heal) = wasted_grants;
        figures
    }

    /// Every figure but the wasted grants.
    fn counted(history: &[Entry]) -> Figures {
        let mut figures = Figures { events: history.len() as u64, ..Figures::default() };
        let mut arrived = BTreeMap::new();
        let mut waits = Vec::new();
        let mut delays = Vec::new();
        let mut granted = std::collections::BTreeSet::new();
        for entry in history {
            match &entry.event {
                Event::Arrived { job, .. } => {
                    figures.accepted += 1;
                    arrived.insert(*job, entry.t_us);
                }
                Event::Rejected { .. } => figures.rejected += 1,
                Event::Granted { job, .. } => {
                    figures.attempts += 1;
                    if granted.insert(*job) {
                        waits.push(entry.t_us.saturating_sub(arrived.get(job).copied().unwrap_or(entry.t_us)));
                    }
                }
                Event::Executing { .. } => figures.executions += 1,
                Event::Adopted { .. } => figures.adoptions += 1,
                Event::Reclaimed { .. } => figures.reclaims += 1,
                Event::Crashed { .. } => figures.crashes += 1,
                Event::Terminal { job, outcome, .. } => {
                    match outcome {
                        OutcomeKind::Completed => figures.completed += 1,
                        OutcomeKind::DeadLettered => figures.dead_lettered += 1,
                        OutcomeKind::Quarantined => figures.quarantined += 1,
                    }
                    delays.push(entry.t_us.saturating_sub(arrived.get(job).copied().unwrap_or(entry.t_us)));
                }
                _ => {}
            }
        }
        figures.queue_wait = Spread::of(waits);
        figures.end_to_end = Spread::of(delays);
        figures
    }

    /// Adds another run's counts; spreads are summarised separately by the sweep.
    pub fn add_counts(&mut self, other: &Figures) {
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.completed += other.completed;
        self.dead_lettered += other.dead_lettered;
        self.quarantined += other.quarantined;
        self.attempts += other.attempts;
        self.executions += other.executions;
        self.adoptions += other.adoptions;
        self.reclaims += other.reclaims;
        self.crashes += other.crashes;
        self.wasted_grants += other.wasted_grants;
        self.wasted_grants_after_heal += other.wasted_grants_after_heal;
        self.events += other.events;
    }
}
