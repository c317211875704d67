//! The SQLite store: the embedded default, in memory or on a file.
//!
//! Each operation is one `BEGIN IMMEDIATE` transaction: it takes SQLite's write lock at its start,
//! so transactions that decide never interleave and the log's sequence is the commit order. A
//! file store opens in WAL mode and waits (a busy timeout) for a writer of another process or
//! thread, rather than fail; its writers take turns through a file beside the database first
//! ([`TURN_SUFFIX`]), so that one waiting is woken as the lock is given back. The time is the
//! caller's, or with [`Clock::Database`] the host's, read once `BEGIN IMMEDIATE` holds the lock:
//! then the log's order is its time order too.

use crate::schema::{self, for_sqlite};
use crate::sql::{bits, identity, int, Op, Row, Stamps, Tx};
use crate::sql_store::{Scope, Session, SqlStore};
use crate::{Clock, Figures, StoreError};
use lease_core::{
    Bugs, Epoch, JobId, LastGrant, OpId, OpRecord, OutputId, RequestId, Rules, TableConfig, Time, WorkerId,
};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

/// How long a file store waits for another writer before it reports the database busy.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a file store tries SQLite's write lock again while another writer holds it.
pub const BUSY_RETRY: Duration = Duration::from_micros(250);

/// The busy handler of a file store: it tries the write lock again every [`BUSY_RETRY`], for
/// [`BUSY_TIMEOUT`] in all. SQLite's own (`busy_timeout`) sleeps longer at each try, up to 100 ms
/// between two, so that among many writing processes one that found the lock taken a few times
/// sleeps through many of the others' turns: on a live bench of four worker processes one of them
/// wrote nothing for 1.4 s, and its leases lapsed while it slept.
pub fn busy_retry(tries: i32) -> bool {
    let limit = BUSY_TIMEOUT.as_micros() / BUSY_RETRY.as_micros();
    if u128::try_from(tries).map_or(true, |tries| tries >= limit) {
        return false;
    }
    std::thread::sleep(BUSY_RETRY);
    true
}

/// Turns off SQLite's count of the memory it holds (`SQLITE_CONFIG_MEMSTATUS`), once a process,
/// before its first connection. With the count on, every allocation SQLite makes or frees takes
/// a mutex that every connection of the process shares. Nothing here reads the count
/// (`sqlite3_memory_used`, a soft heap limit). If the process opened a connection before (not
/// through this store), SQLite refuses the change and keeps counting: the store works the same.
fn no_memory_count() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `sqlite3_config` is safe to call before the library starts, and only then
        // changes anything (otherwise it answers SQLITE_MISUSE, ignored here). No other thread
        // can be starting it through this store meanwhile: the `Once` holds them until this
        // returns, and the first connection opens after it.
        let _refused = unsafe {
            rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, std::ffi::c_int::from(0u8))
        };
    });
}

/// The SQLite store. One handle is one connection.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    session: Session,
    /// A file store's turn file ([`TURN_SUFFIX`]): locked around each write transaction.
    turns: Option<std::fs::File>,
}

/// Beside a file store's database, the file whose lock ([`std::fs::File::lock`], `flock` on
/// Linux) the file's writers take in turn around each write transaction, before SQLite's own
/// write lock. SQLite's lock cannot be waited on: a writer that finds it taken sleeps and tries
/// again ([`busy_retry`]), so the lock stays free for part of each wait after its holder is done.
/// A writer waiting for the turn sleeps in the kernel and is woken as it is given back. On a live
/// bench of 5,000 jobs, two SQLite-only runs with the turn and two without, in turns: ours 22,118
/// to 25,760 jobs/s with it and 19,044 to 22,777 without; with batches of 1 and 8 slots a
/// process (1,000 jobs), 2,821 to 3,652 with it and 2,275 to 2,863 without. The turn orders
/// writers and guards nothing: SQLite's lock still keeps every transaction whole, for a writer
/// that does not take it too (another program, an older build). A process that dies holding it
/// gives it back with its file. Made when the store opens, and left in place.
pub const TURN_SUFFIX: &str = "-turn";

