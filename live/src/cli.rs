//! `lease-live` (and its alias `lease-sim live`): real processes on a real store, killed and
//! paused, judged by `check` and drawn by `report` (see [`crate`]); and `live-child`, the hidden
//! subcommand each of its processes runs.

use crate::child::ChildRole;
use crate::plan::{FaultKind, LivePlan, Shape};
use crate::{Failure, Options, StoreChoice};
use lease_check::check_history;
use lease_check::cli::{coverage_line, BadInput, EXIT_BAD_INPUT, EXIT_LIVENESS, EXIT_SAFETY};
use lease_history::parse_jsonl;
use lease_store::StoreKind;
use std::path::PathBuf;

/// The exit status of a run ended by Ctrl-C or SIGTERM.
const EXIT_INTERRUPTED: u8 = 130;

/// `lease-live`'s arguments (and `lease-sim live`'s).
#[derive(clap::Args, Debug)]
pub struct LiveArgs {
    /// The store: `sqlite` (a file in DIR, the host's clock) or `postgres` (a schema of the run's
    /// own on --url, the server's clock).
    #[arg(long, default_value_t = StoreKind::Sqlite, value_parser = parse_store)]
    store: StoreKind,
    /// The PostgreSQL server (loopback only); default LEASE_PG_URL, else the local server.
    #[arg(long)]
    url: Option<String>,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// Reclaimer processes.
    #[arg(long, default_value_t = 2)]
    reclaimers: u32,
    /// Jobs in flight per worker process (its runtime's slots, each a worker id of its own).
    #[arg(long, default_value_t = 1)]
    slots: u32,
    /// Requests of a kind one call of a worker process carries, its slots' coalesced (1: each
    /// alone).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Jobs offered steadily over the fault phase (default: 10 per second of it); a surge offers
    /// three times the queue's capacity more, within 0.3 s.
    #[arg(long)]
    jobs: Option<u64>,
    /// The fault phase; the heal comes at its end, then the run waits for every job to end.
    #[arg(long, default_value = "60s", value_parser = lease_check::cli::parse_duration)]
    duration: u64,
    /// The faults dealt: any of kill, pause, slow, fail, surge, comma-separated, or none.
    #[arg(long, default_value = "kill,pause,slow,fail,surge")]
    faults: String,
    /// The seed: it fixes the fault schedule and the arrivals, not the interleaving.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Plant a bug in every process (one of `lease-sim bugs`).
    #[arg(long)]
    bug: Option<String>,
    /// The run's directory: history.jsonl, report.txt, report.json, timeline.svg, live.json,
    /// truth.json, logs/ (and live.sqlite).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Keep the run's PostgreSQL schema (it is dropped otherwise).
    #[arg(long)]
    keep_db: bool,
    /// Print each fault as it is dealt.
    #[arg(long)]
    verbose: bool,
    /// Measure instead: jobs/s, delays and recovery after a kill of half the workers, on
    /// PostgreSQL (--url, when it answers) and SQLite with 2, 4 and 8 workers, beside the simplest
    /// queue loop on the same database (docs/live-runs.md, "The bench").
    #[arg(long)]
    bench: bool,
    /// With --bench: the jobs of each burst [default: 500; 200 with --bench-quick].
    #[arg(long)]
    bench_jobs: Option<u64>,
    /// With --bench: the fleet sizes (worker processes for ours, threads for the baselines),
    /// comma-separated [default: 2,4,8; 4 with --bench-quick].
    #[arg(long, value_delimiter = ',')]
    bench_workers: Option<Vec<u32>>,
    /// With --bench: jobs in flight per worker process of ours (its runtime's slots).
    #[arg(long, default_value_t = 64)]
    bench_slots: u32,
    /// With --bench: requests of a kind per call of ours (1: each alone), and the batched
    /// baseline's jobs per statement.
    #[arg(long, default_value_t = 32)]
    bench_batch: usize,
    /// With --bench: how long a batch of ours that is not full waits for more, in milliseconds
    /// (River's completer timer; 0: each turn's requests leave at its end; at most 200, half the
    /// live run's request timeout)
    #[arg(long, default_value_t = 5)]
    bench_linger: u64,
    /// With --bench: a short run, 200 jobs and 4 workers (unless --bench-jobs or
    /// --bench-workers say otherwise); the recovery run still kills half the workers mid-burst.
    #[arg(long)]
    bench_quick: bool,
}

