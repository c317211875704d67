//! The PostgreSQL store, for many machines.
//!
//! Each operation is one transaction at READ COMMITTED: the row a decision is made over is read
//! `FOR UPDATE` (the queue's head `FOR UPDATE SKIP LOCKED`, so concurrent acquires take different
//! jobs), the decision is written back with the compare-and-set of [`crate::schema::UPDATE_JOB`],
//! and the history line takes the log's head row last, so that lines are numbered in commit order.
//! A transaction locks at most one job or operation row, then the head: no lock cycle.

use crate::schema::{self, SCHEMA_VERSION};
use crate::sql::{bits, identity, int, Op, Row, Tx};
use crate::{Caller, LedgerStore, StoreError, TableStore};
use lease_core::{
    Acquired, Apply, Bugs, Completion, Enqueued, Epoch, Fencing, JobId, JobRecord, LastGrant, Lease, Lookup, OpId,
    OpRecord, OutputId, Quarantine, ReclaimerId, Release, Renewal, RequestId, Requeue, Rules, TableConfig, Time,
    WorkerId,
};
use postgres::types::ToSql;
use postgres::{Client, NoTls, Statement, Transaction};
use std::collections::BTreeMap;

/// Whose clock is the table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The `now` each call passes (as `LeaseTable` and SQLite).
    Caller,
    /// The server's `clock_timestamp()`, in microseconds since the Unix epoch, read inside each
    /// operation's transaction; the `now` passed is ignored. For processes on many machines.
    Database,
}

/// A lock key for migrations: one migrator at a time per database.
const MIGRATION_LOCK: i64 = 0x6c65_6173_6573;

/// The PostgreSQL store. One handle is one connection.
pub struct PostgresStore {
    client: Client,
    /// Statements prepared on this connection, by their text: one round trip per query, not two.
    prepared: BTreeMap<String, Statement>,
    rules: Rules,
    caller: Caller,
    clock: Clock,
    last_now: Time,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("rules", &self.rules).field("clock", &self.clock).finish()
    }
}

impl PostgresStore {
    /// Connects to `url` (e.g. `postgres://postgres@127.0.0.1:5432/test`) and works in `schema`
    /// (created if missing; `None`: the connection's default search path), migrated if needed.
    pub fn open(
        url: &str,
        schema: Option<&str>,
        config: TableConfig,
        bugs: Bugs,
        clock: Clock,
    ) -> Result<PostgresStore, StoreError> {
        config.validate()?;
        let mut client = Client::connect(url, NoTls)?;
        if let Some(name) = schema {
            assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "a schema name is lowercase letters, digits and underscores: {name:?}"
            );
            client.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {name}; SET search_path TO {name}"))?;
        }
        migrate(&mut client)?;
        Ok(PostgresStore {
            client,
            prepared: BTreeMap::new(),
            rules: Rules { config, bugs },
            caller: Caller::default(),
            clock,
            last_now: Time::ZERO,
        })
    }

    /// `sql`, prepared once on this connection, for a read outside any transaction.
    fn prepared(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.prepared.insert(sql.to_string(), statement.clone());
        Ok(statement)
    }

    fn run<A>(
        &mut self,
        now: Time,
        advances: bool,
        f: impl FnOnce(&Op, &mut PgTx) -> Result<A, StoreError>,
    ) -> Result<A, StoreError> {
        let mut tx = self.client.transaction()?;
        // Every operation takes the log's head first, and reads the clock after: one operation
        // at a time, as SQLite's `BEGIN IMMEDIATE` makes it, so that the log's order is the order
        // the decisions were made in, and its times only grow. Taken at the end only (as before),
        // a read of rows it does not lock (the queue's head past locked rows, its ends, the
        // expired leases) could miss a transaction logged before it: `lease-sim live` found an
        // `acquire_empty` logged after the arrival (or the requeue) it had not seen, and a
        // requeued job placed ahead of one that arrived before it; and a time read before a wait
        // for the head stamped lines out of order. The head is the first lock every transaction
        // takes, and any row after it: no lock cycle.
        let lock = match self.prepared.get(schema::LOCK_ENQUEUES) {
            Some(statement) => statement.clone(),
            None => {
                let statement = tx.prepare(schema::LOCK_ENQUEUES)?;
                self.prepared.insert(schema::LOCK_ENQUEUES.to_string(), statement.clone());
                statement
            }
        };
        tx.execute(&lock, &[])?;
        let now = match self.clock {
            Clock::Caller => now,
            // The server's clock, never behind what this handle saw (a host clock may step back).
            Clock::Database => {
                Time(tx.query_one(schema::SELECT_CLOCK, &[])?.get::<_, i64>(0) as u64).max(self.last_now)
            }
        };
        let op = Op { rules: &self.rules, caller: &self.caller, last_now: self.last_now, now };
        let answer = f(&op, &mut PgTx { tx: &mut tx, prepared: &mut self.prepared })?;
        tx.commit()?;
        if advances {
            self.last_now = now;
        }
        Ok(answer)
    }
}

