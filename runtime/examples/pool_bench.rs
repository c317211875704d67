//! What a pool of PostgreSQL connections and batches buy one process: a worker runtime of
//! `--slots` slots runs `--jobs` jobs (a 1 ms handler each) on a fresh schema, once per pool size
//! and batch size (`WorkerOptions::batch`: 1 sends each request alone), and prints the jobs per
//! second of each. A benchmark: its figures hold for the machine that printed them.
//!
//! `cargo run --release -p lease-runtime --example pool_bench -- --url URL [--slots 8] [--jobs 2000] [--pools 1,2,4,8] [--batches 1] [--lingers 0]`
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
    /// The batch sizes, comma-separated (each 1 to the table's batch_max, 32).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    batches: Vec<usize>,
    /// How long a batch that is not full waits for more (`WorkerOptions::linger`), in
    /// milliseconds, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    lingers: Vec<u64>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let ttl = Span::from_ms(2_000);
    let table = TableConfig { capacity: args.jobs as usize, lease_ttl: ttl, batch_max: 32, attempts_max: 3 };
    let runs = args.pools.iter().flat_map(|&pool| args.batches.iter().map(move |&batch| (pool, batch)));
    let runs = runs.flat_map(|run| args.lingers.iter().map(move |&linger| (run, linger)));
    for ((pool, batch), linger) in runs.collect::<Vec<_>>() {
        let schema = format!("pool_bench_{}_{pool}_{batch}_{linger}", std::process::id());
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
        let linger = Span::from_ms(linger);
        let options =
            WorkerOptions { batch, linger, ..WorkerOptions::with_ttl((0..args.slots).map(WorkerId).collect(), ttl) };
        let started = Instant::now();
        let tally = runtime.work(options, handler, client.clone().drained()).await?;
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "pool {pool:>2}, batch {batch:>2}, linger {linger}, {} slots: {} jobs in {seconds:.2} s, {:.0} jobs/s, {} store errors",
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
