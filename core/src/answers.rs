//! The table's vocabulary: its limits ([`TableConfig`]), a lease, and every answer it gives, each
//! a typed outcome that the harness records as a history line. The rules ([`crate::rules`])
//! decide in these terms and the table ([`crate::table`]) answers in them; neither owns them.

use crate::ids::{Epoch, JobId, OutputId, Owner};
use crate::time::{Span, Time};
use serde::{Deserialize, Serialize};

/// The tick of the planted off-by-one reclaim boundary ([`Bug::ReclaimBoundaryOffByOne`](crate::Bug::ReclaimBoundaryOffByOne)): the bug
/// compares expiries in whole ticks, rounding down, as queues that store or compare timestamps at a
/// coarser unit than they grant leases in; a lease then counts as expired from the start of the
/// tick in which it expires, up to one tick early.
pub const RECLAIM_TICK: Span = Span::from_ms(50);

/// How long past its expiry the planted [`Bug::RenewGrace`](crate::Bug::RenewGrace) still renews a lease.
pub const RENEW_GRACE: Span = Span::from_ms(25);

/// The table's limits. Every one is named, checked, and shown in a history's `run` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableConfig {
    /// The most jobs that may be accepted and not yet terminal (queued or leased).
    pub capacity: usize,
    /// How long a grant, a renewal or a reclaim holds a lease.
    pub lease_ttl: Span,
    /// The most expired leases one reclaim batch may take.
    pub batch_max: usize,
    /// The most worker grants a job gets before it is dead-lettered.
    pub attempts_max: u32,
}

/// A configuration that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `capacity` is zero: the queue could accept nothing.
    #[error("capacity must be at least 1")]
    ZeroCapacity,
    /// `lease_ttl` is zero: every lease would be born expired.
    #[error("lease_ttl must be at least 1us")]
    ZeroLeaseTtl,
    /// `batch_max` is zero: reclaim could never make progress.
    #[error("batch_max must be at least 1")]
    ZeroBatchMax,
    /// `attempts_max` is zero: every job would dead-letter unrun.
    #[error("attempts_max must be at least 1")]
    ZeroAttemptsMax,
    /// A worker's timing leaves no room to act (see the message).
    #[error("worker timing: {0}")]
    WorkerTiming(&'static str),
    /// A grant could reach the worker after it stops acting on it: the table may hold an
    /// acquire for `acquire_wait` and its answer may take `request_timeout` more to arrive, but
    /// the worker acts on a grant only until `usable` (`lease_ttl - drift_margin`) after it asked.
    #[error(
        "acquire_wait ({acquire_wait}) + request_timeout ({request_timeout}) must be below lease_ttl - drift_margin \
         ({usable}): a grant arriving later is dead on arrival"
    )]
    UnusableGrant {
        /// How long the table may hold an acquire.
        acquire_wait: Span,
        /// How long the worker allows for a round trip.
        request_timeout: Span,
        /// How long after asking the worker acts on a grant.
        usable: Span,
    },
    /// A reclaimer's timing cannot work (see the message).
    #[error("reclaimer timing: {0}")]
    ReclaimerTiming(&'static str),
}

impl TableConfig {
    /// Checks every limit.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        if self.lease_ttl == Span::ZERO {
            return Err(ConfigError::ZeroLeaseTtl);
        }
        if self.batch_max == 0 {
            return Err(ConfigError::ZeroBatchMax);
        }
        if self.attempts_max == 0 {
            return Err(ConfigError::ZeroAttemptsMax);
        }
        Ok(())
    }
}

/// Misuse of the table: a caller's bug, never a protocol outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// The caller passed a `now` earlier than one it passed before.
    #[error("time went backwards: {now} after {last}")]
    TimeWentBackwards {
        /// The latest time seen.
        last: Time,
        /// The earlier time passed now.
        now: Time,
    },
    /// The job was never enqueued.
    #[error("unknown job {0}")]
    UnknownJob(JobId),
    /// A batched call of no job, or of more than the table's `batch_max`.
    #[error("a batch of {asked} jobs: a batch holds 1 to batch_max = {max}")]
    BatchSize {
        /// How many the call named (or asked for).
        asked: usize,
        /// The table's `batch_max`.
        max: usize,
    },
    /// A quarantine named the same output twice: there is no conflict to quarantine.
    #[error("quarantine of {job} names {output} twice: two different outputs make a conflict")]
    NotAConflict {
        /// The job.
        job: JobId,
        /// The output named twice.
        output: OutputId,
    },
}

/// A lease: who holds a job, under which epoch, until when (by the table's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The leased job.
    pub job: JobId,
    /// The worker or reclaimer holding it.
    pub owner: Owner,
    /// The fencing token of this lease.
    pub epoch: Epoch,
    /// The first table time at which the lease counts as expired.
    pub expires_at: Time,
}

/// A lease granted to a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The new lease.
    pub lease: Lease,
    /// Which worker grant of the job this is, counting from 1. On the first, no earlier holder
    /// can have produced an output, so the worker may skip the ledger lookup.
    pub attempt: u32,
}

