//! What a runtime did, as an operator's dashboard reads it: counters, the effect's duration, and
//! the queue's figures, exported through the [`metrics`] crate's facade under the names below
//! and kept beside it, so that a caller reads the same figures without a metrics backend
//! ([`Metrics::snapshot`]).
//!
//! | name | kind | what |
//! | --- | --- | --- |
//! | `lease_grants_total` | counter | leases this process's workers took |
//! | `lease_reclaims_total` | counter | expired leases this process's reclaimers fenced |
//! | `lease_adoptions_total` | counter | outputs adopted from the ledger instead of a second effect |
//! | `lease_dead_letters_total` | counter | jobs dead-lettered by this process's requests |
//! | `lease_quarantines_total` | counter | jobs quarantined on two outputs for one operation |
//! | `lease_self_fences_total` | counter | leases a worker stopped acting on before its estimate of expiry |
//! | `lease_effect_seconds` | histogram | each handler call's duration, by the runtime's clock |
//! | `lease_jobs` | gauge, label `state` | the table's jobs: `queued`, `leased`, `completed`, `dead_lettered`, `quarantined` |
//! | `lease_oldest_waiting_seconds` | gauge | how long the longest-waiting queued job has waited (0: none waits) |
//!
//! The counters count what this process's runtimes did, every runtime of one [`crate::Runtime`]
//! (and its clones) into one [`Metrics`]; the gauges are the whole table's, read from the store
//! ([`Metrics::set_queue`], which `store::watch_queue` calls on a cadence). Without a recorder
//! installed, the facade's calls do nothing: the simulator runs this code and installs none.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The upper bounds of [`Snapshot::effect_seconds`]' buckets, in seconds (and `+Inf`).
pub const EFFECT_BUCKETS: [f64; 12] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The jobs of the table by state, and the longest wait: the queue's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueFigures {
    /// Waiting to be granted.
    pub queued: u64,
    /// Leased to a worker or a reclaimer.
    pub leased: u64,
    /// Completed.
    pub completed: u64,
    /// Dead-lettered.
    pub dead_lettered: u64,
    /// Quarantined.
    pub quarantined: u64,
    /// How long the queued job that has waited longest has waited, in microseconds, by the
    /// table's clock (`None`: nothing is queued).
    pub oldest_waiting_us: Option<u64>,
}

/// A histogram's figures: the count, the sum, and the cumulative count at or below each bound
/// of [`EFFECT_BUCKETS`] (Prometheus' `le` buckets; the last, `+Inf`, is `count`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Histogram {
    /// Observations.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum_seconds: f64,
    /// Cumulative counts, one per bound of [`EFFECT_BUCKETS`].
    pub buckets: [u64; EFFECT_BUCKETS.len()],
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        self.count += 1;
        self.sum_seconds += seconds;
        for (bound, bucket) in EFFECT_BUCKETS.iter().zip(&mut self.buckets) {
            *bucket += u64::from(seconds <= *bound);
        }
    }
}

/// The figures at one moment: every counter, the effect's histogram, and the queue's figures as
/// last read ([`Metrics::set_queue`]; `None` before the first).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// `lease_grants_total`.
    pub grants: u64,
    /// `lease_reclaims_total`.
    pub reclaims: u64,
    /// `lease_adoptions_total`.
    pub adoptions: u64,
    /// `lease_dead_letters_total`.
    pub dead_letters: u64,
    /// `lease_quarantines_total`.
    pub quarantines: u64,
    /// `lease_self_fences_total`.
    pub self_fences: u64,
    /// `lease_effect_seconds`.
    pub effect_seconds: Histogram,
    /// `lease_jobs` and `lease_oldest_waiting_seconds`.
    pub queue: Option<QueueFigures>,
}

impl Snapshot {
    /// The figures in Prometheus' text format (version 0.0.4), as a scrape of `/metrics` reads
    /// them: what a caller without a recorder serves.
    pub fn prometheus(&self) -> String {
        let mut text = String::new();
        let mut counter = |name: &str, help: &str, value: u64| {
            text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"));
        };
        counter("lease_grants_total", "Leases this process's workers took.", self.grants);
        counter("lease_reclaims_total", "Expired leases this process's reclaimers fenced.", self.reclaims);
        counter("lease_adoptions_total", "Outputs adopted instead of a second effect.", self.adoptions);
        counter("lease_dead_letters_total", "Jobs dead-lettered by this process.", self.dead_letters);
        counter("lease_quarantines_total", "Jobs quarantined on two outputs for one operation.", self.quarantines);
        counter("lease_self_fences_total", "Leases given up before their estimated expiry.", self.self_fences);
        let effect = &self.effect_seconds;
        text.push_str("# HELP lease_effect_seconds Each handler call's duration.\n");
        text.push_str("# TYPE lease_effect_seconds histogram\n");
        for (bound, count) in EFFECT_BUCKETS.iter().zip(effect.buckets) {
            text.push_str(&format!("lease_effect_seconds_bucket{{le=\"{bound}\"}} {count}\n"));
        }
        text.push_str(&format!("lease_effect_seconds_bucket{{le=\"+Inf\"}} {}\n", effect.count));
        text.push_str(&format!("lease_effect_seconds_sum {}\n", effect.sum_seconds));
        text.push_str(&format!("lease_effect_seconds_count {}\n", effect.count));
        if let Some(queue) = self.queue {
            text.push_str("# HELP lease_jobs The table's jobs, by state.\n# TYPE lease_jobs gauge\n");
            for (state, count) in queue.by_state() {
                text.push_str(&format!("lease_jobs{{state=\"{state}\"}} {count}\n"));
            }
            text.push_str("# HELP lease_oldest_waiting_seconds The longest wait of a queued job.\n");
            text.push_str("# TYPE lease_oldest_waiting_seconds gauge\n");
            text.push_str(&format!("lease_oldest_waiting_seconds {}\n", queue.oldest_waiting_seconds()));
        }
        text
    }
}

