//! The PostgreSQL store, for many machines.
//!
//! Each operation is one transaction at READ COMMITTED. It first locks the log's head table
//! ([`schema::LOCK_LOG`], or [`schema::LOCK_LOG_SHARED`] for an operation over one row under the
//! database's clock), then the one row it decides over `FOR UPDATE`, then reads the clock; it asks
//! the rules, writes the decision back with the compare-and-set of [`schema::UPDATE_JOB`], and
//! appends its history line. A transaction takes the head table's lock, then rows: no lock cycle.
//!
//! **Round trips.** The statements of a step are pipelined (sent together, answered in order, as
//! `tokio-postgres` does for requests polled together), so an operation over one row costs three
//! round trips: `BEGIN`, the lock, the row and the clock; then the writes and the line; then
//! `COMMIT` (a decision that writes nothing but its line commits with it: two). Statements are
//! prepared once, when the handle opens. Behind the synchronous seam is a private current-thread
//! runtime, as in the `postgres` crate.

use crate::schema::{self, SCHEMA_VERSION};
use crate::sql::{bits, identity, int, Op, Row, Stamps, Tx};
use crate::sql_store::{Scope, Session, SqlStore};
use crate::{Clock, Figures, StoreError};
use futures_util::future::{try_join, try_join3, try_join4, try_join5, try_join_all};
use futures_util::TryFutureExt;
use lease_core::{
    Bugs, Epoch, JobId, LastGrant, OpId, OpRecord, OutputId, RequestId, Rules, TableConfig, Time, WorkerId,
};
use std::collections::{BTreeMap, BTreeSet};
use tokio::runtime::Runtime;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

/// A lock key for migrations: one migrator at a time per database.
const MIGRATION_LOCK: i64 = 0x6c65_6173_6573;

/// The PostgreSQL store. One handle is one connection.
pub struct PostgresStore {
    runtime: Runtime,
    client: Client,
    /// Every statement an operation runs, prepared on this connection, by its text.
    prepared: BTreeMap<&'static str, Statement>,
    /// The `FOR UPDATE` forms of [`LOCKED`], by the text they lock (no text built per call).
    locked: BTreeMap<&'static str, Statement>,
    session: Session,
    /// The backlog's row this handle writes ([`schema::ADD_BACKLOG`]): its server process's id,
    /// modulo [`schema::BACKLOG_SHARDS`], so that connections seldom share one.
    shard: i64,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("rules", &self.session.rules).field("clock", &self.session.clock).finish()
    }
}

/// The reads a handle also prepares with PostgreSQL's row lock (`… FOR UPDATE`).
const LOCKED: [&str; 6] = [
    schema::SELECT_JOB,
    schema::SELECT_HEAD,
    schema::SELECT_OP,
    schema::SELECT_JOBS,
    schema::SELECT_ACQUIRE_ROWS,
    schema::SELECT_OPS,
];

/// The text of every statement a handle prepares when it opens (and [`LOCKED`]).
const STATEMENTS: [&str; 43] = [
    schema::SELECT_NOTHING_TO_GRANT,
    schema::SELECT_KNOWN_ANY,
    schema::SELECT_PAYLOADS,
    schema::UPDATE_JOBS,
    schema::SELECT_JOBS,
    schema::UPDATE_OPS,
    schema::UPSERT_GRANTS,
    schema::INSERT_EVENTS_NEXT,
    schema::SELECT_GRANTS,
    schema::ENSURE_OPS,
    schema::MARK_PRUNED,
    schema::SELECT_PRUNED,
    schema::SELECT_PRUNABLE,
    schema::DELETE_JOB_LINES,
    schema::DELETE_JOB,
    schema::DELETE_PAYLOAD,
    schema::DELETE_OPS,
    schema::DELETE_GRANTS,
    schema::SELECT_EARLIEST_KEPT_LINE,
    schema::DELETE_JOBLESS_LINES,
    schema::SELECT_FIGURES,
    schema::SELECT_JOB,
    schema::SELECT_KNOWN,
    schema::SELECT_EXPIRED,
    schema::SELECT_BACKLOG,
    schema::ADD_BACKLOG,
    schema::SELECT_EARLIEST,
    schema::SELECT_QUEUE_ENDS,
    schema::INSERT_JOB,
    schema::INSERT_PAYLOAD,
    schema::SELECT_PAYLOAD,
    schema::UPDATE_JOB,
    schema::PLANTED_COMPLETE_BY_STATE,
    schema::PLANTED_RENEW_BY_EPOCH,
    schema::SELECT_GRANT,
    schema::UPSERT_GRANT,
    schema::ENSURE_OP,
    schema::SELECT_OP,
    schema::UPDATE_OP,
    schema::INSERT_EVENT_NEXT,
    schema::SELECT_EVENTS,
    schema::SELECT_EVENTS_BY_TIME,
    schema::SELECT_CLOCK,
];

impl PostgresStore {
    /// Connects to `url` (e.g. `postgres://postgres@127.0.0.1:5432/test`) and works in `schema`
    /// (created if missing; `None`: the connection's default search path), migrated if needed.
    pub fn open(
        url: &str,
        schema: Option<&str>,
        config: TableConfig,
        clock: Clock,
    ) -> Result<PostgresStore, StoreError> {
        PostgresStore::planted(url, schema, config, Bugs::NONE, clock)
    }