/// Moves the database to [`SCHEMA_VERSION`], or refuses a version this build does not know.
fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.execute(schema::CREATE_VERSION, &[])?;
    let found: Option<i64> = tx.query_opt(schema::READ_VERSION, &[])?.map(|row| row.get(0));
    let current = found.unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(StoreError::UnknownSchema { found: current, known: SCHEMA_VERSION });
    }
    for &(version, sql) in schema::MIGRATIONS.iter().filter(|(version, _)| *version > current) {
        tx.batch_execute(sql)?;
        let statement = if found.is_none() && version == 1 { schema::INSERT_VERSION } else { schema::UPDATE_VERSION };
        tx.execute(statement, &[&version])?;
    }
    tx.commit()?;
    Ok(())
}

/// The statements of [`Tx`] on one PostgreSQL transaction.
struct PgTx<'a, 'c> {
    tx: &'a mut Transaction<'c>,
    prepared: &'a mut BTreeMap<String, Statement>,
}

fn job_row(row: &postgres::Row) -> Result<Row, StoreError> {
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

fn op_record(row: &postgres::Row) -> OpRecord {
    OpRecord {
        fence: Epoch(row.get::<_, i64>(0) as u64),
        recorded: row.get::<_, Option<i64>>(1).map(identity),
        rival: row.get::<_, Option<i64>>(2).map(identity),
    }
}

fn row_params(r: &Row) -> [&(dyn ToSql + Sync); 13] {
    [
        &r.job,
        &r.state,
        &r.epoch,
        &r.attempts,
        &r.queue_seq,
        &r.owner,
        &r.lease_epoch,
        &r.expires_at_us,
        &r.outcome,
        &r.output,
        &r.rival,
        &r.ended_epoch,
        &r.ended_attempts,
    ]
}

impl PgTx<'_, '_> {
    /// `sql`, prepared once per connection.
    fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.tx.prepare(sql)?;
        self.prepared.insert(sql.to_string(), statement.clone());
        Ok(statement)
    }

    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        Ok(self.tx.query(&statement, params)?)
    }

    fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<postgres::Row, StoreError> {
        let statement = self.statement(sql)?;
        Ok(self.tx.query_one(&statement, params)?)
    }

    fn query_opt(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        Ok(self.tx.query_opt(&statement, params)?)
    }

    fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        Ok(self.tx.execute(&statement, params)?)
    }

    fn rows(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        self.query(sql, params)?.iter().map(job_row).collect()
    }
}

impl Tx for PgTx<'_, '_> {
    fn job(&mut self, job: JobId) -> Result<Option<Row>, StoreError> {
        Ok(self.rows(&format!("{} FOR UPDATE", schema::SELECT_JOB), &[&int(job.0)])?.pop())
    }

    fn known(&mut self, job: JobId) -> Result<bool, StoreError> {
        Ok(self.query_opt(schema::SELECT_KNOWN, &[&int(job.0)])?.is_some())
    }

    fn head(&mut self) -> Result<Option<Row>, StoreError> {
        Ok(self.rows(&format!("{} FOR UPDATE SKIP LOCKED", schema::SELECT_HEAD), &[])?.pop())
    }

