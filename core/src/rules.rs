//! The table's rules, written once: each operation's decision as a pure function over one job's
//! record.
//!
//! [`LeaseTable`](crate::LeaseTable) keeps its records in maps and calls these functions on them;
//! a store on a database (`lease-store`) reads the same record from a row locked inside a
//! transaction, calls the same function, and writes the [`Decision`] back in that transaction. So
//! the rules that decide (epoch checks, expiry checks, the compare-and-set of a fence, when a job
//! dead-letters), and the planted bugs that break them, live here alone.
//!
//! A decision never sees the clock check or an unknown job: those are misuse, answered with a
//! [`TableError`](crate::TableError) by the caller before it asks.

use crate::answers::{
    Acquired, Completion, Enqueued, Fencing, Grant, Lease, Outcome, Quarantine, Refusal, Rejection, Release, Renewal,
    Requeue, TableConfig, Terminal, RECLAIM_TICK, RENEW_GRACE,
};
use crate::bug::{Bug, Bugs};
use crate::ids::{Epoch, JobId, OutputId, Owner, ReclaimerId, RequestId, WorkerId};
use crate::time::{Span, Time};

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Waiting in the queue.
    Queued,
    /// Held under this lease.
    Leased(Lease),
    /// Ended with this terminal outcome.
    Terminal(Terminal),
}

/// Everything the table keeps about one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRecord {
    /// The job's current epoch (fencing token).
    pub epoch: Epoch,
    /// Worker grants so far.
    pub attempts: u32,
    /// Where the job stands.
    pub state: JobState,
}

impl JobRecord {
    /// A job just accepted: queued, epoch 0, never granted.
    pub const NEW: JobRecord = JobRecord { epoch: Epoch(0), attempts: 0, state: JobState::Queued };

    /// Its live lease, if it is leased.
    pub fn lease(&self) -> Option<Lease> {
        match self.state {
            JobState::Leased(lease) => Some(lease),
            _ => None,
        }
    }

    /// Its terminal outcome, if it ended.
    pub fn terminal(&self) -> Option<Terminal> {
        match self.state {
            JobState::Terminal(terminal) => Some(terminal),
            _ => None,
        }
    }
}

/// The last grant an acquire by request made to a worker, and the request it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastGrant {
    /// The request the grant answered.
    pub request: RequestId,
    /// The job granted.
    pub job: JobId,
    /// The grant's epoch.
    pub epoch: Epoch,
}

/// What a decision does with the job's place in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Nothing (a job leaving the queue by a grant was already taken from its head).
    Stay,
    /// To the back of the queue.
    Back,
    /// To the head of the queue (a released grant, undone).
    Front,
    /// Out of the queue, from wherever it is (a planted fence only).
    Out,
}

/// One operation's decision: the answer, and what to write back for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Decision<A> {
    /// The answer to the request.
    pub answer: A,
    /// The job's new record; `None`: nothing changes.
    pub write: Option<JobRecord>,
    /// What happens to the job's place in the queue.
    pub place: Place,
    /// The planted [`Bug::RequeueKeepsExpiry`]: the expiry index keeps the old lease's expiry.
    pub keeps_expiry: bool,
}

impl<A> Decision<A> {
    /// An answer that changes nothing.
    fn answer(answer: A) -> Decision<A> {
        Decision { answer, write: None, place: Place::Stay, keeps_expiry: false }
    }

    /// An answer that writes `record`.
    fn write(answer: A, record: JobRecord, place: Place) -> Decision<A> {
        Decision { answer, write: Some(record), place, keeps_expiry: false }
    }
}

/// The table's rules for one configuration and one (or no) planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// The table's limits.
    pub config: TableConfig,
    /// The planted bug in force, if any.
    pub bugs: Bugs,
}

impl Rules {
    /// An arrival: `known` says whether the job id is known, `backlog` counts accepted,
    /// non-terminal jobs. A new record is written only on acceptance, to the back of the queue.
    pub fn enqueue(&self, known: bool, backlog: usize) -> Decision<Enqueued> {
        if known {
            return Decision::answer(Enqueued::Duplicate);
        }
        if backlog >= self.config.capacity {
            let capacity = self.config.capacity;
            return Decision::answer(Enqueued::Rejected(Rejection::QueueFull { capacity }));
        }
        assert!(backlog < self.config.capacity);
        Decision::write(Enqueued::Accepted { backlog: backlog + 1 }, JobRecord::NEW, Place::Back)
    }

