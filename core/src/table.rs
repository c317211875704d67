//! The lease table: the single authority on who holds which job, and until when.
//!
//! Its clock is the only clock that decides expiry: every call takes the table's `now`, and time
//! never goes backwards. Each call returns a typed outcome that the harness records as a history
//! event; an expected protocol outcome (a stale epoch, a lost race) is a value, never an `Err`.
//! `Err` is kept for misuse: an unknown job, or time going backwards.

use crate::bug::{Bug, Bugs};
use crate::ids::{Epoch, JobId, OutputId, Owner, ReclaimerId, RequestId, WorkerId};
use crate::time::{Span, Time};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The tick of the planted off-by-one reclaim boundary ([`Bug::ReclaimBoundaryOffByOne`]): the bug
/// compares expiries in whole ticks, rounding down, as queues that store or compare timestamps at a
/// coarser unit than they grant leases in; a lease then counts as expired from the start of the
/// tick in which it expires, up to one tick early.
pub const RECLAIM_TICK: Span = Span::from_ms(50);

/// How long past its expiry the planted [`Bug::RenewGrace`] still renews a lease.
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

/// The answer to [`LeaseTable::enqueue`].
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

/// The answer to [`LeaseTable::acquire`] and [`LeaseTable::acquire_for`].
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

/// The answer to [`LeaseTable::renew`].
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

/// The answer to [`LeaseTable::complete`].
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

/// The answer to [`LeaseTable::requeue`].
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

/// The answer to [`LeaseTable::release`].
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

/// The answer to [`LeaseTable::fence`].
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

/// The answer to [`LeaseTable::quarantine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Quarantine {
    /// The job is quarantined now.
    Quarantined(Terminal),
    /// Not quarantined.
    Refused(Refusal),
}

#[derive(Debug, Clone)]
enum JobState {
    Queued,
    Leased(Lease),
    Terminal(Terminal),
}

#[derive(Debug, Clone)]
struct JobRecord {
    epoch: Epoch,
    attempts: u32,
    state: JobState,
}

/// The last grant [`LeaseTable::acquire_for`] made to a worker, and the request it answered.
#[derive(Debug, Clone, Copy)]
struct LastGrant {
    request: RequestId,
    job: JobId,
    epoch: Epoch,
}

/// The lease table. See the module doc.
#[derive(Debug, Clone)]
pub struct LeaseTable {
    config: TableConfig,
    bugs: Bugs,
    jobs: BTreeMap<JobId, JobRecord>,
    /// Queued jobs, oldest first. Entries whose job left the queued state are skipped lazily.
    queue: VecDeque<JobId>,
    /// Every live lease, by expiry, so a reclaim scan reads only what has expired.
    expiries: BTreeSet<(Time, JobId)>,
    /// Accepted jobs that are not terminal yet.
    backlog: usize,
    /// Per worker, its last grant by request: at most one entry per worker that ever acquired.
    last_grants: BTreeMap<WorkerId, LastGrant>,
    last_now: Time,
}

impl LeaseTable {
    /// An empty table. Fails on a configuration that cannot work.
    pub fn new(config: TableConfig) -> Result<LeaseTable, ConfigError> {
        LeaseTable::with_bugs(config, Bugs::NONE)
    }

    /// An empty table with a planted bug (see [`crate::bug`]).
    pub fn with_bugs(config: TableConfig, bugs: Bugs) -> Result<LeaseTable, ConfigError> {
        config.validate()?;
        Ok(LeaseTable {
            config,
            bugs,
            jobs: BTreeMap::new(),
            queue: VecDeque::new(),
            expiries: BTreeSet::new(),
            backlog: 0,
            last_grants: BTreeMap::new(),
            last_now: Time::ZERO,
        })
    }

    /// The table's limits.
    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    /// Accepted jobs that are not terminal yet (queued or leased).
    pub fn backlog(&self) -> usize {
        self.backlog
    }

    /// The job's terminal outcome, once it has one.
    pub fn terminal(&self, job: JobId) -> Option<&Terminal> {
        match &self.jobs.get(&job)?.state {
            JobState::Terminal(terminal) => Some(terminal),
            _ => None,
        }
    }