/// `live-child`'s arguments (hidden: the orchestrator starts these).
#[derive(clap::Args, Debug)]
pub struct ChildArgs {
    /// The plan the orchestrator wrote.
    #[arg(long)]
    plan: PathBuf,
    /// Which process this is.
    #[arg(long, value_enum)]
    role: ChildRole,
    /// Its index among its kind.
    #[arg(long, default_value_t = 0)]
    index: u32,
    /// Its life: 1, then one more per restart.
    #[arg(long, default_value_t = 1)]
    life: u64,
    /// The dependency stub's port on 127.0.0.1.
    #[arg(long, default_value_t = 0)]
    stub_port: u16,
    /// The orchestrator's pid: the child dies with it.
    #[arg(long)]
    parent: u32,
}

/// `--store`: `sqlite` or `postgres`, the stores real processes share.
fn parse_store(text: &str) -> Result<StoreKind, String> {
    StoreKind::parse_among(text, &[StoreKind::Sqlite, StoreKind::Postgres])
}

/// Reads and checks the arguments into options.
fn options(args: &LiveArgs) -> Result<Options, BadInput> {
    let bad = |message: String| BadInput(message);
    if !(1..=32).contains(&args.workers) {
        return Err(bad("--workers must be from 1 to 32".to_string()));
    }
    if !(1..=8).contains(&args.reclaimers) {
        return Err(bad("--reclaimers must be from 1 to 8".to_string()));
    }
    if !(2_000_000..=3_600_000_000).contains(&args.duration) {
        return Err(bad("--duration must be from 2s to 1 hour (e.g. 10s, 60s)".to_string()));
    }
    let jobs = args.jobs.unwrap_or(args.duration / 100_000);
    if !(1..=100_000).contains(&jobs) {
        return Err(bad("--jobs must be from 1 to 100000".to_string()));
    }
    if !(1..=64).contains(&args.slots) {
        return Err(bad("--slots must be from 1 to 64".to_string()));
    }
    if !(1..=64).contains(&args.batch) {
        return Err(bad("--batch must be from 1 to 64".to_string()));
    }
    let faults = FaultKind::parse_list(&args.faults).map_err(bad)?;
    let bug =
        args.bug.as_deref().map(|name| name.parse::<lease_core::Bug>().map_err(|e| bad(e.to_string()))).transpose()?;
    let store = match args.store {
        StoreKind::Postgres => {
            let url = args.url.clone().unwrap_or_else(crate::default_pg_url);
            crate::check_loopback(&url).map_err(bad)?;
            StoreChoice::Postgres { url }
        }
        _ if args.url.is_some() => return Err(bad("--url is for --store postgres".to_string())),
        _ => StoreChoice::Sqlite,
    };
    let shape = Shape {
        seed: args.seed,
        workers: args.workers,
        reclaimers: args.reclaimers,
        jobs,
        duration_us: args.duration,
        faults,
        slots: args.slots,
        batch: args.batch,
    };
    Ok(Options { shape, store, bug, out: args.out.clone(), keep_db: args.keep_db, verbose: args.verbose })
}