    /// [`PostgresStore::open`], with `bugs` planted ([`crate::planted`]).
    pub(crate) fn planted(
        url: &str,
        schema: Option<&str>,
        config: TableConfig,
        bugs: Bugs,
        clock: Clock,
    ) -> Result<PostgresStore, StoreError> {
        config.validate()?;
        if let Some(name) = schema {
            check_schema_name(name)?;
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(StoreError::Io)?;
        let target = crate::connect::target(url)?;
        let (mut client, connection) = runtime.block_on(crate::connect::connect(&target))?;
        // Polled whenever the handle waits on the runtime; it ends when the client is dropped.
        runtime.spawn(async move {
            if let Err(error) = connection.await {
                eprintln!("lease-store: the PostgreSQL connection failed: {error}");
            }
        });
        let (prepared, locked, pid) = runtime.block_on(async {
            if let Some(name) = schema {
                // `CREATE SCHEMA IF NOT EXISTS` is not safe against itself: two handles opening at
                // once (a pool) can both find it missing, and one fails on the catalog's unique
                // index. Under the migration lock they take turns.
                let create = format!(
                    "BEGIN; SELECT pg_advisory_xact_lock({MIGRATION_LOCK}); CREATE SCHEMA IF NOT EXISTS {name}; COMMIT; \
                     SET search_path TO {name}"
                );
                client.batch_execute(&create).await?;
            }
            migrate(&mut client).await?;
            let locked_texts = LOCKED.map(|sql| format!("{sql} FOR UPDATE"));
            let (plain, locked) = try_join(
                try_join_all(STATEMENTS.iter().map(|sql| client.prepare(sql))),
                try_join_all(locked_texts.iter().map(|sql| client.prepare(sql))),
            )
            .await?;
            let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
            let prepared = STATEMENTS.into_iter().zip(plain).collect();
            Ok::<_, StoreError>((prepared, LOCKED.into_iter().zip(locked).collect(), pid))
        })?;
        let shard = i64::from(pid).rem_euclid(schema::BACKLOG_SHARDS);
        let session = Session::new(Rules { config, bugs }, clock);
        Ok(PostgresStore { runtime, client, prepared, locked, session, shard })
    }

    /// A statement prepared when the handle opened.
    fn statement(&self, sql: &str) -> &Statement {
        self.prepared.get(sql).unwrap_or_else(|| panic!("a statement not prepared on opening: {sql}"))
    }

    /// `sql`'s `FOR UPDATE` form, prepared when the handle opened.
    fn locked(&self, sql: &str) -> &Statement {
        self.locked.get(sql).unwrap_or_else(|| panic!("a locked read not prepared on opening: {sql}"))
    }

    fn transact<A>(
        &self,
        now: Time,
        scope: Scope,
        f: impl FnOnce(&Op, &mut PgTx) -> Result<A, StoreError>,
    ) -> Result<(A, Time), StoreError> {
        // Under the caller's clock, every operation takes the whole lock: the callers' times are
        // only ordered by it. So does every operation of a store with a bug planted: a planted
        // decision may write what the rules never do (complete a queued job, requeue on a
        // completion), which the narrower locks do not cover.
        let session = &self.session;
        let whole = session.clock == Clock::Caller || session.rules.bugs != Bugs::NONE;
        let lock = match &scope {
            _ if whole => schema::LOCK_LOG,
            Scope::Set | Scope::Enqueue(_) | Scope::Placing(_) | Scope::Fences(_) => schema::LOCK_LOG,
            Scope::Heads(_) | Scope::Askers(_) => schema::LOCK_QUEUE,
            // Rows each locks in key order (job rows, as an acquire locks its own: no cycle), or
            // none: see LOCK_LOG_SHARED.
            Scope::Job(_) | Scope::Jobs(_) | Scope::Op(_) | Scope::Ops(_) | Scope::Line | Scope::Leases(_) => {
                schema::LOCK_LOG_SHARED
            }
        };
        let client = &self.client;
        // One round trip: the lock, then the rows, then the clock, in that order on the server
        // (an acquire's statements on their generic plans).
        let generic = async {
            match lock == schema::LOCK_QUEUE {
                true => client.batch_execute(schema::GENERIC_PLANS).await,
                false => Ok(()),
            }
        };
        let (_, _, _, prefetched, clock) = self.runtime.block_on(try_join5(
            client.batch_execute("BEGIN").err_into(),
            generic.err_into(),
            client.batch_execute(lock).err_into(),
            self.prefetch(&scope),
            async {
                Ok::<_, StoreError>(match session.clock {
                    Clock::Caller => None,
                    Clock::Database => Some(client.query_one(self.statement(schema::SELECT_CLOCK), &[]).await?),
                })
            },
        ))?;
        let now = match clock {
            None => now,
            // The server's clock, never behind what this handle saw (a host clock may step back).
            Some(row) => Time(row.get::<_, i64>(0) as u64).max(session.last_now),
        };
        let op = session.op(now);
        let mut tx = PgTx { store: self, whole: lock == schema::LOCK_LOG, prefetched, writes: Vec::new(), backlog: 0 };
        let answer = f(&op, &mut tx)?;
        tx.commit()?;
        Ok((answer, now))
    }

    /// The rows `scope` names, read and locked.
    async fn prefetch(&self, scope: &Scope) -> Result<Prefetched, StoreError> {
        let client = &self.client;
        let mut prefetched = Prefetched::default();
        match *scope {
            Scope::Set | Scope::Line => {}
            // Three statements sent together: an enqueue held the log's whole lock for a round
            // trip each (while every worker's batch waited behind it), and now for one.
            Scope::Enqueue(ref jobs) => {
                let ids: Vec<i64> = jobs.iter().map(|job| int(job.0)).collect();
                let (known, backlog, ends) = try_join3(
                    client.query(self.statement(schema::SELECT_KNOWN_ANY), &[&ids]),
                    client.query_one(self.statement(schema::SELECT_BACKLOG), &[]),
                    client.query_one(self.statement(schema::SELECT_QUEUE_ENDS), &[]),
                )
                .await?;
                let known: BTreeSet<i64> = known.iter().map(|row| row.get(0)).collect();
                prefetched.known = jobs.iter().map(|&job| (job, known.contains(&int(job.0)))).collect();
                prefetched.backlog = Some(crate::sql::backlog_of(backlog.get(0))?);
                prefetched.ends = Some((ends.get(0), ends.get(1)));
            }
            Scope::Job(job) => {
                let id = int(job.0);
                let row = client.query_opt(self.locked(schema::SELECT_JOB), &[&id]).await?;
                prefetched.jobs.push((job, row.as_ref().map(job_row).transpose()?));
            }
            // Two statements sent together, as an enqueue's three (`Scope::Enqueue`).
            Scope::Placing(job) => {
                let id = int(job.0);
                let (row, ends) = try_join(
                    client.query_opt(self.locked(schema::SELECT_JOB), &[&id]),
                    client.query_one(self.statement(schema::SELECT_QUEUE_ENDS), &[]),
                )
                .await?;
                prefetched.jobs.push((job, row.as_ref().map(job_row).transpose()?));
                prefetched.ends = Some((ends.get(0), ends.get(1)));
            }
            Scope::Heads(want) => {
                let limit = i64::try_from(want).unwrap_or(i64::MAX);
                let rows =
                    client.query(self.locked(schema::SELECT_ACQUIRE_ROWS), &[&Vec::<i64>::new(), &limit]).await?;
                prefetched.heads = Some(acquire_rows(&rows, want)?.1);
            }
            // Two statements for one acquire or a batch of them: the grants, and the rows of the
            // jobs they name with the queue's first, locked in job order (the heads told apart by
            // their order in the queue: `SELECT_ACQUIRE_ROWS`).
            Scope::Askers(ref workers) => {
                let ids: Vec<i64> = workers.iter().map(|worker| i64::from(worker.0)).collect();
                let limit = i64::try_from(workers.len()).unwrap_or(i64::MAX);
                let (grants, rows) = try_join(
                    client.query(self.statement(schema::SELECT_GRANTS), &[&ids]),
                    client.query(self.locked(schema::SELECT_ACQUIRE_ROWS), &[&ids, &limit]),
                )
                .await?;
                let grants: BTreeMap<i64, LastGrant> = grants
                    .iter()
                    .map(|row| {
                        let grant = LastGrant {
                            request: RequestId(row.get::<_, i64>(1) as u64),
                            job: JobId(row.get::<_, i64>(2) as u64),
                            epoch: Epoch(row.get::<_, i64>(3) as u64),
                        };
                        (row.get::<_, i64>(0), grant)
                    })
                    .collect();
                let (rows, heads) = acquire_rows(&rows, workers.len())?;
                for (&worker, id) in workers.iter().zip(&ids) {
                    let grant = grants.get(id).copied();
                    prefetched.grants.push((worker, grant));
                    // As one worker's read: the row of the job its last grant names, if any. Not
                    // in the answer when a transaction under the shared lock (a reclaimer's
                    // completion of that job) updated it as this statement locked it: READ
                    // COMMITTED rechecks such a row, and can leave it out. Then the acquire fails,
                    // to be tried again: read after the clock, the row could hold a decision
                    // stamped later than this one. (It was read so, which this store refuses
                    // outright: the handle's thread panicked, and a live bench's restarted worker
                    // process served nothing more.)
                    if let Some(grant) = grant {
                        let row = rows.get(&int(grant.job.0)).ok_or(StoreError::Raced { job: grant.job })?;
                        prefetched.jobs.push((grant.job, Some(row.clone())));
                    }
                }
                prefetched.heads = Some(heads);
            }
            Scope::Op(op) => prefetched.ops.push((op, self.prefetch_op(op).await?)),
            // One statement, each job as often as it is named: a batch's rows locked in job order,
            // or an `executing` line's rows read unlocked (see Scope::Leases).
            Scope::Jobs(ref jobs) | Scope::Fences(ref jobs) | Scope::Leases(ref jobs) => {
                let ids: Vec<i64> = jobs.iter().map(|job| int(job.0)).collect();
                let statement = match scope {
                    Scope::Jobs(_) | Scope::Fences(_) => self.locked(schema::SELECT_JOBS),
                    _ => self.statement(schema::SELECT_JOBS),
                };
                let rows = client.query(statement, &[&ids]).await?;
                let rows: BTreeMap<i64, Row> =
                    rows.iter().map(|row| job_row(row).map(|row| (row.job, row))).collect::<Result<_, _>>()?;
                for (&job, id) in jobs.iter().zip(&ids) {
                    prefetched.jobs.push((job, rows.get(id).cloned()));
                }
            }
            // Two statements: the missing rows made, then every row read, locked in key order.
            Scope::Ops(ref ops) => {
                let jobs: Vec<i64> = ops.iter().map(|op| int(op.job.0)).collect();
                let steps: Vec<i64> = ops.iter().map(|op| i64::from(op.step)).collect();
                let key: [&(dyn ToSql + Sync); 2] = [&jobs, &steps];
                let (_, rows) = try_join(
                    client.execute(self.statement(schema::ENSURE_OPS), &key),
                    client.query(self.locked(schema::SELECT_OPS), &key),
                )
                .await?;
                let records: BTreeMap<(i64, i64), OpRecord> = rows
                    .iter()
                    .map(|row| {
                        let record = OpRecord {
                            fence: Epoch(row.get::<_, i64>(2) as u64),
                            recorded: row.get::<_, Option<i64>>(3).map(identity),
                            rival: row.get::<_, Option<i64>>(4).map(identity),
                        };
                        ((row.get::<_, i64>(0), row.get::<_, i64>(1)), record)
                    })
                    .collect();
                for (&op, key) in ops.iter().zip(jobs.into_iter().zip(steps)) {
                    let record = records.get(&key).copied().ok_or(StoreError::Raced { job: op.job })?;
                    prefetched.ops.push((op, record));
                }
            }
        }
        Ok(prefetched)
    }

    /// An operation's ledger row, created empty if missing, and locked.
    async fn prefetch_op(&self, op: OpId) -> Result<OpRecord, StoreError> {
        let (job, step) = (int(op.job.0), i64::from(op.step));
        let key: [&(dyn ToSql + Sync); 2] = [&job, &step];
        let (_, row) = try_join(
            self.client.execute(self.statement(schema::ENSURE_OP), &key),
            self.client.query_one(self.locked(schema::SELECT_OP), &key),
        )
        .await?;
        Ok(op_record(&row))
    }

    fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        Ok(self.runtime.block_on(self.client.query(self.statement(sql), params))?)
    }
}

