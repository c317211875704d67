//! The calls of [`TableStore`] and [`LedgerStore`] on a database, written once for every
//! [`SqlStore`]: each call is one operation of [`Op`], run in one transaction of the store's, and
//! the reads outside any decision are the store's own statements.
//!
//! SQLite and PostgreSQL differ only in how they run a transaction ([`SqlStore::run`]) and read;
//! which call is an operation over which rows ([`Scope`]), and whether it moves the table's clock,
//! is said here, once.

use crate::sql::{Op, Row, Tx};
use crate::{Caller, Clock, Figures, LedgerStore, Pruned, Stamp, StoreError, TableStore};
use lease_core::{
    Acquired, Apply, Completion, Enqueued, Epoch, Fencing, Grant, JobId, JobRecord, Lease, Lookup, OpId, OpRecord,
    OutputId, Owner, Quarantine, ReclaimerId, Release, Renewal, RequestId, Requeue, Rules, TableConfig, Time, WorkerId,
    WorkerReply, WorkerRequest,
};

/// What an operation decides over: the rows a store that locks rows (PostgreSQL) locks before it
/// reads the clock. SQLite's `BEGIN IMMEDIATE` takes the whole database, whatever the scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Rows it does not lock (the backlog, the queue's ends, the expired leases): the log's whole
    /// lock ([`crate::schema::LOCK_LOG`]).
    Set,
    /// An enqueue of these jobs (one, or a batch): the log's whole lock, as [`Scope::Set`], then
    /// which of them are known, the backlog and the queue's ends, read together.
    Enqueue(Vec<JobId>),
    /// A requeue, release or fence of this job: the log's whole lock, as [`Scope::Set`], then the
    /// job's row (locked) and the queue's ends, read together.
    Placing(JobId),
    /// A batched acquire of up to this many jobs: the queue's lock ([`crate::schema::LOCK_QUEUE`]),
    /// then that many of the queue's first rows, in one statement.
    Heads(usize),
    /// An acquire for these workers (distinct; one, or a runtime's batch): the queue's lock
    /// ([`crate::schema::LOCK_QUEUE`]), then each worker's last grant and the row of the job it
    /// was last granted, and as many of the queue's first rows as there are workers, together.
    Askers(Vec<WorkerId>),
    /// One job's row.
    Job(JobId),
    /// One operation's ledger row.
    Op(OpId),
    /// A batch's job rows, all different, in job order (the order they are locked in, so two
    /// batches over the same rows never wait on each other in a cycle).
    Jobs(Vec<JobId>),
    /// A batch's operation rows, all different, in order.
    Ops(Vec<OpId>),
    /// A reclaimer's wave of fences: the log's whole lock, as a fence alone ([`Scope::Placing`]),
    /// then the jobs' rows (all different, in job order), locked, in one statement.
    Fences(Vec<JobId>),
    /// No row: a caller's own line.
    Line,
    /// The rows of the leases whose `executing` lines are about to be written, in the order
    /// named (a job may repeat), read and not locked, under the shared lock: a reclaim of such a
    /// lease commits only at or after its expiry by the database's clock, so a line stamped
    /// before that expiry precedes it, and one read after it committed sees its new epoch. (Locked
    /// as a batch's rows, the write waited behind any acquire, and so behind a paused process's
    /// open transaction: a live run lost a lease that way.)
    Leases(Vec<JobId>),
}

/// What a handle of a store on a database keeps between its operations.
#[derive(Debug)]
pub(crate) struct Session {
    /// The rules, with the table's limits and the planted bugs.
    pub rules: Rules,
    /// Who asks, for the history lines ([`TableStore::set_caller`]).
    pub caller: Caller,
    /// Whose clock is the table's.
    pub clock: Clock,
    /// The latest table time a table operation of this handle ran at; `now` must not be earlier.
    pub last_now: Time,
}

impl Session {
    /// A new handle's: no caller named, no time seen.
    pub fn new(rules: Rules, clock: Clock) -> Session {
        Session { rules, caller: Caller::default(), clock, last_now: Time::ZERO }
    }