/// Runs `lease-sim live --bench`.
fn bench(args: &LiveArgs) -> Result<u8, BadInput> {
    let quick = args.bench_quick;
    let jobs = args.bench_jobs.unwrap_or(if quick { 200 } else { 500 });
    let workers = args.bench_workers.clone().unwrap_or_else(|| if quick { vec![4] } else { vec![2, 4, 8] });
    if !(10..=100_000).contains(&jobs) {
        return Err(BadInput("--bench-jobs must be from 10 to 100000".to_string()));
    }
    if workers.is_empty() || workers.iter().any(|&n| !(1..=32).contains(&n)) {
        return Err(BadInput("--bench-workers must list fleet sizes from 1 to 32".to_string()));
    }
    if !(1..=64).contains(&args.bench_slots) {
        return Err(BadInput("--bench-slots must be from 1 to 64".to_string()));
    }
    if !(1..=64).contains(&args.bench_batch) {
        return Err(BadInput("--bench-batch must be from 1 to 64".to_string()));
    }
    if args.bench_linger > 200 {
        return Err(BadInput("--bench-linger must be from 0 to 200 (milliseconds)".to_string()));
    }
    let linger_us = args.bench_linger * 1_000;
    let fleet = crate::bench::Fleet { slots: args.bench_slots, batch: args.bench_batch, linger_us };
    let url = args.url.clone().unwrap_or_else(crate::default_pg_url);
    crate::check_loopback(&url).map_err(BadInput)?;
    let url = match postgres::Client::connect(&url, postgres::NoTls) {
        Ok(_) => Some(url),
        Err(error) => {
            println!("bench: PostgreSQL NOT RUN: no server at {url} ({error})");
            None
        }
    };
    println!(
        "bench: {jobs} jobs per burst, the dependency answering at once; ours: {} slots per worker process, \
         batches of {} waiting up to {} ms to fill; the batched baseline takes {} jobs per statement; \
         provenance: {}",
        fleet.slots,
        fleet.batch,
        args.bench_linger,
        fleet.batch.max(2),
        lease_check::provenance::line()
    );
    println!("{}", crate::bench::HEADER);
    let rows = match crate::bench::bench(url.as_deref(), jobs, &args.out, &workers, fleet) {
        Ok(rows) => rows,
        Err(Failure::Interrupted) => return Ok(EXIT_INTERRUPTED),
        Err(Failure::Harness(message)) => return Err(BadInput(format!("bench: {message}"))),
    };
    let path = args.out.join("bench.json");
    let json = serde_json::to_string_pretty(&rows).expect("rows serialise");
    lease_history::atomic::write(&path, json.as_bytes())
        .map_err(|error| BadInput(format!("cannot write {}: {error}", path.display())))?;
    let worst = |store: &str, ratio: fn(&crate::bench::Row) -> f64| {
        rows.iter().filter(|row| row.store == store).map(ratio).fold(f64::INFINITY, f64::min)
    };
    for store in ["postgres", "sqlite"] {
        let (plain, batched) = (worst(store, crate::bench::Row::ratio), worst(store, crate::bench::Row::batched_ratio));
        if plain.is_finite() {
            let floor = worst(store, crate::bench::Row::floor_ratio);
            let ceiling = worst(store, crate::bench::Row::floor_of_batched);
            println!(
                "bench: {store}: ours at {:.0}% of the bare loop's jobs/s at worst, {:.0}% of the batched bare loop's, \
                 {:.0}% of the write floor's (the floor itself at {:.0}% of the batched bare loop's, at worst)",
                plain * 100.0,
                batched * 100.0,
                floor * 100.0,
                ceiling * 100.0
            );
            let measured: Vec<u64> =
                rows.iter().filter(|row| row.store == store).filter_map(|row| row.recovery_us).collect();
            let of = rows.iter().filter(|row| row.store == store).count();
            let ttl_ms = crate::plan::LEASE_TTL_US as f64 / 1e3;
            match measured.iter().max() {
                Some(worst) => println!(
                    "bench: {store}: recovery at worst {:.1} ms after the kill, {:.2} leases of {ttl_ms:.0} ms \
                     ({} of {of} runs found the killed workers holding jobs)",
                    *worst as f64 / 1e3,
                    *worst as f64 / crate::plan::LEASE_TTL_US as f64,
                    measured.len()
                ),
                None => println!("bench: {store}: recovery not measured: the killed workers held no job in any run"),
            }
        }
    }
    println!("bench: figures in {}", path.display());
    Ok(0)
}

