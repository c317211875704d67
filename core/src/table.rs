//! The lease table: the single authority on who holds which job, and until when.
//!
//! Its clock is the only clock that decides expiry: every call takes the table's `now`, and time
//! never goes backwards. Each call returns a typed outcome that the harness records as a history
//! event; an expected protocol outcome (a stale epoch, a lost race) is a value, never an `Err`.
//! `Err` is kept for misuse: an unknown job, or time going backwards.

use crate::answers::{
    Acquired, Completion, ConfigError, Enqueued, Fencing, Grant, Lease, Quarantine, Release, Renewal, Requeue,
    TableConfig, TableError, Terminal,
};
use crate::bug::Bugs;
use crate::ids::{Epoch, JobId, OutputId, ReclaimerId, RequestId, WorkerId};
use crate::rules::{Decision, JobRecord, JobState, LastGrant, Place, Rules};
use crate::time::Time;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The lease table. See the module doc.
///
/// Each operation checks for misuse, asks [`Rules`] for its decision over the job's record, and
/// writes the decision back into its maps (`LeaseTable::write`).
#[derive(Debug, Clone)]
pub struct LeaseTable {
    rules: Rules,
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
            rules: Rules { config, bugs },
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
        &self.rules.config
    }

    /// The rules this table decides by.
    pub fn rules(&self) -> &Rules {
        &self.rules
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
        self.jobs.get(&job)?.lease()
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
        let decision = self.rules.enqueue(self.jobs.contains_key(&job), self.backlog);
        if let Some(record) = decision.write {
            self.jobs.insert(job, record);
            self.queue.push_back(job);
            self.backlog += 1;
        }
        assert!(self.backlog <= self.rules.config.capacity);
        Ok(decision.answer)
    }

    /// Enqueues many jobs at once, each judged as [`LeaseTable::enqueue`] at `now` would judge it,
    /// in the order named: a known job (or one named earlier in the batch) is a duplicate, and a
    /// job past the capacity is refused while the jobs before it stay accepted. A batch is never
    /// all-or-nothing: each enqueue is idempotent by its job id, so a caller who lost the answer
    /// offers the whole batch again and hears `Duplicate` for those already in. 1 to `batch_max`
    /// jobs ([`TableError::BatchSize`]).
    pub fn enqueue_batch(&mut self, now: Time, jobs: &[JobId]) -> Result<Vec<Enqueued>, TableError> {
        self.check_batch(jobs.len())?;
        self.advance(now)?;
        Ok(jobs.iter().map(|&job| self.enqueue(now, job).expect("the clock was checked")).collect())
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
    /// it. Once the grant no longer stands, a copy gets nothing ([`Acquired::Spent`]): the worker
    /// had its answer, and a second job would wait out a lease nobody holds. Anything else is a
    /// fresh acquire, as [`LeaseTable::acquire`]. The table remembers one grant per worker, the
    /// last.
    pub fn acquire_for(&mut self, now: Time, owner: WorkerId, request: RequestId) -> Result<Acquired, TableError> {
        self.advance(now)?;
        if let Some(last) = self.last_grants.get(&owner) {
            let record = self.jobs.get(&last.job).expect("a granted job is known");
            if let Some(answer) = self.rules.copy_answer(now, owner, request, last, record) {
                return Ok(answer);
            }
        }
        let acquired = self.grant_oldest(now, owner);
        if let Acquired::Granted(Grant { lease, .. }) = acquired {
            self.last_grants.insert(owner, LastGrant { request, job: lease.job, epoch: lease.epoch });
        }
        Ok(acquired)
    }

    fn grant_oldest(&mut self, now: Time, owner: WorkerId) -> Acquired {
        while let Some(job) = self.queue.pop_front() {
            let record = self.jobs.get(&job).expect("queued job is known");
            // None: left the queue by another path (a planted bug only).
            if let Some(decision) = self.rules.grant(now, job, record, owner) {
                return self.write(job, decision);
            }
        }
        Acquired::Empty
    }

    /// Extends a lease, only for its current epoch and only before it expires.
    pub fn renew(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Renewal, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        self.advance(now)?;
        let decision = self.rules.renew(now, self.record(job)?, epoch);
        Ok(self.write(job, decision))
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
        let decision = self.rules.complete(job, self.record(job)?, epoch, output);
        Ok(self.write(job, decision))
    }

    /// Hands a leased job back to the queue (after an empty reclaim, or a failed dependency),
    /// counting its attempts; a job out of attempts is dead-lettered instead.
    pub fn requeue(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        self.advance(now)?;
        let decision = self.rules.requeue(job, self.record(job)?, epoch);
        Ok(self.write(job, decision))
    }

    /// Dead-letters a leased job now, at its worker's word that the dependency refused it for
    /// good: its attempts are left as they are. Only for the current epoch of a leased job, as a
    /// requeue is.
    pub fn dead_letter(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        self.advance(now)?;
        let decision = self.rules.dead_letter(job, self.record(job)?, epoch);
        Ok(self.write(job, decision))
    }

    /// Undoes a grant its worker never took: the job goes back to the head of the queue, where
    /// it was, and the grant's attempt is not counted, for the job was never tried. Only for the
    /// current epoch of a leased job; a job is never dead-lettered by a release.
    pub fn release(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Release, TableError> {
        self.record(job)?; // An unknown job is misuse: it must not move the clock either.
        self.advance(now)?;
        let decision = self.rules.release(self.record(job)?, epoch);
        Ok(self.write(job, decision))
    }

    /// Lists leases that have expired by the table's clock, earliest first, at most `batch_max`.
    ///
    /// `as_of` is the caller's own clock. The table never uses it: expiry is the table's to decide.
    pub fn expired(&mut self, now: Time, as_of: Time) -> Result<Vec<Lease>, TableError> {
        self.advance(now)?;
        let clock = self.rules.reclaim_clock(now, as_of);
        let limit = self.rules.listing_max();
        let leases = self
            .expiries
            .iter()
            .take_while(|&&(expires_at, _)| self.rules.has_expired(expires_at, clock))
            .take(limit)
            .map(|&(_, job)| self.lease(job).expect("an expiry belongs to a live lease"))
            .collect::<Vec<_>>();
        assert!(leases.len() <= self.rules.config.batch_max || limit == usize::MAX);
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
        let decision = self.rules.fence(now, job, self.record(job)?, expected, reclaimer, as_of);
        Ok(self.write(job, decision))
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
        let decision = self.rules.quarantine(job, self.record(job)?, epoch, recorded, rival);
        Ok(self.write(job, decision))
    }

    /// Grants `owner` leases on up to `want` of the oldest queued jobs, each under its own new
    /// epoch, oldest first: exactly what `want` calls of [`LeaseTable::acquire`] at `now` would
    /// grant, in one call. Fewer (or none) when the queue holds fewer. `want` is 1 to
    /// `batch_max` ([`TableError::BatchSize`]).
    pub fn acquire_batch(&mut self, now: Time, owner: WorkerId, want: usize) -> Result<Vec<Grant>, TableError> {
        self.check_batch(want)?;
        self.advance(now)?;
        let mut grants = Vec::with_capacity(want);
        while grants.len() < want {
            match self.grant_oldest(now, owner) {
                Acquired::Granted(grant) | Acquired::Regranted(grant) => grants.push(grant),
                Acquired::Empty | Acquired::Spent { .. } => break,
            }
        }
        Ok(grants)
    }

    /// Renews many leases at once, each judged on its own record and epoch, in the order named
    /// (as that many calls of [`LeaseTable::renew`] at `now`): one stale epoch is refused, the
    /// others renewed. A batch is never all-or-nothing: each lease's fate is its own record's,
    /// and refusing a whole batch for one lost lease would let every other lease of it expire.
    /// An unknown job is misuse, found before anything changes.
    pub fn renew_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Renewal>, TableError> {
        self.each(now, leases, |&(job, _)| job, |rules, _, record, &(_, epoch)| rules.renew(now, record, epoch))
    }

    /// Completes many jobs at once, each judged on its own epoch and output, in the order named
    /// (as that many calls of [`LeaseTable::complete`]); the answers say which completed and
    /// which were refused, and why.
    pub fn complete_batch(
        &mut self,
        now: Time,
        done: &[(JobId, Epoch, OutputId)],
    ) -> Result<Vec<Completion>, TableError> {
        self.each(
            now,
            done,
            |&(job, _, _)| job,
            |rules, job, record, &(_, epoch, output)| rules.complete(job, record, epoch, output),
        )
    }

    /// Requeues many jobs at once, each judged on its own epoch (as that many calls of
    /// [`LeaseTable::requeue`]).
    pub fn requeue_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Requeue>, TableError> {
        self.each(now, leases, |&(job, _)| job, |rules, job, record, &(_, epoch)| rules.requeue(job, record, epoch))
    }

    /// Releases many grants at once, each judged on its own epoch (as that many calls of
    /// [`LeaseTable::release`]): a worker hands back the buffered grants it will not run.
    pub fn release_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Release>, TableError> {
        self.each(now, leases, |&(job, _)| job, |rules, _, record, &(_, epoch)| rules.release(record, epoch))
    }

    /// A batch's calls at `now`, in order, each `decide`d over its own job's record and written
    /// back before the next is decided; its size and every job checked first.
    fn each<I, A>(
        &mut self,
        now: Time,
        items: &[I],
        job_of: impl Fn(&I) -> JobId,
        decide: impl Fn(&Rules, JobId, &JobRecord, &I) -> Decision<A>,
    ) -> Result<Vec<A>, TableError> {
        self.check_batch(items.len())?;
        for item in items {
            self.record(job_of(item))?;
        }
        self.advance(now)?;
        Ok(items
            .iter()
            .map(|item| {
                let job = job_of(item);
                let decision = decide(&self.rules, job, self.record(job).expect("checked"), item);
                self.write(job, decision)
            })
            .collect())
    }

    fn check_batch(&self, asked: usize) -> Result<(), TableError> {
        let max = self.rules.config.batch_max;
        if asked == 0 || asked > max {
            return Err(TableError::BatchSize { asked, max });
        }
        Ok(())
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

    /// Writes a decision back for a known job: the record, its expiry in the index, the backlog
    /// (a job ending leaves it, a planted revival re-enters it) and its place in the queue.
    fn write<A>(&mut self, job: JobId, decision: Decision<A>) -> A {
        let Some(new) = decision.write else { return decision.answer };
        let old = self.jobs.insert(job, new).expect("a decision is for a known job");
        let (was_ended, ends) = (old.terminal().is_some(), new.terminal().is_some());
        assert!(!(was_ended && ends), "a job ended twice");
        if let (Some(lease), false) = (old.lease(), decision.keeps_expiry) {
            let removed = self.expiries.remove(&(lease.expires_at, job));
            assert!(removed, "a live lease had no expiry entry");
        }
        if let Some(lease) = new.lease() {
            let inserted = self.expiries.insert((lease.expires_at, job));
            assert!(inserted, "a lease's expiry was indexed twice");
        }
        match (was_ended, ends) {
            (false, true) => self.backlog -= 1,
            (true, false) => self.backlog += 1,
            _ => {}
        }
        match decision.place {
            Place::Stay => {}
            Place::Back => self.queue.push_back(job),
            Place::Front => self.queue.push_front(job),
            Place::Out => self.queue.retain(|&queued| queued != job),
        }
        decision.answer
    }
}