    /// The store's side of an operation at the table's time `now`.
    pub fn op(&self, now: Time) -> Op<'_> {
        Op { rules: &self.rules, caller: &self.caller, last_now: self.last_now, now }
    }

    /// An operation at `now` committed: a table operation (`advances`) moves the clock to it.
    pub fn committed(&mut self, now: Time, advances: bool) {
        if advances {
            self.last_now = now;
        }
    }
}

/// A store on a database: one transaction per operation, and the reads outside any decision.
/// Every `SqlStore` is a [`TableStore`] and a [`LedgerStore`] (below).
pub(crate) trait SqlStore {
    /// The statements of one operation's transaction.
    type Tx<'t>: Tx
    where
        Self: 't;

    /// What the handle keeps between operations.
    fn session(&self) -> &Session;
    /// What the handle keeps between operations, to change.
    fn session_mut(&mut self) -> &mut Session;
    /// Runs one operation in one transaction over `scope`; an `Err` rolls it back. A table
    /// operation (`advances`) that succeeds moves this handle's clock to its time.
    fn run<A>(
        &mut self,
        now: Time,
        advances: bool,
        scope: Scope,
        f: impl FnOnce(&Op, &mut Self::Tx<'_>) -> Result<A, StoreError>,
    ) -> Result<A, StoreError>;

    /// Whether an acquire by each of `askers` (each a worker and its request, `None` for a plain
    /// acquire) would grant nothing, read without the acquire's lock: nothing is queued, and no
    /// request is a copy of its worker's last grant's. `true` must be the answer the acquire would
    /// have given at some moment between the call and its return (one snapshot). Asked only under
    /// the database's clock with no bug planted ([`nothing_to_grant`]).
    fn read_nothing_to_grant(&mut self, askers: &[(WorkerId, Option<RequestId>)]) -> Result<bool, StoreError>;

    /// The job's row, read outside any decision.
    fn read_job(&mut self, job: JobId) -> Result<Option<Row>, StoreError>;
    /// Accepted jobs not yet terminal.
    fn read_backlog(&mut self) -> Result<usize, StoreError>;
    /// The earliest live expiry.
    fn read_earliest(&mut self) -> Result<Option<Time>, StoreError>;
    /// The log's lines, in its order ([`crate::Clock::log_order`]).
    fn read_events(&mut self) -> Result<Vec<String>, StoreError>;
    /// The operation's ledger row, empty if missing (and not created).
    fn read_op(&mut self, op: OpId) -> Result<OpRecord, StoreError>;
    /// The latest time before which ended jobs may have been pruned.
    fn read_pruned(&mut self) -> Result<Option<Time>, StoreError>;
    /// See [`TableStore::prune`]: one transaction.
    fn prune_rows(&mut self, ended_before: Time, limit: i64) -> Result<Pruned, StoreError>;
    /// The jobs by state, and when the longest-waiting queued one entered the queue.
    fn read_figures(&mut self) -> Result<Figures, StoreError>;
    /// The job's payload (empty: none).
    fn read_payload(&mut self, job: JobId) -> Result<Vec<u8>, StoreError>;
    /// The payloads of `jobs`, in the order named (see [`TableStore::payloads`]).
    fn read_payloads(&mut self, jobs: &[JobId]) -> Result<Vec<Vec<u8>>, StoreError> {
        jobs.iter().map(|&job| self.read_payload(job)).collect()
    }
}

/// Whether an acquire by each of `askers` would grant nothing, so that it answers
/// [`Acquired::Empty`] for each without its transaction ([`SqlStore::read_nothing_to_grant`]): an
/// empty acquire writes nothing, so an idle worker's poll need not wait for the acquires that grant.
/// Only under the database's clock with no bug planted: under the caller's clock an acquire orders
/// the callers' times, and a planted bug takes the whole lock for everything.
fn nothing_to_grant<S: SqlStore>(store: &mut S, askers: &[(WorkerId, Option<RequestId>)]) -> Result<bool, StoreError> {
    let session = store.session();
    if session.clock == Clock::Caller || session.rules.bugs != lease_core::Bugs::NONE {
        return Ok(false);
    }
    store.read_nothing_to_grant(askers)
}

impl<S: SqlStore> TableStore for S {
    fn config(&self) -> TableConfig {
        self.session().rules.config
    }

