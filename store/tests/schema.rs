//! Versioned migrations: a database at the current version opens as it is, with its rows; a
//! database at a version this build does not know is refused with a clear error and left
//! untouched. On SQLite (a file) and PostgreSQL (a scratch schema).

mod common;

use common::{pg, TempFile};
use lease_core::{Bugs, Enqueued, JobId, Span, TableConfig, Time};
use lease_store::schema::{self, SCHEMA_VERSION};
use lease_store::{SqliteStore, StoreError, TableStore};

fn config() -> TableConfig {
    TableConfig { capacity: 10, lease_ttl: Span(1_000), batch_max: 2, attempts_max: 2 }
}

/// Asserts the refusal names both versions and says what to do.
fn refused(result: Result<impl std::fmt::Debug, StoreError>) {
    let error = result.expect_err("a database from the future must be refused");
    assert!(matches!(error, StoreError::UnknownSchema { found: 99, known: SCHEMA_VERSION }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("schema version 99") && message.contains("refusing"), "{message}");
}

#[test]
fn a_sqlite_file_at_an_unknown_schema_version_is_refused_and_left_untouched() {
    let file = TempFile::new("schema");
    let mut store = SqliteStore::open(file.path(), config()).expect("a new file migrates");
    assert!(matches!(store.enqueue(Time(1), JobId(7)), Ok(Enqueued::Accepted { backlog: 1 })));
    drop(store);

    // Reopened at the current version: the rows are there, nothing migrates twice.
    let mut store = SqliteStore::open(file.path(), config()).expect("the current version opens");
    assert!(store.job(JobId(7)).expect("reads").is_some());
    drop(store);

    let conn = rusqlite::Connection::open(file.path()).expect("open the file");
    conn.execute("UPDATE lease_schema SET version = 99", []).expect("move the version on");
    refused(SqliteStore::open(file.path(), config()));
    let version: i64 = conn.query_row("SELECT version FROM lease_schema", [], |row| row.get(0)).expect("reads");
    let jobs: i64 = conn.query_row("SELECT COUNT(*) FROM lease_jobs", [], |row| row.get(0)).expect("reads");
    assert_eq!((version, jobs), (99, 1), "the refused database was touched");
}

#[test]
fn a_postgres_schema_at_an_unknown_version_is_refused_and_left_untouched() {
    let Some(mut scratch) = pg::scratch("schema") else { return };
    let mut store = scratch.open(config(), Bugs::NONE);
    assert!(matches!(store.enqueue(Time(1), JobId(7)), Ok(Enqueued::Accepted { backlog: 1 })));
    drop(store);
    let mut store = scratch.open(config(), Bugs::NONE);
    assert!(store.job(JobId(7)).expect("reads").is_some());
    drop(store);

    let name = scratch.name.clone();
    scratch.execute(&format!("UPDATE {name}.lease_schema SET version = 99"));
    let url = pg::url();
    refused(lease_store::PostgresStore::open(&url, Some(&name), config(), lease_store::Clock::Caller));
}

#[test]
fn the_database_clock_of_postgres_is_the_tables_and_never_goes_back() {
    // Proves Clock::Database: the `now` passed is ignored, a lease's expiry is the server's time
    // plus the lease's length, and a call passing an earlier `now` is not refused.
    let Some(scratch) = pg::scratch("clock") else { return };
    let url = pg::url();
    let mut store = lease_store::PostgresStore::open(&url, Some(&scratch.name), config(), lease_store::Clock::Database)
        .expect("open");
    assert!(matches!(store.enqueue(Time(u64::MAX / 2), JobId(1)), Ok(Enqueued::Accepted { .. })));
    let granted = store.acquire(Time::ZERO, lease_core::WorkerId(0)).expect("the passed time is ignored");
    let lease_core::Acquired::Granted(grant) = granted else { panic!("{granted:?}") };
    let year_2020_us = 1_577_836_800_000_000;
    assert!(grant.lease.expires_at.0 > year_2020_us, "the expiry is on the server's clock: {grant:?}");
}

#[test]
fn no_statement_reads_a_clock_or_draws_randomness() {
    // Proves the determinism the simulator will rely on, from the statements' text: apart from
    // PostgreSQL's clock_timestamp() (read only under Clock::Database), no SQL of the store names
    // a clock or a random source. Comments (`//`, `--`) may name them.
    let source = include_str!("../src/schema.rs");
    let code = source
        .lines()
        .map(|line| line.split("--").next().unwrap_or_default())
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
        .to_ascii_lowercase();
    for banned in [
        "random(",
        "randomblob(",
        "current_timestamp",
        "current_time",
        "current_date",
        "datetime(",
        "julianday(",
        "strftime(",
        "unixepoch(",
        "now()",
        "autoincrement",
        "gen_random_uuid",
    ] {
        assert!(!code.contains(banned), "a statement uses {banned}");
    }
    assert_eq!(code.matches("clock_timestamp()").count(), 1, "the database's clock is read in SELECT_CLOCK alone");
}

#[test]
fn the_logs_locks_on_postgres_conflict_as_their_docs_say() {
    // Proves the lock matrix lease_store::schema documents: operations over one row
    // (LOCK_LOG_SHARED) run beside each other and beside an acquire (LOCK_QUEUE); acquires take
    // turns; an operation over rows it does not lock (LOCK_LOG) runs beside none of them. A
    // second connection tries each lock with NOWAIT while the first holds one.
    let Some(scratch) = pg::scratch("locks") else { return };
    drop(scratch.open(config(), Bugs::NONE)); // migrated: the log's table exists
    let connect = || {
        let mut client = postgres::Client::connect(&pg::url(), postgres::NoTls).expect("connect");
        client.batch_execute(&format!("SET search_path TO {}", scratch.name)).expect("search path");
        client
    };
    let (mut first, mut second) = (connect(), connect());
    let locks = [
        ("LOCK_LOG", schema::LOCK_LOG),
        ("LOCK_QUEUE", schema::LOCK_QUEUE),
        ("LOCK_LOG_SHARED", schema::LOCK_LOG_SHARED),
    ];
    // (held, tried): whether the tried lock is granted beside the held one.
    let beside = |held: &str, tried: &str| {
        matches!(
            (held, tried),
            ("LOCK_LOG_SHARED", "LOCK_LOG_SHARED" | "LOCK_QUEUE") | ("LOCK_QUEUE", "LOCK_LOG_SHARED")
        )
    };
    for (held_name, held) in locks {
        for (tried_name, tried) in locks {
            first.batch_execute(&format!("BEGIN; {held}")).expect("the first lock");
            let granted = second.batch_execute(&format!("BEGIN; {tried} NOWAIT")).is_ok();
            second.batch_execute("ROLLBACK").expect("roll back");
            first.batch_execute("ROLLBACK").expect("roll back");
            assert_eq!(granted, beside(held_name, tried_name), "{tried_name} while another holds {held_name}");
        }
    }
}

#[test]
fn a_schema_name_postgres_cannot_take_as_it_is_is_an_error() {
    // Proves the name is checked before any SQL is built from it, with an error, not a panic.
    for name in ["", "Upper", "semi;colon", "lease jobs"] {
        let opened = lease_store::PostgresStore::open(&pg::url(), Some(name), config(), lease_store::Clock::Caller);
        assert!(matches!(&opened, Err(StoreError::SchemaName(named)) if named == name), "{name:?}: {:?}", opened.err());
    }
}

/// A file as a build of schema version 5 left it, with one queued job, its payload and its
/// arrival line: the tables keyed by `BIGINT PRIMARY KEY`, each with SQLite's unique index beside
/// it.
fn a_version_5_file(file: &TempFile) {
    let conn = rusqlite::Connection::open(file.path()).expect("open the file");
    conn.execute_batch(schema::CREATE_VERSION).expect("the version table");
    for &(version, both, _, _) in schema::MIGRATIONS.iter().filter(|(version, ..)| *version <= 5) {
        conn.execute_batch(both).unwrap_or_else(|error| panic!("version {version}: {error}"));
    }
    conn.execute_batch(
        "INSERT INTO lease_schema (version) VALUES (5);
         INSERT INTO lease_jobs (job, state, epoch, attempts, queue_seq, queued_at_us) VALUES (7, 'queued', 0, 0, 1, 5);
         INSERT INTO lease_payloads (job, payload) VALUES (7, x'010203');
         INSERT INTO lease_events (seq, t_us, node, line, job) VALUES (1, 5, 'table', 'the arrival of job 7', 7);
         UPDATE lease_log_head SET seq = 1;
         UPDATE lease_backlog SET n = 1 WHERE shard = 0;",
    )
    .expect("version 5's rows");
    let names = indexes(&conn);
    for table in ["lease_jobs", "lease_events", "lease_payloads"] {
        let beside = format!("sqlite_autoindex_{table}_1");
        assert!(names.contains(&beside), "version 5 keys {table} by an index beside it: {names:?}");
    }
}

/// A migrated file's store takes a new job behind the old queued job 7 and grants job 7 first;
/// closed, the file is at this build's version. Its connection, for the caller's checks.
fn serves_the_old_job_first(mut store: SqliteStore, file: &TempFile) -> rusqlite::Connection {
    assert!(matches!(store.enqueue(Time(6), JobId(8)), Ok(Enqueued::Accepted { backlog: 2 })));
    let granted = store.acquire(Time(7), lease_core::WorkerId(0)).expect("acquires");
    assert!(
        matches!(granted, lease_core::Acquired::Granted(grant) if grant.lease.job == JobId(7)),
        "the old job is still the queue's head: {granted:?}"
    );
    drop(store);
    let conn = rusqlite::Connection::open(file.path()).expect("open the file");
    let version: i64 = conn.query_row("SELECT version FROM lease_schema", [], |row| row.get(0)).expect("reads");
    assert_eq!(version, SCHEMA_VERSION);
    conn
}

/// The names of the file's indexes, sorted.
fn indexes(conn: &rusqlite::Connection) -> Vec<String> {
    let mut statement = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'index' ORDER BY name").unwrap();
    statement.query_map([], |row| row.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
}

// Version 6 rebuilds SQLite's jobs, log and payloads keyed by the row's own id: every row and
// value is kept, the three tables lose the unique index beside them (the ledger's two-column key
// and the small tables keep theirs), the indexes on them are made again, and the queue still
// serves the old job with its payload.
#[test]
fn a_sqlite_file_at_schema_version_5_moves_its_keys_to_row_ids_and_keeps_every_row() {
    let file = TempFile::new("schema_v5");
    a_version_5_file(&file);
    let mut store = SqliteStore::open(file.path(), config()).expect("version 5 migrates");
    let record = store.job(JobId(7)).expect("reads").expect("the old job is kept");
    assert_eq!((record.epoch.0, record.attempts), (0, 0), "{record:?}");
    assert_eq!(store.payload(JobId(7)).expect("reads"), vec![1, 2, 3], "its payload is kept");
    assert_eq!(store.backlog().expect("reads"), 1, "the count is kept");
    let figures = store.figures().expect("reads");
    assert_eq!((figures.queued, figures.oldest_queued_at), (1, Some(Time(5))), "it waits where it waited");
    let conn = serves_the_old_job_first(store, &file);
    let lines: Vec<(i64, String)> = conn
        .prepare("SELECT seq, line FROM lease_events WHERE job = 7 ORDER BY seq")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(lines[0], (1, "the arrival of job 7".to_string()), "the old line keeps its number: {lines:?}");
    assert!(lines.len() >= 2 && lines[1..].iter().all(|(seq, _)| *seq > 1), "new lines follow it: {lines:?}");
    let names = indexes(&conn);
    for table in ["lease_jobs", "lease_events", "lease_payloads"] {
        let beside = format!("sqlite_autoindex_{table}_1");
        assert!(!names.contains(&beside), "{table} is keyed by its row id alone: {names:?}");
    }
    for index in ["lease_events_job", "lease_jobs_ended", "lease_jobs_expiry", "lease_jobs_queue"] {
        assert!(names.iter().any(|name| name == index), "{index} is made again: {names:?}");
    }
    let plan: String = conn
        .query_row("EXPLAIN QUERY PLAN SELECT state FROM lease_jobs WHERE job = 7", [], |row| row.get(3))
        .expect("plans");
    assert!(plan.contains("INTEGER PRIMARY KEY"), "a job is read by its row id: {plan}");
}

/// A file as version 6 left it, with a queued job and one ended.
fn a_version_6_file(file: &TempFile) {
    let conn = rusqlite::Connection::open(file.path()).expect("open the file");
    conn.execute_batch(schema::CREATE_VERSION).expect("the version table");
    for &(version, both, _, sqlite) in schema::MIGRATIONS.iter().filter(|(version, ..)| *version <= 6) {
        conn.execute_batch(both).unwrap_or_else(|error| panic!("version {version}: {error}"));
        conn.execute_batch(sqlite).unwrap_or_else(|error| panic!("version {version}: {error}"));
    }
    conn.execute_batch(
        "INSERT INTO lease_schema (version) VALUES (6);
         INSERT INTO lease_jobs (job, state, epoch, attempts, queue_seq, queued_at_us) VALUES (7, 'queued', 0, 0, 1, 5);
         INSERT INTO lease_jobs (job, state, epoch, attempts, outcome, output, ended_epoch, ended_attempts, ended_at_us)
             VALUES (3, 'terminal', 1, 1, 'completed', 33, 1, 1, 4);
         UPDATE lease_backlog SET n = 1 WHERE shard = 0;",
    )
    .expect("version 6's rows");
    assert!(ephemeral_tables_in_a_job_update(&conn) > 0, "version 6 checks its lists through a temporary table");
}

/// How many temporary B-trees one write of a job row opens (`OpenEphemeral` in its program).
fn ephemeral_tables_in_a_job_update(conn: &rusqlite::Connection) -> usize {
    let sql = format!("EXPLAIN {}", schema::for_sqlite(schema::UPDATE_JOB));
    let mut statement = conn.prepare(&sql).unwrap();
    let opcodes: Vec<String> = statement
        .query_map(rusqlite::params_from_iter(std::iter::repeat_n(rusqlite::types::Null, 20)), |row| row.get(1))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    opcodes.iter().filter(|opcode| *opcode == "OpenEphemeral").count()
}

// Version 7 writes SQLite's job checks without `IN` lists, which SQLite checked through a
// temporary B-tree made afresh at every write of a job: the rows are kept, a write of a job opens
// no temporary table, the checks still refuse what they refused, and the queue still serves.
#[test]
fn a_sqlite_file_at_schema_version_6_checks_its_jobs_without_temporary_tables() {
    let file = TempFile::new("schema_v6");
    a_version_6_file(&file);
    let mut store = SqliteStore::open(file.path(), config()).expect("version 6 migrates");
    let ended = store.job(JobId(3)).expect("reads").expect("the ended job is kept");
    assert!(
        matches!(
            ended.state,
            lease_core::JobState::Terminal(lease_core::Terminal {
                outcome: lease_core::Outcome::Completed { output },
                ..
            }) if output.0 == 33
        ),
        "{ended:?}"
    );
    let conn = serves_the_old_job_first(store, &file);
    assert_eq!(ephemeral_tables_in_a_job_update(&conn), 0, "a write of a job makes no temporary table");
    let names = indexes(&conn);
    for index in ["lease_jobs_ended", "lease_jobs_expiry", "lease_jobs_queue"] {
        assert!(names.iter().any(|name| name == index), "{index} is made again: {names:?}");
    }
    let insert = |state: &str, outcome: Option<&str>| {
        conn.execute(
            "INSERT INTO lease_jobs (job, state, epoch, attempts, outcome) \
             VALUES (100 + (SELECT COUNT(*) FROM lease_jobs), ?1, 0, 0, ?2)",
            rusqlite::params![state, outcome],
        )
    };
    assert!(insert("running", None).is_err(), "a state that is none of the three is refused");
    assert!(insert("terminal", Some("done")).is_err(), "an outcome that is none of the three is refused");
    assert!(insert("terminal", Some("dead_lettered")).is_ok(), "each outcome is accepted");
    assert!(insert("queued", None).is_ok(), "no outcome is accepted");
}
