//! The operations of a store on a database, written once over a transaction ([`Tx`]).
//!
//! Each operation runs in one transaction: read the job's row (locked), ask `lease-core`'s
//! [`Rules`] for the decision, write the decision back with a compare-and-set (`UPDATE_JOB` in
//! [`crate::schema`]), and append the history line. SQLite and PostgreSQL implement [`Tx`] with
//! the same statements; neither decides anything itself.

use crate::caller::Caller;
use crate::schema;
use crate::StoreError;
use lease_core::{
    Acquired, Apply, Bug, Completion, Enqueued, Epoch, Fencing, Grant, JobId, JobRecord, JobState, LastGrant, Lease,
    Lookup, OpId, OpRecord, Outcome, OutputId, Owner, Place, Quarantine, ReclaimerId, Release, Renewal, RequestId,
    Requeue, Rules, TableError, Terminal, Time, WorkerId,
};
use lease_history::{answers, Event, Node};

/// One row of `lease_jobs`, column for column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub job: i64,
    pub state: &'static str,
    pub epoch: i64,
    pub attempts: i64,
    pub queue_seq: Option<i64>,
    pub owner: Option<String>,
    pub lease_epoch: Option<i64>,
    pub expires_at_us: Option<i64>,
    pub outcome: Option<&'static str>,
    pub output: Option<i64>,
    pub rival: Option<i64>,
    pub ended_epoch: Option<i64>,
    pub ended_attempts: Option<i64>,
}

/// When a write puts its job at the back of the queue, or ends it: the columns `queued_at_us`
/// and `ended_at_us` (the queue's figures read the first, a prune the second), written with the
/// row in the same statement; `None` keeps the column as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamps {
    pub queued_at_us: Option<i64>,
    pub ended_at_us: Option<i64>,
}

/// A value for a signed 64-bit column. Ids, epochs and times past `i64::MAX` are refused.
pub fn int(value: u64) -> i64 {
    i64::try_from(value).expect("a value past i64::MAX cannot be stored")
}

/// An output identity as a signed 64-bit column: its bits, reinterpreted. An identity is only
/// ever compared for equality, never ordered or summed, so every `u64` is stored.
pub fn bits(output: OutputId) -> i64 {
    output.0 as i64
}

/// The output identity whose bits a column holds ([`bits`]).
pub fn identity(bits: i64) -> OutputId {
    OutputId(bits as u64)
}

fn uint(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative value {value}")))
}

fn state_name(state: &str) -> Result<&'static str, StoreError> {
    ["queued", "leased", "terminal"]
        .into_iter()
        .find(|name| *name == state)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown state {state:?}")))
}

fn outcome_name(outcome: Option<&str>) -> Result<Option<&'static str>, StoreError> {
    let Some(outcome) = outcome else { return Ok(None) };
    ["completed", "dead_lettered", "quarantined"]
        .into_iter()
        .find(|name| *name == outcome)
        .map(Some)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown outcome {outcome:?}")))
}

fn owner_of(text: &str) -> Result<Owner, StoreError> {
    let corrupt = || StoreError::Corrupt(format!("unknown owner {text:?}"));
    let (kind, number) = text.split_at_checked(1).ok_or_else(corrupt)?;
    let number: u32 = number.parse().map_err(|_| corrupt())?;
    match kind {
        "w" => Ok(Owner::Worker(WorkerId(number))),
        "r" => Ok(Owner::Reclaimer(lease_core::ReclaimerId(number))),
        _ => Err(corrupt()),
    }
}

