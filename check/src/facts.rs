//! The facts a history has established so far, shared by every checker.
//!
//! Only what the history says: each job's current epoch, the expiry of every epoch's lease (the
//! table's clock, renewals included), whether a lease is live, the job's terminal outcome; each
//! operation's ledger fence and applied output; each reclaim batch's size. Every fact remembers
//! the history line that set it, so a violation can point at it. The checkers read the facts as
//! they were *before* an entry; [`Facts::absorb`] then folds the entry in.

use lease_core::{BatchId, Epoch, JobId, OpId, OutputId};
use lease_history::{Entry, Event, OutcomeKind};
use std::collections::BTreeMap;

/// The limits of the run, from its `run` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The most leases one reclaim batch may take.
    pub batch_max: usize,
    /// The most accepted, non-terminal jobs.
    pub capacity: usize,
    /// The `run` line, once seen.
    pub run_line: Option<usize>,
    /// The history was pruned of jobs that ended (its run line's `pruned_before_us`): a count
    /// over all jobs is a lower bound, not the count.
    pub pruned: bool,
}

/// The lease of one epoch: its expiry by the table's clock, and the line that set it (a grant, a
/// renewal or a reclaim).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Term {
    /// The first table time at which the lease counts as expired.
    pub expires_at_us: u64,
    /// The line that set `expires_at_us`.
    pub line: usize,
}

/// A job's terminal outcome, as first recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The `terminal` line.
    pub line: usize,
    /// How it ended.
    pub outcome: OutcomeKind,
    /// The output, when completed.
    pub output: Option<OutputId>,
}

/// What the history says about one job.
#[derive(Debug, Clone, Default)]
pub(crate) struct JobFacts {
    /// The `arrived` line, once accepted.
    pub arrived_line: Option<usize>,
    /// The current epoch: the latest `granted.epoch` or `reclaimed.new_epoch` (0 before any).
    pub epoch: Epoch,
    /// The line that set `epoch`.
    pub epoch_line: Option<usize>,
    /// The lease of every epoch granted or reclaimed, renewals included.
    pub terms: BTreeMap<Epoch, Term>,
    /// Whether the current epoch's lease is live: granted or reclaimed, and not since requeued or
    /// ended.
    pub leased: bool,
    /// The `requeued` or `terminal` line that last ended a lease.
    pub unleased_line: Option<usize>,
    /// The first terminal outcome.
    pub terminal: Option<Ended>,
}

impl JobFacts {
    /// The current epoch's lease, if one was ever granted or reclaimed.
    pub fn current_term(&self) -> Option<&Term> {
        self.terms.get(&self.epoch)
    }

    /// The live lease: the current epoch's, while it is leased.
    pub fn live_term(&self) -> Option<&Term> {
        self.current_term().filter(|_| self.leased)
    }

    fn start_term(&mut self, epoch: Epoch, expires_at_us: u64, line: usize) {
        self.epoch = epoch;
        self.epoch_line = Some(line);
        self.terms.insert(epoch, Term { expires_at_us, line });
        self.leased = true;
    }

    fn end_lease(&mut self, line: usize) {
        self.leased = false;
        self.unleased_line = Some(line);
    }
}

/// An output the ledger recorded (`effect_applied`), as first recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    /// The output.
    pub output: OutputId,
    /// The epoch it was applied under.
    pub epoch: Epoch,
    /// The `effect_applied` line.
    pub line: usize,
}

/// What the history says about one operation in the ledger.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OpFacts {
    /// The highest epoch of any `looked_up` or `effect_applied` for the operation.
    pub fence: Epoch,
    /// The line that raised the fence to `fence`.
    pub fence_line: Option<usize>,
    /// The first applied output.
    pub applied: Option<Applied>,
}

impl OpFacts {
    fn raise_fence(&mut self, epoch: Epoch, line: usize) {
        if epoch > self.fence || self.fence_line.is_none() {
            self.fence = epoch;
            self.fence_line = Some(line);
        }
    }
}

/// What the history says about one reclaim batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchFacts {
    /// `reclaimed` entries carrying the batch.
    pub reclaimed: usize,
    /// The first of them.
    pub first_line: usize,
}

/// Everything the history has established so far. See the module doc.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    limits: Limits,
    jobs: BTreeMap<JobId, JobFacts>,
    ops: BTreeMap<OpId, OpFacts>,
    batches: BTreeMap<BatchId, BatchFacts>,
    /// Accepted jobs without a terminal outcome.
    backlog: usize,
}