/// Runs `lease-live` (and `lease-sim live`): the run, then `check`, the ground truth and `report`.
pub fn live(args: &LiveArgs) -> Result<u8, BadInput> {
    crate::catch_interrupts();
    if args.bench {
        return bench(args);
    }
    let options = options(args)?;
    let faults = if options.shape.faults.is_empty() { "none".to_string() } else { args.faults.clone() };
    println!(
        "live: store={} workers={} reclaimers={} jobs={} duration={:.1}s faults={faults} seed={}{}",
        args.store,
        options.shape.workers,
        options.shape.reclaimers,
        options.shape.jobs,
        options.shape.duration_us as f64 / 1e6,
        options.shape.seed,
        options.bug.map_or(String::new(), |bug| format!(" bug={bug}")),
    );
    println!("provenance: {}", lease_check::provenance::line());
    let finished = match crate::run(&options) {
        Ok(finished) => finished,
        Err(Failure::Interrupted) => {
            println!("live: interrupted; every process was reaped");
            return Ok(EXIT_INTERRUPTED);
        }
        Err(Failure::Harness(message)) => return Err(BadInput(format!("live: {message}"))),
    };
    let text = std::fs::read_to_string(&finished.history)
        .map_err(|error| BadInput(format!("cannot read {}: {error}", finished.history.display())))?;
    let entries = parse_jsonl(&text).map_err(|error| BadInput(format!("{}: {error}", finished.history.display())))?;
    let dealt: Vec<String> = finished.dealt.iter().map(|(what, count)| format!("{what}={count}")).collect();
    println!("faults dealt: {}", if dealt.is_empty() { "none".to_string() } else { dealt.join(" ") });
    println!(
        "processes: {} started (restarts included), {} reaped, {} left",
        finished.started,
        finished.started - finished.left,
        finished.left
    );
    if finished.drained {
        println!("drain: every accepted job ended {:.3} s after the heal", finished.drain_us as f64 / 1e6);
    } else {
        println!("drain: jobs still open {:.1} s after the heal (the bound)", finished.drain_us as f64 / 1e6);
    }
    let verdict = check_history(&entries);
    let mut status = match &verdict {
        Ok(coverage) => {
            println!("check: {}: {} lines, every invariant held", finished.history.display(), entries.len());
            println!("sometimes: {}", coverage_line(coverage));
            0
        }
        Err(violation) => {
            println!("check: {}: {violation}", finished.history.display());
            for &line in &violation.lines {
                if let Some(entry) = entries.get(line.wrapping_sub(1)) {
                    println!("  line {line}: {}", entry.to_json());
                }
            }
            if violation.invariant.is_safety() {
                EXIT_SAFETY
            } else {
                EXIT_LIVENESS
            }
        }
    };
    let agreement = crate::truth::compare(&entries, &finished.truth);
    let truth_path = options.out.join("truth.json");
    let truth_json = serde_json::to_string_pretty(&finished.truth).expect("the truth serialises");
    lease_history::atomic::write(&truth_path, truth_json.as_bytes())
        .map_err(|error| BadInput(format!("cannot write {}: {error}", truth_path.display())))?;
    println!(
        "ground truth: the stub took {} calls for {} operations, performed {} effects ({} failed calls, {} effects \
         never recorded); {}",
        agreement.calls,
        agreement.ops,
        agreement.effects,
        agreement.failed,
        agreement.unrecorded,
        if agreement.holds() { "the history agrees" } else { "the history DISAGREES" }
    );
    for problem in agreement.problems.iter().take(10) {
        println!("  {problem}");
    }
    if !agreement.holds() && status == 0 {
        status = EXIT_SAFETY;
    }
    // The log is in time order (the database's clock, each line stamped once its transaction held
    // the locks its decision needed; see lease_store::Clock::Database): `check` and the report
    // read the same lines. A line out of time order is the store's fault, not the run's.
    let (late, worst_us) = inversions(&entries);
    if late > 0 {
        return Err(BadInput(format!(
            "{late} lines of {} are stamped before a line ahead of them (at most {:.3} ms earlier): the store's \
             log is not in time order",
            finished.history.display(),
            worst_us as f64 / 1e3
        )));
    }
    let source = finished.history.display().to_string();
    lease_check::cli::report(&entries, &source, None, Some(&options.out))?;
    if finished.left > 0 {
        println!("live: {} processes outlived the run", finished.left);
        return Ok(EXIT_BAD_INPUT);
    }
    if status != 0 {
        let bug = options.bug.map_or(String::new(), |bug| format!(" --bug {bug}"));
        println!(
            "rerun: cargo run --release -p lease-sim -- live --store {} --workers {} --reclaimers {} --jobs {} \
             --duration {}s --faults {} --seed {}{bug} --out DIR   (the seed fixes the schedule, not the interleaving)",
            args.store,
            options.shape.workers,
            options.shape.reclaimers,
            options.shape.jobs,
            options.shape.duration_us / 1_000_000,
            faults,
            options.shape.seed,
        );
    }
    Ok(status)
}

/// How many lines are stamped earlier than a line before them, and by how much at most.
fn inversions(entries: &[lease_history::Entry]) -> (usize, u64) {
    let (mut late, mut worst_us, mut latest_us) = (0, 0, 0);
    for entry in entries {
        if entry.t_us < latest_us {
            late += 1;
            worst_us = worst_us.max(latest_us - entry.t_us);
        }
        latest_us = latest_us.max(entry.t_us);
    }
    (late, worst_us)
}

/// Runs one child process of a live run.
pub fn child(args: &ChildArgs) -> Result<u8, BadInput> {
    let text = std::fs::read_to_string(&args.plan)
        .map_err(|error| BadInput(format!("cannot read {}: {error}", args.plan.display())))?;
    let plan: LivePlan =
        serde_json::from_str(&text).map_err(|error| BadInput(format!("{}: {error}", args.plan.display())))?;
    // Each process's log (the run's logs/ROLE.log, its stderr) tells its lives: when each began
    // and how it ended, between the errors it reports. A life killed by SIGKILL has no end line.
    let name = format!("{:?} {} life {}", args.role, args.index, args.life).to_lowercase();
    eprintln!("{name}: started, pid {}", std::process::id());
    let ran = crate::child::run(&plan, args.role, args.index, args.life, args.stub_port, args.parent);
    match &ran {
        Ok(()) => eprintln!("{name}: ended"),
        Err(error) => eprintln!("{name}: failed: {error}"),
    }
    ran.map_err(BadInput)?;
    Ok(0)
}
