//! `lease-sim bench`: how fast the harness runs, against the ceiling of madsim itself.
//!
//! The figures, all measured in one process on this machine:
//!
//! - **swarm**: seeds per second and simulated events (messages and timers) per second for the
//!   swarm scenario at 100 jobs, on one thread and on `threads`;
//! - **reference**: a world that sends the same number of raw madsim messages and arms the same
//!   number of timers as the swarm runs did, with no protocol, checker or history: the ceiling.
//!   The ratio of the two event rates says what the protocol, checkers and history cost;
//! - **scaling**: seeds per second and microseconds per job at 10, 100, 1,000 and 10,000 jobs;
//! - **logging**: seeds per second of the swarm on one thread with no `tracing` subscriber (as
//!   every run without `--log`), with a subscriber installed whose filter disables every event of
//!   the harness, and logging every history line (`--log`'s level) to nowhere: what the log
//!   statements cost when off, and what logging costs when on;
//! - **memory**: resident memory at the start and after `memory_seeds` seeds in one process.
//!
//! These are wall-clock figures of a shared machine: they belong in a benchmark's output, never
//! in a test's assertion.

use crate::runner::Target;
use crate::scenarios::Scenario;
use crate::world::durable::StoreKind;
use crate::world::{self, Events};
use madsim::net::Endpoint;
use madsim::runtime::Runtime;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    /// Seeds for the speed figures.
    pub seeds: u64,
    /// Seeds for the memory figure.
    pub memory_seeds: u64,
    /// Threads for the parallel figure.
    pub threads: usize,
}

/// One speed measurement.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Speed {
    /// Seeds run.
    pub seeds: u64,
    /// Threads used.
    pub threads: usize,
    /// Seeds per wall-clock second.
    pub seeds_per_sec: f64,
    /// Simulated events (messages and timers) per wall-clock second.
    pub events_per_sec: f64,
    /// Simulated time over wall time.
    pub sim_speedup: f64,
    /// Average simulated events per seed.
    pub events_per_seed: f64,
}

/// Cost at one world size.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Scale {
    /// Jobs per world.
    pub jobs: u32,
    /// Seeds run.
    pub seeds: u64,
    /// Seeds per wall-clock second, one thread.
    pub seeds_per_sec: f64,
    /// Wall microseconds per offered job.
    pub us_per_job: f64,
}

/// Resident memory.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Memory {
    /// Resident memory after one warm-up seed, in KiB.
    pub rss_start_kib: u64,
    /// Resident memory after `seeds` more seeds, in KiB.
    pub rss_end_kib: u64,
    /// Peak resident memory of the process, in KiB.
    pub rss_peak_kib: u64,
    /// Seeds run between the two readings.
    pub seeds: u64,
}

/// What logging costs (see [`crate::logs`]), one thread.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Logging {
    /// Seeds run for each of `off` and `disabled`.
    pub seeds: u64,
    /// Seeds per second with no subscriber: every run without `--log` or `RUST_LOG`.
    pub off_seeds_per_sec: f64,
    /// Seeds per second with a subscriber whose filter (`lease_sim=info`) disables every event.
    pub disabled_seeds_per_sec: f64,
    /// `disabled` over `off`.
    pub disabled_vs_off: f64,
    /// Seeds run logging at `--log`'s level.
    pub debug_seeds: u64,
    /// Seeds per second logging every history line (`lease_sim=debug`) to a sink.
    pub debug_seeds_per_sec: f64,
}

/// What `lease-sim report` costs: reading histories into windows, incidents and causes, and
/// drawing report.txt and timeline.svg, one thread.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReportCost {
    /// Histories reported on (swarm seeds and labelled seeds).
    pub histories: u64,
    /// Their lines.
    pub lines: u64,
    /// Microseconds per 10,000 history lines for the report alone (windows, incidents, causes).
    pub us_per_10k_lines: f64,
    /// Microseconds per 10,000 lines with report.txt, report.json and timeline.svg drawn too.
    pub us_per_10k_lines_with_files: f64,
}

/// Every figure of one `bench` run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Swarm, 100 jobs, one thread.
    pub swarm_one_thread: Speed,
    /// Swarm, 100 jobs, `threads` threads.
    pub swarm_threads: Speed,
    /// The reference world, one thread, with the swarm's message and timer counts.
    pub reference: Speed,
    /// Swarm events per second over the reference's.
    pub swarm_vs_reference: f64,
    /// Seeds per second with `threads` threads over one thread.
    pub thread_speedup: f64,
    /// Cost by world size.
    pub scaling: Vec<Scale>,
    /// Microseconds per job at 10,000 jobs over that at 100.
    pub cost_growth_100_to_10000: f64,
    /// What logging costs, off and on.
    pub logging: Logging,
    /// What a report costs.
    pub report: ReportCost,
    /// The swarm on each store, and the ratio.
    pub stores: Stores,
    /// Memory over a long sweep.
    pub memory: Option<Memory>,
}