impl Row {
    /// The row from its columns as read (text columns checked against their closed sets).
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        job: i64,
        state: &str,
        numbers: [i64; 2],
        queue_seq: Option<i64>,
        owner: Option<String>,
        lease: [Option<i64>; 2],
        outcome: Option<&str>,
        ended: [Option<i64>; 4],
    ) -> Result<Row, StoreError> {
        Ok(Row {
            job,
            state: state_name(state)?,
            epoch: numbers[0],
            attempts: numbers[1],
            queue_seq,
            owner,
            lease_epoch: lease[0],
            expires_at_us: lease[1],
            outcome: outcome_name(outcome)?,
            output: ended[0],
            rival: ended[1],
            ended_epoch: ended[2],
            ended_attempts: ended[3],
        })
    }

    /// The row of `record`, at `queue_seq` while queued.
    pub fn of(job: JobId, record: &JobRecord, queue_seq: Option<i64>) -> Row {
        let mut row = Row {
            job: int(job.0),
            state: "queued",
            epoch: int(record.epoch.0),
            attempts: i64::from(record.attempts),
            queue_seq: None,
            owner: None,
            lease_epoch: None,
            expires_at_us: None,
            outcome: None,
            output: None,
            rival: None,
            ended_epoch: None,
            ended_attempts: None,
        };
        match record.state {
            JobState::Queued => row.queue_seq = queue_seq,
            JobState::Leased(lease) => {
                row.state = "leased";
                row.owner = Some(lease.owner.to_string());
                row.lease_epoch = Some(int(lease.epoch.0));
                row.expires_at_us = Some(int(lease.expires_at.0));
            }
            JobState::Terminal(terminal) => {
                row.state = "terminal";
                row.ended_epoch = Some(int(terminal.epoch.0));
                match terminal.outcome {
                    Outcome::Completed { output } => {
                        row.outcome = Some("completed");
                        row.output = Some(bits(output));
                    }
                    Outcome::DeadLettered { attempts } => {
                        row.outcome = Some("dead_lettered");
                        row.ended_attempts = Some(i64::from(attempts));
                    }
                    Outcome::Quarantined { recorded, rival } => {
                        row.outcome = Some("quarantined");
                        row.output = Some(bits(recorded));
                        row.rival = Some(bits(rival));
                    }
                }
            }
        }
        row
    }

    /// The job's record.
    pub fn record(&self) -> Result<(JobId, JobRecord), StoreError> {
        let job = JobId(uint(self.job)?);
        let epoch = Epoch(uint(self.epoch)?);
        let attempts = u32::try_from(self.attempts).map_err(|_| StoreError::Corrupt("attempts".into()))?;
        let missing = |what: &str| StoreError::Corrupt(format!("{} row of job {} has no {what}", self.state, self.job));
        let state = match self.state {
            "queued" => JobState::Queued,
            "leased" => JobState::Leased(Lease {
                job,
                owner: owner_of(self.owner.as_deref().ok_or_else(|| missing("owner"))?)?,
                epoch: Epoch(uint(self.lease_epoch.ok_or_else(|| missing("lease_epoch"))?)?),
                expires_at: Time(uint(self.expires_at_us.ok_or_else(|| missing("expires_at_us"))?)?),
            }),
            _ => {
                let epoch = Epoch(uint(self.ended_epoch.ok_or_else(|| missing("ended_epoch"))?)?);
                let output = || Ok::<_, StoreError>(identity(self.output.ok_or_else(|| missing("output"))?));
                let outcome = match self.outcome.ok_or_else(|| missing("outcome"))? {
                    "completed" => Outcome::Completed { output: output()? },
                    "dead_lettered" => {
                        let attempts = self.ended_attempts.ok_or_else(|| missing("ended_attempts"))?;
                        Outcome::DeadLettered { attempts: u32::try_from(attempts).unwrap_or(u32::MAX) }
                    }
                    _ => Outcome::Quarantined {
                        recorded: output()?,
                        rival: identity(self.rival.ok_or_else(|| missing("rival"))?),
                    },
                };
                JobState::Terminal(Terminal { job, epoch, outcome })
            }
        };
        Ok((job, JobRecord { epoch, attempts, state }))
    }
}

/// The backlog as the count's rows sum it ([`crate::schema::SELECT_BACKLOG`]): a sum below zero is
/// a count some write did not keep.
pub(crate) fn backlog_of(sum: i64) -> Result<usize, StoreError> {
    usize::try_from(sum).map_err(|_| StoreError::Corrupt(format!("the backlog's count is {sum}, below zero")))
}