    /// The job's live lease, if it is leased.
    pub fn lease(&self, job: JobId) -> Option<Lease> {
        match self.jobs.get(&job)?.state {
            JobState::Leased(lease) => Some(lease),
            _ => None,
        }
    }

    /// Worker grants the job has had so far.
    pub fn attempts(&self, job: JobId) -> Option<u32> {
        Some(self.jobs.get(&job)?.attempts)
    }

    /// The job's current epoch.
    pub fn epoch(&self, job: JobId) -> Option<Epoch> {
        Some(self.jobs.get(&job)?.epoch)
    }

    /// The earliest lease expiry: the next time a reclaim scan could find something.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.expiries.first().map(|&(at, _)| at)
    }

    /// Accepts a job into the queue, unless it is known already or the backlog is at capacity.
    pub fn enqueue(&mut self, now: Time, job: JobId) -> Result<Enqueued, TableError> {
        self.advance(now)?;
        if self.jobs.contains_key(&job) {
            return Ok(Enqueued::Duplicate);
        }
        if self.backlog >= self.config.capacity {
            let capacity = self.config.capacity;
            return Ok(Enqueued::Rejected(Rejection::QueueFull { capacity }));
        }
        let record = JobRecord { epoch: Epoch(0), attempts: 0, state: JobState::Queued };
        self.jobs.insert(job, record);
        self.queue.push_back(job);
        self.backlog += 1;
        assert!(self.backlog <= self.config.capacity);
        Ok(Enqueued::Accepted { backlog: self.backlog })
    }

    /// Grants `owner` a lease on the oldest queued job, under a new epoch. Every call is a fresh
    /// acquire; [`LeaseTable::acquire_for`] also knows a retried request.
    pub fn acquire(&mut self, now: Time, owner: WorkerId) -> Result<Acquired, TableError> {
        self.advance(now)?;
        Ok(self.grant_oldest(now, owner))
    }

    /// Answers `owner`'s acquire `request`, where a request sent again keeps its id.
    ///
    /// A retried copy of the request that got `owner`'s last grant, while that grant still stands
    /// (the job is leased to `owner` under the grant's epoch, and the lease has not expired by the
    /// table's clock), is answered with the same grant: [`Acquired::Regranted`]. Its first answer
    /// was lost, and a second job would leave the first leased to a worker that never heard of
    /// it. Anything else is a fresh acquire, as [`LeaseTable::acquire`]. The table remembers one
    /// grant per worker, the last.
    pub fn acquire_for(&mut self, now: Time, owner: WorkerId, request: RequestId) -> Result<Acquired, TableError> {
        self.advance(now)?;
        if let Some(grant) = self.standing_grant(now, owner, request) {
            return Ok(Acquired::Regranted(grant));
        }
        let acquired = self.grant_oldest(now, owner);
        if let Acquired::Granted(Grant { lease, .. }) = acquired {
            self.last_grants.insert(owner, LastGrant { request, job: lease.job, epoch: lease.epoch });
        }
        Ok(acquired)
    }

    /// The grant `request` already got, if it was `owner`'s last and still stands.
    fn standing_grant(&self, now: Time, owner: WorkerId, request: RequestId) -> Option<Grant> {
        let last = self.last_grants.get(&owner).filter(|last| last.request == request)?;
        let record = self.jobs.get(&last.job).expect("a granted job is known");
        let JobState::Leased(lease) = record.state else { return None };
        if lease.owner != Owner::Worker(owner) || lease.epoch != last.epoch || now >= lease.expires_at {
            return None;
        }
        // The lease is the grant's, so no grant of the job came since: the attempt is the grant's.
        Some(Grant { lease, attempt: record.attempts })
    }

    fn grant_oldest(&mut self, now: Time, owner: WorkerId) -> Acquired {
        while let Some(job) = self.queue.pop_front() {
            let record = self.jobs.get_mut(&job).expect("queued job is known");
            if !matches!(record.state, JobState::Queued) {
                continue; // Left the queue by another path (a planted bug only).
            }
            record.epoch = record.epoch.next();
            record.attempts += 1;
            let owner = Owner::Worker(owner);
            let lease = Lease { job, owner, epoch: record.epoch, expires_at: now + self.config.lease_ttl };
            record.state = JobState::Leased(lease);
            let inserted = self.expiries.insert((lease.expires_at, job));
            assert!(inserted, "a queued job had a live lease");
            return Acquired::Granted(Grant { lease, attempt: record.attempts });
        }
        Acquired::Empty
    }

    /// Extends a lease, only for its current epoch and only before it expires.
    pub fn renew(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Renewal, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        self.advance(now)?;
        let skip_epoch = self.bugs.on(Bug::RenewWithoutEpochCheck);
        let lease = match self.leased(job, epoch, skip_epoch)? {
            Ok(lease) => lease,
            Err(refusal) => return Ok(Renewal::Refused(refusal)),
        };
        let grace = if self.bugs.on(Bug::RenewGrace) { RENEW_GRACE } else { Span::ZERO };
        if now >= lease.expires_at + grace {
            return Ok(Renewal::Refused(Refusal::Expired { expires_at: lease.expires_at }));
        }
        let expires_at = now + self.config.lease_ttl;
        self.relet(Lease { expires_at, ..lease });
        Ok(Renewal::Renewed { epoch, expires_at })
    }

    /// Completes a job with `output`, only for its current epoch.
    ///
    /// Completing again with the same output is an idempotent success that records nothing; a
    /// different output is a conflict and changes nothing.
    pub fn complete(
        &mut self,
        now: Time,
        job: JobId,
        epoch: Epoch,
        output: OutputId,
    ) -> Result<Completion, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        self.advance(now)?;
        let record = self.record(job)?;
        let skip_epoch = self.bugs.on(Bug::CompleteWithoutEpochCheck);
        if record.epoch != epoch && !skip_epoch {
            return Ok(Completion::Refused(Refusal::StaleEpoch { current: record.epoch }));
        }
        match record.state {
            JobState::Terminal(Terminal { outcome: Outcome::Completed { output: recorded }, .. }) => {
                if recorded == output {
                    return Ok(Completion::AlreadyCompleted);
                }
                Ok(Completion::Conflict { recorded, offered: output })
            }
            JobState::Terminal(_) => Ok(Completion::Refused(Refusal::AlreadyTerminal)),
            JobState::Queued if !skip_epoch => Ok(Completion::Refused(Refusal::NotLeased)),
            JobState::Queued | JobState::Leased(_) => {
                let terminal = Terminal { job, epoch, outcome: Outcome::Completed { output } };
                if self.bugs.on(Bug::Canary) && output.0.is_multiple_of(2_000) {
                    // The completion is acknowledged but lost: the job runs, and ends, again.
                    self.unlease(job);
                    self.record_mut(job).state = JobState::Queued;
                    self.queue.push_back(job);
                    return Ok(Completion::Completed(terminal));
                }
                self.finish(terminal);
                Ok(Completion::Completed(terminal))
            }
        }
    }

    /// Hands a leased job back to the queue (after an empty reclaim, or a failed dependency),
    /// counting its attempts; a job out of attempts is dead-lettered instead.
    pub fn requeue(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        self.advance(now)?;
        if let Some(planted) = self.planted_requeue(job, epoch) {
            return Ok(planted);
        }
        let skip_epoch = self.bugs.on(Bug::RequeueWithoutEpochCheck) || self.bugs.on(Bug::HandBackByJobId);
        if let Err(refusal) = self.leased(job, epoch, skip_epoch)? {
            return Ok(Requeue::Refused(refusal));
        }
        let attempts = self.record(job)?.attempts;
        let late = u32::from(self.bugs.on(Bug::DeadLetterOneLate));
        if attempts >= self.config.attempts_max + late {
            let terminal = Terminal { job, epoch, outcome: Outcome::DeadLettered { attempts } };
            self.finish(terminal);
            return Ok(Requeue::DeadLettered(terminal));
        }
        if !self.bugs.on(Bug::RequeueKeepsExpiry) {
            self.unlease(job);
        }
        let fresh = self.bugs.on(Bug::ReclaimSkipsAdoption);
        let record = self.record_mut(job);
        record.state = JobState::Queued;
        if fresh {
            record.attempts = 0; // Rescued "as new": the next worker believes it is the first.
        }
        self.queue.push_back(job);
        Ok(Requeue::Requeued { attempts })
    }

    /// Undoes a grant its worker never took: the job goes back to the head of the queue, where
    /// it was, and the grant's attempt is not counted, for the job was never tried. Only for the
    /// current epoch of a leased job; a job is never dead-lettered by a release.
    pub fn release(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Release, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        self.advance(now)?;
        if let Err(refusal) = self.leased(job, epoch, false)? {
            return Ok(Release::Refused(refusal));
        }
        self.unlease(job);
        let record = self.record_mut(job);
        record.state = JobState::Queued;
        record.attempts = record.attempts.saturating_sub(1);
        let attempts = record.attempts;
        self.queue.push_front(job);
        Ok(Release::Released { attempts })
    }

    /// What a requeue of an ended job does under the planted [`Bug::HandBackByJobId`] (puts it back
    /// in the queue) or [`Bug::DeadLetterIgnoresTerminal`] (dead-letters it again); `None` when
    /// neither is planted, or the job has not ended.
    fn planted_requeue(&mut self, job: JobId, epoch: Epoch) -> Option<Requeue> {
        let record = self.jobs.get(&job)?;
        let JobState::Terminal(_) = record.state else { return None };
        if self.bugs.on(Bug::DeadLetterIgnoresTerminal)
            && record.epoch == epoch
            && record.attempts >= self.config.attempts_max
        {
            let attempts = record.attempts;
            return Some(Requeue::DeadLettered(Terminal { job, epoch, outcome: Outcome::DeadLettered { attempts } }));
        }
        if self.bugs.on(Bug::HandBackByJobId) {
            let attempts = record.attempts;
            self.record_mut(job).state = JobState::Queued;
            self.backlog += 1;
            self.queue.push_back(job);
            return Some(Requeue::Requeued { attempts });
        }
        None
    }

    /// Lists leases that have expired by the table's clock, earliest first, at most `batch_max`.
    ///
    /// `as_of` is the caller's own clock. The table never uses it: expiry is the table's to decide.
    pub fn expired(&mut self, now: Time, as_of: Time) -> Result<Vec<Lease>, TableError> {
        self.advance(now)?;
        let clock = if self.bugs.on(Bug::ReclaimByReclaimerClock) { as_of } else { now };
        let limit = if self.bugs.on(Bug::UnboundedReclaimBatch) { usize::MAX } else { self.config.batch_max };
        let leases = self
            .expiries
            .iter()
            .take_while(|&&(expires_at, _)| self.has_expired(expires_at, clock))
            .take(limit)
            .map(|&(_, job)| self.lease(job).expect("an expiry belongs to a live lease"))
            .collect::<Vec<_>>();
        assert!(leases.len() <= self.config.batch_max || limit == usize::MAX);
        Ok(leases)
    }

    /// Fences an expired lease with a compare-and-set on its epoch, handing the job to
    /// `reclaimer` under a new epoch. Losing the race is an outcome, not an error.
    pub fn fence(
        &mut self,
        now: Time,
        job: JobId,
        expected: Epoch,
        reclaimer: ReclaimerId,
        as_of: Time,
    ) -> Result<Fencing, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        self.advance(now)?;
        let no_cas = self.bugs.on(Bug::ReclaimWithoutCas);
        let record = self.record(job)?;
        let ended = matches!(record.state, JobState::Terminal(_));
        let revives = self.bugs.on(Bug::FenceRevivesFinished) && ended;
        let epoch_only = self.bugs.on(Bug::FenceChecksEpochOnly) && !matches!(record.state, JobState::Leased(_));
        if record.epoch == expected && (revives || epoch_only) {
            return Ok(self.fence_unleased(now, job, expected, reclaimer));
        }
        let JobState::Leased(lease) = record.state else {
            return Ok(Fencing::LostRace { current: record.epoch });
        };
        if lease.epoch != expected && !no_cas {
            return Ok(Fencing::LostRace { current: lease.epoch });
        }
        let clock = if self.bugs.on(Bug::ReclaimByReclaimerClock) { as_of } else { now };
        if !self.has_expired(lease.expires_at, clock) && !no_cas {
            return Ok(Fencing::NotExpired { expires_at: lease.expires_at });
        }
        let epoch = lease.epoch.next();
        let owner = Owner::Reclaimer(reclaimer);
        let fenced = Lease { job, owner, epoch, expires_at: now + self.config.lease_ttl };
        self.record_mut(job).epoch = epoch;
        self.relet(fenced);
        Ok(Fencing::Won { expired: lease, lease: fenced })
    }

    /// The planted fences that compare the epoch only ([`Bug::FenceRevivesFinished`],
    /// [`Bug::FenceChecksEpochOnly`]): the job, handed back or ended since the listing, is taken
    /// out of the queue or out of its end and leased to the reclaimer.
    fn fence_unleased(&mut self, now: Time, job: JobId, expected: Epoch, reclaimer: ReclaimerId) -> Fencing {
        if let JobState::Terminal(_) = self.record_mut(job).state {
            self.backlog += 1;
        }
        self.queue.retain(|&queued| queued != job);
        let ended = Lease { job, owner: Owner::Reclaimer(reclaimer), epoch: expected, expires_at: now };
        let lease = Lease { epoch: expected.next(), expires_at: now + self.config.lease_ttl, ..ended };
        let record = self.record_mut(job);
        record.epoch = lease.epoch;
        record.state = JobState::Leased(lease);
        let inserted = self.expiries.insert((lease.expires_at, job));
        assert!(inserted);
        Fencing::Won { expired: ended, lease }
    }

    /// Quarantines a job whose operation has two different outputs, for an operator to resolve.
    pub fn quarantine(
        &mut self,
        now: Time,
        job: JobId,
        epoch: Epoch,
        recorded: OutputId,
        rival: OutputId,
    ) -> Result<Quarantine, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        if recorded == rival {
            return Err(TableError::NotAConflict { job, output: recorded });
        }
        self.advance(now)?;
        if let Err(refusal) = self.leased(job, epoch, false)? {
            return Ok(Quarantine::Refused(refusal));
        }
        let terminal = Terminal { job, epoch, outcome: Outcome::Quarantined { recorded, rival } };
        self.finish(terminal);
        Ok(Quarantine::Quarantined(terminal))
    }

    fn has_expired(&self, expires_at: Time, clock: Time) -> bool {
        if self.bugs.on(Bug::ReclaimBoundaryOffByOne) {
            return clock.0 / RECLAIM_TICK.0 >= expires_at.0 / RECLAIM_TICK.0;
        }
        clock >= expires_at
    }

    fn advance(&mut self, now: Time) -> Result<(), TableError> {
        if now < self.last_now {
            return Err(TableError::TimeWentBackwards { last: self.last_now, now });
        }
        self.last_now = now;
        Ok(())
    }

    fn record(&self, job: JobId) -> Result<&JobRecord, TableError> {
        self.jobs.get(&job).ok_or(TableError::UnknownJob(job))
    }

    fn record_mut(&mut self, job: JobId) -> &mut JobRecord {
        self.jobs.get_mut(&job).expect("job checked known")
    }

    /// The job's live lease, if `epoch` is current (or the check is skipped) and it is leased.
    fn leased(&self, job: JobId, epoch: Epoch, skip_epoch: bool) -> Result<Result<Lease, Refusal>, TableError> {
        let record = self.record(job)?;
        if record.epoch != epoch && !skip_epoch {
            return Ok(Err(Refusal::StaleEpoch { current: record.epoch }));
        }
        Ok(match record.state {
            JobState::Leased(lease) => Ok(lease),
            JobState::Queued => Err(Refusal::NotLeased),
            JobState::Terminal(_) => Err(Refusal::AlreadyTerminal),
        })
    }

    /// Replaces the job's live lease (a renewal or a fence).
    fn relet(&mut self, lease: Lease) {
        self.unlease(lease.job);
        self.record_mut(lease.job).state = JobState::Leased(lease);
        let inserted = self.expiries.insert((lease.expires_at, lease.job));
        assert!(inserted);
    }

    fn unlease(&mut self, job: JobId) {
        if let JobState::Leased(lease) = self.record_mut(job).state {
            let removed = self.expiries.remove(&(lease.expires_at, job));
            assert!(removed, "a live lease had no expiry entry");
        }
    }

    fn finish(&mut self, terminal: Terminal) {
        self.unlease(terminal.job);
        let record = self.record_mut(terminal.job);
        assert!(!matches!(record.state, JobState::Terminal(_)), "a job ended twice");
        record.state = JobState::Terminal(terminal);
        self.backlog -= 1;
    }
}