/// Moves the database to [`SCHEMA_VERSION`], or refuses a version this build does not know.
async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
    tx.execute(schema::CREATE_VERSION, &[]).await?;
    let found: Option<i64> = tx.query_opt(schema::READ_VERSION, &[]).await?.map(|row| row.get(0));
    let current = found.unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(StoreError::UnknownSchema { found: current, known: SCHEMA_VERSION });
    }
    for &(version, both, postgres, _) in schema::MIGRATIONS.iter().filter(|(version, ..)| *version > current) {
        tx.batch_execute(both).await?;
        tx.batch_execute(postgres).await?;
        if version == 4 {
            // Each earlier line gets its job, as every line written from now on has.
            for row in tx.query(schema::SELECT_UNNAMED_LINES, &[]).await? {
                if let Some(job) = crate::sql::line_job(row.get(1)) {
                    tx.execute(schema::NAME_LINE, &[&row.get::<_, i64>(0), &int(job.0)]).await?;
                }
            }
        }
        let statement = if found.is_none() && version == 1 { schema::INSERT_VERSION } else { schema::UPDATE_VERSION };
        tx.execute(statement, &[&version]).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The rows an operation locked (and read) before it read the clock.
#[derive(Default)]
struct Prefetched {
    /// Job rows, by job (`None`: no such job).
    jobs: Vec<(JobId, Option<Row>)>,
    /// Ledger rows, by operation.
    ops: Vec<(OpId, OpRecord)>,
    /// Each asking worker's last grant by request, for an acquire (one, or a runtime's batch).
    grants: Vec<(WorkerId, Option<LastGrant>)>,
    /// The queue's first jobs, in order, for a batched acquire.
    heads: Option<std::collections::VecDeque<Row>>,
    /// An enqueue's jobs, and whether each is known.
    known: Vec<(JobId, bool)>,
    /// The backlog, for an enqueue.
    backlog: Option<usize>,
    /// The queue's ends, for an enqueue, a requeue, a release or a fence.
    ends: Option<(i64, i64)>,
}

/// A write held until the operation's decision is made, then sent with the others: a
/// statement of its own, or one of the kinds a batch's writes share one statement for
/// ([`statements`]).
enum Write {
    One {
        sql: &'static str,
        params: Vec<Box<dyn ToSql + Sync>>,
        /// The rows it must write (a compare-and-set: 1), and the job named if it does not.
        guard: Option<JobId>,
    },
    /// [`schema::UPDATE_JOB`]: the decision over the row read (guarded), with its stamps.
    Job { new: Row, old: Row, stamps: Stamps },
    /// [`schema::UPDATE_OP`]: a ledger decision (guarded).
    Op { op: OpId, new: OpRecord, old: OpRecord },
    /// [`schema::UPSERT_GRANT`].
    Grant { worker: i64, grant: [i64; 3] },
    /// [`schema::INSERT_EVENT_NEXT`].
    Line { t_us: i64, node: String, line: String, job: Option<i64> },
}

/// What a statement sent must have written: nothing checked, one row (a compare-and-set over
/// one job's row), or one row per job listed (a batch's compare-and-sets, each row's own guard,
/// the rows written returned by job).
enum Guard {
    None,
    One(JobId),
    Each(Vec<i64>),
}

/// One statement to send: its text, its parameters, and what it must have written.
struct Outgoing {
    sql: &'static str,
    params: Vec<Box<dyn ToSql + Sync>>,
    guard: Guard,
}

impl Write {
    /// Its kind's place among the kinds that share a statement (`None`: a statement of its own).
    fn kind(&self) -> Option<usize> {
        match self {
            Write::One { .. } => None,
            Write::Job { .. } => Some(0),
            Write::Op { .. } => Some(1),
            Write::Grant { .. } => Some(2),
            Write::Line { .. } => Some(3),
        }
    }

    /// The key a kind's statement writes once at most (`None`: any number of times, as lines).
    fn key(&self) -> Option<(i64, i64)> {
        match *self {
            Write::One { .. } | Write::Line { .. } => None,
            Write::Job { ref new, .. } => Some((new.job, 0)),
            Write::Op { op, .. } => Some((int(op.job.0), i64::from(op.step))),
            Write::Grant { worker, .. } => Some((worker, 0)),
        }
    }

    /// Its own statement.
    fn alone(self) -> Outgoing {
        let output = |output: Option<OutputId>| output.map(bits);
        match self {
            Write::One { sql, params, guard } => Outgoing { sql, params, guard: guard.map_or(Guard::None, Guard::One) },
            Write::Job { new, old, stamps } => {
                let mut params = row_params(&new);
                params.push(Box::new(old.state));
                params.push(Box::new(old.epoch));
                params.push(Box::new(old.attempts));
                params.push(Box::new(old.lease_epoch));
                params.push(Box::new(old.expires_at_us));
                params.push(Box::new(stamps.queued_at_us));
                params.push(Box::new(stamps.ended_at_us));
                Outgoing { sql: schema::UPDATE_JOB, params, guard: Guard::One(JobId(new.job as u64)) }
            }
            Write::Op { op, new, old } => Outgoing {
                sql: schema::UPDATE_OP,
                params: vec![
                    Box::new(int(op.job.0)),
                    Box::new(i64::from(op.step)),
                    Box::new(int(new.fence.0)),
                    Box::new(output(new.recorded)),
                    Box::new(output(new.rival)),
                    Box::new(output(old.recorded)),
                    Box::new(output(old.rival)),
                ],
                guard: Guard::One(op.job),
            },
            Write::Grant { worker, grant: [request, job, epoch] } => Outgoing {
                sql: schema::UPSERT_GRANT,
                params: vec![Box::new(worker), Box::new(request), Box::new(job), Box::new(epoch)],
                guard: Guard::None,
            },
            Write::Line { t_us, node, line, job } => Outgoing {
                sql: schema::INSERT_EVENT_NEXT,
                params: vec![Box::new(t_us), Box::new(node), Box::new(line), Box::new(job)],
                guard: Guard::None,
            },
        }
    }
}

/// The statements that send `writes`. A kind with two or more writes goes as one statement over
/// arrays (`unnest`, each row's own guard in its `WHERE`), when the writes allow it: every other
/// write is a job's insert or payload (sent first, in order) or the backlog's change (sent last),
/// and no key is written twice by one kind. A batch's lines keep their order (their sequence
/// numbers are taken in it). Otherwise every write is its own statement, in order, as one row's
/// are.
fn statements(writes: Vec<Write>) -> Vec<Outgoing> {
    let inserts_only = |write: &Write| match write {
        Write::One { sql, .. } => [schema::INSERT_JOB, schema::INSERT_PAYLOAD, schema::ADD_BACKLOG].contains(sql),
        _ => true,
    };
    let mut keys = std::collections::BTreeSet::new();
    let unique = writes.iter().all(|write| write.key().is_none_or(|key| keys.insert((write.kind(), key))));
    let batched = writes.iter().filter(|write| write.kind().is_some()).count();
    if batched < 2 || !unique || !writes.iter().all(inserts_only) {
        return writes.into_iter().map(Write::alone).collect();
    }
    let mut kinds: [Vec<Write>; 6] = Default::default();
    let (mut out, mut last) = (Vec::new(), Vec::new());
    for write in writes {
        match write.kind() {
            None if matches!(write, Write::One { sql: schema::ADD_BACKLOG, .. }) => last.push(write.alone()),
            None => out.push(write.alone()),
            Some(kind) => kinds[kind].push(write),
        }
    }
    for group in kinds {
        match group.len() {
            0 => {}
            1 => out.extend(group.into_iter().map(Write::alone)),
            _ => out.push(together(group)),
        }
    }
    out.extend(last);
    out
}

/// One statement for writes of one kind, two or more.
fn together(group: Vec<Write>) -> Outgoing {
    let output = |output: Option<OutputId>| output.map(bits);
    let mut params: Vec<Box<dyn ToSql + Sync>> = Vec::new();
    macro_rules! column {
        ($pattern:pat => $value:expr) => {{
            let column: Vec<_> = group
                .iter()
                .map(|write| match write {
                    $pattern => $value,
                    _ => unreachable!("a group holds one kind"),
                })
                .collect();
            params.push(Box::new(column));
        }};
    }
    match group[0] {
        Write::Job { .. } => {
            column!(Write::Job { new, .. } => new.job);
            column!(Write::Job { new, .. } => new.state);
            column!(Write::Job { new, .. } => new.epoch);
            column!(Write::Job { new, .. } => new.attempts);
            column!(Write::Job { new, .. } => new.queue_seq);
            column!(Write::Job { new, .. } => new.owner.clone());
            column!(Write::Job { new, .. } => new.lease_epoch);
            column!(Write::Job { new, .. } => new.expires_at_us);
            column!(Write::Job { new, .. } => new.outcome);
            column!(Write::Job { new, .. } => new.output);
            column!(Write::Job { new, .. } => new.rival);
            column!(Write::Job { new, .. } => new.ended_epoch);
            column!(Write::Job { new, .. } => new.ended_attempts);
            column!(Write::Job { old, .. } => old.state);
            column!(Write::Job { old, .. } => old.epoch);
            column!(Write::Job { old, .. } => old.attempts);
            column!(Write::Job { old, .. } => old.lease_epoch);
            column!(Write::Job { old, .. } => old.expires_at_us);
            column!(Write::Job { stamps, .. } => stamps.queued_at_us);
            column!(Write::Job { stamps, .. } => stamps.ended_at_us);
            let jobs = group.iter().filter_map(|write| write.key()).map(|(job, _)| job).collect();
            Outgoing { sql: schema::UPDATE_JOBS, params, guard: Guard::Each(jobs) }
        }
        Write::Op { .. } => {
            column!(Write::Op { op, .. } => int(op.job.0));
            column!(Write::Op { op, .. } => i64::from(op.step));
            column!(Write::Op { new, .. } => int(new.fence.0));
            column!(Write::Op { new, .. } => output(new.recorded));
            column!(Write::Op { new, .. } => output(new.rival));
            column!(Write::Op { old, .. } => output(old.recorded));
            column!(Write::Op { old, .. } => output(old.rival));
            let jobs = group.iter().filter_map(|write| write.key()).map(|(job, _)| job).collect();
            Outgoing { sql: schema::UPDATE_OPS, params, guard: Guard::Each(jobs) }
        }
        Write::Grant { .. } => {
            column!(Write::Grant { worker, .. } => *worker);
            column!(Write::Grant { grant, .. } => grant[0]);
            column!(Write::Grant { grant, .. } => grant[1]);
            column!(Write::Grant { grant, .. } => grant[2]);
            Outgoing { sql: schema::UPSERT_GRANTS, params, guard: Guard::None }
        }
        Write::Line { .. } => {
            column!(Write::Line { t_us, .. } => *t_us);
            column!(Write::Line { node, .. } => node.clone());
            column!(Write::Line { line, .. } => line.clone());
            column!(Write::Line { job, .. } => *job);
            Outgoing { sql: schema::INSERT_EVENTS_NEXT, params, guard: Guard::None }
        }
        Write::One { .. } => unreachable!("a statement of its own is never grouped"),
    }
}

/// The statements of [`Tx`] on one PostgreSQL transaction. Reads go at once; writes are held and
/// sent together when the decision is made ([`PgTx::commit`]), so no read may follow a write.
pub(crate) struct PgTx<'a> {
    store: &'a PostgresStore,
    /// Holds [`schema::LOCK_LOG`]: may read rows it does not lock, or did not lock before its clock.
    whole: bool,
    prefetched: Prefetched,
    writes: Vec<Write>,
    /// What this transaction changed the backlog by, written last, just before the commit: the
    /// count's row is then held for the least time.
    backlog: i64,
}