/// The statements a store runs inside one transaction. Every method is one or two statements of
/// [`crate::schema`]; the decisions are the callers', in this module.
pub trait Tx {
    /// The job's row, locked for the rest of the transaction.
    fn job(&mut self, job: JobId) -> Result<Option<Row>, StoreError>;
    /// Whether the job is known, without locking its row.
    fn known(&mut self, job: JobId) -> Result<bool, StoreError>;
    /// The queue's head, or in a batched acquire the next queued job after those granted.
    fn head(&mut self) -> Result<Option<Row>, StoreError>;
    /// Accepted, non-terminal jobs, read before this transaction changes the count (an enqueue
    /// reads it first).
    fn backlog(&mut self) -> Result<usize, StoreError>;
    /// Adds `delta` to the backlog's count, in this transaction ([`crate::schema::ADD_BACKLOG`]):
    /// one for a job accepted, minus one for a job ended. A store may add its calls up and write
    /// the sum once, before it commits.
    fn add_backlog(&mut self, delta: i64) -> Result<(), StoreError>;
    /// `(back, front)`: the queue places behind the last queued job and ahead of the first.
    fn queue_ends(&mut self) -> Result<(i64, i64), StoreError>;
    /// A new row, in the queue since `queued_at_us`.
    fn insert(&mut self, row: &Row, queued_at_us: i64) -> Result<(), StoreError>;
    /// A new job's payload.
    fn insert_payload(&mut self, job: JobId, payload: &[u8]) -> Result<(), StoreError>;
    /// The compare-and-set write of `new` over `old`, with its `stamps`: rows written (0 or 1).
    fn update(&mut self, new: &Row, old: &Row, stamps: Stamps) -> Result<usize, StoreError>;
    /// Leases expiring at or before `through`, earliest first, at most `limit`.
    fn expiring(&mut self, through: i64, limit: i64) -> Result<Vec<Row>, StoreError>;
    /// A worker's last grant by request.
    fn last_grant(&mut self, worker: WorkerId) -> Result<Option<LastGrant>, StoreError>;
    /// Remembers a worker's last grant by request.
    fn set_last_grant(&mut self, worker: WorkerId, grant: &LastGrant) -> Result<(), StoreError>;
    /// An operation's ledger row, created empty if missing, locked.
    fn op(&mut self, op: OpId) -> Result<OpRecord, StoreError>;
    /// Runs a planted bug's own statement (`sql` of [`crate::schema`], `PLANTED_…`) with the
    /// job, an epoch and one value: rows written.
    fn planted(&mut self, sql: &str, job: JobId, epoch: Epoch, value: i64) -> Result<usize, StoreError>;
    /// The guarded write of a ledger decision: rows written (0 or 1).
    fn update_op(&mut self, op: OpId, new: &OpRecord, old: &OpRecord) -> Result<usize, StoreError>;
    /// Appends one history line about `job` (`None`: no one job), numbered in the log (SQLite: the
    /// head row's next number, the row locked to commit; PostgreSQL: the log's sequence). The
    /// log's order: [`crate::Clock`].
    fn log(&mut self, t_us: u64, node: &str, job: Option<JobId>, line: &str) -> Result<(), StoreError>;
    /// Sends the writes held so far, their guards checked, without committing: a batch's next job
    /// reads what its earlier jobs wrote. A store that writes at once has nothing to send.
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// The store's side of one operation: the rules, the caller for the history, and the clock.
pub struct Op<'a> {
    /// The rules.
    pub rules: &'a Rules,
    /// Who asks, for the history.
    pub caller: &'a Caller,
    /// The latest time this handle passed; `now` must not be earlier.
    pub last_now: Time,
    /// The table's time for this operation.
    pub now: Time,
}

