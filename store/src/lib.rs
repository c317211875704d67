//! # lease-store: lease-core's rules on real stores
//!
//! `lease-core` holds the rules; this crate gives them durability and atomicity. Two traits are
//! the seam, [`TableStore`] (the lease table) and [`LedgerStore`] (the effect ledger), mirroring
//! [`lease_core::LeaseTable`] and [`lease_core::EffectLedger`] call for call, with three
//! implementations:
//!
//! - [`MemoryStore`]: `LeaseTable` and `EffectLedger` themselves. Nothing is durable.
//! - [`SqliteStore`]: SQLite through `rusqlite` with SQLite compiled in (`bundled`), in memory or
//!   on a file. The embedded default. Writers are serialised by `BEGIN IMMEDIATE`.
//! - [`PostgresStore`]: PostgreSQL, for many machines. Each row an operation decides over is
//!   taken `FOR UPDATE`, after a lock on the log's table whose mode says what may run beside it
//!   ([`schema::LOCK_LOG`], [`schema::LOCK_QUEUE`], [`schema::LOCK_LOG_SHARED`]).
//!
//! **The rules are written once.** A store on a database never decides: each operation runs in
//! one transaction that reads the job's row (locked), asks [`lease_core::Rules`] (or
//! [`lease_core::OpRecord`] for the ledger) for the decision, the very function `LeaseTable`
//! calls on its maps, and writes the decision back with a compare-and-set that re-checks, at write
//! time, the state, epoch and expiry the decision was made over. The statements and their guards
//! are in [`schema`], each guard with the production bug it prevents. The planted bugs of
//! `lease-core` (feature `planted-bugs`) therefore act through the stores too.
//!
//! **Every answer and its history line commit together.** Each operation appends one line of the
//! project's history contract (docs/history.md) in its own transaction, so the log, read in
//! its order ([`TableStore::events`], see [`Clock`]), is a history's lines; [`TableStore::history`]
//! puts a `run` line with the table's limits before them, a file `lease-check` reads as it is.
//! See [`lease_history::Entry`] for the line type.
//!
//! **The table's clock.** Every call takes `now`, the table's time in microseconds, as
//! `LeaseTable` does: the simulated clock in the simulator. A store opened on
//! [`Clock::Database`] ignores it and reads the database's own clock inside each transaction, once
//! it holds the locks its decision needs: PostgreSQL's `clock_timestamp()` (processes on many
//! machines share one clock), or for SQLite the host's ([`SqliteStore::open_on`]). The log is then
//! read in time order, and on PostgreSQL operations over different rows commit side by side (see
//! [`Clock`]). A handle refuses a `now` earlier than one it was passed before
//! ([`lease_core::TableError::TimeWentBackwards`]); different handles share rows, not a clock.
//!
//! **Determinism.** Nothing in the SQL reads a clock or draws randomness (no `CURRENT_TIMESTAMP`,
//! no `random()`, no `AUTOINCREMENT`; SQLite's temporary storage is kept in memory), and every
//! ordering has a total tie-break (`ORDER BY expires_at_us, job`), so the same calls on an
//! in-memory SQLite database give the same answers and the same log, byte for byte.
//!
//! **Synchronous, with `tokio-postgres` inside.** The rules are sans-IO and the seam is
//! synchronous, as `rusqlite` is: one trait serves every store, and a caller on threads (a worker
//! process, the race tests, the benchmark) needs no runtime. The PostgreSQL handle runs
//! `tokio-postgres` on a private current-thread runtime, as the `postgres` crate does, so that it
//! can pipeline: the statements of one step of an operation go out together and cost one round
//! trip. An async service can still run a store on a blocking thread. And no tokio runtime may
//! ever reach a simulated world, where a store runs on SQLite.
//!
//! **TLS.** With the `tls` feature (rustls), a PostgreSQL URL's `sslmode` (`require`, `verify-ca`,
//! `verify-full`) and `sslrootcert` are honoured as libpq reads them; without it such a URL is
//! refused ([`StoreError::Tls`]), never connected in plaintext. docs/stores.md, "TLS to
//! PostgreSQL", has the table of modes.
//!
//! **A service.** `lease-runtime` runs a service's workers and reclaimers on a store; [`open`]
//! gives it a handle on the table clock a service uses, and [`HostClock`] the host's time. Its
//! `service` example (`lease_runtime::service`) injects failures and checks that every job ended
//! exactly once; docs/stores.md, "The example: a service", walks through it.
//!
//! **Serving a request.** [`serve_worker`] and [`serve_reclaimer`] are the one mapping from a
//! request of `lease-core`'s `Worker` or `Reclaimer` to its store call, and from the answer to
//! the reply (with the answer's history line): the simulator's table and ledger nodes, the live
//! runner's processes and `lease-runtime`'s store client serve through them.
//!
//! **Schema versions.** [`schema::MIGRATIONS`] moves a database from its version to the newest
//! this build knows, one transaction per migration; a database at a version this build does not
//! know is refused with [`StoreError::UnknownSchema`] and left untouched.

