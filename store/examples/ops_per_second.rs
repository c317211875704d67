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

use lease_core::{Acquired, Completion, JobId, OpId, OutputId, Span, TableConfig, Time, WorkerId};
use lease_store::{Clock, MemoryStore, PostgresStore, SqliteStore, Store, StoreError};
use std::time::{Duration, Instant};

const OPS_PER_JOB: u64 = 6;

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

fn main() -> Result<(), StoreError> {
    let secs = std::env::var("LEASE_BENCH_SECS").ok().and_then(|secs| secs.parse().ok()).unwrap_or(2);
    let budget = Duration::from_secs(secs);
    println!("store                  ops/s   (enqueue, acquire, lookup, apply, renew, complete; one thread)");
    let mut memory = MemoryStore::new(config())?;
    println!("in-memory      {:>12.0}", measure(&mut memory, budget)?);
    let mut sqlite = SqliteStore::open_in_memory(config())?;
    println!("sqlite memory  {:>12.0}", measure(&mut sqlite, budget)?);
    let path = std::env::temp_dir().join(format!("lease_bench_{}.sqlite", std::process::id()));
    let mut file = SqliteStore::open(&path, config())?;
    println!("sqlite file    {:>12.0}", measure(&mut file, budget)?);
    drop(file);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let url = std::env::var("LEASE_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("lease_bench_{}", std::process::id());
    match PostgresStore::open(&url, Some(&schema), config(), Clock::Caller) {
        Ok(mut postgres) => {
            println!("postgres       {:>12.0}", measure(&mut postgres, budget)?);
            let mut admin = postgres::Client::connect(&url, postgres::NoTls)?;
            admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))?;
            // The same without waiting for the disk at each commit: what the fsync costs.
            let separator = if url.contains('?') { '&' } else { '?' };
            let lazy = format!("{url}{separator}options=-csynchronous_commit%3Doff");
            let mut postgres = PostgresStore::open(&lazy, Some(&schema), config(), Clock::Caller)?;
            println!("postgres, synchronous_commit=off {:>6.0}", measure(&mut postgres, budget)?);
            admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))?;
        }
        Err(error) => println!("postgres       not run: no server answers at {url} ({error})"),
    }
    Ok(())
}