impl Op<'_> {
    fn clock(&self) -> Result<(), StoreError> {
        if self.now < self.last_now {
            return Err(TableError::TimeWentBackwards { last: self.last_now, now: self.now }.into());
        }
        Ok(())
    }

    /// Writes the answer's line, unless it is one a store does not write down
    /// ([`answers::is_written`]: an empty poll or scan).
    fn log(&self, tx: &mut impl Tx, event: Event) -> Result<(), StoreError> {
        if !answers::is_written(&event) {
            return Ok(());
        }
        let (node, job) = (answers::writer(&event).to_string(), event.job());
        tx.log(self.now.0, &node, job, &answers::line(self.now.0, event))
    }

    /// The job's record, or misuse: an unknown job (checked before the clock, as the table does).
    fn known(&self, tx: &mut impl Tx, job: JobId) -> Result<(Row, JobRecord), StoreError> {
        let row = tx.job(job)?.ok_or(TableError::UnknownJob(job))?;
        let (_, record) = row.record()?;
        Ok((row, record))
    }

    /// Writes a decision back over `old`, guarded; a lost compare-and-set is a broken invariant
    /// (the row was locked), so it rolls back with an error rather than answer.
    fn write<A>(&self, tx: &mut impl Tx, old: &Row, decision: &lease_core::Decision<A>) -> Result<(), StoreError> {
        let Some(new) = decision.write else { return Ok(()) };
        let seq = match (decision.place, new.state) {
            (_, JobState::Leased(_) | JobState::Terminal(_)) => None,
            (Place::Back, _) => Some(tx.queue_ends()?.0),
            (Place::Front, _) => Some(tx.queue_ends()?.1),
            (Place::Stay | Place::Out, _) => old.queue_seq,
        };
        let (job, _) = old.record()?;
        let mut row = Row::of(job, &new, seq);
        if decision.keeps_expiry && row.expires_at_us.is_none() {
            row.expires_at_us = old.expires_at_us; // The planted bug: the expiry outlives the lease.
        }
        let now = Some(int(self.now.0));
        let ends = matches!(new.state, JobState::Terminal(_)) && old.state != "terminal";
        let stamps = Stamps {
            queued_at_us: now.filter(|_| decision.place == Place::Back && matches!(new.state, JobState::Queued)),
            ended_at_us: now.filter(|_| ends),
        };
        let written = tx.update(&row, old, stamps)?;
        if written != 1 {
            return Err(StoreError::Raced { job });
        }
        if ends {
            tx.add_backlog(-1)?;
        }
        Ok(())
    }

    /// See [`crate::TableStore::enqueue`].
    pub fn enqueue(&self, tx: &mut impl Tx, job: JobId, payload: &[u8]) -> Result<Enqueued, StoreError> {
        Ok(self.enqueue_batch(tx, &[(job, payload)])?[0])
    }

    /// See [`crate::TableStore::enqueue_batch`]: each job judged as its single enqueue would be,
    /// after the jobs before it (a job accepted earlier in the batch is a duplicate). Every read
    /// comes first (whether each job is known, the backlog, the queue's back), then the writes:
    /// each accepted job's row and payload, every job's line, and the backlog's change once.
    pub fn enqueue_batch<P: AsRef<[u8]>>(
        &self,
        tx: &mut impl Tx,
        jobs: &[(JobId, P)],
    ) -> Result<Vec<Enqueued>, StoreError> {
        self.clock()?;
        for (job, payload) in jobs {
            crate::check_payload(*job, payload.as_ref())?;
        }
        let mut known = std::collections::BTreeSet::new();
        for &(job, _) in jobs {
            if tx.known(job)? {
                known.insert(job);
            }
        }
        let before = tx.backlog()?;
        let (mut back, _) = tx.queue_ends()?;
        let mut backlog = before;
        let mut answers = Vec::with_capacity(jobs.len());
        for (job, payload) in jobs {
            let decision = self.rules.enqueue(known.contains(job), backlog);
            if let Some(record) = decision.write {
                known.insert(*job);
                tx.insert(&Row::of(*job, &record, Some(back)), int(self.now.0))?;
                if !payload.as_ref().is_empty() {
                    tx.insert_payload(*job, payload.as_ref())?;
                }
                back += 1;
                backlog += 1;
            }
            self.log(tx, answers::enqueued(*job, &decision.answer))?;
            answers.push(decision.answer);
        }
        if backlog > before {
            tx.add_backlog((backlog - before) as i64)?;
        }
        Ok(answers)
    }

    /// See [`crate::TableStore::acquire_for`]; `request` `None` is a plain acquire.
    pub fn acquire(
        &self,
        tx: &mut impl Tx,
        owner: WorkerId,
        request: Option<RequestId>,
    ) -> Result<Acquired, StoreError> {
        self.clock()?;
        let answer = self.grant(tx, owner, request)?;
        self.log(tx, answers::acquired(Node::Worker(owner.0), &answer))?;
        Ok(answer)
    }

    fn grant(&self, tx: &mut impl Tx, owner: WorkerId, request: Option<RequestId>) -> Result<Acquired, StoreError> {
        let last = match request {
            Some(_) => tx.last_grant(owner)?,
            None => None,
        };
        if let (Some(request), Some(last)) = (request, last) {
            let (_, record) = self.known(tx, last.job)?;
            if let Some(answer) = self.rules.copy_answer(self.now, owner, request, &last, &record) {
                return Ok(answer);
            }
        }
        let Some(head) = tx.head()? else { return Ok(Acquired::Empty) };
        let (job, record) = head.record()?;
        let decision = self.rules.grant(self.now, job, &record, owner).expect("the head of the queue is queued");
        self.write(tx, &head, &decision)?;
        if let (Some(request), Acquired::Granted(Grant { lease, .. })) = (request, decision.answer) {
            tx.set_last_grant(owner, &LastGrant { request, job: lease.job, epoch: lease.epoch })?;
        }
        Ok(decision.answer)
    }

    /// See [`crate::TableStore::acquire_batch`]: up to `want` grants, each a single grant's
    /// decision and line, in one transaction. Each grant takes the next head ([`Tx::head`]: on
    /// PostgreSQL, the next of the rows locked together up front).
    pub fn acquire_batch(&self, tx: &mut impl Tx, owner: WorkerId, want: usize) -> Result<Vec<Grant>, StoreError> {
        self.clock()?;
        let mut grants = Vec::with_capacity(want);
        while grants.len() < want {
            match self.grant(tx, owner, None)? {
                Acquired::Granted(grant) | Acquired::Regranted(grant) => {
                    self.log(tx, answers::acquired(Node::Worker(owner.0), &Acquired::Granted(grant)))?;
                    grants.push(grant);
                }
                Acquired::Empty | Acquired::Spent { .. } => break,
            }
        }
        Ok(grants)
    }

    /// See [`crate::TableStore::renew`].
    pub fn renew(&self, tx: &mut impl Tx, job: JobId, epoch: Epoch) -> Result<Renewal, StoreError> {
        let (row, record) = self.known(tx, job)?;
        self.clock()?;
        if self.rules.bugs.on(Bug::RenewByEpochOnly) {
            return self.planted_renew(tx, job, epoch, &record);
        }
        let decision = self.rules.renew(self.now, &record, epoch);
        self.write(tx, &row, &decision)?;
        self.log(tx, answers::renewal(&self.caller.asker(), job, epoch, &decision.answer))?;
        Ok(decision.answer)
    }

    /// See [`crate::TableStore::complete`].
    pub fn complete(
        &self,
        tx: &mut impl Tx,
        job: JobId,
        epoch: Epoch,
        output: OutputId,
    ) -> Result<Completion, StoreError> {
        let (row, record) = self.known(tx, job)?;
        self.clock()?;
        if self.rules.bugs.on(Bug::CompleteByStateOnly) {
            return self.planted_complete(tx, job, epoch, output, &record);
        }
        let decision = self.rules.complete(job, &record, epoch, output);
        self.write(tx, &row, &decision)?;
        self.log(tx, answers::completion(&self.caller.asker(), job, epoch, output, &decision.answer))?;
        Ok(decision.answer)
    }

    /// Planted bug `renew-by-epoch-only`: the heartbeat statement decides, with no expiry in
    /// its guard; what it did not write is answered as the rules would.
    fn planted_renew(
        &self,
        tx: &mut impl Tx,
        job: JobId,
        epoch: Epoch,
        record: &JobRecord,
    ) -> Result<Renewal, StoreError> {
        let expires_at = self.now + self.rules.config.lease_ttl;
        let answer = match tx.planted(schema::PLANTED_RENEW_BY_EPOCH, job, epoch, int(expires_at.0))? {
            0 => self.rules.renew(self.now, record, epoch).answer,
            _ => Renewal::Renewed { epoch, expires_at },
        };
        self.log(tx, answers::renewal(&self.caller.asker(), job, epoch, &answer))?;
        Ok(answer)
    }

    /// Planted bug `complete-by-state-only`: River's completion statement decides, guarded by the
    /// state alone; what it did not write is answered as the rules would.
    fn planted_complete(
        &self,
        tx: &mut impl Tx,
        job: JobId,
        epoch: Epoch,
        output: OutputId,
        record: &JobRecord,
    ) -> Result<Completion, StoreError> {
        let answer = match tx.planted(schema::PLANTED_COMPLETE_BY_STATE, job, epoch, bits(output))? {
            0 => self.rules.complete(job, record, epoch, output).answer,
            _ => {
                // A leased job ended: the count follows, whatever the bug.
                tx.add_backlog(-1)?;
                Completion::Completed(Terminal { job, epoch, outcome: Outcome::Completed { output } })
            }
        };
        self.log(tx, answers::completion(&self.caller.asker(), job, epoch, output, &answer))?;
        Ok(answer)
    }

    /// See [`crate::TableStore::requeue`].
    pub fn requeue(&self, tx: &mut impl Tx, job: JobId, epoch: Epoch) -> Result<Requeue, StoreError> {
        let (row, record) = self.known(tx, job)?;
        self.clock()?;
        let decision = self.rules.requeue(job, &record, epoch);
        self.write(tx, &row, &decision)?;
        self.log(tx, answers::requeue(&self.caller.asker(), job, epoch, &decision.answer))?;
        Ok(decision.answer)
    }

    /// See [`crate::TableStore::dead_letter`].
    pub fn dead_letter(&self, tx: &mut impl Tx, job: JobId, epoch: Epoch) -> Result<Requeue, StoreError> {
        let (row, record) = self.known(tx, job)?;
        self.clock()?;
        let decision = self.rules.dead_letter(job, &record, epoch);
        self.write(tx, &row, &decision)?;
        self.log(tx, answers::dead_letter(&self.caller.asker(), job, epoch, &decision.answer))?;
        Ok(decision.answer)
    }

    /// See [`crate::TableStore::release`].
    pub fn release(&self, tx: &mut impl Tx, job: JobId, epoch: Epoch) -> Result<Release, StoreError> {
        let (row, record) = self.known(tx, job)?;
        self.clock()?;
        let decision = self.rules.release(&record, epoch);
        self.write(tx, &row, &decision)?;
        self.log(tx, answers::release(&self.caller.asker(), job, epoch, &decision.answer))?;
        Ok(decision.answer)
    }

    /// See [`crate::TableStore::expired`].
    pub fn expired(&self, tx: &mut impl Tx, as_of: Time) -> Result<Vec<Lease>, StoreError> {
        self.clock()?;
        let clock = self.rules.reclaim_clock(self.now, as_of);
        let through = int(self.rules.expired_through(clock).0);
        let limit = i64::try_from(self.rules.listing_max()).unwrap_or(i64::MAX);
        let mut leases = Vec::new();
        for row in tx.expiring(through, limit)? {
            let (_, record) = row.record()?;
            let lease = record.lease().expect("an expiry belongs to a live lease");
            assert!(self.rules.has_expired(lease.expires_at, clock), "listed an unexpired lease");
            leases.push(lease);
        }
        assert!(leases.len() <= self.rules.config.batch_max || limit == i64::MAX);
        self.log(tx, answers::listed(&self.caller.asker(), &leases))?;
        Ok(leases)
    }

    /// See [`crate::TableStore::fence`].
    pub fn fence(
        &self,
        tx: &mut impl Tx,
        job: JobId,
        expected: Epoch,
        reclaimer: ReclaimerId,
        as_of: Time,
    ) -> Result<Fencing, StoreError> {
        let (row, record) = self.known(tx, job)?;
        self.clock()?;
        let decision = self.rules.fence(self.now, job, &record, expected, reclaimer, as_of);
        self.write(tx, &row, &decision)?;
        self.log(tx, answers::fencing(&self.caller.asker(), job, expected, &decision.answer))?;
        Ok(decision.answer)
    }

    /// See [`crate::TableStore::quarantine`].
    pub fn quarantine(
        &self,
        tx: &mut impl Tx,
        job: JobId,
        epoch: Epoch,
        recorded: OutputId,
        rival: OutputId,
    ) -> Result<Quarantine, StoreError> {
        let (row, record) = self.known(tx, job)?;
        if recorded == rival {
            return Err(TableError::NotAConflict { job, output: recorded }.into());
        }
        self.clock()?;
        let decision = self.rules.quarantine(job, &record, epoch, recorded, rival);
        self.write(tx, &row, &decision)?;
        self.log(tx, answers::quarantine(&self.caller.asker(), job, epoch, &decision.answer))?;
        Ok(decision.answer)
    }

    /// See [`crate::TableStore::append`]: `at` is the stamp, if not this operation's time.
    pub fn append(
        &self,
        tx: &mut impl Tx,
        at: Option<Time>,
        node: &str,
        line: &mut dyn FnMut(Time) -> Option<String>,
    ) -> Result<Option<Time>, StoreError> {
        let stamp = at.unwrap_or(self.now);
        let Some(text) = line(stamp) else { return Ok(None) };
        tx.log(stamp.0, node, line_job(&text), &text)?;
        Ok(Some(stamp))
    }

    /// See [`crate::TableStore::append_all`].
    pub fn append_all(
        &self,
        tx: &mut impl Tx,
        lines: &mut dyn FnMut(Time) -> Vec<(String, String)>,
    ) -> Result<Time, StoreError> {
        for (node, text) in lines(self.now) {
            tx.log(self.now.0, &node, line_job(&text), &text)?;
        }
        Ok(self.now)
    }

    /// See [`crate::TableStore::append_started`].
    pub fn append_started(
        &self,
        tx: &mut impl Tx,
        leases: &[(JobId, Epoch)],
        line: &mut dyn FnMut(Time, usize) -> (String, String),
    ) -> Result<(Time, Vec<bool>), StoreError> {
        self.clock()?;
        // Every row read before any line is written (PostgreSQL holds its writes to the commit).
        let mut written = Vec::with_capacity(leases.len());
        for &(job, epoch) in leases {
            written.push(match tx.job(job)? {
                Some(row) => self.rules.may_start(self.now, &row.record()?.1, epoch),
                None => false,
            });
        }
        for (index, (&(job, _), &live)) in leases.iter().zip(&written).enumerate() {
            if live {
                let (node, text) = line(self.now, index);
                tx.log(self.now.0, &node, Some(job), &text)?;
            }
        }
        Ok((self.now, written))
    }

    /// See [`crate::LedgerStore::lookup`].
    pub fn lookup(&self, tx: &mut impl Tx, op: OpId, epoch: Epoch) -> Result<Lookup, StoreError> {
        let old = tx.op(op)?;
        let (answer, new) = old.lookup(epoch, self.rules.bugs);
        self.write_op(tx, op, &new, &old)?;
        self.log(tx, answers::lookup(&self.caller.asker(), op, epoch, &answer))?;
        Ok(answer)
    }

    /// See [`crate::LedgerStore::apply`].
    pub fn apply(&self, tx: &mut impl Tx, op: OpId, epoch: Epoch, output: OutputId) -> Result<Apply, StoreError> {
        let old = tx.op(op)?;
        let (answer, new) = old.apply(epoch, output, self.rules.bugs);
        self.write_op(tx, op, &new, &old)?;
        self.log(tx, answers::apply(&self.caller.ledger_asker(), op, epoch, output, &answer))?;
        Ok(answer)
    }

    fn write_op(&self, tx: &mut impl Tx, op: OpId, new: &OpRecord, old: &OpRecord) -> Result<(), StoreError> {
        if new == old {
            return Ok(());
        }
        if tx.update_op(op, new, old)? != 1 {
            return Err(StoreError::Raced { job: op.job });
        }
        Ok(())
    }
}

/// The one job a line of the history is about ([`lease_history::Event::job`]): `None` for a line
/// about none or several, and for text that is no history line (nothing of this crate writes one).
pub fn line_job(text: &str) -> Option<JobId> {
    serde_json::from_str::<lease_history::Entry>(text).ok()?.job()
}