    /// A grant of `head`, the queue's oldest job, to `owner` under the next epoch; `None` when
    /// `head` is not queued (it left the queue by another path: a planted bug only).
    pub fn grant(&self, now: Time, job: JobId, head: &JobRecord, owner: WorkerId) -> Option<Decision<Acquired>> {
        if !matches!(head.state, JobState::Queued) {
            return None;
        }
        let epoch = head.epoch.next();
        let attempts = head.attempts + 1;
        let lease = Lease { job, owner: Owner::Worker(owner), epoch, expires_at: now + self.config.lease_ttl };
        let record = JobRecord { epoch, attempts, state: JobState::Leased(lease) };
        Some(Decision::write(Acquired::Granted(Grant { lease, attempt: attempts }), record, Place::Stay))
    }

    /// The answer to `request` if it is a copy of the request that got `owner`'s `last` grant
    /// (whose job's record is `record`); `None` for any other request, a fresh acquire. The same
    /// grant again while it stands (the job is leased to `owner` under the grant's epoch and the
    /// lease has not expired by the table's clock): [`Acquired::Regranted`]. Else nothing,
    /// [`Acquired::Spent`]: a request is granted a job once.
    pub fn copy_answer(
        &self,
        now: Time,
        owner: WorkerId,
        request: RequestId,
        last: &LastGrant,
        record: &JobRecord,
    ) -> Option<Acquired> {
        if last.request != request {
            return None;
        }
        let spent = Acquired::Spent { job: last.job, epoch: last.epoch };
        let Some(lease) = record.lease() else { return Some(spent) };
        if lease.owner != Owner::Worker(owner) || lease.epoch != last.epoch || now >= lease.expires_at {
            return Some(spent);
        }
        // The lease is the grant's, so no grant of the job came since: the attempt is the grant's.
        Some(Acquired::Regranted(Grant { lease, attempt: record.attempts }))
    }

    /// Extends a lease, only for its current epoch and only before it expires.
    pub fn renew(&self, now: Time, record: &JobRecord, epoch: Epoch) -> Decision<Renewal> {
        let skip_epoch = self.bugs.on(Bug::RenewWithoutEpochCheck);
        let lease = match leased(record, epoch, skip_epoch) {
            Ok(lease) => lease,
            Err(refusal) => return Decision::answer(Renewal::Refused(refusal)),
        };
        let grace = if self.bugs.on(Bug::RenewGrace) { RENEW_GRACE } else { Span::ZERO };
        if now >= lease.expires_at + grace {
            return Decision::answer(Renewal::Refused(Refusal::Expired { expires_at: lease.expires_at }));
        }
        let expires_at = now + self.config.lease_ttl;
        let record = JobRecord { state: JobState::Leased(Lease { expires_at, ..lease }), ..*record };
        Decision::write(Renewal::Renewed { epoch, expires_at }, record, Place::Stay)
    }

    /// Whether an effect under `epoch` may be written down as starting at `now`: the lease is
    /// the job's current one and has not expired. A store writes a worker's `executing` line only
    /// then, so that the history's promise holds however long the line's write took: every
    /// effect starts under a live lease, never after a reclaimer could have taken it.
    pub fn may_start(&self, now: Time, record: &JobRecord, epoch: Epoch) -> bool {
        matches!(leased(record, epoch, false), Ok(lease) if now < lease.expires_at)
    }

    /// Completes a job with `output`, only for its current epoch; the same output again is an
    /// idempotent success that writes nothing, a different one a conflict that changes nothing.
    pub fn complete(&self, job: JobId, record: &JobRecord, epoch: Epoch, output: OutputId) -> Decision<Completion> {
        let skip_epoch = self.bugs.on(Bug::CompleteWithoutEpochCheck);
        if record.epoch != epoch && !skip_epoch {
            return Decision::answer(Completion::Refused(Refusal::StaleEpoch { current: record.epoch }));
        }
        match record.state {
            JobState::Terminal(Terminal { outcome: Outcome::Completed { output: recorded }, .. }) => {
                if recorded == output {
                    return Decision::answer(Completion::AlreadyCompleted);
                }
                Decision::answer(Completion::Conflict { recorded, offered: output })
            }
            JobState::Terminal(_) => Decision::answer(Completion::Refused(Refusal::AlreadyTerminal)),
            JobState::Queued if !skip_epoch => Decision::answer(Completion::Refused(Refusal::NotLeased)),
            JobState::Queued | JobState::Leased(_) => {
                let terminal = Terminal { job, epoch, outcome: Outcome::Completed { output } };
                if self.bugs.on(Bug::Canary) && output.0.is_multiple_of(2_000) {
                    // The completion is acknowledged but lost: the job runs, and ends, again.
                    let queued = JobRecord { state: JobState::Queued, ..*record };
                    return Decision::write(Completion::Completed(terminal), queued, Place::Back);
                }
                let ended = JobRecord { state: JobState::Terminal(terminal), ..*record };
                Decision::write(Completion::Completed(terminal), ended, Place::Stay)
            }
        }
    }