    fn set_caller(&mut self, caller: Caller) {
        self.session_mut().caller = caller;
    }

    fn enqueue_with(&mut self, now: Time, job: JobId, payload: &[u8]) -> Result<Enqueued, StoreError> {
        self.run(now, true, Scope::Enqueue(vec![job]), |op, tx| op.enqueue(tx, job, payload))
    }

    fn enqueue_batch(&mut self, now: Time, jobs: &[(JobId, Vec<u8>)]) -> Result<Vec<Enqueued>, StoreError> {
        check_batch(self.session().rules.config, jobs.len())?;
        let scope = Scope::Enqueue(jobs.iter().map(|&(job, _)| job).collect());
        self.run(now, true, scope, |op, tx| op.enqueue_batch(tx, jobs))
    }

    fn payload(&mut self, job: JobId) -> Result<Vec<u8>, StoreError> {
        self.read_payload(job)
    }

    fn payloads(&mut self, jobs: &[JobId]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.read_payloads(jobs)
    }

    fn acquire(&mut self, now: Time, owner: WorkerId) -> Result<Acquired, StoreError> {
        if nothing_to_grant(self, &[(owner, None)])? {
            return Ok(Acquired::Empty);
        }
        self.run(now, true, Scope::Askers(vec![owner]), |op, tx| op.acquire(tx, owner, None))
    }

    fn acquire_for(&mut self, now: Time, owner: WorkerId, request: RequestId) -> Result<Acquired, StoreError> {
        if nothing_to_grant(self, &[(owner, Some(request))])? {
            return Ok(Acquired::Empty);
        }
        self.run(now, true, Scope::Askers(vec![owner]), |op, tx| op.acquire(tx, owner, Some(request)))
    }

