//! What a pool of PostgreSQL connections and batches buy one process: a worker runtime of
//! `--slots` slots runs `--jobs` jobs (a 1 ms handler each) on a fresh schema, once per pool size
//! and batch size (`WorkerOptions::batch`: 1 sends each request alone), and prints the jobs per
//! second of each. A benchmark: its figures hold for the machine that printed them.
//!
//! With `--costs`, each run also prints what a job cost while the jobs ran: CPU time of this
//! process and of every `postgres` process on the host (read from `/proc`: run it on the
//! database's machine, with nothing else busy), and what the database did per job: write-ahead
//! log bytes, commits, and rows inserted and updated (from `pg_stat_database`, which a backend
//! reports as it exits: the figures are read once the run's connections have closed).
//!
//! With `--sqlite PATH` instead of `--url`, the same on a SQLite file (one connection; the store
//! runs in this process, so `--costs` gives its CPU time as this process's).
//!
//! `cargo run --release -p lease-runtime --example pool_bench -- --url URL [--slots 8] [--jobs 2000] [--pools 1,2,4,8] [--batches 1] [--lingers 0] [--costs]`
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
    #[arg(long, required_unless_present = "sqlite", conflicts_with = "sqlite")]
    url: Option<String>,
    /// A SQLite file instead (created, and removed after each run; one connection, so `--pools`
    /// does not apply; `--costs` prints this process's CPU time only).
    #[arg(long)]
    sqlite: Option<std::path::PathBuf>,
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
    /// Also print what a job cost: CPU time (this process, the database's) and the database's
    /// writes.
    #[arg(long)]
    costs: bool,
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
        let (place, pool) = match (&args.url, &args.sqlite) {
            (Some(url), _) => (Place::Postgres { url: url.clone(), schema: schema.clone() }, pool),
            (None, Some(path)) => {
                if path.exists() {
                    return Err(
                        format!("{} exists: pool_bench makes its own file, and removes it", path.display()).into()
                    );
                }
                (Place::Sqlite { path: path.clone() }, 1)
            }
            (None, None) => return Err("--url or --sqlite".into()),
        };
        let clock = HostClock::start();
        let client = StoreClient::open_with(&place, table, clock, 1, Connections::pool(pool)).await?;
        let enqueuing = Instant::now();
        for job in 0..args.jobs {
            let _accepted = client.enqueue(JobId(job)).await?;
        }
        let enqueued = enqueuing.elapsed().as_secs_f64();
        // One at a time, each its own transaction, the backlog growing to `--jobs`.
        println!("enqueued {} jobs one by one in {enqueued:.2} s, {:.0} per s", args.jobs, args.jobs as f64 / enqueued);
        let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
        let handler = |job: Job| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(format!("{}", job.id).into_bytes())
        };
        let linger = Span::from_ms(linger);
        let options =
            WorkerOptions { batch, linger, ..WorkerOptions::with_ttl((0..args.slots).map(WorkerId).collect(), ttl) };
        let before = if args.costs { Some(Costs::read(args.url.as_deref())?) } else { None };
        let started = Instant::now();
        let tally = runtime.work(options, handler, client.clone().drained()).await?;
        let seconds = started.elapsed().as_secs_f64();
        let cpu = cpu_ticks();
        println!(
            "pool {pool:>2}, batch {batch:>2}, linger {linger}, {} slots: {} jobs in {seconds:.2} s, {:.0} jobs/s, {} store errors",
            args.slots,
            tally.completed,
            tally.completed as f64 / seconds,
            client.errors().count
        );
        drop((runtime, client));
        if let Some(before) = before {
            // The connections closed, their backends report what they counted as they exit.
            std::thread::sleep(Duration::from_secs(1));
            let after = Costs { cpu_ticks: cpu, ..Costs::read(args.url.as_deref())? };
            println!("  per job: {}", after.since(&before, tally.completed.max(1)));
        }
        let Some(url) = args.url.clone() else {
            if let Some(path) = &args.sqlite {
                for end in ["", "-wal", "-shm"] {
                    let file = format!("{}{end}", path.display());
                    if std::path::Path::new(&file).exists() {
                        std::fs::remove_file(&file)?;
                    }
                }
            }
            continue;
        };
        let sql = format!("DROP SCHEMA {schema} CASCADE");
        // The synchronous admin client runs a runtime of its own: on a thread of its own.
        let dropped = std::thread::spawn(move || postgres::Client::connect(&url, postgres::NoTls)?.batch_execute(&sql));
        dropped.join().map_err(|_| "the schema's drop panicked")??;
    }
    Ok(())
}

/// What the host and the database had spent so far ([`Args::costs`]).
struct Costs {
    /// CPU ticks (1/100 s) of this process and of every `postgres` process, if `/proc` tells.
    cpu_ticks: Option<(u64, u64)>,
    /// PostgreSQL's write-ahead log position in bytes, commits, rows inserted and rows updated
    /// (`None` on SQLite).
    database: Option<[i64; 4]>,
}

impl Costs {
    fn read(url: Option<&str>) -> Result<Costs, String> {
        let Some(url) = url else { return Ok(Costs { cpu_ticks: cpu_ticks(), database: None }) };
        let url = url.to_string();
        let database = std::thread::spawn(move || -> Result<[i64; 4], postgres::Error> {
            let mut admin = postgres::Client::connect(&url, postgres::NoTls)?;
            let row = admin.query_one(
                "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, xact_commit, tup_inserted, tup_updated \
                 FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )?;
            Ok([row.get(0), row.get(1), row.get(2), row.get(3)])
        });
        let database = database.join().map_err(|_| "the statistics' reader panicked")?.map_err(|e| e.to_string())?;
        Ok(Costs { cpu_ticks: cpu_ticks(), database: Some(database) })
    }

    fn since(&self, before: &Costs, jobs: u64) -> String {
        let us = |after: u64, before: u64| after.saturating_sub(before) as f64 * 10_000.0 / jobs as f64;
        let (Some(database), Some(was)) = (self.database, before.database) else {
            // SQLite runs in this process: its CPU time is here.
            return match (before.cpu_ticks, self.cpu_ticks) {
                (Some(b), Some(a)) => format!("cpu {:.0} us here (the store's too, in process)", us(a.0, b.0)),
                _ => "no CPU time: /proc does not tell".to_string(),
            };
        };
        let d = |i: usize| (database[i] - was[i]) as f64 / jobs as f64;
        let cpu = match (before.cpu_ticks, self.cpu_ticks) {
            (Some(b), Some(a)) => format!("cpu {:.0} us here, {:.0} us in the database; ", us(a.0, b.0), us(a.1, b.1)),
            _ => String::new(),
        };
        format!("{cpu}{:.0} wal bytes, {:.2} commits, {:.2} rows inserted, {:.2} rows updated", d(0), d(1), d(2), d(3))
    }
}

/// CPU ticks (1/100 s) spent so far by this process and by every `postgres` process on the
/// host, from `/proc` (`None` where there is none).
fn cpu_ticks() -> Option<(u64, u64)> {
    let ticks = |stat: &str| -> Option<u64> {
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
    };
    let own = ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let mut database = 0;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let path = entry.path();
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else { continue };
        if comm.trim() == "postgres" {
            database += std::fs::read_to_string(path.join("stat")).ok().and_then(|s| ticks(&s)).unwrap_or(0);
        }
    }
    Some((own, database))
}