/// Why an arrival was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// The backlog is at capacity.
    QueueFull {
        /// The capacity that was reached.
        capacity: usize,
    },
}

/// The answer to [`LeaseTable::enqueue`](crate::LeaseTable::enqueue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Enqueued {
    /// The job is queued. `backlog` counts accepted, non-terminal jobs, this one included.
    Accepted {
        /// Accepted and not yet terminal jobs.
        backlog: usize,
    },
    /// The job id was known already: nothing changed.
    Duplicate,
    /// The arrival was rejected.
    Rejected(Rejection),
}

/// The answer to [`LeaseTable::acquire`](crate::LeaseTable::acquire) and
/// [`LeaseTable::acquire_for`](crate::LeaseTable::acquire_for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Acquired {
    /// A lease on the oldest queued job.
    Granted(Grant),
    /// The grant this request already had, again: it is a retried copy of a request whose grant
    /// still stands (its first answer was lost). Nothing changed; `lease` is the lease as it
    /// stands now.
    Regranted(Grant),
    /// Nothing is queued.
    Empty,
    /// Nothing, again: a copy of the request that got this worker's last grant, `job` under
    /// `epoch`, which no longer stands (the worker completed, released or handed it back, or it
    /// expired). The worker had its answer; a copy delivered late (a duplicated message, a retry
    /// held past its first answer) must not take a second job, whose answer nobody waits for and
    /// whose lease would lapse unused, its attempt charged.
    Spent {
        /// The job of the grant the request got.
        job: JobId,
        /// Its epoch.
        epoch: Epoch,
    },
}

/// Why the table refused to act for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The request carried an epoch that is not the job's current one.
    StaleEpoch {
        /// The job's current epoch.
        current: Epoch,
    },
    /// The lease had expired by the table's clock.
    Expired {
        /// When it expired.
        expires_at: Time,
    },
    /// The job is queued, not leased.
    NotLeased,
    /// The job has reached its terminal outcome already.
    AlreadyTerminal,
}

/// The answer to [`LeaseTable::renew`](crate::LeaseTable::renew).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Renewal {
    /// The lease now runs until `expires_at`.
    Renewed {
        /// The epoch the request carried.
        epoch: Epoch,
        /// The new expiry.
        expires_at: Time,
    },
    /// Not renewed.
    Refused(Refusal),
}

/// How a job ended. Each job reaches exactly one, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    /// Completed with this output.
    Completed {
        /// The output the job produced.
        output: OutputId,
    },
    /// Given up after `attempts` worker grants.
    DeadLettered {
        /// Worker grants spent.
        attempts: u32,
    },
    /// Two different outputs claim the job's operation: held for an operator.
    Quarantined {
        /// The output the ledger recorded first.
        recorded: OutputId,
        /// The different output that claimed the same operation.
        rival: OutputId,
    },
}

/// A job's terminal outcome, and the epoch under which it was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terminal {
    /// The job.
    pub job: JobId,
    /// The epoch of the request that ended it.
    pub epoch: Epoch,
    /// How it ended.
    pub outcome: Outcome,
}

/// The answer to [`LeaseTable::complete`](crate::LeaseTable::complete).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Completion {
    /// The job is complete: its terminal outcome is recorded now.
    Completed(Terminal),
    /// It was completed with the same output before: an idempotent success, no second outcome.
    AlreadyCompleted,
    /// It was completed with a different output: nothing changed.
    Conflict {
        /// The output it completed with.
        recorded: OutputId,
        /// The output this request offered.
        offered: OutputId,
    },
    /// Not completed.
    Refused(Refusal),
}

/// The answer to [`LeaseTable::requeue`](crate::LeaseTable::requeue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Requeue {
    /// Back in the queue, after `attempts` worker grants.
    Requeued {
        /// Worker grants spent so far.
        attempts: u32,
    },
    /// Out of attempts: dead-lettered now.
    DeadLettered(Terminal),
    /// Not requeued.
    Refused(Refusal),
}

/// The answer to [`LeaseTable::release`](crate::LeaseTable::release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Release {
    /// Back at the head of the queue, the grant undone: `attempts` worker grants now.
    Released {
        /// Worker grants spent, without the released one.
        attempts: u32,
    },
    /// Not released.
    Refused(Refusal),
}

/// The answer to [`LeaseTable::fence`](crate::LeaseTable::fence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Fencing {
    /// The reclaimer owns the job now under a new epoch; `expired` is the lease it displaced.
    Won {
        /// The lease that expired.
        expired: Lease,
        /// The reclaimer's lease.
        lease: Lease,
    },
    /// Another reclaimer or worker moved the job first: a normal outcome.
    LostRace {
        /// The job's epoch now.
        current: Epoch,
    },
    /// The lease was renewed since it was listed, and has not expired.
    NotExpired {
        /// Its expiry now.
        expires_at: Time,
    },
}

/// The answer to [`LeaseTable::quarantine`](crate::LeaseTable::quarantine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Quarantine {
    /// The job is quarantined now.
    Quarantined(Terminal),
    /// Not quarantined.
    Refused(Refusal),
}