    fn renew(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Renewal, StoreError> {
        self.run(now, true, Scope::Job(job), |op, tx| op.renew(tx, job, epoch))
    }

    fn complete(&mut self, now: Time, job: JobId, epoch: Epoch, output: OutputId) -> Result<Completion, StoreError> {
        self.run(now, true, Scope::Job(job), |op, tx| op.complete(tx, job, epoch, output))
    }

    fn requeue(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, StoreError> {
        // Places the job in the queue (its ends are read, not locked).
        self.run(now, true, Scope::Placing(job), |op, tx| op.requeue(tx, job, epoch))
    }

    fn dead_letter(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, StoreError> {
        // One row: the job ends where it stands, out of the queue it was not in.
        self.run(now, true, Scope::Job(job), |op, tx| op.dead_letter(tx, job, epoch))
    }

    fn release(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Release, StoreError> {
        self.run(now, true, Scope::Placing(job), |op, tx| op.release(tx, job, epoch))
    }

    // A batch is one transaction under the whole lock: its jobs' rows are read one by one, each
    // after the writes of the jobs before it (`Tx::flush`), and its lines commit with it.
    fn acquire_batch(&mut self, now: Time, owner: WorkerId, want: usize) -> Result<Vec<Grant>, StoreError> {
        check_batch(self.session().rules.config, want)?;
        if nothing_to_grant(self, &[(owner, None)])? {
            return Ok(Vec::new());
        }
        self.run(now, true, Scope::Heads(want), |op, tx| op.acquire_batch(tx, owner, want))
    }

    fn renew_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Renewal>, StoreError> {
        check_batch(self.session().rules.config, leases.len())?;
        let (scope, flush) = batch_scope(leases.iter().map(|&(job, _)| job), Scope::Jobs);
        self.run(now, true, scope, |op, tx| {
            leases.iter().map(|&(job, epoch)| flushed(tx, flush).and_then(|()| op.renew(tx, job, epoch))).collect()
        })
    }

    fn complete_batch(&mut self, now: Time, done: &[(JobId, Epoch, OutputId)]) -> Result<Vec<Completion>, StoreError> {
        check_batch(self.session().rules.config, done.len())?;
        let (scope, flush) = batch_scope(done.iter().map(|&(job, _, _)| job), Scope::Jobs);
        self.run(now, true, scope, |op, tx| {
            done.iter()
                .map(|&(job, epoch, output)| flushed(tx, flush).and_then(|()| op.complete(tx, job, epoch, output)))
                .collect()
        })
    }

    fn requeue_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Requeue>, StoreError> {
        check_batch(self.session().rules.config, leases.len())?;
        self.run(now, true, Scope::Set, |op, tx| {
            leases.iter().map(|&(job, epoch)| tx.flush().and_then(|()| op.requeue(tx, job, epoch))).collect()
        })
    }

    fn release_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Release>, StoreError> {
        check_batch(self.session().rules.config, leases.len())?;
        self.run(now, true, Scope::Set, |op, tx| {
            leases.iter().map(|&(job, epoch)| tx.flush().and_then(|()| op.release(tx, job, epoch))).collect()
        })
    }

    // A runtime's batch: one kind, each call by its single call's Op under its own worker's name.
    // Over distinct rows, those rows are locked together up front and written at the commit;
    // else (a row named twice, or a requeue, which places its job in the queue) under the
    // whole lock, each call after the writes of those before it.
    fn serve_batch(&mut self, now: Time, calls: &[crate::WorkerCall]) -> Result<Vec<WorkerReply>, StoreError> {
        check_batch(self.session().rules.config, calls.len())?;
        let kind = crate::batch_kind(calls)?;
        if kind == crate::BatchKind::Acquire {
            let askers: Vec<_> = calls.iter().map(|&(worker, id, _)| (worker, Some(id))).collect();
            if nothing_to_grant(self, &askers)? {
                return Ok(calls.iter().map(|_| WorkerReply::Acquired(Acquired::Empty)).collect());
            }
        }
        let jobs = || {
            calls.iter().filter_map(|&(_, _, request)| match request {
                WorkerRequest::Renew { job, .. } | WorkerRequest::Complete { job, .. } => Some(job),
                _ => None,
            })
        };
        let (scope, flush) = match kind {
            crate::BatchKind::Acquire => (Scope::Askers(calls.iter().map(|&(worker, _, _)| worker).collect()), false),
            crate::BatchKind::Renew | crate::BatchKind::Complete => batch_scope(jobs(), Scope::Jobs),
            crate::BatchKind::Lookup => {
                let ops = calls.iter().filter_map(|&(_, _, request)| match request {
                    WorkerRequest::Lookup { op, .. } => Some(op),
                    _ => None,
                });
                batch_scope(ops, Scope::Ops)
            }
            crate::BatchKind::Requeue => (Scope::Set, true),
        };
        let callers: Vec<Caller> =
            calls.iter().map(|&(worker, _, _)| Caller { from: Some(Owner::Worker(worker)), batch: None }).collect();
        let advances = kind != crate::BatchKind::Lookup;
        self.run(now, advances, scope, |op, tx| {
            let mut replies = Vec::with_capacity(calls.len());
            for (&(worker, id, request), caller) in calls.iter().zip(&callers) {
                flushed(tx, flush)?;
                let op = Op { caller, ..*op };
                replies.push(match request {
                    WorkerRequest::Acquire => WorkerReply::Acquired(op.acquire(tx, worker, Some(id))?),
                    WorkerRequest::Renew { job, epoch } => WorkerReply::Renewed(op.renew(tx, job, epoch)?),
                    WorkerRequest::Lookup { op: which, epoch } => WorkerReply::Looked(op.lookup(tx, which, epoch)?),
                    WorkerRequest::Complete { job, epoch, output } => {
                        WorkerReply::Completed(op.complete(tx, job, epoch, output)?)
                    }
                    WorkerRequest::Requeue { job, epoch } => WorkerReply::Requeued(op.requeue(tx, job, epoch)?),
                    _ => unreachable!("batch_kind admits no other request"),
                });
            }
            Ok(replies)
        })
    }

    fn expired(&mut self, now: Time, as_of: Time) -> Result<Vec<Lease>, StoreError> {
        self.run(now, true, Scope::Set, |op, tx| op.expired(tx, as_of))
    }

    fn fence(
        &mut self,
        now: Time,
        job: JobId,
        expected: Epoch,
        reclaimer: ReclaimerId,
        as_of: Time,
    ) -> Result<Fencing, StoreError> {
        // One row, but the reclaim's own turn: a fence and the listing it follows are ordered by
        // the whole lock, and fences are rare (an expired lease each).
        self.run(now, true, Scope::Placing(job), |op, tx| op.fence(tx, job, expected, reclaimer, as_of))
    }

    fn fence_batch(
        &mut self,
        now: Time,
        reclaimer: ReclaimerId,
        fences: &[(JobId, Epoch, Time)],
    ) -> Result<Vec<Fencing>, StoreError> {
        check_batch(self.session().rules.config, fences.len())?;
        // The whole lock, as a fence alone; distinct rows locked together up front, else each
        // after the writes of those before it.
        let (scope, flush) = batch_scope(fences.iter().map(|&(job, _, _)| job), Scope::Fences);
        self.run(now, true, scope, |op, tx| {
            fences
                .iter()
                .map(|&(job, expected, as_of)| {
                    flushed(tx, flush).and_then(|()| op.fence(tx, job, expected, reclaimer, as_of))
                })
                .collect()
        })
    }

    fn quarantine(
        &mut self,
        now: Time,
        job: JobId,
        epoch: Epoch,
        recorded: OutputId,
        rival: OutputId,
    ) -> Result<Quarantine, StoreError> {
        self.run(now, true, Scope::Job(job), |op, tx| op.quarantine(tx, job, epoch, recorded, rival))
    }

    fn job(&mut self, job: JobId) -> Result<Option<JobRecord>, StoreError> {
        let Some(row) = self.read_job(job)? else { return Ok(None) };
        Ok(Some(row.record()?.1))
    }

    fn backlog(&mut self) -> Result<usize, StoreError> {
        self.read_backlog()
    }

    fn figures(&mut self) -> Result<Figures, StoreError> {
        self.read_figures()
    }

    fn pruned_before(&mut self) -> Result<Option<Time>, StoreError> {
        self.read_pruned()
    }

    fn prune(&mut self, ended_before: Time, limit: usize) -> Result<Pruned, StoreError> {
        self.prune_rows(ended_before, i64::try_from(limit).unwrap_or(i64::MAX))
    }

    fn poll_timeout(&mut self) -> Result<Option<Time>, StoreError> {
        self.read_earliest()
    }

    fn events(&mut self) -> Result<Vec<String>, StoreError> {
        self.read_events()
    }

    fn append(
        &mut self,
        stamp: Stamp,
        node: &str,
        line: &mut dyn FnMut(Time) -> Option<String>,
    ) -> Result<Option<Time>, StoreError> {
        let (now, at) = stamp.split(self.session().last_now);
        self.run(now, false, Scope::Line, |op, tx| op.append(tx, at, node, line))
    }

    fn append_all(
        &mut self,
        now: Time,
        lines: &mut dyn FnMut(Time) -> Vec<(String, String)>,
    ) -> Result<Time, StoreError> {
        self.run(now, false, Scope::Line, |op, tx| op.append_all(tx, lines))
    }

    fn append_started(
        &mut self,
        now: Time,
        leases: &[(JobId, Epoch)],
        line: &mut dyn FnMut(Time, usize) -> (String, String),
    ) -> Result<(Time, Vec<bool>), StoreError> {
        let scope = Scope::Leases(leases.iter().map(|&(job, _)| job).collect());
        self.run(now, false, scope, |op, tx| op.append_started(tx, leases, line))
    }
}

impl<S: SqlStore> LedgerStore for S {
    fn lookup(&mut self, now: Time, op: OpId, epoch: Epoch) -> Result<Lookup, StoreError> {
        self.run(now, false, Scope::Op(op), |o, tx| o.lookup(tx, op, epoch))
    }

    fn apply(&mut self, now: Time, op: OpId, epoch: Epoch, output: OutputId) -> Result<Apply, StoreError> {
        self.run(now, false, Scope::Op(op), |o, tx| o.apply(tx, op, epoch, output))
    }

    fn lookup_batch(&mut self, now: Time, ops: &[(OpId, Epoch)]) -> Result<Vec<Lookup>, StoreError> {
        check_batch(self.session().rules.config, ops.len())?;
        let (scope, flush) = batch_scope(ops.iter().map(|&(op, _)| op), Scope::Ops);
        self.run(now, false, scope, |o, tx| {
            ops.iter().map(|&(op, epoch)| flushed(tx, flush).and_then(|()| o.lookup(tx, op, epoch))).collect()
        })
    }

    fn apply_batch(&mut self, now: Time, outputs: &[(OpId, Epoch, OutputId)]) -> Result<Vec<Apply>, StoreError> {
        check_batch(self.session().rules.config, outputs.len())?;
        let (scope, flush) = batch_scope(outputs.iter().map(|&(op, _, _)| op), Scope::Ops);
        self.run(now, false, scope, |o, tx| {
            outputs
                .iter()
                .map(|&(op, epoch, output)| flushed(tx, flush).and_then(|()| o.apply(tx, op, epoch, output)))
                .collect()
        })
    }

    fn apply_as(&mut self, now: Time, outputs: &[(WorkerId, OpId, Epoch, OutputId)]) -> Result<Vec<Apply>, StoreError> {
        check_batch(self.session().rules.config, outputs.len())?;
        let (scope, flush) = batch_scope(outputs.iter().map(|&(_, op, _, _)| op), Scope::Ops);
        let callers: Vec<Caller> =
            outputs.iter().map(|&(worker, ..)| Caller { from: Some(Owner::Worker(worker)), batch: None }).collect();
        self.run(now, false, scope, |o, tx| {
            let each = outputs.iter().zip(&callers);
            each.map(|(&(_, op, epoch, output), caller)| {
                flushed(tx, flush)?;
                Op { caller, ..*o }.apply(tx, op, epoch, output)
            })
            .collect()
        })
    }

    fn op(&mut self, op: OpId) -> Result<OpRecord, StoreError> {
        self.read_op(op)
    }
}

/// How a batch over `keys` runs: over exactly its rows, locked together up front and written
/// together at its commit, when they are all different; otherwise (a row named twice) under the
/// whole lock, each call after the writes of those before it (the `true`: flush between calls).
fn batch_scope<K: Ord + Copy>(keys: impl Iterator<Item = K>, rows: fn(Vec<K>) -> Scope) -> (Scope, bool) {
    let mut sorted: Vec<K> = keys.collect();
    sorted.sort_unstable();
    let len = sorted.len();
    sorted.dedup();
    if sorted.len() == len {
        (rows(sorted), false)
    } else {
        (Scope::Set, true)
    }
}

/// Before each call of a batch run under the whole lock: the writes of the calls before it.
fn flushed(tx: &mut impl Tx, flush: bool) -> Result<(), StoreError> {
    if flush {
        tx.flush()?;
    }
    Ok(())
}

/// A batch of 1 to `batch_max` jobs, or [`lease_core::TableError::BatchSize`].
pub(crate) fn check_batch(config: TableConfig, asked: usize) -> Result<(), StoreError> {
    let max = config.batch_max;
    if asked == 0 || asked > max {
        return Err(lease_core::TableError::BatchSize { asked, max }.into());
    }
    Ok(())
}