fn job_row(row: &tokio_postgres::Row) -> Result<Row, StoreError> {
    Row::read(
        row.get(0),
        row.get::<_, &str>(1),
        [row.get(2), row.get(3)],
        row.get(4),
        row.get(5),
        [row.get(6), row.get(7)],
        row.get::<_, Option<&str>>(8),
        [row.get(9), row.get(10), row.get(11), row.get(12)],
    )
}

/// [`schema::SELECT_ACQUIRE_ROWS`]'s rows, by job, and the queue's first `limit` of them in queue
/// order: every head is among the rows, and a granted job that is queued but not a head comes
/// after them all (the order is the statement's, `NULLS LAST` as PostgreSQL sorts).
fn acquire_rows(
    rows: &[tokio_postgres::Row],
    limit: usize,
) -> Result<(BTreeMap<i64, Row>, std::collections::VecDeque<Row>), StoreError> {
    let rows: BTreeMap<i64, Row> =
        rows.iter().map(|row| job_row(row).map(|row| (row.job, row))).collect::<Result<_, _>>()?;
    let mut queued: Vec<&Row> = rows.values().filter(|row| row.state == "queued").collect();
    queued.sort_by_key(|row| (row.queue_seq.is_none(), row.queue_seq, row.job));
    let heads = queued.into_iter().take(limit).cloned().collect();
    Ok((rows, heads))
}

