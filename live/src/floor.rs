//! The write floor of `lease-sim live --bench`: what the protocol's durable writes cost on their
//! own, with nothing of the protocol around them.
//!
//! On our own tables (made by lease-store's migrations, with every index ours has), each thread
//! takes a batch of queued jobs and writes, for every job, the rows a fenced run writes, in the
//! four transactions a batch of ours commits:
//!
//! 1. the grant: the job rows leased (taken with `FOR UPDATE SKIP LOCKED` on PostgreSQL, without
//!    the queue's lock), a `granted` line each, the worker's last grant;
//! 2. an `executing` line each;
//! 3. the ledger: a row made and its output recorded, an `effect_applied` line each;
//! 4. the completion: the job rows ended, a `terminal` line each, the backlog's count.
//!
//! Nothing is read but the queue's head, nothing is guarded, no epoch is compared and no clock is
//! read inside a transaction. So no correct implementation of the protocol, with its history
//! written in the transaction of each decision, can be faster on these tables: this is the
//! ceiling the batched bare loop is not. A run of ours at 70% of the floor spends 30% on what it
//! reads, checks and waits for; the floor's own distance from the batched bare loop is what the
//! history and the ledger cost.

use super::db::host_now;
use super::{Failure, StoreChoice};
use lease_core::{Enqueued, JobId, Span, TableConfig, Time};
use lease_store::{schema, tokio_postgres, Clock, PostgresStore, SqliteStore, TableStore};
use std::path::Path;

/// The write floor's jobs per second: `workers` threads, each with its own connection, writing
/// `jobs` jobs' rows in batches of `batch`. Fails unless every job ended and every line was
/// written.
pub(crate) fn floor(store: &StoreChoice, workers: u32, jobs: u64, out: &Path, batch: usize) -> Result<f64, Failure> {
    let harness = |error: String| Failure::Harness(format!("write floor: {error}"));
    let e = |error: &dyn std::fmt::Display| error.to_string();
    let batch = batch.max(1);
    let config = TableConfig {
        capacity: usize::try_from(jobs).map_err(|x| harness(e(&x)))?.max(1),
        lease_ttl: Span::from_secs(60),
        batch_max: batch,
        attempts_max: 3,
    };
    let name = format!("lease_floor_{}_{}", std::process::id(), host_now().0 % 1_000_000_000);
    let path = out.join("floor.sqlite");
    // The tables, made by the store's own migrations, and the queue loaded through it.
    {
        let mut table: Box<dyn TableStore> = match store {
            StoreChoice::Sqlite => {
                std::fs::create_dir_all(out).map_err(|x| harness(e(&x)))?;
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
                Box::new(SqliteStore::open_on(&path, config, Clock::Database).map_err(|x| harness(e(&x)))?)
            }
            StoreChoice::Postgres { url } => {
                Box::new(PostgresStore::open(url, Some(&name), config, Clock::Database).map_err(|x| harness(e(&x)))?)
            }
        };
        for job in 0..jobs {
            match table.enqueue(Time(host_now().0), JobId(job)).map_err(|x| harness(e(&x)))? {
                Enqueued::Accepted { .. } => {}
                other => return Err(harness(format!("job {job} not accepted: {other:?}"))),
            }
        }
    }
    let mut conns = Vec::new();
    for _ in 0..=workers {
        conns.push(Writer::open(store, &path, &name).map_err(harness)?);
    }
    let mut checker = conns.remove(0);
    let started = std::time::Instant::now();
    let threads: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(worker, mut conn)| {
            std::thread::spawn(move || -> Result<u64, String> {
                let mut written = 0;
                // Bounded: each pass ends at least one job, or the queue is empty.
                for _ in 0..=jobs {
                    match conn.batch(worker as i64, batch as i64)? {
                        0 => return Ok(written),
                        n => written += n as u64,
                    }
                }
                Err("the loop ran out".to_string())
            })
        })
        .collect();
    let mut written = 0;
    for thread in threads {
        written += thread.join().map_err(|_| harness("a thread panicked".into()))?.map_err(harness)?;
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-6);
    let (open, lines) = checker.counts().map_err(harness)?;
    checker.drop_all().map_err(harness)?;
    // Every job ended once, with its four lines beside its arrival's.
    if written != jobs || open != 0 || lines != 5 * jobs as i64 {
        return Err(harness(format!(
            "{written} of {jobs} jobs written, {open} not ended, {lines} lines (expected {})",
            5 * jobs
        )));
    }
    Ok(jobs as f64 / seconds)
}