impl Facts {
    /// No facts yet; the limits are unbounded until the `run` line.
    pub fn new() -> Facts {
        Facts {
            limits: Limits { batch_max: usize::MAX, capacity: usize::MAX, run_line: None, pruned: false },
            jobs: BTreeMap::new(),
            ops: BTreeMap::new(),
            batches: BTreeMap::new(),
            backlog: 0,
        }
    }

    /// The run's limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// What is known of `job`, if it appeared.
    pub fn job(&self, job: JobId) -> Option<&JobFacts> {
        self.jobs.get(&job)
    }

    /// Every job that appeared, in id order.
    pub fn jobs(&self) -> impl Iterator<Item = (&JobId, &JobFacts)> {
        self.jobs.iter()
    }

    /// What the ledger is known to hold for `op`.
    pub fn op(&self, op: OpId) -> Option<&OpFacts> {
        self.ops.get(&op)
    }

    /// The applied outputs of `job`'s operations, in operation order.
    pub fn applied_for(&self, job: JobId) -> impl Iterator<Item = (&OpId, &Applied)> {
        let first = OpId { job, step: 0 };
        let last = OpId { job, step: u32::MAX };
        self.ops.range(first..=last).filter_map(|(op, facts)| facts.applied.as_ref().map(|applied| (op, applied)))
    }

    /// What is known of `batch`, if it reclaimed anything.
    pub fn batch(&self, batch: BatchId) -> Option<&BatchFacts> {
        self.batches.get(&batch)
    }

    /// Accepted jobs without a terminal outcome.
    pub fn backlog(&self) -> usize {
        self.backlog
    }

    /// The backlog once `job`'s `arrived` entry is counted: a job is counted once, and not at
    /// all if it already ended.
    pub fn backlog_after_arrival(&self, job: JobId) -> usize {
        match self.jobs.get(&job) {
            Some(facts) if facts.arrived_line.is_some() || facts.terminal.is_some() => self.backlog,
            _ => self.backlog + 1,
        }
    }

    /// Folds the entry at `line` into the facts.
    pub fn absorb(&mut self, line: usize, entry: &Entry) {
        match &entry.event {
            Event::Run { batch_max, capacity, pruned_before_us, .. } => {
                let (batch_max, capacity, pruned) = (*batch_max, *capacity, pruned_before_us.is_some());
                self.limits = Limits { batch_max, capacity, run_line: Some(line), pruned };
            }
            Event::Arrived { job, .. } => self.arrive(*job, line),
            Event::Granted { job, epoch, expires_at_us, .. } => {
                self.jobs.entry(*job).or_default().start_term(*epoch, *expires_at_us, line);
            }
            Event::Renewed { job, epoch, expires_at_us, .. } => {
                let term = self.jobs.get_mut(job).and_then(|facts| facts.terms.get_mut(epoch));
                if let Some(term) = term {
                    *term = Term { expires_at_us: *expires_at_us, line };
                }
            }
            Event::Reclaimed { job, new_epoch, new_expires_at_us, batch, .. } => {
                self.jobs.entry(*job).or_default().start_term(*new_epoch, *new_expires_at_us, line);
                let facts = self.batches.entry(*batch).or_insert(BatchFacts { reclaimed: 0, first_line: line });
                facts.reclaimed += 1;
            }
            Event::Requeued { job, .. } | Event::Released { job, .. } => {
                self.jobs.entry(*job).or_default().end_lease(line)
            }
            Event::Terminal { job, outcome, output, .. } => self.end(*job, line, *outcome, *output),
            Event::LookedUp { op, epoch, .. } => self.ops.entry(*op).or_default().raise_fence(*epoch, line),
            Event::EffectApplied { op, epoch, output, .. } => {
                let facts = self.ops.entry(*op).or_default();
                facts.raise_fence(*epoch, line);
                facts.applied.get_or_insert(Applied { output: *output, epoch: *epoch, line });
            }
            _ => {}
        }
    }

    fn arrive(&mut self, job: JobId, line: usize) {
        let facts = self.jobs.entry(job).or_default();
        if facts.arrived_line.is_some() {
            return;
        }
        facts.arrived_line = Some(line);
        if facts.terminal.is_none() {
            self.backlog += 1;
        }
    }

    fn end(&mut self, job: JobId, line: usize, outcome: OutcomeKind, output: Option<OutputId>) {
        let facts = self.jobs.entry(job).or_default();
        facts.end_lease(line);
        if facts.terminal.is_some() {
            return;
        }
        facts.terminal = Some(Ended { line, outcome, output });
        if facts.arrived_line.is_some() {
            assert!(self.backlog > 0, "an accepted, unfinished job is counted in the backlog");
            self.backlog -= 1;
        }
    }
}