    fn backlog(&mut self) -> Result<usize, StoreError> {
        let count: i64 = self.query_one(schema::SELECT_BACKLOG, &[])?.get(0);
        Ok(usize::try_from(count).expect("a count is not negative"))
    }

    fn queue_ends(&mut self) -> Result<(i64, i64), StoreError> {
        let row = self.query_one(schema::SELECT_QUEUE_ENDS, &[])?;
        Ok((row.get(0), row.get(1)))
    }

    fn insert(&mut self, r: &Row) -> Result<(), StoreError> {
        self.execute(schema::INSERT_JOB, &row_params(r))?;
        Ok(())
    }

    fn update(&mut self, r: &Row, old: &Row) -> Result<usize, StoreError> {
        let mut params: Vec<&(dyn ToSql + Sync)> = row_params(r).to_vec();
        params.extend_from_slice(&[&old.state, &old.epoch, &old.attempts, &old.lease_epoch, &old.expires_at_us]);
        Ok(self.execute(schema::UPDATE_JOB, &params)? as usize)
    }

    fn expiring(&mut self, through: i64, limit: i64) -> Result<Vec<Row>, StoreError> {
        self.rows(schema::SELECT_EXPIRED, &[&through, &limit])
    }

    fn last_grant(&mut self, worker: WorkerId) -> Result<Option<LastGrant>, StoreError> {
        let row = self.query_opt(schema::SELECT_GRANT, &[&i64::from(worker.0)])?;
        Ok(row.map(|row| LastGrant {
            request: RequestId(row.get::<_, i64>(0) as u64),
            job: JobId(row.get::<_, i64>(1) as u64),
            epoch: Epoch(row.get::<_, i64>(2) as u64),
        }))
    }

    fn set_last_grant(&mut self, worker: WorkerId, grant: &LastGrant) -> Result<(), StoreError> {
        let params: [&(dyn ToSql + Sync); 4] =
            [&i64::from(worker.0), &int(grant.request.0), &int(grant.job.0), &int(grant.epoch.0)];
        self.execute(schema::UPSERT_GRANT, &params)?;
        Ok(())
    }

    fn planted(&mut self, sql: &str, job: JobId, epoch: Epoch, value: i64) -> Result<usize, StoreError> {
        let params: [&(dyn ToSql + Sync); 3] = [&int(job.0), &int(epoch.0), &value];
        Ok(self.execute(sql, &params)? as usize)
    }

    fn op(&mut self, op: OpId) -> Result<OpRecord, StoreError> {
        let key: [&(dyn ToSql + Sync); 2] = [&int(op.job.0), &i64::from(op.step)];
        self.execute(schema::ENSURE_OP, &key)?;
        Ok(op_record(&self.query_one(&format!("{} FOR UPDATE", schema::SELECT_OP), &key)?))
    }

    fn update_op(&mut self, op: OpId, new: &OpRecord, old: &OpRecord) -> Result<usize, StoreError> {
        let output = |output: Option<OutputId>| output.map(bits);
        let (job, step, fence) = (int(op.job.0), i64::from(op.step), int(new.fence.0));
        let (recorded, rival, old_recorded, old_rival) =
            (output(new.recorded), output(new.rival), output(old.recorded), output(old.rival));
        let params: [&(dyn ToSql + Sync); 7] = [&job, &step, &fence, &recorded, &rival, &old_recorded, &old_rival];
        Ok(self.execute(schema::UPDATE_OP, &params)? as usize)
    }

    fn log(&mut self, t_us: u64, node: &str, line: &str) -> Result<(), StoreError> {
        let seq: i64 = self.query_one(schema::NEXT_SEQ, &[])?.get(0);
        self.execute(schema::INSERT_EVENT, &[&seq, &int(t_us), &node, &line])?;
        Ok(())
    }
}

impl TableStore for PostgresStore {
    fn config(&self) -> TableConfig {
        self.rules.config
    }

    fn set_caller(&mut self, caller: Caller) {
        self.caller = caller;
    }