/// A held turn ([`TURN_SUFFIX`]), given back when dropped, however the transaction ended.
struct Turn<'f>(&'f std::fs::File);

impl Turn<'_> {
    /// Waits for the turn of `file` (none: an in-memory store, whose one handle takes no turn).
    fn take(file: Option<&std::fs::File>) -> Result<Option<Turn<'_>>, StoreError> {
        let Some(file) = file else { return Ok(None) };
        file.lock().map_err(StoreError::Io)?;
        Ok(Some(Turn(file)))
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // Closing the file would give it back too; an unlock that fails leaves it to that.
        let _ = self.0.unlock();
    }
}

impl SqliteStore {
    /// A store on a fresh in-memory database: private to this handle, gone with it.
    pub fn open_in_memory(config: TableConfig) -> Result<SqliteStore, StoreError> {
        SqliteStore::planted_in_memory(config, Bugs::NONE)
    }

    /// [`SqliteStore::open_in_memory`], with `bugs` planted ([`crate::planted`]).
    pub(crate) fn planted_in_memory(config: TableConfig, bugs: Bugs) -> Result<SqliteStore, StoreError> {
        no_memory_count();
        SqliteStore::with(Connection::open_in_memory()?, config, bugs)
    }

    /// A store on the database file at `path`, created and migrated if needed, on the caller's
    /// clock. Many handles (and processes) may open one file.
    pub fn open(path: &Path, config: TableConfig) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_on(path, config, Clock::Caller)
    }

    /// [`SqliteStore::open`], on `clock`: with [`Clock::Database`], the host's clock read inside
    /// each transaction, so that handles of many threads or processes log in time order.
    pub fn open_on(path: &Path, config: TableConfig, clock: Clock) -> Result<SqliteStore, StoreError> {
        SqliteStore::planted_on(path, config, Bugs::NONE, clock)
    }

    /// [`SqliteStore::open_on`], with `bugs` planted ([`crate::planted`]).
    pub(crate) fn planted_on(
        path: &Path,
        config: TableConfig,
        bugs: Bugs,
        clock: Clock,
    ) -> Result<SqliteStore, StoreError> {
        no_memory_count();
        let conn = Connection::open(path)?;
        conn.busy_handler(Some(busy_retry))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let mut store = SqliteStore::with(conn, config, bugs)?;
        store.session.clock = clock;
        let mut turn = path.as_os_str().to_owned();
        turn.push(TURN_SUFFIX);
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(turn);
        store.turns = Some(file.map_err(StoreError::Io)?);
        Ok(store)
    }

    fn with(mut conn: Connection, config: TableConfig, bugs: Bugs) -> Result<SqliteStore, StoreError> {
        config.validate()?;
        // Temporary tables and indices in memory: no temporary file, whose name SQLite draws at random.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        migrate(&mut conn)?;
        prepare_all(&conn)?;
        Ok(SqliteStore { conn, session: Session::new(Rules { config, bugs }, Clock::Caller), turns: None })
    }
}

/// The host's clock, in microseconds since the Unix epoch: the table's clock of a file store on
/// [`Clock::Database`] (never read otherwise: the simulator's stores are on the caller's clock).
fn host_now() -> Time {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Time(u64::try_from(since.as_micros()).expect("the year is before 294,000"))
}

/// Prepares every statement an operation runs, into a cache that holds them all, so that no
/// operation prepares one. Two reasons: speed, and determinism. The cache's hasher seeds itself
/// from the operating system's randomness on its first use in the process; done here, on opening,
/// that draw never happens inside an operation (inside a simulated world, madsim answers such a
/// draw from the world's own random stream, which would then depend on whether an earlier world
/// in the same process had already drawn it).
fn prepare_all(conn: &Connection) -> Result<(), StoreError> {
    conn.set_prepared_statement_cache_capacity(schema::STATEMENTS.len());
    for sql in schema::STATEMENTS {
        conn.prepare_cached(&for_sqlite(sql))?;
    }
    Ok(())
}