/// One `BEGIN IMMEDIATE` transaction of `f`, committed, holding the file's turn as the store holds
/// its own (`lease_store::TURN_SUFFIX`); the turn is given back however it ends.
fn in_turn<T>(
    conn: &mut rusqlite::Connection,
    turn: &std::fs::File,
    f: impl FnOnce(&rusqlite::Transaction) -> rusqlite::Result<T>,
) -> Result<T, String> {
    turn.lock().map_err(|error| error.to_string())?;
    let done = (|| {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let done = f(&tx)?;
        tx.commit()?;
        Ok(done)
    })();
    // Closing the file gives it back too (the thread's connection, when it ends).
    let _ = turn.unlock();
    done.map_err(|error: rusqlite::Error| error.to_string())
}

/// One connection of the write floor.
enum Writer {
    /// The connection, and the store's turn file (`lease_store::TURN_SUFFIX`), taken around each
    /// transaction as the store takes it.
    Sqlite(rusqlite::Connection, std::fs::File),
    Postgres(Box<Pg>),
}

/// A PostgreSQL connection of the floor: each transaction's statements prepared once and sent
/// together, in one round trip (the grant's in two: its jobs are known once taken), as the
/// store sends its own.
struct Pg {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    schema: String,
    /// [`PG_STATEMENTS`], prepared.
    prepared: Vec<tokio_postgres::Statement>,
}

/// The floor's statements on PostgreSQL: the take, the lines, the last grant, the ledger's rows
/// made and recorded, the jobs ended, the backlog.
const PG_STATEMENTS: [&str; 7] = [
    "WITH heads AS (SELECT job FROM lease_jobs WHERE state = 'queued' ORDER BY queue_seq, job LIMIT $1 \
     FOR UPDATE SKIP LOCKED) UPDATE lease_jobs AS j SET state = 'leased', epoch = j.epoch + 1, \
     attempts = j.attempts + 1, queue_seq = NULL, owner = $2, lease_epoch = j.epoch + 1, expires_at_us = $3 \
     FROM heads WHERE j.job = heads.job RETURNING j.job",
    schema::INSERT_EVENTS_NEXT,
    schema::UPSERT_GRANTS,
    schema::ENSURE_OPS,
    "UPDATE lease_ledger SET fence = 1, output = $2 WHERE job = ANY($1) AND step = 0",
    "UPDATE lease_jobs SET state = 'terminal', outcome = 'completed', output = $2, ended_epoch = epoch, \
     ended_attempts = attempts, ended_at_us = $2, owner = NULL, lease_epoch = NULL, expires_at_us = NULL \
     WHERE job = ANY($1)",
    schema::ADD_BACKLOG,
];