mod caller;
mod connect;
mod host;
mod memory;
mod place;
#[cfg(feature = "planted-bugs")]
pub mod planted;
mod postgres;
pub mod schema;
mod serve;
mod sql;
mod sql_store;
mod sqlite;

pub use crate::postgres::{enqueue_batch_in, enqueue_in, PostgresStore};
pub use caller::Caller;
pub use host::{open, HostClock};
pub use memory::MemoryStore;
pub use place::{Place, StoreKind};
pub use serve::{
    life_request, reclaimer_line, serve_reclaimer, serve_reclaimer_batch, serve_worker, serve_worker_batch,
    worker_line, Served, LIFE_SHIFT,
};
pub use sqlite::{busy_retry, SqliteStore, BUSY_RETRY, BUSY_TIMEOUT, TURN_SUFFIX};
/// The PostgreSQL client [`enqueue_in`] takes a transaction of: use this very version.
pub use tokio_postgres;

use lease_core::{
    Acquired, Apply, Completion, ConfigError, Enqueued, Epoch, Fencing, Grant, JobId, JobRecord, Lease, Lookup, OpId,
    OpRecord, OutputId, Quarantine, ReclaimerId, Release, Renewal, RequestId, Requeue, TableConfig, TableError, Time,
    WorkerId, WorkerReply, WorkerRequest,
};

