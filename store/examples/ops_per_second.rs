//! Operations per second on each store, one after the other in one run:
//!
//! ```sh
//! cargo run --release -p lease-store --example ops_per_second
//! ```
//!
//! One thread, one handle, the happy path of a job: enqueue, acquire, lookup, apply, renew,
//! complete (6 operations, each its own transaction with its history line), for at least
//! `LEASE_BENCH_SECS` seconds (default 2) per store. PostgreSQL is `LEASE_PG_URL` (default the
//! local server), in a scratch schema dropped afterwards, with its default durability
//! (`synchronous_commit` on): a commit waits for the disk. SQLite on a file runs in WAL mode with
//! `synchronous=NORMAL`. Where no PostgreSQL server answers, its line says so.
//!
//! Each store's line also gives jobs per second of the same path one by one and in batches of
//! `BATCH` (`acquire_batch`, `lookup_batch`, `apply_batch`, `renew_batch`, `complete_batch`: one
//! transaction each for the whole batch; enqueue stays one by one).

use lease_core::{Acquired, Completion, JobId, OpId, OutputId, Span, TableConfig, Time, WorkerId};
use lease_store::{Clock, MemoryStore, PostgresStore, SqliteStore, Store, StoreError};
use std::time::{Duration, Instant};

const OPS_PER_JOB: u64 = 6;
const BATCH: u64 = 16;

fn config() -> TableConfig {
    TableConfig { capacity: 100_000_000, lease_ttl: Span::from_secs(30), batch_max: 16, attempts_max: 3 }
}

/// Runs jobs through `store` for `budget`; returns operations per second.
fn measure(store: &mut dyn Store, budget: Duration) -> Result<f64, StoreError> {
    let start = Instant::now();
    let mut job = 0;
    while start.elapsed() < budget {
        let now = Time(job);
        let _ = store.enqueue(now, JobId(job))?;
        let Acquired::Granted(grant) = store.acquire(now, WorkerId(0))? else { panic!("the job was queued") };
        let (op, epoch, output) = (OpId::for_job(JobId(job)), grant.lease.epoch, OutputId(job));
        let _ = store.lookup(now, op, epoch)?;
        let _ = store.apply(now, op, epoch, output)?;
        let _ = store.renew(now, JobId(job), epoch)?;
        let completed = store.complete(now, JobId(job), epoch, output)?;
        assert!(matches!(completed, Completion::Completed(_)), "{completed:?}");
        job += 1;
    }
    Ok((job * OPS_PER_JOB) as f64 / start.elapsed().as_secs_f64())
}

/// Runs jobs through `store` in batches of [`BATCH`] for `budget`; returns jobs per second.
fn measure_batched(store: &mut dyn Store, budget: Duration, first: u64) -> Result<f64, StoreError> {
    let start = Instant::now();
    let mut job = first;
    while start.elapsed() < budget {
        let now = Time(job);
        let jobs: Vec<JobId> = (job..job + BATCH).map(JobId).collect();
        for &id in &jobs {
            let _ = store.enqueue(now, id)?;
        }
        let grants = store.acquire_batch(now, WorkerId(0), BATCH as usize)?;
        assert_eq!(grants.len(), jobs.len(), "the batch was queued");
        let ops: Vec<_> = grants.iter().map(|g| (OpId::for_job(g.lease.job), g.lease.epoch)).collect();
        let _ = store.lookup_batch(now, &ops)?;
        let outputs: Vec<_> = ops.iter().map(|&(op, epoch)| (op, epoch, OutputId(op.job.0))).collect();
        let _ = store.apply_batch(now, &outputs)?;
        let leases: Vec<_> = grants.iter().map(|g| (g.lease.job, g.lease.epoch)).collect();
        let _ = store.renew_batch(now, &leases)?;
        let done: Vec<_> = grants.iter().map(|g| (g.lease.job, g.lease.epoch, OutputId(g.lease.job.0))).collect();
        for completed in store.complete_batch(now, &done)? {
            assert!(matches!(completed, Completion::Completed(_)), "{completed:?}");
        }
        job += BATCH;
    }
    Ok((job - first) as f64 / start.elapsed().as_secs_f64())
}

/// One store's line: operations per second, and jobs per second one by one and batched.
fn line(name: &str, store: &mut dyn Store, budget: Duration) -> Result<(), StoreError> {
    let ops = measure(store, budget)?;
    let batched = measure_batched(store, budget, 1 << 40)?;
    let single = ops / OPS_PER_JOB as f64;
    println!("{name:<34} {ops:>9.0} {single:>10.0} {batched:>10.0} {:>7.1}x", batched / single);
    Ok(())
}

fn main() -> Result<(), StoreError> {
    let secs = std::env::var("LEASE_BENCH_SECS").ok().and_then(|secs| secs.parse().ok()).unwrap_or(2);
    let budget = Duration::from_secs(secs);
    println!("(enqueue, acquire, lookup, apply, renew, complete; one thread; batches of {BATCH})");
    println!("{:<34} {:>9} {:>10} {:>10} {:>8}", "store", "ops/s", "jobs/s", "batched", "ratio");
    line("in-memory", &mut MemoryStore::new(config())?, budget)?;
    line("sqlite memory", &mut SqliteStore::open_in_memory(config())?, budget)?;
    let path = std::env::temp_dir().join(format!("lease_bench_{}.sqlite", std::process::id()));
    let mut file = SqliteStore::open(&path, config())?;
    line("sqlite file", &mut file, budget)?;
    drop(file);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let url = std::env::var("LEASE_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("lease_bench_{}", std::process::id());
    match PostgresStore::open(&url, Some(&schema), config(), Clock::Caller) {
        Ok(mut postgres) => {
            line("postgres", &mut postgres, budget)?;
            let mut admin = postgres::Client::connect(&url, postgres::NoTls)?;
            admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))?;
            // The same without waiting for the disk at each commit: what the fsync costs.
            let separator = if url.contains('?') { '&' } else { '?' };
            let lazy = format!("{url}{separator}options=-csynchronous_commit%3Doff");
            let mut postgres = PostgresStore::open(&lazy, Some(&schema), config(), Clock::Caller)?;
            line("postgres, synchronous_commit=off", &mut postgres, budget)?;
            admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))?;
        }
        Err(error) => println!("postgres                           not run: no server answers at {url} ({error})"),
    }
    Ok(())
}
