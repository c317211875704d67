//! What a pool of PostgreSQL connections buys one process: a worker runtime of `--slots` slots
//! runs `--jobs` jobs (a 1 ms handler each) on a fresh schema, once per pool size, and prints the
//! jobs per second of each. A benchmark: its figures hold for the machine that printed them.
//!
//! `cargo run --release -p lease-runtime --example pool_bench -- --url URL [--slots 8] [--jobs 2000] [--pools 1,2,4,8]`
use clap::Parser;
use lease_core::{JobId, Span, TableConfig, WorkerId};
use lease_runtime::store::{Connections, HostClock, StoreClient};
use lease_runtime::{Job, Runtime, WorkerOptions};
use lease_store::Place;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// The PostgreSQL server (a schema of its own per pool size, dropped after).
    #[arg(long)]
    url: String,
    /// Jobs in flight in the one process.
    #[arg(long, default_value_t = 8)]
    slots: u32,
    /// Jobs per pool size.
    #[arg(long, default_value_t = 2_000)]
    jobs: u64,
    /// The pool sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pools: Vec<usize>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let ttl = Span::from_ms(2_000);
    let table = TableConfig { capacity: args.jobs as usize, lease_ttl: ttl, batch_max: 32, attempts_max: 3 };
    for pool in args.pools {
        let schema = format!("pool_bench_{}_{pool}", std::process::id());
        let place = Place::Postgres { url: args.url.clone(), schema: schema.clone() };
        let clock = HostClock::start();
        let client = StoreClient::open_with(&place, table, clock, 1, Connections::pool(pool)).await?;
        for job in 0..args.jobs {
            let _accepted = client.enqueue(JobId(job)).await?;
        }
        let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
        let handler = |job: Job| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(format!("{}", job.id).into_bytes())
        };
        let options = WorkerOptions::with_ttl((0..args.slots).map(WorkerId).collect(), ttl);
        let started = Instant::now();
        let tally = runtime.work(options, handler, client.clone().drained()).await?;
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "pool {pool:>2}, {} slots: {} jobs in {seconds:.2} s, {:.0} jobs/s, {} store errors",
            args.slots,
            tally.completed,
            tally.completed as f64 / seconds,
            client.errors().count
        );
        let url = args.url.clone();
        let sql = format!("DROP SCHEMA {schema} CASCADE");
        // The synchronous admin client runs a runtime of its own: on a thread of its own.
        let dropped = std::thread::spawn(move || postgres::Client::connect(&url, postgres::NoTls)?.batch_execute(&sql));
        dropped.join().map_err(|_| "the schema's drop panicked")??;
    }
    Ok(())
}