/// What can go wrong in a store, apart from the protocol's own outcomes (which are answers).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The caller's misuse, as the in-memory table reports it.
    #[error(transparent)]
    Table(#[from] TableError),
    /// A table configuration that cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// SQLite failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL failed (or could not be reached).
    #[error("postgres: {}", postgres_message(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// A connection string's TLS settings that cannot be honoured (see `sslmode` in the crate
    /// doc): an unknown or unsupported mode, a root certificate that cannot be read, or TLS asked
    /// of a build without the `tls` feature.
    #[error("postgres TLS: {0}")]
    Tls(String),
    /// A PostgreSQL schema name that is not lowercase letters, digits and underscores.
    #[error("a schema name is lowercase letters, digits and underscores: {0:?}")]
    SchemaName(String),
    /// The handle's runtime could not start.
    #[error("cannot start the PostgreSQL handle's runtime: {0}")]
    Io(#[source] std::io::Error),
    /// The database is at a schema version this build does not know: it is left untouched.
    #[error(
        "the database is at lease-store schema version {found}, but this build knows versions up to {known}: \
         refusing to use it (run a newer lease-store, or point this one at another database)"
    )]
    UnknownSchema {
        /// The database's version.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// An `Execute` sent to the store ([`serve_worker`]): it is a call to the dependency, which the
    /// caller makes; the store only records its output ([`LedgerStore::apply`]).
    #[error(
        "the execute of operation {op:?} under epoch {epoch:?} is a call to the dependency, not a store request: \
         the caller makes it (and records its output with LedgerStore::apply)"
    )]
    Execute {
        /// The operation.
        op: OpId,
        /// The epoch it would run under.
        epoch: Epoch,
    },
    /// A row that no statement of this crate writes.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A runtime's batch of worker requests ([`TableStore::serve_batch`]) that no single
    /// transaction may serve: mixed kinds, a kind a batch does not take, or one worker twice in
    /// an acquire batch. Nothing was written.
    #[error("a batch of worker requests {0}: nothing was served")]
    Batch(String),
    /// A payload longer than [`PAYLOAD_MAX`]: the job is not enqueued.
    #[error("job {job}'s payload is {len} bytes, more than the {max} a job carries: not enqueued")]
    PayloadTooLarge {
        /// The job.
        job: JobId,
        /// The payload's length.
        len: usize,
        /// [`PAYLOAD_MAX`].
        max: usize,
    },
    /// An enqueue in a caller's transaction ([`enqueue_in`]) at an isolation level other than
    /// `READ COMMITTED`.
    #[error(
        "an enqueue in your transaction needs READ COMMITTED (PostgreSQL's default), not {0}: under an \
         earlier snapshot the table's capacity and the job's novelty are judged on stale rows"
    )]
    Isolation(String),
    /// [`enqueue_in`] in a schema no store of this version has migrated.
    #[error(
        "schema {schema:?} is at lease-store schema version {found:?}, not {known}: open a store there first \
         (PostgresStore::open migrates it)"
    )]
    NotMigrated {
        /// The schema.
        schema: String,
        /// Its version, if it has one.
        found: Option<i64>,
        /// This build's.
        known: i64,
    },
    /// A store that keeps no durable rows, asked to prune them.
    #[error("the in-memory store keeps every job for as long as it lives: it has nothing durable to prune")]
    NotDurable,
    /// A pool of connections that cannot work.
    #[error("connections: {0}")]
    Pool(String),
    /// The handle's connection is down and not yet made again: the call was not sent.
    #[error("the store's connection is down, reconnecting: {0}")]
    Disconnected(String),
    /// A compare-and-set write found the row changed under a decision made inside the same
    /// transaction, which its lock forbids, or (PostgreSQL) an acquire's locking read left out the
    /// row of a job an asker was last granted, which a concurrent write moved as it was locked:
    /// the transaction was rolled back, nothing answered, and the call may be made again.
    #[error("job {job}'s row changed under a locked decision: rolled back")]
    Raced {
        /// The job.
        job: JobId,
    },
}

impl StoreError {
    /// Whether the error says the connection to the database is gone (cut by the server, by the
    /// network, or refused while the server restarts), so that only a new connection can serve
    /// again: what a client reconnects on. A statement the database refused, or a decision's
    /// error, is not: the connection still serves.
    pub fn is_disconnect(&self) -> bool {
        match self {
            StoreError::Postgres(error) => {
                let class = error.code().map(|code| &code.code()[..2]);
                // 08: connection exception; 57P: the server shut the session (admin, crash, start-up).
                error.is_closed()
                    || matches!(class, Some("08"))
                    || error.code().is_some_and(|code| code.code().starts_with("57P"))
                    || (error.as_db_error().is_none()
                        && std::error::Error::source(error).is_some_and(|s| s.is::<std::io::Error>()))
            }
            StoreError::Disconnected(_) => true,
            _ => false,
        }
    }
}

/// What one [`TableStore::prune`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Jobs.
    pub jobs: usize,
    /// History lines.
    pub lines: usize,
}

/// The table's jobs by state, and the longest wait ([`TableStore::figures`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    /// Waiting in the queue.
    pub queued: u64,
    /// Leased to a worker or a reclaimer.
    pub leased: u64,
    /// Completed.
    pub completed: u64,
    /// Dead-lettered.
    pub dead_lettered: u64,
    /// Quarantined.
    pub quarantined: u64,
    /// When the queued job that has waited longest entered the queue, by the table's clock
    /// (`None`: nothing is queued, or only jobs queued before schema version 4).
    pub oldest_queued_at: Option<Time>,
}