impl std::fmt::Display for Snapshot {
    /// One line: the counters, the effects and their mean, and the queue's figures if read.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Snapshot { grants, reclaims, adoptions, dead_letters, quarantines, self_fences, .. } = self;
        write!(f, "{grants} grants, {reclaims} reclaims, {adoptions} adoptions, {dead_letters} dead letters, ")?;
        write!(f, "{quarantines} quarantines, {self_fences} self-fences, ")?;
        let effect = &self.effect_seconds;
        let mean_ms = if effect.count == 0 { 0.0 } else { effect.sum_seconds * 1e3 / effect.count as f64 };
        write!(f, "{} effects (mean {mean_ms:.1} ms)", effect.count)?;
        if let Some(queue) = self.queue {
            let states: Vec<String> = queue.by_state().iter().map(|(state, n)| format!("{n} {state}")).collect();
            write!(f, "; jobs: {}, oldest wait {:.3} s", states.join(", "), queue.oldest_waiting_seconds())?;
        }
        Ok(())
    }
}

impl QueueFigures {
    /// `(state, count)` for each value of `lease_jobs`' `state` label.
    pub fn by_state(&self) -> [(&'static str, u64); 5] {
        [
            ("queued", self.queued),
            ("leased", self.leased),
            ("completed", self.completed),
            ("dead_lettered", self.dead_lettered),
            ("quarantined", self.quarantined),
        ]
    }

    /// `lease_oldest_waiting_seconds`: 0 when nothing waits.
    pub fn oldest_waiting_seconds(&self) -> f64 {
        self.oldest_waiting_us.unwrap_or(0) as f64 / 1e6
    }
}

/// The figures of one process's runtimes (see the module doc). Shared: cheap to update from
/// every slot and reclaimer at once.
#[derive(Debug, Default)]
pub struct Metrics {
    grants: AtomicU64,
    reclaims: AtomicU64,
    adoptions: AtomicU64,
    dead_letters: AtomicU64,
    quarantines: AtomicU64,
    self_fences: AtomicU64,
    effect: Mutex<Histogram>,
    queue: Mutex<Option<QueueFigures>>,
}

/// One counter: its field and its name.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Grant,
    Reclaim,
    Adoption,
    DeadLetter,
    Quarantine,
    SelfFence,
}

impl Metrics {
    /// Counters at zero, no queue figures yet.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    pub(crate) fn count(&self, what: Count) {
        let (field, name) = match what {
            Count::Grant => (&self.grants, "lease_grants_total"),
            Count::Reclaim => (&self.reclaims, "lease_reclaims_total"),
            Count::Adoption => (&self.adoptions, "lease_adoptions_total"),
            Count::DeadLetter => (&self.dead_letters, "lease_dead_letters_total"),
            Count::Quarantine => (&self.quarantines, "lease_quarantines_total"),
            Count::SelfFence => (&self.self_fences, "lease_self_fences_total"),
        };
        field.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(name).increment(1);
    }

    /// One handler call took `seconds`.
    pub(crate) fn effect(&self, seconds: f64) {
        lock(&self.effect).observe(seconds);
        metrics::histogram!("lease_effect_seconds").record(seconds);
    }

    /// The queue's figures as just read from the store: the gauges.
    pub fn set_queue(&self, figures: QueueFigures) {
        *lock(&self.queue) = Some(figures);
        for (state, count) in figures.by_state() {
            metrics::gauge!("lease_jobs", "state" => state).set(count as f64);
        }
        metrics::gauge!("lease_oldest_waiting_seconds").set(figures.oldest_waiting_seconds());
    }

    /// Every figure now.
    pub fn snapshot(&self) -> Snapshot {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Snapshot {
            grants: read(&self.grants),
            reclaims: read(&self.reclaims),
            adoptions: read(&self.adoptions),
            dead_letters: read(&self.dead_letters),
            quarantines: read(&self.quarantines),
            self_fences: read(&self.self_fences),
            effect_seconds: lock(&self.effect).clone(),
            queue: *lock(&self.queue),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