/// Moves the database to [`schema::SCHEMA_VERSION`], or refuses a version this build does not know.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(schema::CREATE_VERSION, [])?;
    let found: Option<i64> = tx.query_row(schema::READ_VERSION, [], |row| row.get(0)).optional()?;
    let current = found.unwrap_or(0);
    if current > schema::SCHEMA_VERSION {
        return Err(StoreError::UnknownSchema { found: current, known: schema::SCHEMA_VERSION });
    }
    for &(version, both, _, sqlite) in schema::MIGRATIONS.iter().filter(|(version, ..)| *version > current) {
        tx.execute_batch(both)?;
        tx.execute_batch(sqlite)?;
        if version == 4 {
            // Each earlier line gets its job, as every line written from now on has.
            let named: Vec<(i64, String)> = tx
                .prepare(schema::SELECT_UNNAMED_LINES)?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let mut name = tx.prepare(&for_sqlite(schema::NAME_LINE))?;
            for (seq, line) in named {
                if let Some(job) = crate::sql::line_job(&line) {
                    name.execute(params![seq, int(job.0)])?;
                }
            }
        }
        let statement = if found.is_none() && version == 1 { schema::INSERT_VERSION } else { schema::UPDATE_VERSION };
        tx.execute(&for_sqlite(statement), [version])?;
    }
    tx.commit()?;
    Ok(())
}

/// The statements of [`Tx`] on one SQLite transaction.
pub(crate) struct SqliteTx<'c> {
    conn: &'c Connection,
    /// What this transaction changed the backlog by, written once before it commits.
    backlog: i64,
    /// Its history lines (time, writer, job, line), numbered and written as it commits: one
    /// [`schema::NEXT_SEQ`] for them all, not one each.
    lines: Vec<(i64, String, Option<i64>, String)>,
    /// Operations read without a ledger row: their first write inserts it ([`schema::INSERT_OP`]).
    unrecorded: Vec<OpId>,
}

impl<'c> SqliteTx<'c> {
    fn new(conn: &'c Connection) -> SqliteTx<'c> {
        SqliteTx { conn, backlog: 0, lines: Vec::new(), unrecorded: Vec::new() }
    }

    /// What the transaction holds back until it commits: the backlog's change (SQLite has one
    /// writer at a time: its row 0), and its lines, numbered in the order they were written.
    fn finish(self) -> Result<(), StoreError> {
        if self.backlog != 0 {
            self.conn.prepare_cached(&for_sqlite(schema::ADD_BACKLOG))?.execute(params![self.backlog, 0i64])?;
        }
        if self.lines.is_empty() {
            return Ok(());
        }
        let count = i64::try_from(self.lines.len()).expect("a transaction's lines fit in an i64");
        self.conn.prepare_cached(&for_sqlite(schema::NEXT_SEQ))?.execute([count])?;
        let last: i64 = self.conn.prepare_cached(schema::READ_SEQ)?.query_row([], |row| row.get(0))?;
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::INSERT_EVENT))?;
        for (seq, (t_us, node, job, line)) in (last - count + 1..).zip(self.lines) {
            statement.execute(params![seq, t_us, node, line, job])?;
        }
        Ok(())
    }
}

fn job_row(row: &rusqlite::Row) -> rusqlite::Result<Result<Row, StoreError>> {
    let state: String = row.get(1)?;
    let outcome: Option<String> = row.get(8)?;
    Ok(Row::read(
        row.get(0)?,
        &state,
        [row.get(2)?, row.get(3)?],
        row.get(4)?,
        row.get(5)?,
        [row.get(6)?, row.get(7)?],
        outcome.as_deref(),
        [row.get(9)?, row.get(10)?, row.get(11)?, row.get(12)?],
    ))
}

fn op_record(row: &rusqlite::Row) -> rusqlite::Result<OpRecord> {
    Ok(OpRecord {
        fence: Epoch(row.get::<_, i64>(0)? as u64),
        recorded: row.get::<_, Option<i64>>(1)?.map(identity),
        rival: row.get::<_, Option<i64>>(2)?.map(identity),
    })
}