fn last_grant(row: &tokio_postgres::Row) -> LastGrant {
    LastGrant {
        request: RequestId(row.get::<_, i64>(0) as u64),
        job: JobId(row.get::<_, i64>(1) as u64),
        epoch: Epoch(row.get::<_, i64>(2) as u64),
    }
}

fn op_record(row: &tokio_postgres::Row) -> OpRecord {
    OpRecord {
        fence: Epoch(row.get::<_, i64>(0) as u64),
        recorded: row.get::<_, Option<i64>>(1).map(identity),
        rival: row.get::<_, Option<i64>>(2).map(identity),
    }
}

fn row_params(r: &Row) -> Vec<Box<dyn ToSql + Sync>> {
    vec![
        Box::new(r.job),
        Box::new(r.state),
        Box::new(r.epoch),
        Box::new(r.attempts),
        Box::new(r.queue_seq),
        Box::new(r.owner.clone()),
        Box::new(r.lease_epoch),
        Box::new(r.expires_at_us),
        Box::new(r.outcome),
        Box::new(r.output),
        Box::new(r.rival),
        Box::new(r.ended_epoch),
        Box::new(r.ended_attempts),
    ]
}

/// A new job's parameters ([`schema::INSERT_JOB`]): its row, and when it entered the queue.
fn insert_params(r: &Row, queued_at_us: i64) -> Vec<Box<dyn ToSql + Sync>> {
    let mut params = row_params(r);
    params.push(Box::new(queued_at_us));
    params
}

impl Write {
    /// [`schema::ADD_BACKLOG`]: `delta` added to the backlog's row `shard`.
    fn backlog(delta: i64, shard: i64) -> Write {
        Write::One { sql: schema::ADD_BACKLOG, params: vec![Box::new(delta), Box::new(shard)], guard: None }
    }
}

impl PgTx<'_> {
    /// A read of rows this transaction does not lock, or of a row it did not lock before its
    /// clock: only under the whole lock, and before any write (a held write is not yet visible).
    fn read(&self, what: &str) {
        assert!(self.whole, "{what} read without the log's whole lock");
        assert!(self.writes.is_empty(), "{what} read after a held write");
    }

    fn rows(&self, statement: &Statement, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        let rows = self.store.runtime.block_on(self.store.client.query(statement, params))?;
        rows.iter().map(job_row).collect()
    }

    fn hold(&mut self, sql: &'static str, params: Vec<Box<dyn ToSql + Sync>>, guard: Option<JobId>) {
        self.writes.push(Write::One { sql, params, guard });
    }

    /// Sends the held writes, then commits: together, unless a write is guarded, whose count must
    /// be seen before the commit (a guard that wrote nothing rolls the transaction back).
    fn commit(mut self) -> Result<(), StoreError> {
        let store = self.store;
        if self.backlog != 0 {
            self.writes.push(Write::backlog(self.backlog, store.shard));
        }
        let statements = statements(std::mem::take(&mut self.writes));
        if statements.iter().all(|statement| matches!(statement.guard, Guard::None)) {
            let writes = try_join_all(statements.iter().map(|statement| store.send(statement)));
            store.runtime.block_on(try_join(writes, store.client.batch_execute("COMMIT")))?;
            return Ok(());
        }
        store.send_checked(&statements)?;
        store.runtime.block_on(store.client.batch_execute("COMMIT"))?;
        Ok(())
    }
}

impl PostgresStore {
    /// Sends one statement: its rows written, or (a batch's compare-and-sets) the jobs it wrote.
    async fn send(&self, statement: &Outgoing) -> Result<Written, tokio_postgres::Error> {
        let params: Vec<&(dyn ToSql + Sync)> = statement.params.iter().map(|param| &**param as _).collect();
        let prepared = self.statement(statement.sql);
        Ok(match statement.guard {
            Guard::Each(_) => {
                let rows = self.client.query(prepared, &params).await?;
                Written::Jobs(rows.iter().map(|row| row.get::<_, i64>(0)).collect())
            }
            Guard::None | Guard::One(_) => Written::Count(self.client.execute(prepared, &params).await?),
        })
    }