    /// Hands a leased job back to the back of the queue, counting its attempts; a job out of
    /// attempts is dead-lettered instead.
    pub fn requeue(&self, job: JobId, record: &JobRecord, epoch: Epoch) -> Decision<Requeue> {
        if let Some(planted) = self.planted_requeue(job, record, epoch) {
            return planted;
        }
        let skip_epoch = self.bugs.on(Bug::RequeueWithoutEpochCheck) || self.bugs.on(Bug::HandBackByJobId);
        if let Err(refusal) = leased(record, epoch, skip_epoch) {
            return Decision::answer(Requeue::Refused(refusal));
        }
        let attempts = record.attempts;
        let late = u32::from(self.bugs.on(Bug::DeadLetterOneLate));
        if attempts >= self.config.attempts_max + late {
            let terminal = Terminal { job, epoch, outcome: Outcome::DeadLettered { attempts } };
            let ended = JobRecord { state: JobState::Terminal(terminal), ..*record };
            return Decision::write(Requeue::DeadLettered(terminal), ended, Place::Stay);
        }
        // Rescued "as new" under the planted bug: the next worker believes it is the first.
        let fresh = self.bugs.on(Bug::ReclaimSkipsAdoption);
        let queued =
            JobRecord { state: JobState::Queued, attempts: if fresh { 0 } else { record.attempts }, ..*record };
        let mut decision = Decision::write(Requeue::Requeued { attempts }, queued, Place::Back);
        decision.keeps_expiry = self.bugs.on(Bug::RequeueKeepsExpiry);
        decision
    }

    /// A dead-letter of `record` under `epoch`, asked by its worker after a permanent failure:
    /// the job ends dead-lettered with the attempts it spent, if `epoch` holds its live lease;
    /// refused otherwise, as a requeue would be (a stale worker never ends a job it lost).
    pub fn dead_letter(&self, job: JobId, record: &JobRecord, epoch: Epoch) -> Decision<Requeue> {
        if let Err(refusal) = leased(record, epoch, false) {
            return Decision::answer(Requeue::Refused(refusal));
        }
        let terminal = Terminal { job, epoch, outcome: Outcome::DeadLettered { attempts: record.attempts } };
        let ended = JobRecord { state: JobState::Terminal(terminal), ..*record };
        Decision::write(Requeue::DeadLettered(terminal), ended, Place::Stay)
    }

    /// What a requeue of an ended job does under the planted [`Bug::HandBackByJobId`] (puts it back
    /// in the queue) or [`Bug::DeadLetterIgnoresTerminal`] (dead-letters it again); `None` when
    /// neither is planted, or the job has not ended.
    fn planted_requeue(&self, job: JobId, record: &JobRecord, epoch: Epoch) -> Option<Decision<Requeue>> {
        let JobState::Terminal(_) = record.state else { return None };
        let attempts = record.attempts;
        if self.bugs.on(Bug::DeadLetterIgnoresTerminal)
            && record.epoch == epoch
            && record.attempts >= self.config.attempts_max
        {
            let terminal = Terminal { job, epoch, outcome: Outcome::DeadLettered { attempts } };
            return Some(Decision::answer(Requeue::DeadLettered(terminal)));
        }
        if self.bugs.on(Bug::HandBackByJobId) {
            let queued = JobRecord { state: JobState::Queued, ..*record };
            return Some(Decision::write(Requeue::Requeued { attempts }, queued, Place::Back));
        }
        None
    }

    /// Undoes a grant its worker never took: back to the head of the queue, the grant's attempt
    /// not counted. Only for the current epoch of a leased job; never a dead-letter.
    pub fn release(&self, record: &JobRecord, epoch: Epoch) -> Decision<Release> {
        if let Err(refusal) = leased(record, epoch, false) {
            return Decision::answer(Release::Refused(refusal));
        }
        let attempts = record.attempts.saturating_sub(1);
        let queued = JobRecord { state: JobState::Queued, attempts, ..*record };
        Decision::write(Release::Released { attempts }, queued, Place::Front)
    }

    /// The clock a reclaim decides expiry by: the table's own, `now`. `as_of` is the reclaimer's,
    /// which only a planted bug uses.
    pub fn reclaim_clock(&self, now: Time, as_of: Time) -> Time {
        if self.bugs.on(Bug::ReclaimByReclaimerClock) {
            return as_of;
        }
        now
    }

    /// Whether a lease expiring at `expires_at` has expired by `clock`.
    pub fn has_expired(&self, expires_at: Time, clock: Time) -> bool {
        if self.bugs.on(Bug::ReclaimBoundaryOffByOne) {
            return clock.0 / RECLAIM_TICK.0 >= expires_at.0 / RECLAIM_TICK.0;
        }
        clock >= expires_at
    }