/// Runs every measurement; `progress` hears what is being measured.
pub fn run(options: BenchOptions, progress: &dyn Fn(&str)) -> Report {
    progress("warm-up");
    // The first worlds of a process pay for page faults and allocator growth: keep them out.
    let _ = swarm(options.seeds.min(200), 1);
    let _ = reference(&swarm(options.seeds.min(50), 1).1);
    progress("swarm at 100 jobs, one thread");
    let (swarm_one_thread, events) = swarm(options.seeds, 1);
    progress(&format!("swarm at 100 jobs, {} threads", options.threads));
    let (swarm_threads, _) = swarm(options.seeds, options.threads);
    progress("reference world");
    let reference = reference(&events);
    let mut scaling = Vec::new();
    for (jobs, seeds) in
        [(10, options.seeds), (100, options.seeds), (1_000, options.seeds / 10), (10_000, options.seeds / 100)]
    {
        progress(&format!("scaling: {jobs} jobs"));
        scaling.push(scale(jobs, seeds.max(2)));
    }
    let us_per_job = |jobs: u32| scaling.iter().find(|scale| scale.jobs == jobs).map_or(0.0, |scale| scale.us_per_job);
    progress("stores: memory and sqlite in turns, one thread");
    let stores = stores(options.seeds / 4);
    progress("logging: off, disabled, and at debug");
    let logging = logging(options.seeds);
    progress("report: windows, incidents, causes, and the three files");
    let report = report_cost(options.seeds);
    let memory = (options.memory_seeds > 0).then(|| {
        progress(&format!("memory over {} seeds", options.memory_seeds));
        memory(options.memory_seeds, options.threads)
    });
    Report {
        swarm_vs_reference: swarm_one_thread.events_per_sec / reference.events_per_sec,
        thread_speedup: swarm_threads.seeds_per_sec / swarm_one_thread.seeds_per_sec,
        cost_growth_100_to_10000: us_per_job(10_000) / us_per_job(100),
        swarm_one_thread,
        swarm_threads,
        reference,
        scaling,
        logging,
        report,
        stores,
        memory,
    }
}

/// Reports on the histories of `seeds` swarm seeds and as many labelled ones (a tenth of each
/// labelled scenario's share), timing the report alone, then with its files drawn.
fn report_cost(seeds: u64) -> ReportCost {
    let mut histories: Vec<Vec<lease_history::Entry>> =
        (0..seeds / 10).map(|seed| Target::new(Scenario::SWARM).run(seed).history).collect();
    for &scenario in Scenario::LABELLED {
        let per = (seeds / 10 / Scenario::LABELLED.len() as u64).max(1);
        histories.extend((0..per).map(|seed| Target::new(scenario).run(seed).history));
    }
    let lines: u64 = histories.iter().map(|history| history.len() as u64).sum();
    let time = |files: bool| {
        let started = Instant::now();
        for history in &histories {
            let report = lease_check::report::Report::of(history, None).expect("a simulated history reports");
            if files {
                std::hint::black_box((
                    lease_check::report::text::render(&report),
                    report.to_json(),
                    lease_check::report::svg::render(&report),
                ));
            }
            std::hint::black_box(&report);
        }
        started.elapsed().as_secs_f64() * 1e6 / lines.max(1) as f64 * 10_000.0
    };
    ReportCost {
        histories: histories.len() as u64,
        lines,
        us_per_10k_lines: time(false),
        us_per_10k_lines_with_files: time(true),
    }
}

/// The swarm on the in-memory store and on SQLite (`--store sqlite`), measured in turns.
#[derive(Debug, Clone, Serialize)]
pub struct Stores {
    /// On `lease-core`'s in-memory table and ledger.
    pub memory: Speed,
    /// On lease-store's SQL, an in-memory SQLite database per world.
    pub sqlite: Speed,
    /// Seeds per second on SQLite over seeds per second in memory.
    pub sqlite_vs_memory: f64,
}

/// The swarm at 100 jobs; returns the speed and each seed's events, in seed order.
fn swarm(seeds: u64, threads: usize) -> (Speed, Vec<Events>) {
    swarm_on(Target::new(Scenario::SWARM), 0..seeds, threads)
}