impl Figures {
    /// Adds one row of [`schema::SELECT_FIGURES`]: a state, an outcome, a count, and the earliest
    /// time a job of the row entered the queue.
    pub(crate) fn add(
        &mut self,
        state: &str,
        outcome: Option<&str>,
        count: i64,
        since: Option<i64>,
    ) -> Result<(), StoreError> {
        let count = u64::try_from(count).map_err(|_| StoreError::Corrupt(format!("a count of {count}")))?;
        let field = match (state, outcome) {
            ("queued", None) => {
                self.oldest_queued_at = since.map(|us| Time(us as u64));
                &mut self.queued
            }
            ("leased", None) => &mut self.leased,
            ("terminal", Some("completed")) => &mut self.completed,
            ("terminal", Some("dead_lettered")) => &mut self.dead_lettered,
            ("terminal", Some("quarantined")) => &mut self.quarantined,
            (state, outcome) => {
                return Err(StoreError::Corrupt(format!("a job in state {state} with outcome {outcome:?}")))
            }
        };
        *field += count;
        Ok(())
    }
}

/// The most bytes a job's payload holds: a job carries what its handler needs to find its work
/// (a document's id, a small request), not the work itself.
pub const PAYLOAD_MAX: usize = 1 << 20;

/// Refuses a payload past [`PAYLOAD_MAX`].
pub(crate) fn check_payload(job: JobId, payload: &[u8]) -> Result<(), StoreError> {
    if payload.len() > PAYLOAD_MAX {
        return Err(StoreError::PayloadTooLarge { job, len: payload.len(), max: PAYLOAD_MAX });
    }
    Ok(())
}

/// Whose clock is the table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The `now` each call passes (as `LeaseTable` does). Operations take turns, and the log is in
    /// commit order ([`schema::SELECT_EVENTS`]).
    Caller,
    /// The database's clock, read inside each operation's transaction once it holds every lock its
    /// decision needs, in microseconds since the Unix epoch; the `now` passed is ignored.
    /// PostgreSQL's `clock_timestamp()`, for processes on many machines; SQLite's host clock, read
    /// after `BEGIN IMMEDIATE` (every process of one SQLite file is on its machine). The log is in
    /// time order, ties in commit order ([`schema::SELECT_EVENTS_BY_TIME`]), and on PostgreSQL
    /// operations over different rows commit side by side ([`schema::LOCK_LOG_SHARED`]). The
    /// database's clock must not step back: a handle never goes behind the time it last saw, but
    /// two handles could order a line by a clock stepped back between them.
    Database,
}

impl Clock {
    /// The statement that reads the log in this clock's order.
    pub fn log_order(self) -> &'static str {
        match self {
            Clock::Caller => schema::SELECT_EVENTS,
            Clock::Database => schema::SELECT_EVENTS_BY_TIME,
        }
    }
}

/// When a line of a caller's own is stamped ([`TableStore::append`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// The table's clock once the line's turn in the log has come: this time under
    /// [`Clock::Caller`], the database's under [`Clock::Database`].
    Now(Time),
    /// This time, read earlier: a line written after the fact (a fault, stamped when its signal
    /// was sent, by a thread that may have waited).
    At(Time),
}

impl Stamp {
    /// The `now` to run the append at (`last_now`, a handle's latest, for a line stamped earlier),
    /// and the stamp when it is not that operation's time.
    fn split(self, last_now: Time) -> (Time, Option<Time>) {
        match self {
            Stamp::Now(now) => (now, None),
            Stamp::At(at) => (last_now, Some(at)),
        }
    }
}

/// A PostgreSQL error with the server's own words (its `Display` alone says only "db error").
fn postgres_message(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        // tokio-postgres's own text names only the kind ("error performing TLS handshake"):
        // the cause says which certificate, or which option.
        None => match std::error::Error::source(error) {
            Some(cause) => format!("{error}: {cause}"),
            None => error.to_string(),
        },
    }
}