    /// Sends `statements` together and checks each guard: a compare-and-set that wrote nothing
    /// names its job ([`StoreError::Raced`]), and the transaction is rolled back.
    fn send_checked(&self, statements: &[Outgoing]) -> Result<(), StoreError> {
        let written = self.runtime.block_on(try_join_all(statements.iter().map(|statement| self.send(statement))))?;
        for (statement, written) in statements.iter().zip(written) {
            match (&statement.guard, written) {
                (Guard::One(job), Written::Count(0)) => return Err(StoreError::Raced { job: *job }),
                (Guard::Each(jobs), Written::Jobs(wrote)) => {
                    if let Some(&job) = jobs.iter().find(|job| !wrote.contains(job)) {
                        return Err(StoreError::Raced { job: JobId(job as u64) });
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// What a statement sent wrote.
enum Written {
    Count(u64),
    Jobs(Vec<i64>),
}

impl Tx for PgTx<'_> {
    fn job(&mut self, job: JobId) -> Result<Option<Row>, StoreError> {
        if let Some(at) = self.prefetched.jobs.iter().position(|(prefetched, _)| *prefetched == job) {
            return Ok(self.prefetched.jobs.swap_remove(at).1);
        }
        self.read("another job's row");
        Ok(self.rows(self.store.locked(schema::SELECT_JOB), &[&int(job.0)])?.pop())
    }

    fn known(&mut self, job: JobId) -> Result<bool, StoreError> {
        // An enqueue's, read with its lock (`Scope::Enqueue`).
        if let Some(&(_, known)) = self.prefetched.known.iter().find(|&&(prefetched, _)| prefetched == job) {
            return Ok(known);
        }
        self.read("whether a job is known");
        Ok(!self.store.query(schema::SELECT_KNOWN, &[&int(job.0)])?.is_empty())
    }

    fn head(&mut self) -> Result<Option<Row>, StoreError> {
        if let Some(heads) = &mut self.prefetched.heads {
            return Ok(heads.pop_front());
        }
        self.read("the queue's head");
        Ok(self.rows(self.store.locked(schema::SELECT_HEAD), &[])?.pop())
    }

    fn backlog(&mut self) -> Result<usize, StoreError> {
        self.read("the backlog");
        // Read before this transaction changes it (an enqueue reads it first): a change is held
        // until the commit, so a read after one would miss it.
        assert_eq!(self.backlog, 0, "the backlog read after this transaction changed it");
        if let Some(backlog) = self.prefetched.backlog.take() {
            return Ok(backlog);
        }
        crate::sql::backlog_of(self.store.query(schema::SELECT_BACKLOG, &[])?[0].get(0))
    }

    fn add_backlog(&mut self, delta: i64) -> Result<(), StoreError> {
        self.backlog += delta;
        Ok(())
    }

    fn queue_ends(&mut self) -> Result<(i64, i64), StoreError> {
        if let Some(ends) = self.prefetched.ends.take() {
            return Ok(ends);
        }
        self.read("the queue's ends");
        let row = &self.store.query(schema::SELECT_QUEUE_ENDS, &[])?[0];
        Ok((row.get(0), row.get(1)))
    }

    fn insert(&mut self, r: &Row, queued_at_us: i64) -> Result<(), StoreError> {
        self.hold(schema::INSERT_JOB, insert_params(r, queued_at_us), None);
        Ok(())
    }

    fn insert_payload(&mut self, job: JobId, payload: &[u8]) -> Result<(), StoreError> {
        self.hold(schema::INSERT_PAYLOAD, vec![Box::new(int(job.0)), Box::new(payload.to_vec())], None);
        Ok(())
    }

    fn update(&mut self, r: &Row, old: &Row, stamps: Stamps) -> Result<usize, StoreError> {
        self.writes.push(Write::Job { new: r.clone(), old: old.clone(), stamps });
        // Checked before the commit: a guard that wrote nothing rolls everything back.
        Ok(1)
    }

    fn expiring(&mut self, through: i64, limit: i64) -> Result<Vec<Row>, StoreError> {
        self.read("the expired leases");
        self.rows(self.store.statement(schema::SELECT_EXPIRED), &[&through, &limit])
    }

    fn last_grant(&mut self, worker: WorkerId) -> Result<Option<LastGrant>, StoreError> {
        if let Some(at) = self.prefetched.grants.iter().position(|(asker, _)| *asker == worker) {
            return Ok(self.prefetched.grants.swap_remove(at).1);
        }
        self.read("a worker's last grant");
        Ok(self.store.query(schema::SELECT_GRANT, &[&i64::from(worker.0)])?.first().map(last_grant))
    }

    fn set_last_grant(&mut self, worker: WorkerId, grant: &LastGrant) -> Result<(), StoreError> {
        let grant = [int(grant.request.0), int(grant.job.0), int(grant.epoch.0)];
        self.writes.push(Write::Grant { worker: i64::from(worker.0), grant });
        Ok(())
    }

    fn planted(&mut self, sql: &str, job: JobId, epoch: Epoch, value: i64) -> Result<usize, StoreError> {
        // Its count is the planted decision: sent at once (no write is held before it).
        assert!(self.writes.is_empty(), "a planted statement after a held write");
        let params: [&(dyn ToSql + Sync); 3] = [&int(job.0), &int(epoch.0), &value];
        let store = self.store;
        Ok(store.runtime.block_on(store.client.execute(store.statement(sql), &params))? as usize)
    }

    fn op(&mut self, op: OpId) -> Result<OpRecord, StoreError> {
        if let Some(at) = self.prefetched.ops.iter().position(|&(prefetched, _)| prefetched == op) {
            return Ok(self.prefetched.ops.swap_remove(at).1);
        }
        self.read("another operation's ledger row");
        let key: [&(dyn ToSql + Sync); 2] = [&int(op.job.0), &i64::from(op.step)];
        let store = self.store;
        let (_, row) = store.runtime.block_on(try_join(
            store.client.execute(store.statement(schema::ENSURE_OP), &key),
            store.client.query_one(store.locked(schema::SELECT_OP), &key),
        ))?;
        Ok(op_record(&row))
    }

    fn update_op(&mut self, op: OpId, new: &OpRecord, old: &OpRecord) -> Result<usize, StoreError> {
        self.writes.push(Write::Op { op, new: *new, old: *old });
        Ok(1)
    }

    fn log(&mut self, t_us: u64, node: &str, job: Option<JobId>, line: &str) -> Result<(), StoreError> {
        let (node, line, job) = (node.to_string(), line.to_string(), job.map(|job| int(job.0)));
        self.writes.push(Write::Line { t_us: int(t_us), node, line, job });
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.store.send_checked(&statements(std::mem::take(&mut self.writes)))
    }
}

impl SqlStore for PostgresStore {
    type Tx<'t> = PgTx<'t>;

    fn session(&self) -> &Session {
        &self.session
    }

    fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    fn run<A>(
        &mut self,
        now: Time,
        advances: bool,
        scope: Scope,
        f: impl FnOnce(&Op, &mut PgTx) -> Result<A, StoreError>,
    ) -> Result<A, StoreError> {
        match self.transact(now, scope, f) {
            Ok((answer, now)) => {
                self.session.committed(now, advances);
                Ok(answer)
            }
            Err(error) => {
                // Outside a transaction (the commit failed), a ROLLBACK only warns.
                let _ = self.runtime.block_on(self.client.batch_execute("ROLLBACK"));
                Err(error)
            }
        }
    }

    fn read_nothing_to_grant(&mut self, askers: &[(WorkerId, Option<RequestId>)]) -> Result<bool, StoreError> {
        let (workers, requests): (Vec<i64>, Vec<i64>) = askers
            .iter()
            .filter_map(|&(worker, request)| request.map(|request| (i64::from(worker.0), int(request.0))))
            .unzip();
        let rows = self.query(schema::SELECT_NOTHING_TO_GRANT, &[&workers, &requests])?;
        Ok(rows.first().is_some_and(|row| row.get::<_, bool>(0)))
    }

    fn read_job(&mut self, job: JobId) -> Result<Option<Row>, StoreError> {
        self.query(schema::SELECT_JOB, &[&int(job.0)])?.first().map(job_row).transpose()
    }

    fn read_backlog(&mut self) -> Result<usize, StoreError> {
        crate::sql::backlog_of(self.query(schema::SELECT_BACKLOG, &[])?[0].get(0))
    }

    fn read_earliest(&mut self) -> Result<Option<Time>, StoreError> {
        let earliest: Option<i64> = self.query(schema::SELECT_EARLIEST, &[])?[0].get(0);
        Ok(earliest.map(|us| Time(us as u64)))
    }

    fn read_events(&mut self) -> Result<Vec<String>, StoreError> {
        Ok(self.query(self.session.clock.log_order(), &[])?.iter().map(|row| row.get(0)).collect())
    }

    fn read_op(&mut self, op: OpId) -> Result<OpRecord, StoreError> {
        let key: [&(dyn ToSql + Sync); 2] = [&int(op.job.0), &i64::from(op.step)];
        Ok(self.query(schema::SELECT_OP, &key)?.first().map(op_record).unwrap_or_default())
    }

    fn prune_rows(&mut self, ended_before: Time, limit: i64) -> Result<crate::Pruned, StoreError> {
        let (client, cutoff) = (&self.client, int(ended_before.0));
        let pruned = self.runtime.block_on(async {
            client.batch_execute("BEGIN").await?;
            client.batch_execute(schema::LOCK_LOG).await?;
            let jobs = client.query(self.statement(schema::SELECT_PRUNABLE), &[&cutoff, &limit]).await?;
            let mut pruned = crate::Pruned::default();
            for job in jobs.iter().map(|row| row.get::<_, i64>(0)) {
                let key: [&(dyn ToSql + Sync); 1] = [&job];
                let (lines, _, _, _) = try_join4(
                    client.execute(self.statement(schema::DELETE_JOB_LINES), &key),
                    client.execute(self.statement(schema::DELETE_PAYLOAD), &key),
                    client.execute(self.statement(schema::DELETE_OPS), &key),
                    client.execute(self.statement(schema::DELETE_GRANTS), &key),
                )
                .await?;
                pruned.lines += lines as usize;
                pruned.jobs += client.execute(self.statement(schema::DELETE_JOB), &key).await? as usize;
            }
            let kept: Option<i64> =
                client.query_one(self.statement(schema::SELECT_EARLIEST_KEPT_LINE), &[]).await?.get(0);
            let before = kept.map_or(cutoff, |kept| kept.min(cutoff));
            let lines = client.execute(self.statement(schema::DELETE_JOBLESS_LINES), &[&before, &limit]).await?;
            pruned.lines += lines as usize;
            if pruned != crate::Pruned::default() {
                client.execute(self.statement(schema::MARK_PRUNED), &[&cutoff]).await?;
            }
            client.batch_execute("COMMIT").await?;
            Ok::<_, StoreError>(pruned)
        });
        if pruned.is_err() {
            let _ = self.runtime.block_on(self.client.batch_execute("ROLLBACK"));
        }
        pruned
    }

    fn read_pruned(&mut self) -> Result<Option<Time>, StoreError> {
        let before: Option<i64> = self.query(schema::SELECT_PRUNED, &[])?[0].get(0);
        Ok(before.map(|us| Time(us as u64)))
    }

    fn read_figures(&mut self) -> Result<Figures, StoreError> {
        let mut figures = Figures::default();
        for row in self.query(schema::SELECT_FIGURES, &[])? {
            figures.add(row.get(0), row.get(1), row.get(2), row.get(3))?;
        }
        Ok(figures)
    }

    fn read_payload(&mut self, job: JobId) -> Result<Vec<u8>, StoreError> {
        Ok(self.query(schema::SELECT_PAYLOAD, &[&int(job.0)])?.first().map(|row| row.get(0)).unwrap_or_default())
    }

    /// One read for the lot: the payloads of the jobs named, by `= ANY`.
    fn read_payloads(&mut self, jobs: &[JobId]) -> Result<Vec<Vec<u8>>, StoreError> {
        let ids: Vec<i64> = jobs.iter().map(|job| int(job.0)).collect();
        let found: BTreeMap<i64, Vec<u8>> =
            self.query(schema::SELECT_PAYLOADS, &[&ids])?.into_iter().map(|row| (row.get(0), row.get(1))).collect();
        // A job named twice gets its payload twice.
        Ok(ids.iter().map(|id| found.get(id).cloned().unwrap_or_default()).collect())
    }
}

/// Enqueues `job` with `payload` inside `tx`, a transaction the caller holds on its own
/// connection, so that the job is enqueued with the caller's own writes or not at all: it and its
/// history line commit with the caller's transaction, and a rollback leaves neither. The answer is
/// [`PostgresStore`]'s enqueue's, decided by the same rules: `job` is the caller's idempotency key
/// (a document's id, say), accepted once ([`lease_core::Enqueued::Duplicate`] after, the first payload kept),
/// and refused at the table's capacity (`config`, as the fleet's stores are opened with).
///
/// `schema` is where the fleet's stores work (already migrated by one of them: a schema at
/// another version is refused). The transaction must be at `READ COMMITTED`, PostgreSQL's
/// default: under a snapshot taken before this call's lock, the capacity and the job's novelty
/// would be judged on stale rows. The search path is set for this call and restored after it.
///
/// **The cost.** This takes the log's exclusive lock ([`schema::LOCK_LOG`]), as every enqueue
/// does, and holds it until the caller's transaction ends: every other operation of the fleet
/// waits meanwhile. Enqueue last, just before the commit; many jobs at once with
/// [`enqueue_batch_in`], which is this call's batch.
pub async fn enqueue_in(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
    config: TableConfig,
    job: JobId,
    payload: &[u8],
) -> Result<lease_core::Enqueued, StoreError> {
    let mut answers = enqueue_batch_in(tx, schema, config, &[(job, payload)]).await?;
    Ok(answers.pop().expect("a batch of one has one answer"))
}

/// Enqueues `jobs` (1 to `config.batch_max`, each with its payload) inside `tx`, as
/// [`enqueue_in`] enqueues one, in one turn of the log's exclusive lock: a service that writes
/// many rows in its transaction (an import, an order's lines) enqueues their jobs with them, or
/// none of them. Each job is judged as its own enqueue at that moment
/// ([`lease_core::LeaseTable::enqueue_batch`], as [`crate::TableStore::enqueue_batch`]): a known
/// job, or one named earlier in the batch, is `Duplicate`; past the capacity a job is `Rejected`,
/// and the jobs before it stay accepted; each gets its own history line. The answers come in the
/// order of `jobs`.
///
/// An empty batch, one past `batch_max`, and a payload too large anywhere in it are refused
/// before anything is read or written; so is everything [`enqueue_in`] refuses. The reads (which
/// jobs are known, the backlog, the queue's end) go together once the lock is taken, and the
/// writes together after the decision: a batch costs about the round trips of one enqueue.
pub async fn enqueue_batch_in<P: AsRef<[u8]>>(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
    config: TableConfig,
    jobs: &[(JobId, P)],
) -> Result<Vec<lease_core::Enqueued>, StoreError> {
    config.validate()?;
    check_schema_name(schema)?;
    crate::sql_store::check_batch(config, jobs.len())?;
    for (job, payload) in jobs {
        crate::check_payload(*job, payload.as_ref())?;
    }
    let isolation: String = tx.query_one("SELECT current_setting('transaction_isolation')", &[]).await?.get(0);
    if isolation != "read committed" {
        return Err(StoreError::Isolation(isolation));
    }
    let saved: String = tx.query_one("SELECT current_setting('search_path')", &[]).await?.get(0);
    tx.query_one("SELECT set_config('search_path', $1, true)", &[&schema]).await?;
    let answers = enqueue_in_schema(tx, schema, config, jobs).await;
    // The caller's search path again, whatever the answer (a database error has aborted the
    // caller's transaction anyway, and then this fails too: the first error is the one said).
    let restored = tx.query_one("SELECT set_config('search_path', $1, true)", &[&saved]).await;
    let answers = answers?;
    restored?;
    Ok(answers)
}

/// [`enqueue_batch_in`] once the search path names `schema`.
async fn enqueue_in_schema<P: AsRef<[u8]>>(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
    config: TableConfig,
    jobs: &[(JobId, P)],
) -> Result<Vec<lease_core::Enqueued>, StoreError> {
    let versioned: bool = tx.query_one("SELECT to_regclass('lease_schema') IS NOT NULL", &[]).await?.get(0);
    let version: Option<i64> = match versioned {
        true => tx.query_opt(schema::READ_VERSION, &[]).await?.map(|row| row.get(0)),
        false => None,
    };
    if version != Some(SCHEMA_VERSION) {
        return Err(StoreError::NotMigrated { schema: schema.to_string(), found: version, known: SCHEMA_VERSION });
    }
    tx.batch_execute(schema::LOCK_LOG).await?;
    let ids: Vec<i64> = jobs.iter().map(|&(job, _)| int(job.0)).collect();
    let (clock, known, backlog, ends) = try_join4(
        tx.query_one(schema::SELECT_CLOCK, &[]),
        tx.query(schema::SELECT_KNOWN_ANY, &[&ids]),
        tx.query_one(schema::SELECT_BACKLOG, &[]),
        tx.query_one(schema::SELECT_QUEUE_ENDS, &[]),
    )
    .await?;
    let backlog = crate::sql::backlog_of(backlog.get(0))?;
    let known = known.iter().map(|row| JobId(row.get::<_, i64>(0) as u64)).collect();
    let mut held = Held { known, backlog, ends: (ends.get(0), ends.get(1)), writes: Vec::new() };
    let (rules, caller) = (Rules { config, bugs: Bugs::NONE }, crate::Caller::default());
    let now = Time(clock.get::<_, i64>(0) as u64);
    let answers = Op { rules: &rules, caller: &caller, last_now: now, now }.enqueue_batch(&mut held, jobs)?;
    // Sent together (pipelined on the caller's connection, run in order): the jobs' rows and
    // payloads, the lines in one statement, the backlog's change last.
    let statements = statements(held.writes);
    let params: Vec<Vec<&(dyn ToSql + Sync)>> =
        statements.iter().map(|statement| statement.params.iter().map(|param| &**param as _).collect()).collect();
    try_join_all(statements.iter().zip(&params).map(|(statement, params)| tx.execute(statement.sql, params))).await?;
    Ok(answers)
}

/// Refuses a schema name that is not lowercase letters, digits and underscores: it is spliced
/// into SQL.
fn check_schema_name(name: &str) -> Result<(), StoreError> {
    let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !valid {
        return Err(StoreError::SchemaName(name.to_string()));
    }
    Ok(())
}

/// The statements of an enqueue in a caller's transaction: its three reads made before the
/// decision (the jobs already known, the backlog, the queue's ends), its writes held until it is
/// made (as [`PgTx`] holds them), then sent on the caller's transaction. An enqueue reads and
/// writes nothing else.
struct Held {
    known: BTreeSet<JobId>,
    backlog: usize,
    ends: (i64, i64),
    writes: Vec<Write>,
}

impl Held {
    fn outside(what: &str) -> StoreError {
        StoreError::Corrupt(format!("an enqueue in a caller's transaction asked for {what}, which no enqueue reads"))
    }
}

impl Tx for Held {
    fn job(&mut self, _: JobId) -> Result<Option<Row>, StoreError> {
        Err(Held::outside("a job's row"))
    }

    fn known(&mut self, job: JobId) -> Result<bool, StoreError> {
        Ok(self.known.contains(&job))
    }

    fn head(&mut self) -> Result<Option<Row>, StoreError> {
        Err(Held::outside("the queue's head"))
    }

    fn backlog(&mut self) -> Result<usize, StoreError> {
        Ok(self.backlog)
    }

    fn add_backlog(&mut self, delta: i64) -> Result<(), StoreError> {
        // Under the log's exclusive lock: no other transaction writes the count meanwhile.
        self.writes.push(Write::backlog(delta, 0));
        Ok(())
    }

    fn queue_ends(&mut self) -> Result<(i64, i64), StoreError> {
        Ok(self.ends)
    }

    fn insert(&mut self, r: &Row, queued_at_us: i64) -> Result<(), StoreError> {
        self.writes.push(Write::One { sql: schema::INSERT_JOB, params: insert_params(r, queued_at_us), guard: None });
        Ok(())
    }

    fn insert_payload(&mut self, job: JobId, payload: &[u8]) -> Result<(), StoreError> {
        let params: Vec<Box<dyn ToSql + Sync>> = vec![Box::new(int(job.0)), Box::new(payload.to_vec())];
        self.writes.push(Write::One { sql: schema::INSERT_PAYLOAD, params, guard: None });
        Ok(())
    }

    fn update(&mut self, _: &Row, _: &Row, _: Stamps) -> Result<usize, StoreError> {
        Err(Held::outside("a row's update"))
    }

    fn expiring(&mut self, _: i64, _: i64) -> Result<Vec<Row>, StoreError> {
        Err(Held::outside("the expired leases"))
    }

    fn last_grant(&mut self, _: WorkerId) -> Result<Option<LastGrant>, StoreError> {
        Err(Held::outside("a worker's last grant"))
    }

    fn set_last_grant(&mut self, _: WorkerId, _: &LastGrant) -> Result<(), StoreError> {
        Err(Held::outside("a worker's last grant"))
    }

    fn op(&mut self, _: OpId) -> Result<OpRecord, StoreError> {
        Err(Held::outside("a ledger row"))
    }

    fn planted(&mut self, _: &str, _: JobId, _: Epoch, _: i64) -> Result<usize, StoreError> {
        Err(Held::outside("a planted statement"))
    }

    fn update_op(&mut self, _: OpId, _: &OpRecord, _: &OpRecord) -> Result<usize, StoreError> {
        Err(Held::outside("a ledger row's update"))
    }

    fn log(&mut self, t_us: u64, node: &str, job: Option<JobId>, line: &str) -> Result<(), StoreError> {
        let (node, line, job) = (node.to_string(), line.to_string(), job.map(|job| int(job.0)));
        self.writes.push(Write::Line { t_us: int(t_us), node, line, job });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{statements, Write};
    use crate::schema;
    use crate::sql::{Row, Stamps};
    use lease_core::{Epoch, JobId, JobRecord, JobState};

    fn job(id: u64) -> Write {
        let row = Row::of(JobId(id), &JobRecord { epoch: Epoch(1), attempts: 0, state: JobState::Queued }, Some(1));
        Write::Job { new: row.clone(), old: row, stamps: Stamps::default() }
    }

    fn line(id: i64) -> Write {
        Write::Line { t_us: 1, node: "table".to_string(), line: "{}".to_string(), job: Some(id) }
    }

    fn backlog(delta: i64) -> Write {
        Write::backlog(delta, 0)
    }

    fn sent(writes: Vec<Write>) -> Vec<&'static str> {
        statements(writes).iter().map(|statement| statement.sql).collect()
    }

    /// A batch that ends jobs still goes as one statement per kind: the backlog's change does not
    /// split it into a statement per row, and goes last, so its row is held for the least time.
    #[test]
    fn a_batch_that_changes_the_backlog_goes_as_one_statement_per_kind_then_the_count() {
        let writes = vec![job(1), line(1), job(2), line(2), backlog(-2)];
        assert_eq!(sent(writes), [schema::UPDATE_JOBS, schema::INSERT_EVENTS_NEXT, schema::ADD_BACKLOG]);
        let enqueue = vec![backlog(1), line(3)];
        assert_eq!(sent(enqueue), [schema::ADD_BACKLOG, schema::INSERT_EVENT_NEXT], "one of a kind: in order");
        let twice = vec![job(1), job(1), backlog(-1)];
        assert_eq!(sent(twice), [schema::UPDATE_JOB, schema::UPDATE_JOB, schema::ADD_BACKLOG], "a row twice: in order");
    }

    /// A job's insert goes before the kinds' statements and the count's change after them; a
    /// statement of any other text would go alone, and then every write goes alone, in order.
    #[test]
    fn inserts_go_first_the_count_last_and_any_other_statement_sends_all_in_order() {
        let insert = || Write::One { sql: schema::INSERT_JOB, params: Vec::new(), guard: None };
        let writes = vec![line(5), insert(), line(6), backlog(1)];
        assert_eq!(sent(writes), [schema::INSERT_JOB, schema::INSERT_EVENTS_NEXT, schema::ADD_BACKLOG]);
        let other = Write::One { sql: schema::UPDATE_OP, params: Vec::new(), guard: None };
        let writes = vec![line(5), other, line(6), backlog(1)];
        let alone = [schema::INSERT_EVENT_NEXT, schema::UPDATE_OP, schema::INSERT_EVENT_NEXT, schema::ADD_BACKLOG];
        assert_eq!(sent(writes), alone);
    }
}