    fn enqueue(&mut self, now: Time, job: JobId) -> Result<Enqueued, StoreError> {
        self.run(now, true, |op, tx| {
            tx.execute(schema::LOCK_ENQUEUES, &[])?;
            op.enqueue(tx, job)
        })
    }

    fn acquire(&mut self, now: Time, owner: WorkerId) -> Result<Acquired, StoreError> {
        self.run(now, true, |op, tx| op.acquire(tx, owner, None))
    }

    fn acquire_for(&mut self, now: Time, owner: WorkerId, request: RequestId) -> Result<Acquired, StoreError> {
        self.run(now, true, |op, tx| op.acquire(tx, owner, Some(request)))
    }

    fn renew(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Renewal, StoreError> {
        self.run(now, true, |op, tx| op.renew(tx, job, epoch))
    }

    fn complete(&mut self, now: Time, job: JobId, epoch: Epoch, output: OutputId) -> Result<Completion, StoreError> {
        self.run(now, true, |op, tx| op.complete(tx, job, epoch, output))
    }

    fn requeue(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Requeue, StoreError> {
        self.run(now, true, |op, tx| op.requeue(tx, job, epoch))
    }

    fn release(&mut self, now: Time, job: JobId, epoch: Epoch) -> Result<Release, StoreError> {
        self.run(now, true, |op, tx| op.release(tx, job, epoch))
    }

    fn expired(&mut self, now: Time, as_of: Time) -> Result<Vec<Lease>, StoreError> {
        self.run(now, true, |op, tx| op.expired(tx, as_of))
    }

    fn fence(
        &mut self,
        now: Time,
        job: JobId,
        expected: Epoch,
        reclaimer: ReclaimerId,
        as_of: Time,
    ) -> Result<Fencing, StoreError> {
        self.run(now, true, |op, tx| op.fence(tx, job, expected, reclaimer, as_of))
    }

    fn quarantine(
        &mut self,
        now: Time,
        job: JobId,
        epoch: Epoch,
        recorded: OutputId,
        rival: OutputId,
    ) -> Result<Quarantine, StoreError> {
        self.run(now, true, |op, tx| op.quarantine(tx, job, epoch, recorded, rival))
    }

    fn job(&mut self, job: JobId) -> Result<Option<JobRecord>, StoreError> {
        let statement = self.prepared(schema::SELECT_JOB)?;
        let row = self.client.query_opt(&statement, &[&int(job.0)])?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(job_row(&row)?.record()?.1))
    }

    fn backlog(&mut self) -> Result<usize, StoreError> {
        let statement = self.prepared(schema::SELECT_BACKLOG)?;
        let count: i64 = self.client.query_one(&statement, &[])?.get(0);
        Ok(usize::try_from(count).expect("a count is not negative"))
    }

    fn poll_timeout(&mut self) -> Result<Option<Time>, StoreError> {
        let statement = self.prepared(schema::SELECT_EARLIEST)?;
        let earliest: Option<i64> = self.client.query_one(&statement, &[])?.get(0);
        Ok(earliest.map(|us| Time(us as u64)))
    }

    fn events(&mut self) -> Result<Vec<String>, StoreError> {
        let statement = self.prepared(schema::SELECT_EVENTS)?;
        Ok(self.client.query(&statement, &[])?.iter().map(|row| row.get(0)).collect())
    }
}

impl LedgerStore for PostgresStore {
    fn lookup(&mut self, now: Time, op: OpId, epoch: Epoch) -> Result<Lookup, StoreError> {
        self.run(now, false, |o, tx| o.lookup(tx, op, epoch))
    }

    fn apply(&mut self, now: Time, op: OpId, epoch: Epoch, output: OutputId) -> Result<Apply, StoreError> {
        self.run(now, false, |o, tx| o.apply(tx, op, epoch, output))
    }

    fn op(&mut self, op: OpId) -> Result<OpRecord, StoreError> {
        let key: [&(dyn ToSql + Sync); 2] = [&int(op.job.0), &i64::from(op.step)];
        let statement = self.prepared(schema::SELECT_OP)?;
        Ok(self.client.query_opt(&statement, &key)?.map(|row| op_record(&row)).unwrap_or_default())
    }
}