/// One worker request of a batch ([`TableStore::serve_batch`]): the worker, the request's id
/// (its life's: [`crate::life_request`]) and the request.
pub type WorkerCall = (WorkerId, RequestId, WorkerRequest);

/// The kind of every request of a runtime's batch, if they are of one kind that a batch takes;
/// checked before anything is served.
pub(crate) fn batch_kind(calls: &[WorkerCall]) -> Result<BatchKind, StoreError> {
    let kind = |request: &WorkerRequest| match request {
        WorkerRequest::Acquire => Some(BatchKind::Acquire),
        WorkerRequest::Renew { .. } => Some(BatchKind::Renew),
        WorkerRequest::Lookup { .. } => Some(BatchKind::Lookup),
        WorkerRequest::Complete { .. } => Some(BatchKind::Complete),
        WorkerRequest::Requeue { .. } => Some(BatchKind::Requeue),
        _ => None,
    };
    let Some(first) = calls.first() else { return Err(StoreError::Batch("is empty".to_string())) };
    let Some(first_kind) = kind(&first.2) else {
        return Err(StoreError::Batch(format!(
            "holds a {:?}: a batch takes acquire, renew, lookup, complete or requeue",
            first.2
        )));
    };
    if let Some(other) = calls.iter().find(|call| kind(&call.2) != Some(first_kind)) {
        return Err(StoreError::Batch(format!("mixes {:?} with {:?}: a batch is of one kind", first.2, other.2)));
    }
    if first_kind == BatchKind::Acquire {
        let mut workers: Vec<WorkerId> = calls.iter().map(|call| call.0).collect();
        workers.sort_unstable();
        if let Some(pair) = workers.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(StoreError::Batch(format!(
                "names {} twice in one acquire: the table answers a worker's retried acquire by its last grant",
                pair[0]
            )));
        }
    }
    Ok(first_kind)
}

/// The kinds of request a runtime's batch takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchKind {
    Acquire,
    Renew,
    Lookup,
    Complete,
    Requeue,
}