impl SqliteTx<'_> {
    fn rows(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<Row>, StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(sql))?;
        let rows = statement.query_map(params, job_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }
}

impl Tx for SqliteTx<'_> {
    fn job(&mut self, job: JobId) -> Result<Option<Row>, StoreError> {
        Ok(self.rows(schema::SELECT_JOB, [int(job.0)])?.pop())
    }

    fn known(&mut self, job: JobId) -> Result<bool, StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::SELECT_KNOWN))?;
        Ok(statement.exists([int(job.0)])?)
    }

    fn head(&mut self) -> Result<Option<Row>, StoreError> {
        Ok(self.rows(schema::SELECT_HEAD, [])?.pop())
    }

    fn backlog(&mut self) -> Result<usize, StoreError> {
        // As on PostgreSQL: a change is held until the commit, so a read after one would miss it.
        assert_eq!(self.backlog, 0, "the backlog read after this transaction changed it");
        let count: i64 = self.conn.prepare_cached(schema::SELECT_BACKLOG)?.query_row([], |row| row.get(0))?;
        crate::sql::backlog_of(count)
    }

    fn add_backlog(&mut self, delta: i64) -> Result<(), StoreError> {
        self.backlog += delta;
        Ok(())
    }

    fn queue_ends(&mut self) -> Result<(i64, i64), StoreError> {
        let mut statement = self.conn.prepare_cached(schema::SELECT_QUEUE_ENDS)?;
        Ok(statement.query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?)
    }

    fn insert_payload(&mut self, job: JobId, payload: &[u8]) -> Result<(), StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::INSERT_PAYLOAD))?;
        statement.execute(params![int(job.0), payload])?;
        Ok(())
    }

    fn insert(&mut self, r: &Row, queued_at_us: i64) -> Result<(), StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::INSERT_JOB))?;
        statement.execute(params![
            r.job,
            r.state,
            r.epoch,
            r.attempts,
            r.queue_seq,
            r.owner,
            r.lease_epoch,
            r.expires_at_us,
            r.outcome,
            r.output,
            r.rival,
            r.ended_epoch,
            r.ended_attempts,
            queued_at_us
        ])?;
        Ok(())
    }

    fn update(&mut self, r: &Row, old: &Row, stamps: Stamps) -> Result<usize, StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::UPDATE_JOB))?;
        Ok(statement.execute(params![
            r.job,
            r.state,
            r.epoch,
            r.attempts,
            r.queue_seq,
            r.owner,
            r.lease_epoch,
            r.expires_at_us,
            r.outcome,
            r.output,
            r.rival,
            r.ended_epoch,
            r.ended_attempts,
            old.state,
            old.epoch,
            old.attempts,
            old.lease_epoch,
            old.expires_at_us,
            stamps.queued_at_us,
            stamps.ended_at_us
        ])?)
    }

    fn expiring(&mut self, through: i64, limit: i64) -> Result<Vec<Row>, StoreError> {
        self.rows(schema::SELECT_EXPIRED, [through, limit])
    }

    fn last_grant(&mut self, worker: WorkerId) -> Result<Option<LastGrant>, StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::SELECT_GRANT))?;
        let grant = statement
            .query_row([i64::from(worker.0)], |row| {
                Ok(LastGrant {
                    request: RequestId(row.get::<_, i64>(0)? as u64),
                    job: JobId(row.get::<_, i64>(1)? as u64),
                    epoch: Epoch(row.get::<_, i64>(2)? as u64),
                })
            })
            .optional()?;
        Ok(grant)
    }

    fn set_last_grant(&mut self, worker: WorkerId, grant: &LastGrant) -> Result<(), StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::UPSERT_GRANT))?;
        statement.execute([i64::from(worker.0), int(grant.request.0), int(grant.job.0), int(grant.epoch.0)])?;
        Ok(())
    }

    /// A missing row reads as the empty record, as PostgreSQL's (made empty first, to lock it)
    /// does: SQLite's writers take turns, so no other can make it before this transaction's write,
    /// which inserts it. One statement, not an empty row made, read and then written.
    fn op(&mut self, op: OpId) -> Result<OpRecord, StoreError> {
        let key = [int(op.job.0), i64::from(op.step)];
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::SELECT_OP))?;
        match statement.query_row(key, op_record).optional()? {
            Some(record) => Ok(record),
            None => {
                if !self.unrecorded.contains(&op) {
                    self.unrecorded.push(op);
                }
                Ok(OpRecord::default())
            }
        }
    }

    fn planted(&mut self, sql: &str, job: JobId, epoch: Epoch, value: i64) -> Result<usize, StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(sql))?;
        Ok(statement.execute([int(job.0), int(epoch.0), value])?)
    }

    fn update_op(&mut self, op: OpId, new: &OpRecord, old: &OpRecord) -> Result<usize, StoreError> {
        let output = |output: Option<OutputId>| output.map(bits);
        // A row this transaction found missing (`old` is the empty record it read): made now.
        if let Some(at) = self.unrecorded.iter().position(|&unrecorded| unrecorded == op) {
            self.unrecorded.swap_remove(at);
            let mut statement = self.conn.prepare_cached(&for_sqlite(schema::INSERT_OP))?;
            let (job, step) = (int(op.job.0), i64::from(op.step));
            return Ok(statement.execute(params![
                job,
                step,
                int(new.fence.0),
                output(new.recorded),
                output(new.rival)
            ])?);
        }
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::UPDATE_OP))?;
        Ok(statement.execute(params![
            int(op.job.0),
            i64::from(op.step),
            int(new.fence.0),
            output(new.recorded),
            output(new.rival),
            output(old.recorded),
            output(old.rival)
        ])?)
    }

    fn log(&mut self, t_us: u64, node: &str, job: Option<JobId>, line: &str) -> Result<(), StoreError> {
        self.lines.push((int(t_us), node.to_string(), job.map(|job| int(job.0)), line.to_string()));
        Ok(())
    }
}