/// The swarm on the in-memory store and on SQLite, over the same seeds on one thread, in turns
/// (memory, sqlite, memory, sqlite over two halves of the seeds), so that a noisy neighbour slows
/// both alike.
fn stores(seeds: u64) -> Stores {
    let half = (seeds / 2).max(1);
    let mut walls = [0.0_f64; 2];
    let mut simulated = [0_u64; 2];
    let mut sim_us = [0_u64; 2];
    for range in [0..half, half..2 * half] {
        for (k, store) in [StoreKind::Memory, StoreKind::Sqlite].into_iter().enumerate() {
            let (speed, events) = swarm_on(Target::new(Scenario::SWARM).on(store), range.clone(), 1);
            walls[k] += half as f64 / speed.seeds_per_sec;
            simulated[k] += events.iter().map(Events::simulated).sum::<u64>();
            sim_us[k] += (speed.sim_speedup * half as f64 / speed.seeds_per_sec * 1e6) as u64;
        }
    }
    let at = |k: usize| speed(2 * half, 1, Duration::from_secs_f64(walls[k]), simulated[k], sim_us[k]);
    let (memory, sqlite) = (at(0), at(1));
    Stores { sqlite_vs_memory: sqlite.seeds_per_sec / memory.seeds_per_sec, memory, sqlite }
}

/// The swarm over `seeds` on `target`; returns the speed and each seed's events, in seed order.
fn swarm_on(target: Target, seeds: std::ops::Range<u64>, threads: usize) -> (Speed, Vec<Events>) {
    let seed_list: Vec<u64> = seeds.collect();
    let seeds = seed_list.len() as u64;
    let events = Mutex::new(Vec::new());
    let sim_us = AtomicU64::new(0);
    let started = Instant::now();
    let next = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seed_list.get(index as usize) else { return };
                let report = target.run(seed);
                sim_us.fetch_add(report.sim_us, Ordering::Relaxed);
                events.lock().expect("no bench thread panics").push((seed, report.events));
            });
        }
    });
    let wall = started.elapsed();
    let mut events = events.into_inner().expect("bench threads finished");
    events.sort_by_key(|(seed, _)| *seed);
    let events: Vec<Events> = events.into_iter().map(|(_, events)| events).collect();
    let simulated: u64 = events.iter().map(Events::simulated).sum();
    (speed(seeds, threads, wall, simulated, sim_us.into_inner()), events)
}

fn speed(seeds: u64, threads: usize, wall: Duration, simulated: u64, sim_us: u64) -> Speed {
    let wall_s = wall.as_secs_f64().max(1e-9);
    Speed {
        seeds,
        threads,
        seeds_per_sec: seeds as f64 / wall_s,
        events_per_sec: simulated as f64 / wall_s,
        sim_speedup: sim_us as f64 / 1e6 / wall_s,
        events_per_seed: simulated as f64 / seeds.max(1) as f64,
    }
}

/// The ceiling: per swarm seed, a world of two nodes that exchanges the same number of raw
/// messages (ping and pong, each pong awaited under a timeout) and arms the same number of timers,
/// with no protocol, no checker and no history.
fn reference(swarm: &[Events]) -> Speed {
    let started = Instant::now();
    let mut sim_us = 0;
    for (seed, events) in swarm.iter().enumerate() {
        sim_us += reference_world(seed as u64, events.messages, events.timers).sim_us;
    }
    let simulated: u64 = swarm.iter().map(Events::simulated).sum();
    speed(swarm.len() as u64, 1, started.elapsed(), simulated, sim_us)
}

/// One reference world: its simulated time, and the messages and timers it really used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceRun {
    /// Simulated time, in microseconds.
    pub sim_us: u64,
    /// Messages madsim carried.
    pub messages: u64,
    /// Timers armed.
    pub timers: u64,
}

/// Runs one reference world with `messages` messages (rounded down to whole round trips) and
/// `timers` timers.
pub fn reference_world(seed: u64, messages: u64, timers: u64) -> ReferenceRun {
    let runtime = Runtime::with_seed_and_config(seed, madsim::Config::default());
    let ping: std::net::SocketAddr = "10.9.0.1:1".parse().expect("a literal address");
    let pong: std::net::SocketAddr = "10.9.0.2:1".parse().expect("a literal address");
    let echo = runtime.create_node().ip(pong.ip()).build();
    let pinger = runtime.create_node().ip(ping.ip()).build();
    runtime.block_on(async move {
        let start = madsim::time::Instant::now();
        echo.spawn(async move {
            let endpoint = Endpoint::bind(pong).await.expect("bind");
            while let Ok((payload, from)) = endpoint.recv_from_raw(1).await {
                let _ = endpoint.send_to_raw(from, 1, payload).await;
            }
        });
        let done = pinger.spawn(async move {
            let endpoint = Endpoint::bind(ping).await.expect("bind");
            let round_trips = messages / 2;
            // Each round trip arms one timer (the timeout on the pong); the rest are plain sleeps.
            for _ in 0..round_trips {
                let _ = endpoint.send_to_raw(pong, 1, Box::new(0u64)).await;
                let _ = madsim::time::timeout(Duration::from_secs(1), endpoint.recv_from_raw(1)).await;
            }
            for _ in round_trips..timers {
                madsim::time::sleep(Duration::from_micros(10)).await;
            }
        });
        let _ = done.await;
        let round_trips = messages / 2;
        ReferenceRun {
            sim_us: start.elapsed().as_micros() as u64,
            messages: madsim::net::NetSim::current().stat().msg_count,
            timers: round_trips + timers.saturating_sub(round_trips),
        }
    })
}