/// A history line as long as ours: `kind` and what follows it.
fn line(t_us: i64, job: i64, kind: &str, rest: &str) -> String {
    format!(r#"{{"t_us":{t_us},"node":"worker-3","kind":"{kind}","job":{job},"op":{job},"epoch":1{rest}}}"#)
}

/// The four kinds of line a job's batch writes, in order, with what follows each kind.
const KINDS: [(&str, &str); 4] = [
    ("granted", r#","owner":"worker-3","expires_at_us":1764000000000000"#),
    ("executing", ""),
    ("effect_applied", r#","output":1764000000000"#),
    ("terminal", r#","outcome":"completed","output":1764000000000"#),
];

impl Writer {
    fn open(store: &StoreChoice, path: &Path, schema: &str) -> Result<Writer, String> {
        let e = |error: &dyn std::fmt::Display| error.to_string();
        match store {
            StoreChoice::Sqlite => {
                let conn = rusqlite::Connection::open(path).map_err(|x| e(&x))?;
                conn.busy_handler(Some(lease_store::busy_retry)).map_err(|x| e(&x))?;
                conn.pragma_update(None, "journal_mode", "WAL").map_err(|x| e(&x))?;
                conn.pragma_update(None, "synchronous", "NORMAL").map_err(|x| e(&x))?;
                let mut turn = path.as_os_str().to_owned();
                turn.push(lease_store::TURN_SUFFIX);
                let turn = std::fs::OpenOptions::new().write(true).open(turn).map_err(|x| e(&x))?;
                Ok(Writer::Sqlite(conn, turn))
            }
            StoreChoice::Postgres { url } => {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|x| e(&x))?;
                let (client, connection) =
                    runtime.block_on(tokio_postgres::connect(url, tokio_postgres::NoTls)).map_err(|x| e(&x))?;
                runtime.spawn(connection);
                let prepared = runtime
                    .block_on(async {
                        client.batch_execute(&format!("SET search_path TO {schema}")).await?;
                        futures::future::try_join_all(PG_STATEMENTS.iter().map(|sql| client.prepare(sql))).await
                    })
                    .map_err(|x| e(&x))?;
                Ok(Writer::Postgres(Box::new(Pg { runtime, client, schema: schema.to_string(), prepared })))
            }
        }
    }

    /// One batch of up to `batch` jobs, in four transactions: the number of jobs it ended.
    fn batch(&mut self, worker: i64, batch: i64) -> Result<usize, String> {
        let e = |error: &dyn std::fmt::Display| error.to_string();
        let now = host_now().0 as i64;
        let node = format!("worker-{worker}");
        match self {
            Writer::Sqlite(conn, turn) => {
                let lines = |tx: &rusqlite::Transaction, jobs: &[i64], kind: usize| -> rusqlite::Result<()> {
                    tx.prepare_cached(&schema::for_sqlite(schema::NEXT_SEQ))?.execute([jobs.len() as i64])?;
                    let last: i64 = tx.prepare_cached(schema::READ_SEQ)?.query_row([], |row| row.get(0))?;
                    let mut insert = tx.prepare_cached(&schema::for_sqlite(schema::INSERT_EVENT))?;
                    let (name, rest) = KINDS[kind];
                    for (seq, &job) in (last - jobs.len() as i64 + 1..).zip(jobs) {
                        insert.execute(rusqlite::params![seq, now, node, line(now, job, name, rest), job])?;
                    }
                    Ok(())
                };
                let jobs: Vec<i64> = in_turn(conn, turn, |tx| {
                    let jobs: Vec<i64> = tx
                        .prepare_cached(
                            "SELECT job FROM lease_jobs WHERE state = 'queued' ORDER BY queue_seq, job LIMIT ?1",
                        )?
                        .query_map([batch], |row| row.get(0))?
                        .collect::<Result<_, _>>()?;
                    for &job in &jobs {
                        tx.prepare_cached(
                            "UPDATE lease_jobs SET state = 'leased', epoch = epoch + 1, attempts = attempts + 1, \
                             queue_seq = NULL, owner = ?2, lease_epoch = epoch + 1, expires_at_us = ?3 WHERE job = ?1",
                        )?
                        .execute(rusqlite::params![job, node, now + 60_000_000])?;
                    }
                    if let Some(&first) = jobs.first() {
                        lines(tx, &jobs, 0)?;
                        tx.prepare_cached(
                            "INSERT INTO lease_grants (worker, request, job, epoch) VALUES (?1, 1, ?2, 1) \
                             ON CONFLICT (worker) DO UPDATE SET request = excluded.request, job = excluded.job",
                        )?
                        .execute([worker, first])?;
                    }
                    Ok(jobs)
                })?;
                if jobs.is_empty() {
                    return Ok(0);
                }
                in_turn(conn, turn, |tx| lines(tx, &jobs, 1))?;
                in_turn(conn, turn, |tx| {
                    for &job in &jobs {
                        // The row is missing: made with its record, as the store makes it.
                        tx.prepare_cached("INSERT INTO lease_ledger (job, step, fence, output) VALUES (?1, 0, 1, ?2)")?
                            .execute([job, now])?;
                    }
                    lines(tx, &jobs, 2)
                })?;
                in_turn(conn, turn, |tx| {
                    for &job in &jobs {
                        tx.prepare_cached(
                            "UPDATE lease_jobs SET state = 'terminal', outcome = 'completed', output = ?2, \
                             ended_epoch = epoch, ended_attempts = attempts, ended_at_us = ?2, owner = NULL, \
                             lease_epoch = NULL, expires_at_us = NULL WHERE job = ?1",
                        )?
                        .execute([job, now])?;
                    }
                    lines(tx, &jobs, 3)?;
                    tx.prepare_cached(&schema::for_sqlite(schema::ADD_BACKLOG))?
                        .execute([-(jobs.len() as i64), worker % schema::BACKLOG_SHARDS])?;
                    Ok(())
                })?;
                Ok(jobs.len())
            }
            Writer::Postgres(pg) => {
                let Pg { runtime, client, prepared, .. } = &**pg;
                let [take, lines, grants, ensure, record, end, backlog] = &prepared[..] else {
                    unreachable!("every statement prepared")
                };
                let texts = |jobs: &[i64], kind: usize| -> Vec<String> {
                    let (name, rest) = KINDS[kind];
                    jobs.iter().map(|&job| line(now, job, name, rest)).collect()
                };
                let run = async {
                    use futures::future::{try_join, try_join3, try_join4, try_join5};
                    let (_, taken) = try_join(
                        client.batch_execute("BEGIN"),
                        client.query(take, &[&batch, &node, &(now + 60_000_000)]),
                    )
                    .await?;
                    let jobs: Vec<i64> = taken.iter().map(|row| row.get(0)).collect();
                    if jobs.is_empty() {
                        client.batch_execute("COMMIT").await?;
                        return Ok(0);
                    }
                    let n = jobs.len();
                    let (times, nodes) = (vec![now; n], vec![node.clone(); n]);
                    let (granted, executing, applied, ended) =
                        (texts(&jobs, 0), texts(&jobs, 1), texts(&jobs, 2), texts(&jobs, 3));
                    try_join3(
                        client.execute(lines, &[&times, &nodes, &granted, &jobs]),
                        client.execute(grants, &[&vec![worker], &vec![1i64], &vec![jobs[0]], &vec![1i64]]),
                        client.batch_execute("COMMIT"),
                    )
                    .await?;
                    try_join3(
                        client.batch_execute("BEGIN"),
                        client.execute(lines, &[&times, &nodes, &executing, &jobs]),
                        client.batch_execute("COMMIT"),
                    )
                    .await?;
                    try_join5(
                        client.batch_execute("BEGIN"),
                        client.execute(ensure, &[&jobs, &vec![0i64; n]]),
                        client.execute(record, &[&jobs, &now]),
                        client.execute(lines, &[&times, &nodes, &applied, &jobs]),
                        client.batch_execute("COMMIT"),
                    )
                    .await?;
                    try_join4(
                        client.batch_execute("BEGIN"),
                        client.execute(end, &[&jobs, &now]),
                        client.execute(lines, &[&times, &nodes, &ended, &jobs]),
                        try_join(
                            client.execute(backlog, &[&-(n as i64), &(worker % schema::BACKLOG_SHARDS)]),
                            client.batch_execute("COMMIT"),
                        ),
                    )
                    .await?;
                    Ok::<_, tokio_postgres::Error>(n)
                };
                runtime.block_on(run).map_err(|x| e(&x))
            }
        }
    }

    /// Jobs not ended, and lines written.
    fn counts(&mut self) -> Result<(i64, i64), String> {
        let open = "SELECT COUNT(*) FROM lease_jobs WHERE state <> 'terminal'";
        let lines = "SELECT COUNT(*) FROM lease_events";
        let e = |error: &dyn std::fmt::Display| error.to_string();
        match self {
            Writer::Sqlite(conn, _) => {
                let count = |sql: &str| conn.query_row(sql, [], |row| row.get::<_, i64>(0)).map_err(|x| e(&x));
                Ok((count(open)?, count(lines)?))
            }
            Writer::Postgres(pg) => {
                let (open, lines) = pg
                    .runtime
                    .block_on(futures::future::try_join(
                        pg.client.query_one(open, &[]),
                        pg.client.query_one(lines, &[]),
                    ))
                    .map_err(|x| e(&x))?;
                Ok((open.get(0), lines.get(0)))
            }
        }
    }

    fn drop_all(&mut self) -> Result<(), String> {
        match self {
            Writer::Sqlite(..) => Ok(()),
            Writer::Postgres(pg) => pg
                .runtime
                .block_on(pg.client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", pg.schema)))
                .map_err(|e| e.to_string()),
        }
    }
}