impl SqlStore for SqliteStore {
    type Tx<'t> = SqliteTx<'t>;

    fn session(&self) -> &Session {
        &self.session
    }

    fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// One `BEGIN IMMEDIATE` transaction, whatever the scope: SQLite's write lock is the whole
    /// database's.
    fn run<A>(
        &mut self,
        now: Time,
        advances: bool,
        _scope: Scope,
        f: impl FnOnce(&Op, &mut SqliteTx) -> Result<A, StoreError>,
    ) -> Result<A, StoreError> {
        let _turn = Turn::take(self.turns.as_ref())?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = match self.session.clock {
            Clock::Caller => now,
            // Read holding the write lock: no line can commit after this one with an earlier time.
            Clock::Database => host_now().max(self.session.last_now),
        };
        let mut stx = SqliteTx::new(&tx);
        let answer = f(&self.session.op(now), &mut stx)?;
        stx.finish()?;
        tx.commit()?;
        self.session.committed(now, advances);
        Ok(answer)
    }

    /// One deferred (reading) transaction: one snapshot of the queue's head and the askers' last
    /// grants, without the write lock that every acquire takes (and
    /// every other writer waits for: an idle fleet's polls took it in turn).
    fn read_nothing_to_grant(&mut self, askers: &[(WorkerId, Option<RequestId>)]) -> Result<bool, StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
        let mut read = SqliteTx::new(&tx);
        let mut nothing = read.head()?.is_none();
        for &(worker, request) in askers {
            let Some(request) = request else { continue };
            nothing &= read.last_grant(worker)?.is_none_or(|last| last.request != request);
        }
        drop(read);
        tx.commit()?;
        Ok(nothing)
    }

    fn read_job(&mut self, job: JobId) -> Result<Option<Row>, StoreError> {
        SqliteTx::new(&self.conn).job(job)
    }

    fn read_backlog(&mut self) -> Result<usize, StoreError> {
        SqliteTx::new(&self.conn).backlog()
    }

    fn read_earliest(&mut self) -> Result<Option<Time>, StoreError> {
        let mut statement = self.conn.prepare_cached(schema::SELECT_EARLIEST)?;
        let earliest: Option<i64> = statement.query_row([], |row| row.get(0))?;
        Ok(earliest.map(|us| Time(us as u64)))
    }

    fn read_events(&mut self) -> Result<Vec<String>, StoreError> {
        let mut statement = self.conn.prepare_cached(self.session.clock.log_order())?;
        let lines = statement.query_map([], |row| row.get(0))?;
        Ok(lines.collect::<Result<_, _>>()?)
    }

    fn prune_rows(&mut self, ended_before: Time, limit: i64) -> Result<crate::Pruned, StoreError> {
        let _turn = Turn::take(self.turns.as_ref())?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let cutoff = int(ended_before.0);
        let jobs: Vec<i64> = tx
            .prepare_cached(&for_sqlite(schema::SELECT_PRUNABLE))?
            .query_map(params![cutoff, limit], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        let mut pruned = crate::Pruned::default();
        for job in &jobs {
            pruned.lines += tx.prepare_cached(&for_sqlite(schema::DELETE_JOB_LINES))?.execute([job])?;
            for sql in [schema::DELETE_PAYLOAD, schema::DELETE_OPS, schema::DELETE_GRANTS] {
                tx.prepare_cached(&for_sqlite(sql))?.execute([job])?;
            }
            pruned.jobs += tx.prepare_cached(&for_sqlite(schema::DELETE_JOB))?.execute([job])?;
        }
        let kept: Option<i64> =
            tx.prepare_cached(schema::SELECT_EARLIEST_KEPT_LINE)?.query_row([], |row| row.get(0))?;
        let before = kept.map_or(cutoff, |kept| kept.min(cutoff));
        pruned.lines +=
            tx.prepare_cached(&for_sqlite(schema::DELETE_JOBLESS_LINES))?.execute(params![before, limit])?;
        if pruned != crate::Pruned::default() {
            tx.prepare_cached(&for_sqlite(schema::MARK_PRUNED))?.execute([cutoff])?;
        }
        tx.commit()?;
        Ok(pruned)
    }

    fn read_pruned(&mut self) -> Result<Option<Time>, StoreError> {
        let mut statement = self.conn.prepare_cached(schema::SELECT_PRUNED)?;
        let before: Option<i64> = statement.query_row([], |row| row.get(0))?;
        Ok(before.map(|us| Time(us as u64)))
    }

    fn read_figures(&mut self) -> Result<Figures, StoreError> {
        let mut statement = self.conn.prepare_cached(schema::SELECT_FIGURES)?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?;
        let mut figures = Figures::default();
        for row in rows {
            let (state, outcome, count, since): (String, Option<String>, i64, Option<i64>) = row?;
            figures.add(&state, outcome.as_deref(), count, since)?;
        }
        Ok(figures)
    }

    fn read_payload(&mut self, job: JobId) -> Result<Vec<u8>, StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::SELECT_PAYLOAD))?;
        Ok(statement.query_row([int(job.0)], |row| row.get(0)).optional()?.unwrap_or_default())
    }

    fn read_op(&mut self, op: OpId) -> Result<OpRecord, StoreError> {
        let mut statement = self.conn.prepare_cached(&for_sqlite(schema::SELECT_OP))?;
        let record = statement.query_row([int(op.job.0), i64::from(op.step)], op_record).optional()?;
        Ok(record.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::{busy_retry, BUSY_RETRY, BUSY_TIMEOUT};

    #[test]
    fn the_busy_handler_tries_again_until_the_timeout() {
        let last = i32::try_from(BUSY_TIMEOUT.as_micros() / BUSY_RETRY.as_micros()).unwrap();
        assert!(busy_retry(0), "the first busy try waits and tries again");
        assert!(busy_retry(last - 1), "the last try within the timeout");
        assert!(!busy_retry(last), "past the timeout: busy");
        assert!(!busy_retry(-1), "a try count SQLite never gives");
    }
}