    /// The latest expiry that has expired by `clock`: a listing reads the leases expiring at or
    /// before it, earliest first, and keeps those [`Rules::has_expired`] confirms.
    pub fn expired_through(&self, clock: Time) -> Time {
        if self.bugs.on(Bug::ReclaimBoundaryOffByOne) {
            return Time((clock.0 / RECLAIM_TICK.0 + 1) * RECLAIM_TICK.0 - 1);
        }
        clock
    }

    /// The most leases one listing may hold: `batch_max`.
    pub fn listing_max(&self) -> usize {
        if self.bugs.on(Bug::UnboundedReclaimBatch) {
            return usize::MAX;
        }
        self.config.batch_max
    }

    /// Fences an expired lease with a compare-and-set on its epoch, handing the job to
    /// `reclaimer` under a new epoch. Losing the race is an outcome, not an error.
    pub fn fence(
        &self,
        now: Time,
        job: JobId,
        record: &JobRecord,
        expected: Epoch,
        reclaimer: ReclaimerId,
        as_of: Time,
    ) -> Decision<Fencing> {
        let no_cas = self.bugs.on(Bug::ReclaimWithoutCas);
        let ended = matches!(record.state, JobState::Terminal(_));
        let revives = self.bugs.on(Bug::FenceRevivesFinished) && ended;
        let epoch_only = self.bugs.on(Bug::FenceChecksEpochOnly) && !matches!(record.state, JobState::Leased(_));
        if record.epoch == expected && (revives || epoch_only) {
            return self.fence_unleased(now, job, record, expected, reclaimer);
        }
        let JobState::Leased(lease) = record.state else {
            return Decision::answer(Fencing::LostRace { current: record.epoch });
        };
        if lease.epoch != expected && !no_cas {
            return Decision::answer(Fencing::LostRace { current: lease.epoch });
        }
        if !self.has_expired(lease.expires_at, self.reclaim_clock(now, as_of)) && !no_cas {
            return Decision::answer(Fencing::NotExpired { expires_at: lease.expires_at });
        }
        let epoch = lease.epoch.next();
        let owner = Owner::Reclaimer(reclaimer);
        let fenced = Lease { job, owner, epoch, expires_at: now + self.config.lease_ttl };
        let record = JobRecord { epoch, state: JobState::Leased(fenced), ..*record };
        Decision::write(Fencing::Won { expired: lease, lease: fenced }, record, Place::Stay)
    }

    /// The planted fences that compare the epoch only ([`Bug::FenceRevivesFinished`],
    /// [`Bug::FenceChecksEpochOnly`]): the job, handed back or ended since the listing, is taken
    /// out of the queue or out of its end and leased to the reclaimer.
    fn fence_unleased(
        &self,
        now: Time,
        job: JobId,
        record: &JobRecord,
        expected: Epoch,
        reclaimer: ReclaimerId,
    ) -> Decision<Fencing> {
        let ended = Lease { job, owner: Owner::Reclaimer(reclaimer), epoch: expected, expires_at: now };
        let lease = Lease { epoch: expected.next(), expires_at: now + self.config.lease_ttl, ..ended };
        let record = JobRecord { epoch: lease.epoch, state: JobState::Leased(lease), ..*record };
        Decision::write(Fencing::Won { expired: ended, lease }, record, Place::Out)
    }

    /// Quarantines a job whose operation has two different outputs, for an operator to resolve.
    /// The caller has refused a quarantine naming one output twice as misuse.
    pub fn quarantine(
        &self,
        job: JobId,
        record: &JobRecord,
        epoch: Epoch,
        recorded: OutputId,
        rival: OutputId,
    ) -> Decision<Quarantine> {
        assert_ne!(recorded, rival, "a quarantine needs two different outputs");
        if let Err(refusal) = leased(record, epoch, self.bugs.on(Bug::QuarantineWithoutEpochCheck)) {
            return Decision::answer(Quarantine::Refused(refusal));
        }
        let terminal = Terminal { job, epoch, outcome: Outcome::Quarantined { recorded, rival } };
        let ended = JobRecord { state: JobState::Terminal(terminal), ..*record };
        Decision::write(Quarantine::Quarantined(terminal), ended, Place::Stay)
    }
}

/// The job's live lease, if `epoch` is current (or the check is skipped) and it is leased.
fn leased(record: &JobRecord, epoch: Epoch, skip_epoch: bool) -> Result<Lease, Refusal> {
    if record.epoch != epoch && !skip_epoch {
        return Err(Refusal::StaleEpoch { current: record.epoch });
    }
    match record.state {
        JobState::Leased(lease) => Ok(lease),
        JobState::Queued => Err(Refusal::NotLeased),
        JobState::Terminal(_) => Err(Refusal::AlreadyTerminal),
    }
}