/// Cost at one world size, one thread.
fn scale(jobs: u32, seeds: u64) -> Scale {
    let started = Instant::now();
    for seed in 0..seeds {
        let params = Scenario::SWARM.params(seed, None).with_jobs(jobs);
        let _ = world::run(params);
    }
    let wall = started.elapsed().as_secs_f64().max(1e-9);
    Scale { jobs, seeds, seeds_per_sec: seeds as f64 / wall, us_per_job: wall * 1e6 / (seeds as f64 * jobs as f64) }
}

/// Rounds of [`logging`]: the two ways alternate, so that a machine busy for a while slows both.
const LOGGING_ROUNDS: u64 = 10;

/// Logging's cost, on this thread: the same swarm seeds with no subscriber and under one that
/// disables every event, alternating in rounds, then a tenth of the seeds logging at debug into a
/// sink. The first round without a subscriber runs before any was ever installed in the process;
/// later ones run after, when tracing has cached that no one wants the harness's events.
fn logging(seeds: u64) -> Logging {
    let target = Target::new(Scenario::SWARM);
    let time = |seeds: std::ops::Range<u64>| {
        let started = Instant::now();
        for seed in seeds {
            drop(target.run(seed));
        }
        started.elapsed().as_secs_f64()
    };
    let under = |filter: &str, seeds: std::ops::Range<u64>| {
        let filter = tracing_subscriber::EnvFilter::new(filter);
        tracing::subscriber::with_default(crate::logs::subscriber(filter, std::io::sink), || time(seeds))
    };
    let per_round = seeds.div_ceil(LOGGING_ROUNDS);
    let (mut off_s, mut disabled_s) = (0.0, 0.0);
    for round in 0..LOGGING_ROUNDS {
        let range = round * per_round..((round + 1) * per_round).min(seeds);
        off_s += time(range.clone());
        disabled_s += under("lease_sim=info", range);
    }
    let debug_seeds = (seeds / 10).max(1);
    let debug_s = under(crate::logs::LOG_FILTER, 0..debug_seeds);
    let rate = |seeds: u64, wall_s: f64| seeds as f64 / wall_s.max(1e-9);
    let (off_seeds_per_sec, disabled_seeds_per_sec) = (rate(seeds, off_s), rate(seeds, disabled_s));
    Logging {
        seeds,
        off_seeds_per_sec,
        disabled_seeds_per_sec,
        disabled_vs_off: disabled_seeds_per_sec / off_seeds_per_sec,
        debug_seeds,
        debug_seeds_per_sec: rate(debug_seeds, debug_s),
    }
}

/// Resident memory before and after a long sweep in this process.
fn memory(seeds: u64, threads: usize) -> Memory {
    let target = Target::new(Scenario::SWARM);
    let _ = target.run(0);
    let rss_start_kib = status_kib("VmRSS:");
    // Each seed's report is dropped at once: this measures the worlds, not what a caller keeps.
    let next = AtomicU64::new(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed > seeds {
                    return;
                }
                drop(target.run(seed));
            });
        }
    });
    Memory { rss_start_kib, rss_end_kib: status_kib("VmRSS:"), rss_peak_kib: status_kib("VmHWM:"), seeds }
}

/// A `/proc/self/status` figure in KiB; 0 where the system has none.
fn status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the ceiling is a fair one: the reference world carries exactly the messages it was
    // asked for (whole round trips), as counted by madsim itself.
    #[test]
    fn the_reference_world_carries_the_messages_it_is_asked_for() {
        let run = reference_world(7, 1_000, 1_200);
        assert_eq!(run.messages, 1_000);
        assert_eq!(run.timers, 1_200);
        assert!(run.sim_us > 0);
    }

    // Proves the swarm's event counts are what the reference replays: madsim's message count and
    // the world's timers, per seed, the same on every run of a seed.
    #[test]
    fn swarm_event_counts_are_deterministic_per_seed() {
        let (_, first) = swarm(3, 1);
        let (_, again) = swarm(3, 2);
        assert_eq!(first, again);
        assert!(first.iter().all(|events| events.messages > 100 && events.timers > 100), "{first:?}");
    }
}