/// The lease table's seam: the calls of [`lease_core::LeaseTable`], on any store.
pub trait TableStore {
    /// The table's limits.
    fn config(&self) -> TableConfig;
    /// Names the requester (and batch) of the calls that follow, for the history lines.
    fn set_caller(&mut self, caller: Caller);
    /// Accepts a job with no payload, unless known or at capacity.
    fn enqueue(&mut self, now: Time, job: JobId) -> Result<Enqueued, StoreError> {
        self.enqueue_with(now, job, &[])
    }
    /// Accepts a job with `payload` (at most [`PAYLOAD_MAX`] bytes), unless known or at
    /// capacity. The payload is kept with the job, in the same transaction, only when the job is
    /// accepted: an enqueue of a known job is idempotent, and keeps the first payload.
    fn enqueue_with(&mut self, now: Time, job: JobId, payload: &[u8]) -> Result<Enqueued, StoreError>;
    /// Enqueues many jobs, each with its payload (empty for none), in one transaction: each is
    /// judged as [`TableStore::enqueue_with`] would judge it after the jobs before it
    /// ([`lease_core::LeaseTable::enqueue_batch`]), and each gets its own `arrived` line. A
    /// service's many arrivals at once hold the queue's whole lock for one turn, not one each.
    /// 1 to `batch_max` jobs; a bad payload anywhere refuses the batch before anything changes.
    fn enqueue_batch(&mut self, now: Time, jobs: &[(JobId, Vec<u8>)]) -> Result<Vec<Enqueued>, StoreError>;
    /// The payload the job was enqueued with: empty when it had none, or is not known.
    fn payload(&mut self, job: JobId) -> Result<Vec<u8>, StoreError>;
    /// The payloads of `jobs`, in the order named, as [`TableStore::payload`] reads each: a
    /// runtime's batch of effects about to start, read at once.
    fn payloads(&mut self, jobs: &[JobId]) -> Result<Vec<Vec<u8>>, StoreError> {
        jobs.iter().map(|&job| self.payload(job)).collect()
    }
    /// Grants the oldest queued job.
    fn acquire(&mut self, now: Time, owner: WorkerId) -> Result<Acquired, StoreError>;
    /// Grants the oldest queued job, or the standing grant of a retried request.
    fn acquire_for(&mut self, now: Time, owner: WorkerId, request: RequestId) -> Result<Acquired, StoreError>;
    /// Extends a lease, for its current epoch, before it expires.
    fn renew(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Renewal, StoreError>;
    /// Completes a job, for its current epoch.
    fn complete(&mut self, now: Time, job: JobId, epoch: Epoch, output: OutputId) -> Result<Completion, StoreError>;
    /// Hands a leased job back, or dead-letters it out of attempts.
    fn requeue(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, StoreError>;
    /// Dead-letters a leased job now, at its worker's word that its dependency refused it for
    /// good, for its current epoch.
    fn dead_letter(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, StoreError>;
    /// Undoes a grant its worker never took.
    fn release(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Release, StoreError>;
    /// Grants up to `want` (1 to `batch_max`) of the oldest queued jobs, each its own lease, at
    /// one time and in one transaction ([`lease_core::LeaseTable::acquire_batch`]): fewer when
    /// the queue holds fewer. Each grant's history line is a single grant's.
    fn acquire_batch(&mut self, now: Time, owner: WorkerId, want: usize) -> Result<Vec<Grant>, StoreError>;
    /// Renews 1 to `batch_max` leases in one transaction, each judged on its own record and
    /// epoch, in the order named ([`lease_core::LeaseTable::renew_batch`]): never all-or-nothing.
    /// An unknown job rolls the whole batch back.
    fn renew_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Renewal>, StoreError>;
    /// Completes 1 to `batch_max` jobs in one transaction, each on its own epoch and output.
    fn complete_batch(&mut self, now: Time, done: &[(JobId, Epoch, OutputId)]) -> Result<Vec<Completion>, StoreError>;
    /// Requeues 1 to `batch_max` jobs in one transaction, each on its own epoch.
    fn requeue_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Requeue>, StoreError>;
    /// Releases 1 to `batch_max` grants in one transaction, each on its own epoch.
    fn release_batch(&mut self, now: Time, leases: &[(JobId, Epoch)]) -> Result<Vec<Release>, StoreError>;
    /// Serves 1 to `batch_max` worker requests of one kind (`acquire`, `renew`, `lookup`,
    /// `complete` or `requeue`), from one or many workers, in one transaction: each as
    /// [`crate::serve_worker`] serves it alone, in the order given, each decided on its own record
    /// after the writes of those before it, its line naming its own worker. This is a runtime's
    /// batch: the requests its slots made at one turn, coalesced ([`crate::serve_worker_batch`]).
    /// An acquire is answered by its request id, as [`TableStore::acquire_for`]; an acquire
    /// batch names each worker once. Mixed kinds, another kind, one worker twice in an acquire
    /// batch ([`StoreError::Batch`]), a size out of bounds or an unknown job refuse the whole
    /// batch, with nothing written. Never all-or-nothing otherwise: a stale epoch is refused
    /// alone.
    fn serve_batch(&mut self, now: Time, calls: &[WorkerCall]) -> Result<Vec<WorkerReply>, StoreError>;
    /// Leases expired by the table's clock, earliest first, at most `batch_max`.
    fn expired(&mut self, now: Time, as_of: Time) -> Result<Vec<Lease>, StoreError>;
    /// Fences an expired lease by compare-and-set on its epoch.
    fn fence(
        &mut self,
        now: Time,
        job: JobId,
        expected: Epoch,
        reclaimer: ReclaimerId,
        as_of: Time,
    ) -> Result<Fencing, StoreError>;
    /// Fences 1 to `batch_max` expired leases for `reclaimer` in one transaction, each `(job,
    /// expected epoch, as_of)` by its own compare-and-set as [`TableStore::fence`] fences it alone,
    /// in the order named, each line written in the same transaction: a reclaimer's wave
    /// ([`crate::serve_reclaimer_batch`]). Never all-or-nothing: a lost race is answered alone.
    /// A size out of bounds or an unknown job refuses the whole batch, with nothing written.
    fn fence_batch(
        &mut self,
        now: Time,
        reclaimer: ReclaimerId,
        fences: &[(JobId, Epoch, Time)],
    ) -> Result<Vec<Fencing>, StoreError>;
    /// Quarantines a job whose operation has two different outputs.
    fn quarantine(
        &mut self,
        now: Time,
        job: JobId,
        epoch: Epoch,
        recorded: OutputId,
        rival: OutputId,
    ) -> Result<Quarantine, StoreError>;
    /// Everything kept about a job, if known (for checks and tests).
    fn job(&mut self, job: JobId) -> Result<Option<JobRecord>, StoreError>;
    /// Accepted jobs not yet terminal.
    fn backlog(&mut self) -> Result<usize, StoreError>;
    /// The jobs by state, and when the queued job that has waited longest entered the queue: what
    /// a dashboard shows of the table (one read, outside any decision).
    fn figures(&mut self) -> Result<Figures, StoreError>;
    /// Prunes: removes up to `limit` jobs that ended before `ended_before` (the table's clock),
    /// the longest ended first, with their payloads, ledger rows, the workers' last grants of
    /// them and every line about them; then up to `limit` lines about no one job (a listing, a
    /// world's line) stamped before both `ended_before` and the first line of every job kept. A
    /// job that has not ended, and its lines, are never touched, so the history that is left
    /// still passes `lease-check` for every job it keeps. Call it again while it prunes
    /// anything: each call is one short transaction. A pruned job's id is unknown again: an
    /// enqueue of it is accepted as new (the idempotency key holds for as long as the job is
    /// kept).
    fn prune(&mut self, ended_before: Time, limit: usize) -> Result<Pruned, StoreError>;
    /// The latest time before which ended jobs may have been pruned, if a prune removed anything:
    /// [`TableStore::history`] says so on its `run` line. A store that never prunes: `None`.
    fn pruned_before(&mut self) -> Result<Option<Time>, StoreError> {
        Ok(None)
    }
    /// The earliest live expiry.
    fn poll_timeout(&mut self) -> Result<Option<Time>, StoreError>;
    /// The history lines, in the log's order (see [`Clock`]).
    fn events(&mut self) -> Result<Vec<String>, StoreError>;
    /// The log as a history that `lease-check` reads as it is: a `run` line with the table's
    /// limits, stamped with the first line's time, then [`TableStore::events`]. Newline-ended.
    fn history(&mut self) -> Result<String, StoreError> {
        let events = self.events()?;
        let pruned_before_us = self.pruned_before()?.map(|at| at.0);
        let first_us = events.first().and_then(|line| stamp_of(line)).unwrap_or(0);
        let config = self.config();
        let run = lease_history::Entry {
            t_us: first_us,
            node: lease_history::Node::Table,
            event: lease_history::Event::Run {
                history_version: lease_history::HISTORY_VERSION,
                seed: 0,
                scenario: "lease-store".to_string(),
                batch_max: config.batch_max,
                capacity: config.capacity,
                lease_ttl_us: config.lease_ttl.as_us(),
                attempts_max: config.attempts_max,
                bug: None,
                store: None,
                drift_margin_us: None,
                latency_us: None,
                latency_calm_us: None,
                pruned_before_us,
                worker_processes: None,
                scan_every_us: None,
                params: String::new(),
            },
        };
        let mut text = run.to_json();
        text.push('\n');
        for line in events {
            text.push_str(&line);
            text.push('\n');
        }
        Ok(text)
    }
    /// Appends a line that no call of the store writes (a worker's `executing`, a fault), in the
    /// log's order as the store's own lines are, under `node`: `line` makes the line's text from
    /// its stamp, or makes none (then nothing is written). Returns the stamp of the line written.
    fn append(
        &mut self,
        stamp: Stamp,
        node: &str,
        line: &mut dyn FnMut(Time) -> Option<String>,
    ) -> Result<Option<Time>, StoreError>;
    /// Appends many lines of the caller's own in one transaction, in order, each stamped with
    /// the table's time for `now` (as [`TableStore::append`] with [`Stamp::Now`], that many
    /// times): `lines` makes them, as `(node, text)`, from the stamp. Returns the stamp.
    fn append_all(
        &mut self,
        now: Time,
        lines: &mut dyn FnMut(Time) -> Vec<(String, String)>,
    ) -> Result<Time, StoreError>;
    /// Appends the `executing` lines of effects about to start, in one transaction, each only
    /// while its lease is held: the line of `leases[i]` (that `line` makes from the stamp and `i`,
    /// as `(node, text)`) is written only if that job is still leased under that epoch
    /// and the lease has not expired by the line's time ([`lease_core::Rules::may_start`]); an
    /// unknown job's line is refused too.
    /// Returns the stamp and, lease by lease, whether its line was written: a line refused is
    /// known not written, and its effect must not start. The guard is what keeps the history's
    /// promise that an effect starts under a live lease when the write itself is slow (a live
    /// run on SQLite once waited 540 ms for the write lock and wrote the line 337 ms after the
    /// lease expired). Each lease is judged on its own: a batch is never refused whole.
    fn append_started(
        &mut self,
        now: Time,
        leases: &[(JobId, Epoch)],
        line: &mut dyn FnMut(Time, usize) -> (String, String),
    ) -> Result<(Time, Vec<bool>), StoreError>;
}

/// The effect ledger's seam: the calls of [`lease_core::EffectLedger`], on any store. `now` only
/// stamps the history line: the ledger has no clock.
pub trait LedgerStore {
    /// Raises the operation's fence to `epoch` and reports what is recorded.
    fn lookup(&mut self, now: Time, op: OpId, epoch: Epoch) -> Result<Lookup, StoreError>;
    /// Records an output unless fenced or another is recorded; never overwrites.
    fn apply(&mut self, now: Time, op: OpId, epoch: Epoch, output: OutputId) -> Result<Apply, StoreError>;
    /// Looks 1 to `batch_max` operations up in one transaction, each raising its own fence.
    fn lookup_batch(&mut self, now: Time, ops: &[(OpId, Epoch)]) -> Result<Vec<Lookup>, StoreError>;
    /// Records 1 to `batch_max` outputs in one transaction, each judged on its own operation.
    fn apply_batch(&mut self, now: Time, outputs: &[(OpId, Epoch, OutputId)]) -> Result<Vec<Apply>, StoreError>;
    /// Records 1 to `batch_max` outputs in one transaction, each judged on its own operation and
    /// its line naming the worker that records it (a runtime's slots' records, coalesced): as
    /// that many calls of [`LedgerStore::apply`], each after naming its worker.
    fn apply_as(&mut self, now: Time, outputs: &[(WorkerId, OpId, Epoch, OutputId)]) -> Result<Vec<Apply>, StoreError>;
    /// Everything kept about an operation (for checks and tests).
    fn op(&mut self, op: OpId) -> Result<OpRecord, StoreError>;
}

/// A whole store: the table and the ledger on one database.
pub trait Store: TableStore + LedgerStore {}
impl<S: TableStore + LedgerStore> Store for S {}

/// A log line's `t_us`, read without parsing the whole line.
fn stamp_of(line: &str) -> Option<u64> {
    let rest = line.strip_prefix(r#"{"t_us":"#)?;
    rest[..rest.find(',')?].parse().ok()
}
