//! The in-memory store: `lease-core`'s [`LeaseTable`] and [`EffectLedger`] as they are, with the
//! history lines kept in a vector. Nothing is durable; one handle is the whole store.

use crate::caller::Caller;
use crate::{Figures, LedgerStore, Stamp, StoreError, TableStore};
use lease_core::{
    Acquired, Apply, Bug, Bugs, Completion, EffectLedger, Enqueued, Epoch, Fencing, Grant, JobId, JobRecord, JobState,
    Lease, LeaseTable, Lookup, OpId, OpRecord, Outcome, OutputId, Quarantine, ReclaimerId, Release, Renewal, RequestId,
    Requeue, TableConfig, Time, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::{answers, Event, Node};

/// The in-memory store.
#[derive(Debug)]
pub struct MemoryStore {
    table: LeaseTable,
    ledger: EffectLedger,
    caller: Caller,
    /// The history lines, unless unlogged (`None`).
    events: Option<Vec<String>>,
    /// Each accepted job's payload, when it has one.
    payloads: std::collections::BTreeMap<JobId, Vec<u8>>,
    /// Every accepted job, and when it last entered the queue (accepted, or requeued to the
    /// back), as the SQL stores' `queued_at_us` ([`crate::schema::UPDATE_JOB`]'s stamps).
    queued_at: std::collections::BTreeMap<JobId, Time>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new(config: TableConfig) -> Result<MemoryStore, StoreError> {
        MemoryStore::planted(config, Bugs::NONE)
    }

    /// An empty store that keeps no history lines ([`TableStore::events`] is always empty): for
    /// a caller that writes its own history, as the simulator does, and should not pay for two.
    pub fn unlogged(config: TableConfig) -> Result<MemoryStore, StoreError> {
        MemoryStore::planted_unlogged(config, Bugs::NONE)
    }

    /// An empty store with `bugs` planted ([`crate::planted`]).
    pub(crate) fn planted(config: TableConfig, bugs: Bugs) -> Result<MemoryStore, StoreError> {
        let table = LeaseTable::with_bugs(config, bugs)?;
        let ledger = EffectLedger::with_bugs(bugs);
        let payloads = std::collections::BTreeMap::new();
        let queued_at = std::collections::BTreeMap::new();
        Ok(MemoryStore { table, ledger, caller: Caller::default(), events: Some(Vec::new()), payloads, queued_at })
    }

    /// [`MemoryStore::unlogged`], with `bugs` planted ([`crate::planted`]).
    pub(crate) fn planted_unlogged(config: TableConfig, bugs: Bugs) -> Result<MemoryStore, StoreError> {
        Ok(MemoryStore { events: None, ..MemoryStore::planted(config, bugs)? })
    }

    /// Enqueues `jobs` through [`LeaseTable::enqueue_batch`], each job's payload kept and line
    /// logged: a single enqueue is the batch of one. A bad payload anywhere refuses them all first.
    fn enqueue_each<P: AsRef<[u8]>>(&mut self, now: Time, jobs: &[(JobId, P)]) -> Result<Vec<Enqueued>, StoreError> {
        for (job, payload) in jobs {
            crate::check_payload(*job, payload.as_ref())?;
        }
        let ids: Vec<JobId> = jobs.iter().map(|&(job, _)| job).collect();
        let mut answers = self.table.enqueue_batch(now, &ids)?;
        if self.table.rules().bugs.on(Bug::BatchEnqueueStopsAtRefusal) {
            // The jobs after the first refusal are refused too (the queue stays full: a refusal
            // changes nothing), and answered nothing.
            if let Some(first) = answers.iter().position(|answer| matches!(answer, Enqueued::Rejected(_))) {
                answers.truncate(first + 1);
            }
        }
        for ((job, payload), answer) in jobs.iter().zip(&answers) {
            if matches!(answer, Enqueued::Accepted { .. }) {
                self.queued_at.insert(*job, now);
                if !payload.as_ref().is_empty() {
                    self.payloads.insert(*job, payload.as_ref().to_vec());
                }
            }
            self.log(now, answers::enqueued(*job, answer));
        }
        Ok(answers)
    }

    /// The planted batch bugs ([`Bug::BATCH`]): call `at` of a batch, after the `earlier` calls'
    /// answers, served as the bug serves it and logged with the request's own epoch; `None` when
    /// no such bug is planted or it does not touch this call.
    fn planted_batch(
        &mut self,
        now: Time,
        at: usize,
        calls: usize,
        earlier: &[WorkerReply],
        (worker, id, request): crate::WorkerCall,
    ) -> Option<Result<WorkerReply, StoreError>> {
        let bugs = self.table.rules().bugs;
        let asker = self.caller.asker();
        let current = |table: &LeaseTable, job| table.lease(job).map(|lease| lease.epoch);
        match request {
            WorkerRequest::Complete { job, epoch, output } if at > 0 && bugs.on(Bug::BatchCompleteChecksFirst) => {
                let held = current(&self.table, job).unwrap_or(epoch);
                Some(self.table.complete(now, job, held, output).map_err(StoreError::from).map(|answer| {
                    self.log(now, answers::completion(&asker, job, epoch, output, &answer));
                    WorkerReply::Completed(answer)
                }))
            }
            WorkerRequest::Renew { job, epoch } if calls > 1 && bugs.on(Bug::BatchRenewUnchecked) => {
                let held = current(&self.table, job).unwrap_or(epoch);
                Some(self.table.renew(now, job, held).map_err(StoreError::from).map(|answer| {
                    let answer = match answer {
                        Renewal::Renewed { expires_at, .. } => Renewal::Renewed { epoch, expires_at },
                        refused => refused,
                    };
                    self.log(now, answers::renewal(&asker, job, epoch, &answer));
                    WorkerReply::Renewed(answer)
                }))
            }
            WorkerRequest::Acquire if bugs.on(Bug::BatchAcquireGrantsTwice) && self.queue_empty(now, worker, id) => {
                // The batch read the queue's head once: the job it granted last goes out again.
                let last = earlier.iter().rev().find_map(|answer| match answer {
                    WorkerReply::Acquired(Acquired::Granted(grant)) => Some(grant.lease),
                    _ => None,
                })?;
                let again =
                    self.table.release(now, last.job, last.epoch).and_then(|_| self.table.acquire_for(now, worker, id));
                Some(again.map_err(StoreError::from).map(|acquired| {
                    self.log(now, answers::acquired(Node::Worker(worker.0), &acquired));
                    WorkerReply::Acquired(acquired)
                }))
            }
            _ => None,
        }
    }

    /// Serves a batch of renewals, completions, requeues or lookups through `lease-core`'s own
    /// batch calls ([`LeaseTable::renew_batch`], [`LeaseTable::complete_batch`],
    /// [`LeaseTable::requeue_batch`], [`EffectLedger::lookup_batch`]), which judge each job on
    /// its own record (one answer per call, in order), and logs each call's line under its own
    /// worker, in order: the same answers
    /// and lines as serving the calls one by one, which `store/tests/batch.rs` checks. So the
    /// simulator's batched worlds run the core's batch code, not only its single calls. `None`
    /// for an acquire (each is answered by its own request id), and when a planted batch bug
    /// must see the calls one at a time.
    fn serve_by_rules(
        &mut self,
        now: Time,
        kind: crate::BatchKind,
        calls: &[crate::WorkerCall],
    ) -> Result<Option<Vec<WorkerReply>>, StoreError> {
        let bugs = self.table.rules().bugs;
        if Bug::BATCH.iter().any(|&bug| bugs.on(bug)) {
            return Ok(None);
        }
        let leases = |calls: &[crate::WorkerCall]| -> Vec<(JobId, Epoch)> {
            calls.iter().filter_map(|call| lease_named(call.2)).collect()
        };
        let replies: Vec<WorkerReply> = match kind {
            crate::BatchKind::Acquire => return Ok(None),
            crate::BatchKind::Renew => {
                self.table.renew_batch(now, &leases(calls))?.into_iter().map(WorkerReply::Renewed).collect()
            }
            crate::BatchKind::Complete => {
                let done: Vec<(JobId, Epoch, OutputId)> = calls
                    .iter()
                    .filter_map(|call| match call.2 {
                        WorkerRequest::Complete { job, epoch, output } => Some((job, epoch, output)),
                        _ => None,
                    })
                    .collect();
                self.table.complete_batch(now, &done)?.into_iter().map(WorkerReply::Completed).collect()
            }
            crate::BatchKind::Requeue => {
                let answers = self.table.requeue_batch(now, &leases(calls))?;
                for (call, answer) in calls.iter().zip(&answers) {
                    if let (Some((job, _)), Requeue::Requeued { .. }) = (lease_named(call.2), answer) {
                        self.queued_at.insert(job, now);
                    }
                }
                answers.into_iter().map(WorkerReply::Requeued).collect()
            }
            crate::BatchKind::Lookup => {
                let ops: Vec<(OpId, Epoch)> = calls
                    .iter()
                    .filter_map(|call| match call.2 {
                        WorkerRequest::Lookup { op, epoch } => Some((op, epoch)),
                        _ => None,
                    })
                    .collect();
                self.ledger.lookup_batch(&ops).into_iter().map(WorkerReply::Looked).collect()
            }
        };
        for (&(worker, _, request), reply) in calls.iter().zip(&replies) {
            self.log(now, crate::serve::worker_line(worker, request, reply));
        }
        Ok(Some(replies))
    }

    /// Whether an acquire would find nothing to grant (asked of a copy of the table: a planted
    /// bug's probe, never the correct path).
    fn queue_empty(&self, now: Time, worker: WorkerId, id: RequestId) -> bool {
        matches!(self.table.clone().acquire_for(now, worker, id), Ok(Acquired::Empty))
    }

    fn log(&mut self, now: Time, event: Event) {
        if !answers::is_written(&event) {
            return; // An empty poll or scan, as the SQL stores.
        }
        if let Some(events) = &mut self.events {
            events.push(answers::line(now.0, event));
        }
    }
}

/// The lease a renewal or a requeue names.
fn lease_named(request: WorkerRequest) -> Option<(JobId, Epoch)> {
    match request {
        WorkerRequest::Renew { job, epoch } | WorkerRequest::Requeue { job, epoch } => Some((job, epoch)),
        _ => None,
    }
}

impl TableStore for MemoryStore {
    fn config(&self) -> TableConfig {
        *self.table.config()
    }

    fn set_caller(&mut self, caller: Caller) {
        self.caller = caller;
    }

    fn enqueue_with(&mut self, now: Time, job: JobId, payload: &[u8]) -> Result<Enqueued, StoreError> {
        Ok(self.enqueue_each(now, &[(job, payload)])?[0])
    }

    fn enqueue_batch(&mut self, now: Time, jobs: &[(JobId, Vec<u8>)]) -> Result<Vec<Enqueued>, StoreError> {
        self.enqueue_each(now, jobs)
    }

    fn payload(&mut self, job: JobId) -> Result<Vec<u8>, StoreError> {
        Ok(self.payloads.get(&job).cloned().unwrap_or_default())
    }

    fn acquire(&mut self, now: Time, owner: WorkerId) -> Result<Acquired, StoreError> {
        let answer = self.table.acquire(now, owner)?;
        self.log(now, answers::acquired(Node::Worker(owner.0), &answer));
        Ok(answer)
    }

    fn acquire_for(&mut self, now: Time, owner: WorkerId, request: RequestId) -> Result<Acquired, StoreError> {
        let answer = self.table.acquire_for(now, owner, request)?;
        self.log(now, answers::acquired(Node::Worker(owner.0), &answer));
        Ok(answer)
    }

    fn renew(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Renewal, StoreError> {
        let answer = self.table.renew(now, job, epoch)?;
        self.log(now, answers::renewal(&self.caller.asker(), job, epoch, &answer));
        Ok(answer)
    }

    fn complete(&mut self, now: Time, job: JobId, epoch: Epoch, output: OutputId) -> Result<Completion, StoreError> {
        let answer = self.table.complete(now, job, epoch, output)?;
        self.log(now, answers::completion(&self.caller.asker(), job, epoch, output, &answer));
        Ok(answer)
    }

    fn requeue(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, StoreError> {
        let answer = self.table.requeue(now, job, epoch)?;
        if let Requeue::Requeued { .. } = answer {
            self.queued_at.insert(job, now);
        }
        self.log(now, answers::requeue(&self.caller.asker(), job, epoch, &answer));
        Ok(answer)
    }

    fn dead_letter(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, StoreError> {
        let answer = self.table.dead_letter(now, job, epoch)?;
        self.log(now, answers::dead_letter(&self.caller.asker(), job, epoch, &answer));
        Ok(answer)
    }

    fn release(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Release, StoreError> {
        let answer = self.table.release(now, job, epoch)?;
        self.log(now, answers::release(&self.caller.asker(), job, epoch, &answer));
        Ok(answer)
    }

    fn acquire_batch(&mut self, now: Time, owner: WorkerId, want: usize) -> Result<Vec<Grant>, StoreError> {
        let grants = self.table.acquire_batch(now, owner, want)?;
        for &grant in &grants {
            self.log(now, answers::acquired(Node::Worker(owner.0), &Acquired::Granted(grant)));
        }
        Ok(grants)
    }

    fn renew_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Renewal>, StoreError> {
        let answers = self.table.renew_batch(now, leases)?;
        for (&(job, epoch), answer) in leases.iter().zip(&answers) {
            self.log(now, answers::renewal(&self.caller.asker(), job, epoch, answer));
        }
        Ok(answers)
    }

    fn complete_batch(&mut self, now: Time, done: &[(JobId, Epoch, OutputId)]) -> Result<Vec<Completion>, StoreError> {
        let answers = self.table.complete_batch(now, done)?;
        for (&(job, epoch, output), answer) in done.iter().zip(&answers) {
            self.log(now, answers::completion(&self.caller.asker(), job, epoch, output, answer));
        }
        Ok(answers)
    }

    fn requeue_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Requeue>, StoreError> {
        let answers = self.table.requeue_batch(now, leases)?;
        for (&(job, epoch), answer) in leases.iter().zip(&answers) {
            if let Requeue::Requeued { .. } = answer {
                self.queued_at.insert(job, now);
            }
            self.log(now, answers::requeue(&self.caller.asker(), job, epoch, answer));
        }
        Ok(answers)
    }

    fn release_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Release>, StoreError> {
        let answers = self.table.release_batch(now, leases)?;
        for (&(job, epoch), answer) in leases.iter().zip(&answers) {
            self.log(now, answers::release(&self.caller.asker(), job, epoch, answer));
        }
        Ok(answers)
    }

    fn serve_batch(&mut self, now: Time, calls: &[crate::WorkerCall]) -> Result<Vec<WorkerReply>, StoreError> {
        // Every check first, as a SQL store's rollback would leave nothing written.
        crate::sql_store::check_batch(*self.table.config(), calls.len())?;
        let kind = crate::batch_kind(calls)?;
        for &(_, _, request) in calls {
            if let WorkerRequest::Renew { job, .. }
            | WorkerRequest::Complete { job, .. }
            | WorkerRequest::Requeue { job, .. } = request
            {
                if self.table.epoch(job).is_none() {
                    return Err(lease_core::TableError::UnknownJob(job).into());
                }
            }
        }
        if let Some(replies) = self.serve_by_rules(now, kind, calls)? {
            return Ok(replies);
        }
        let kept = self.caller;
        let mut replies = Vec::with_capacity(calls.len());
        for (at, &(worker, id, request)) in calls.iter().enumerate() {
            self.caller = Caller { from: Some(lease_core::Owner::Worker(worker)), batch: None };
            let served = match self.planted_batch(now, at, calls.len(), &replies, (worker, id, request)) {
                Some(planted) => planted,
                None => crate::serve_worker(self, now, worker, id, request).map(|served| served.reply),
            };
            self.caller = kept;
            replies.push(served?);
        }
        Ok(replies)
    }

    fn expired(&mut self, now: Time, as_of: Time) -> Result<Vec<Lease>, StoreError> {
        let leases = self.table.expired(now, as_of)?;
        self.log(now, answers::listed(&self.caller.asker(), &leases));
        Ok(leases)
    }

    fn fence(
        &mut self,
        now: Time,
        job: JobId,
        expected: Epoch,
        reclaimer: ReclaimerId,
        as_of: Time,
    ) -> Result<Fencing, StoreError> {
        let answer = self.table.fence(now, job, expected, reclaimer, as_of)?;
        self.log(now, answers::fencing(&self.caller.asker(), job, expected, &answer));
        Ok(answer)
    }

    fn fence_batch(
        &mut self,
        now: Time,
        reclaimer: ReclaimerId,
        fences: &[(JobId, Epoch, Time)],
    ) -> Result<Vec<Fencing>, StoreError> {
        crate::sql_store::check_batch(*self.table.config(), fences.len())?;
        // Unknown jobs refuse the batch before anything is fenced, as one transaction would.
        if let Some(&(job, _, _)) = fences.iter().find(|&&(job, _, _)| self.table.epoch(job).is_none()) {
            return Err(lease_core::TableError::UnknownJob(job).into());
        }
        fences.iter().map(|&(job, expected, as_of)| self.fence(now, job, expected, reclaimer, as_of)).collect()
    }

    fn quarantine(
        &mut self,
        now: Time,
        job: JobId,
        epoch: Epoch,
        recorded: OutputId,
        rival: OutputId,
    ) -> Result<Quarantine, StoreError> {
        let answer = self.table.quarantine(now, job, epoch, recorded, rival)?;
        self.log(now, answers::quarantine(&self.caller.asker(), job, epoch, &answer));
        Ok(answer)
    }

    fn job(&mut self, job: JobId) -> Result<Option<JobRecord>, StoreError> {
        let Some(epoch) = self.table.epoch(job) else { return Ok(None) };
        let attempts = self.table.attempts(job).expect("a known job");
        let state = match (self.table.lease(job), self.table.terminal(job)) {
            (Some(lease), _) => JobState::Leased(lease),
            (None, Some(terminal)) => JobState::Terminal(*terminal),
            (None, None) => JobState::Queued,
        };
        Ok(Some(JobRecord { epoch, attempts, state }))
    }

    fn backlog(&mut self) -> Result<usize, StoreError> {
        Ok(self.table.backlog())
    }

    fn prune(&mut self, _: Time, _: usize) -> Result<crate::Pruned, StoreError> {
        Err(StoreError::NotDurable)
    }

    fn figures(&mut self) -> Result<Figures, StoreError> {
        let mut figures = Figures::default();
        let jobs: Vec<(JobId, Time)> = self.queued_at.iter().map(|(job, at)| (*job, *at)).collect();
        for (job, queued_at) in jobs {
            let record = self.job(job)?.ok_or(StoreError::Corrupt(format!("{job} accepted, then unknown")))?;
            let field = match record.state {
                JobState::Queued => {
                    figures.oldest_queued_at = Some(figures.oldest_queued_at.map_or(queued_at, |at| at.min(queued_at)));
                    &mut figures.queued
                }
                JobState::Leased(_) => &mut figures.leased,
                JobState::Terminal(terminal) => match terminal.outcome {
                    Outcome::Completed { .. } => &mut figures.completed,
                    Outcome::DeadLettered { .. } => &mut figures.dead_lettered,
                    Outcome::Quarantined { .. } => &mut figures.quarantined,
                },
            };
            *field += 1;
        }
        Ok(figures)
    }

    fn poll_timeout(&mut self) -> Result<Option<Time>, StoreError> {
        Ok(self.table.poll_timeout())
    }

    fn events(&mut self) -> Result<Vec<String>, StoreError> {
        Ok(self.events.clone().unwrap_or_default())
    }

    fn append(
        &mut self,
        stamp: Stamp,
        _node: &str,
        line: &mut dyn FnMut(Time) -> Option<String>,
    ) -> Result<Option<Time>, StoreError> {
        let (Stamp::Now(t) | Stamp::At(t)) = stamp;
        let Some(text) = line(t) else { return Ok(None) };
        if let Some(events) = &mut self.events {
            events.push(text);
        }
        Ok(Some(t))
    }

    fn append_all(
        &mut self,
        now: Time,
        lines: &mut dyn FnMut(Time) -> Vec<(String, String)>,
    ) -> Result<Time, StoreError> {
        let made = lines(now);
        if let Some(events) = &mut self.events {
            events.extend(made.into_iter().map(|(_, text)| text));
        }
        Ok(now)
    }

    fn append_started(
        &mut self,
        now: Time,
        leases: &[(JobId, Epoch)],
        line: &mut dyn FnMut(Time, usize) -> (String, String),
    ) -> Result<(Time, Vec<bool>), StoreError> {
        let mut written = Vec::with_capacity(leases.len());
        for (index, &(job, epoch)) in leases.iter().enumerate() {
            let record = TableStore::job(self, job)?;
            let live = record.is_some_and(|record| self.table.rules().may_start(now, &record, epoch));
            if live {
                let (_, text) = line(now, index);
                if let Some(events) = &mut self.events {
                    events.push(text);
                }
            }
            written.push(live);
        }
        Ok((now, written))
    }
}

impl LedgerStore for MemoryStore {
    fn lookup(&mut self, now: Time, op: OpId, epoch: Epoch) -> Result<Lookup, StoreError> {
        let answer = self.ledger.lookup(op, epoch);
        self.log(now, answers::lookup(&self.caller.asker(), op, epoch, &answer));
        Ok(answer)
    }

    fn apply_as(&mut self, now: Time, outputs: &[(WorkerId, OpId, Epoch, OutputId)]) -> Result<Vec<Apply>, StoreError> {
        crate::sql_store::check_batch(*self.table.config(), outputs.len())?;
        let kept = self.caller;
        let mut answers = Vec::with_capacity(outputs.len());
        for &(worker, op, epoch, output) in outputs {
            self.caller = Caller { from: Some(lease_core::Owner::Worker(worker)), batch: None };
            answers.push(self.apply(now, op, epoch, output));
        }
        self.caller = kept;
        answers.into_iter().collect()
    }

    fn apply(&mut self, now: Time, op: OpId, epoch: Epoch, output: OutputId) -> Result<Apply, StoreError> {
        let answer = self.ledger.apply(op, epoch, output);
        self.log(now, answers::apply(&self.caller.ledger_asker(), op, epoch, output, &answer));
        Ok(answer)
    }

    fn lookup_batch(&mut self, now: Time, ops: &[(OpId, Epoch)]) -> Result<Vec<Lookup>, StoreError> {
        crate::sql_store::check_batch(*self.table.config(), ops.len())?;
        ops.iter().map(|&(op, epoch)| self.lookup(now, op, epoch)).collect()
    }

    fn apply_batch(&mut self, now: Time, outputs: &[(OpId, Epoch, OutputId)]) -> Result<Vec<Apply>, StoreError> {
        crate::sql_store::check_batch(*self.table.config(), outputs.len())?;
        outputs.iter().map(|&(op, epoch, output)| self.apply(now, op, epoch, output)).collect()
    }

    fn op(&mut self, op: OpId) -> Result<OpRecord, StoreError> {
        Ok(self.ledger.op(op))
    }
}
