//! `lease-sim live --bench`: what the protocol costs on a real store, beside the simplest queue
//! loop on the same database, measured in the same run.
//!
//! For each store and fleet size, three runs, each a burst of `jobs` (the queue's capacity is the
//! burst, the dependency answers at once: what is measured is the queue, not the dependency):
//!
//! 1. **ours**: `lease-sim live` with no fault: the burst is enqueued, then the worker processes
//!    start, each running lease-runtime on lease-store with [`Fleet`]'s slots and batches: each
//!    job acquired, its output made in process and recorded by the runtime, and completed, every
//!    step fenced and on the history. Jobs per second from the first grant to the last terminal outcome; the delay from
//!    each job's arrival to its outcome, p50 and p99 (mostly its place in the preloaded queue).
//! 2. **recovery**: the same, with half the workers SIGKILLed (restarted only at the heal) a
//!    quarter of a second into the burst: the time from the kill until every job the killed
//!    workers held reached its outcome (a reclaimer's adoption or requeue, then a survivor). Its
//!    burst is `jobs`, or more when the workers left would serve `jobs` in less than a second
//!    ([`recovery_jobs`]): the kill must find the killed workers holding jobs.
//! 3. **baseline**: the burst inserted, then as many threads, each with its own connection, looping `UPDATE … SET
//!    state = 'running' WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id`, then
//!    `UPDATE … SET state = 'done'`: no lease, no fencing, no ledger, no history. (SQLite has no
//!    SKIP LOCKED: the same two statements, each in its `BEGIN IMMEDIATE`.)
//! 4. **batched baseline**: the same, each thread taking up to the fleet's batch of jobs in one
//!    statement and marking them done in one.
//! 5. **write floor** ([`crate::floor`]): the rows and lines ours writes for each job, in the
//!    transactions ours writes them in, with nothing read, checked or locked around them: the
//!    fastest any correct implementation could be on these tables.

use super::db::host_now;
use super::plan::{FaultKind, LivePlan, Role, Shape, SignalStrike};
use super::{Failure, Options, StoreChoice};
use lease_history::Point;
use lease_history::{parse_jsonl, Event, Node};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One row of figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// `postgres` or `sqlite`.
    pub store: String,
    /// Workers (processes for ours, threads for the baseline).
    pub workers: u32,
    /// Jobs in the burst.
    pub jobs: u64,
    /// Ours: jobs per second.
    pub jobs_per_s: f64,
    /// Ours: arrival to outcome, p50.
    pub p50_us: u64,
    /// Ours: arrival to outcome, p99.
    pub p99_us: u64,
    /// From the kill of half the workers until every job they held ended (`None`: they held none).
    pub recovery_us: Option<u64>,
    /// The recovery run's burst: `jobs`, or more when the fleet would have served `jobs` before
    /// the kill ([`recovery_jobs`]).
    pub recovery_jobs: u64,
    /// Where the recovery's time went ([`Recovery`]; `None` when the killed workers held none).
    pub recovery_steps: Option<Recovery>,
    /// The baseline's jobs per second.
    pub baseline_jobs_per_s: f64,
    /// The baseline's p50.
    pub baseline_p50_us: u64,
    /// The baseline's p99.
    pub baseline_p99_us: u64,
    /// The batched baseline's jobs per second: each thread takes up to `batch` jobs in one
    /// statement and marks them done in one.
    pub batched_baseline_jobs_per_s: f64,
    /// The write floor's jobs per second ([`crate::floor`]): the rows and lines ours writes for
    /// each job, in its four transactions a batch, with nothing read, checked or locked around
    /// them, on the same tables. No correct implementation on these tables is faster.
    pub floor_jobs_per_s: f64,
    /// Ours: slots per worker process.
    pub slots: u32,
    /// Ours: the most requests of a kind per call (`WorkerOptions::batch`); the batched
    /// baseline's jobs per statement.
    pub batch: usize,
    /// Ours: how long a batch that is not full waits for more, in µs (`WorkerOptions::linger`).
    pub linger_us: u64,
}

impl Row {
    /// Ours over the baseline, in jobs per second.
    pub fn ratio(&self) -> f64 {
        self.jobs_per_s / self.baseline_jobs_per_s.max(f64::MIN_POSITIVE)
    }

    /// Ours over the batched baseline, in jobs per second.
    pub fn batched_ratio(&self) -> f64 {
        self.jobs_per_s / self.batched_baseline_jobs_per_s.max(f64::MIN_POSITIVE)
    }

    /// Ours over the write floor, in jobs per second.
    pub fn floor_ratio(&self) -> f64 {
        self.jobs_per_s / self.floor_jobs_per_s.max(f64::MIN_POSITIVE)
    }

    /// The write floor over the batched baseline: the most of the batched bare loop's jobs/s
    /// that any correct implementation on these tables could reach.
    pub fn floor_of_batched(&self) -> f64 {
        self.floor_jobs_per_s / self.batched_baseline_jobs_per_s.max(f64::MIN_POSITIVE)
    }
}

/// Where a recovery's time went, each time from the kill: the jobs the killed workers held
/// expire (a lease outlives its holder by up to a ttl), the reclaimer fences them a wave at a
/// time (the plan's `reclaimer_wave`), and each then ends (requeued and run by a survivor, or its recorded output adopted).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Recovery {
    /// Jobs the killed workers held at the kill.
    pub held: u64,
    /// Of them, fenced by a reclaimer after the kill.
    pub fenced: u64,
    /// The first of their leases' expiries.
    pub first_expiry_us: u64,
    /// The last of their leases' expiries.
    pub last_expiry_us: u64,
    /// The first fence.
    pub first_fence_us: u64,
    /// The last fence.
    pub last_fence_us: u64,
    /// The reclaim's pace: from the first fence to the last, per lease after the first.
    pub us_per_lease: f64,
}

impl Recovery {
    /// One line for an operator: where the recovery's time went.
    pub fn line(&self, recovery_us: u64) -> String {
        let s = |us: u64| us as f64 / 1e6;
        format!(
            "{} jobs held at the kill; their leases expired {:.2} to {:.2} s after it; {} fenced from {:.2} to {:.2} s \
             ({:.2} ms a lease); the last ended {:.2} s after the kill",
            self.held,
            s(self.first_expiry_us),
            s(self.last_expiry_us),
            self.fenced,
            s(self.first_fence_us),
            s(self.last_fence_us),
            self.us_per_lease / 1e3,
            s(recovery_us),
        )
    }
}

/// Where the recovery went, from a recovery run's history: the kill at `killed_at`, the jobs the
/// killed workers held then.
fn recovery_steps(entries: &[lease_history::Entry], killed_at: u64, held: &[u64]) -> Option<Recovery> {
    let held_set: std::collections::BTreeSet<u64> = held.iter().copied().collect();
    let (mut expiries, mut fences) = (Vec::new(), Vec::new());
    for entry in entries.iter().filter(|entry| entry.t_us >= killed_at) {
        if let Event::Reclaimed { job, expires_at_us, .. } = &entry.event {
            if held_set.contains(&job.0) {
                expiries.push(expires_at_us.saturating_sub(killed_at));
                fences.push(entry.t_us - killed_at);
            }
        }
    }
    let (first_fence_us, last_fence_us) = (*fences.iter().min()?, *fences.iter().max()?);
    let steps = (fences.len() as f64 - 1.0).max(1.0);
    Some(Recovery {
        held: held_set.len() as u64,
        fenced: fences.len() as u64,
        first_expiry_us: expiries.iter().copied().min().unwrap_or(0),
        last_expiry_us: expiries.iter().copied().max().unwrap_or(0),
        first_fence_us,
        last_fence_us,
        us_per_lease: (last_fence_us - first_fence_us) as f64 / steps,
    })
}

/// Throughput and delays of one drained burst.
struct Figures {
    jobs_per_s: f64,
    p50_us: u64,
    p99_us: u64,
}

fn figures(delays: &mut [u64], first_us: u64, last_us: u64) -> Figures {
    delays.sort_unstable();
    let at = |q: f64| delays.get(((delays.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0);
    let span_s = (last_us.saturating_sub(first_us)).max(1) as f64 / 1e6;
    Figures { jobs_per_s: delays.len() as f64 / span_s, p50_us: at(0.5), p99_us: at(0.99) }
}

/// The plan's change for a benchmark run: a burst at the start, room for all of it, an instant
/// dependency, no fault but the timed kill (when `kill`).
fn burst(plan: &mut LivePlan, jobs: u64, kill: bool, fleet: Fleet) {
    plan.slots = fleet.slots;
    plan.batch = fleet.batch;
    plan.linger_us = fleet.linger_us;
    // The queue alone, as the bare loops: the output made in process, recorded by the runtime.
    plan.dependency_in_process = true;
    plan.batch_max = plan.batch_max.max(fleet.batch);
    // The throughput run serves a preloaded queue, as the baseline does; the recovery run kills
    // workers in the middle of a burst still arriving.
    plan.start_at_backlog = (!kill).then_some(jobs as usize);
    plan.arrivals = (0..jobs).map(|job| (job, 0)).collect();
    plan.capacity = jobs as usize;
    // The recovery run's burst must outlast the kill at 250 ms: its dependency takes long enough
    // that the workers left after the kill would serve the burst in about a second (at most a
    // tenth of a lease: [`recovery_jobs`] makes the burst long enough for that), so the killed
    // workers hold jobs mid-effect. It is timed by the workers that survive the kill: timed by
    // the whole fleet, the burst outlasted the lease by half a second once it arrived in batches,
    // and the reclaimed jobs waited at the back of a queue still hundreds long, which is the
    // burst's size and not the recovery's speed.
    let in_flight = survivor_slots(plan.workers, fleet.slots);
    let latency_us = if kill { (1_000_000 * in_flight / jobs.max(1)).min(plan.lease_ttl_us / 10) } else { 0 };
    plan.dependency.latency_min_us = latency_us;
    plan.dependency.latency_max_us = latency_us;
    plan.windows.clear();
    plan.surge = None;
    plan.strikes.clear();
    if kill {
        plan.strikes = (0..killed(plan.workers))
            .map(|index| SignalStrike {
                at_us: 250_000,
                kind: FaultKind::Kill,
                role: Role::Worker,
                index,
                point: Point::AtRandom,
                len_us: u64::MAX / 4,
            })
            .collect();
    }
}

/// The worker processes the recovery run kills: half the fleet, at least one.
fn killed(workers: u32) -> u32 {
    (workers / 2).max(1)
}

/// The slots of the worker processes the kill leaves (at least one process's, when it kills all).
fn survivor_slots(workers: u32, slots: u32) -> u64 {
    u64::from(workers.saturating_sub(killed(workers)).max(1)) * u64::from(slots)
}

/// The recovery run's burst: `jobs`, or more when the workers left after the kill, each slot's
/// job taking a tenth of a lease `ttl_us` (the handler's longest), would serve `jobs` in less
/// than a second. Then the whole fleet would have served them all before the kill at 250 ms,
/// and the killed workers would hold nothing to recover (a 500-job burst on 8 processes of 64
/// slots did: 512 slots and a 100 ms handler). The burst grows instead of the handler, so that a
/// reclaimed job's second run stays a tenth of a lease and the recovery measures the reclaim.
pub fn recovery_jobs(jobs: u64, workers: u32, slots: u32, ttl_us: u64) -> u64 {
    let handler_us = (ttl_us / 10).max(1);
    jobs.max(survivor_slots(workers, slots).saturating_mul(1_000_000).div_ceil(handler_us))
}

/// Runs ours (and, with `kill`, the recovery run) and reads its figures from the history.
fn ours(
    store: &StoreChoice,
    workers: u32,
    jobs: u64,
    out: &Path,
    kill: bool,
    fleet: Fleet,
) -> Result<(Figures, Option<u64>, Option<Recovery>), Failure> {
    let shape = Shape {
        seed: 1,
        workers,
        reclaimers: 1,
        jobs,
        duration_us: if kill { 2_000_000 } else { 1_000_000 },
        faults: Vec::new(),
        slots: fleet.slots,
        batch: fleet.batch,
    };
    let options =
        Options { shape, store: store.clone(), bug: None, out: out.to_path_buf(), keep_db: false, verbose: false };
    let finished = super::run_with(&options, &|plan| burst(plan, jobs, kill, fleet))?;
    if !finished.drained {
        return Err(Failure::Harness(format!("a benchmark burst did not drain ({})", out.display())));
    }
    let text = std::fs::read_to_string(&finished.history).map_err(|e| Failure::Harness(e.to_string()))?;
    let entries = parse_jsonl(&text).map_err(|e| Failure::Harness(e.to_string()))?;
    if let Err(violation) = lease_check::check_history(&entries) {
        return Err(Failure::Harness(format!("a benchmark run broke {violation}")));
    }
    let (mut arrived, mut ended, mut holder, mut killed_at) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new(), None);
    let mut first_grant_us = u64::MAX;
    let mut held_at_kill: Vec<u64> = Vec::new();
    for entry in &entries {
        match &entry.event {
            Event::Arrived { job, .. } => {
                arrived.insert(job.0, entry.t_us);
            }
            Event::Terminal { job, .. } => {
                ended.insert(job.0, entry.t_us);
            }
            Event::Granted { job, owner, .. } => {
                first_grant_us = first_grant_us.min(entry.t_us);
                if killed_at.is_none() {
                    holder.insert(job.0, *owner);
                }
            }
            Event::Crashed { target: Node::Worker(n), .. } => {
                killed_at.get_or_insert(entry.t_us);
                let held = holder.iter().filter(|(job, owner)| **owner == Node::Worker(*n) && !ended.contains_key(job));
                held_at_kill.extend(held.map(|(job, _)| *job));
            }
            _ => {}
        }
    }
    // Serving: from the first grant (the workers start once the queue is loaded) to the last outcome.
    let first_us = if first_grant_us == u64::MAX { 0 } else { first_grant_us };
    let last_us = ended.values().copied().max().unwrap_or(0);
    let mut delays: Vec<u64> =
        ended.iter().filter_map(|(job, end)| arrived.get(job).map(|start| end.saturating_sub(*start))).collect();
    // None when the killed workers held no job at the kill (between jobs): nothing to recover.
    let recovery_us = killed_at
        .and_then(|at| held_at_kill.iter().filter_map(|job| ended.get(job)).map(|end| end.saturating_sub(at)).max());
    let steps = killed_at.filter(|_| recovery_us.is_some()).and_then(|at| recovery_steps(&entries, at, &held_at_kill));
    Ok((figures(&mut delays, first_us, last_us), recovery_us, steps))
}

/// The simplest queue loop on the same database. See the module doc.
fn baseline(store: &StoreChoice, workers: u32, jobs: u64, out: &Path, batch: usize) -> Result<Figures, Failure> {
    let done = Arc::new(AtomicBool::new(false));
    let harness = |error: String| Failure::Harness(format!("baseline: {error}"));
    let mut conns: Vec<Baseline> = Vec::new();
    let name = format!("lease_bench_{}_{}", std::process::id(), host_now().0 % 1_000_000_000);
    for n in 0..=workers {
        conns.push(Baseline::open(store, out, &name, n == 0).map_err(harness)?);
    }
    let mut inserter = conns.remove(0);
    // The queue is loaded first, as ours is: what is measured is serving it.
    for job in 0..jobs {
        inserter.insert(job as i64).map_err(harness)?;
    }
    let started_us = host_now().0;
    let threads: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let done = done.clone();
            std::thread::spawn(move || -> Result<(), String> {
                // Bounded: each pass takes a job or finds none; the inserter says when all are in.
                for _ in 0..jobs * 1_000 + 1_000_000 {
                    if conn.take_and_finish(batch)? {
                        continue;
                    }
                    if done.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err("the loop ran out".to_string())
            })
        })
        .collect();
    // The workers stop once the queue is empty.
    while inserter.open_jobs().map_err(harness)? > 0 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    done.store(true, Ordering::SeqCst);
    for thread in threads {
        thread.join().map_err(|_| harness("a worker thread panicked".into()))?.map_err(harness)?;
    }
    let times = inserter.times().map_err(harness)?;
    inserter.drop_all().map_err(harness)?;
    let first_us = started_us;
    let last_us = times.iter().map(|(_, done)| *done).max().unwrap_or(0);
    let mut delays: Vec<u64> = times.iter().map(|(arrived, done)| done.saturating_sub(*arrived)).collect();
    Ok(figures(&mut delays, first_us, last_us))
}

/// One connection of the baseline.
enum Baseline {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>, String),
}

const BASELINE_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS bench_jobs (id BIGINT PRIMARY KEY, state TEXT NOT NULL, arrived_us BIGINT NOT NULL, \
     done_us BIGINT)";

/// The bare loops' queue index, as a real queue has one (River's and Oban's index their
/// available jobs; ours, `lease_jobs_queue`): without it, each take scans past every job done
/// before it, and the loops slow as the burst grows (at 3,000 jobs the unbatched SQLite loop fell
/// from about 20,000 to 5,700 jobs/s), flattering ours.
const BASELINE_INDEX: &str = "CREATE INDEX IF NOT EXISTS bench_jobs_queued ON bench_jobs (id) WHERE state = 'queued'";

impl Baseline {
    fn open(store: &StoreChoice, out: &Path, schema: &str, create: bool) -> Result<Baseline, String> {
        let e = |error: &dyn std::fmt::Display| error.to_string();
        match store {
            StoreChoice::Sqlite => {
                let path = out.join("baseline.sqlite");
                if create {
                    for suffix in ["", "-wal", "-shm"] {
                        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                    }
                }
                let conn = rusqlite::Connection::open(&path).map_err(|x| e(&x))?;
                // Ours' busy handler (`lease_store::busy_retry`): the same waits for the lock.
                conn.busy_handler(Some(lease_store::busy_retry)).map_err(|x| e(&x))?;
                conn.pragma_update(None, "journal_mode", "WAL").map_err(|x| e(&x))?;
                conn.pragma_update(None, "synchronous", "NORMAL").map_err(|x| e(&x))?;
                if create {
                    conn.execute(BASELINE_TABLE, []).map_err(|x| e(&x))?;
                    conn.execute(BASELINE_INDEX, []).map_err(|x| e(&x))?;
                }
                Ok(Baseline::Sqlite(conn))
            }
            StoreChoice::Postgres { url } => {
                let mut client = postgres::Client::connect(url, postgres::NoTls).map_err(|x| e(&x))?;
                if create {
                    client.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}")).map_err(|x| e(&x))?;
                }
                client.batch_execute(&format!("SET search_path TO {schema}")).map_err(|x| e(&x))?;
                if create {
                    client.batch_execute(BASELINE_TABLE).map_err(|x| e(&x))?;
                    client.batch_execute(BASELINE_INDEX).map_err(|x| e(&x))?;
                }
                Ok(Baseline::Postgres(Box::new(client), schema.to_string()))
            }
        }
    }

    fn insert(&mut self, id: i64) -> Result<(), String> {
        let now = host_now().0 as i64;
        match self {
            Baseline::Sqlite(conn) => conn
                .execute("INSERT INTO bench_jobs (id, state, arrived_us) VALUES (?1, 'queued', ?2)", [id, now])
                .map(drop)
                .map_err(|e| e.to_string()),
            Baseline::Postgres(client, _) => client
                .execute("INSERT INTO bench_jobs (id, state, arrived_us) VALUES ($1, 'queued', $2)", &[&id, &now])
                .map(drop)
                .map_err(|e| e.to_string()),
        }
    }

    /// Takes the oldest queued job and marks it done: `true` if there was one. With `batch`
    /// above 1, up to that many, in one statement each way.
    fn take_and_finish(&mut self, batch: usize) -> Result<bool, String> {
        if batch > 1 {
            return self.take_and_finish_batch(batch as i64);
        }
        let e = |error: &dyn std::fmt::Display| error.to_string();
        match self {
            Baseline::Sqlite(conn) => {
                let take = "UPDATE bench_jobs SET state = 'running' WHERE id = \
                            (SELECT id FROM bench_jobs WHERE state = 'queued' ORDER BY id LIMIT 1) RETURNING id";
                let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|x| e(&x))?;
                let id: Option<i64> = {
                    let mut statement = tx.prepare_cached(take).map_err(|x| e(&x))?;
                    let mut rows = statement.query([]).map_err(|x| e(&x))?;
                    rows.next().map_err(|x| e(&x))?.map(|row| row.get(0)).transpose().map_err(|x| e(&x))?
                };
                tx.commit().map_err(|x| e(&x))?;
                let Some(id) = id else { return Ok(false) };
                let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|x| e(&x))?;
                tx.execute(
                    "UPDATE bench_jobs SET state = 'done', done_us = ?2 WHERE id = ?1",
                    [id, host_now().0 as i64],
                )
                .map_err(|x| e(&x))?;
                tx.commit().map_err(|x| e(&x))?;
                Ok(true)
            }
            Baseline::Postgres(client, _) => {
                let take = "UPDATE bench_jobs SET state = 'running' WHERE id = (SELECT id FROM bench_jobs \
                            WHERE state = 'queued' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id";
                let Some(row) = client.query_opt(take, &[]).map_err(|x| e(&x))? else { return Ok(false) };
                let id: i64 = row.get(0);
                let now = host_now().0 as i64;
                client
                    .execute("UPDATE bench_jobs SET state = 'done', done_us = $2 WHERE id = $1", &[&id, &now])
                    .map_err(|x| e(&x))?;
                Ok(true)
            }
        }
    }

    /// The batched bare loop: `LIMIT batch … FOR UPDATE SKIP LOCKED` taken in one statement,
    /// marked done in one (SQLite: the same two, each in its `BEGIN IMMEDIATE`).
    fn take_and_finish_batch(&mut self, batch: i64) -> Result<bool, String> {
        let e = |error: &dyn std::fmt::Display| error.to_string();
        match self {
            Baseline::Sqlite(conn) => {
                let take = "UPDATE bench_jobs SET state = 'running' WHERE id IN \
                            (SELECT id FROM bench_jobs WHERE state = 'queued' ORDER BY id LIMIT ?1) RETURNING id";
                let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|x| e(&x))?;
                let ids: Vec<i64> = {
                    let mut statement = tx.prepare_cached(take).map_err(|x| e(&x))?;
                    let rows = statement.query_map([batch], |row| row.get(0)).map_err(|x| e(&x))?;
                    rows.collect::<Result<_, _>>().map_err(|x| e(&x))?
                };
                tx.commit().map_err(|x| e(&x))?;
                if ids.is_empty() {
                    return Ok(false);
                }
                let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|x| e(&x))?;
                let done = format!("UPDATE bench_jobs SET state = 'done', done_us = ?1 WHERE id IN ({list})");
                tx.execute(&done, [host_now().0 as i64]).map_err(|x| e(&x))?;
                tx.commit().map_err(|x| e(&x))?;
                Ok(true)
            }
            Baseline::Postgres(client, _) => {
                let take = "UPDATE bench_jobs SET state = 'running' WHERE id IN (SELECT id FROM bench_jobs \
                            WHERE state = 'queued' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT $1) RETURNING id";
                let ids: Vec<i64> =
                    client.query(take, &[&batch]).map_err(|x| e(&x))?.iter().map(|row| row.get(0)).collect();
                if ids.is_empty() {
                    return Ok(false);
                }
                let now = host_now().0 as i64;
                client
                    .execute("UPDATE bench_jobs SET state = 'done', done_us = $2 WHERE id = ANY($1)", &[&ids, &now])
                    .map_err(|x| e(&x))?;
                Ok(true)
            }
        }
    }

    fn open_jobs(&mut self) -> Result<i64, String> {
        let count = "SELECT COUNT(*) FROM bench_jobs WHERE state <> 'done'";
        match self {
            Baseline::Sqlite(conn) => conn.query_row(count, [], |row| row.get(0)).map_err(|e| e.to_string()),
            Baseline::Postgres(client, _) => {
                client.query_one(count, &[]).map(|row| row.get(0)).map_err(|e| e.to_string())
            }
        }
    }

    fn times(&mut self) -> Result<Vec<(u64, u64)>, String> {
        let select = "SELECT arrived_us, done_us FROM bench_jobs";
        match self {
            Baseline::Sqlite(conn) => {
                let mut statement = conn.prepare(select).map_err(|e| e.to_string())?;
                let rows = statement
                    .query_map([], |row| Ok((row.get::<_, i64>(0)? as u64, row.get::<_, i64>(1)? as u64)))
                    .map_err(|e| e.to_string())?;
                rows.collect::<Result<_, _>>().map_err(|e| e.to_string())
            }
            Baseline::Postgres(client, _) => Ok(client
                .query(select, &[])
                .map_err(|e| e.to_string())?
                .iter()
                .map(|row| (row.get::<_, i64>(0) as u64, row.get::<_, i64>(1) as u64))
                .collect()),
        }
    }

    fn drop_all(&mut self) -> Result<(), String> {
        match self {
            Baseline::Sqlite(_) => Ok(()),
            Baseline::Postgres(client, schema) => {
                client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).map_err(|e| e.to_string())
            }
        }
    }
}

/// How ours runs: slots per worker process and requests per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fleet {
    /// Slots per worker process.
    pub slots: u32,
    /// Requests of a kind per call (1: each alone); the batched baseline's jobs per statement.
    pub batch: usize,
    /// How long a batch that is not full waits for more (`WorkerOptions::linger`), in µs.
    pub linger_us: u64,
}

/// Every row: PostgreSQL (when `url` is given), then SQLite, with each of `workers`.
pub fn bench(url: Option<&str>, jobs: u64, out: &Path, workers: &[u32], fleet: Fleet) -> Result<Vec<Row>, Failure> {
    let mut stores = Vec::new();
    if let Some(url) = url {
        stores.push(StoreChoice::Postgres { url: url.to_string() });
    }
    stores.push(StoreChoice::Sqlite);
    let mut rows = Vec::new();
    for store in &stores {
        let name = store.kind().name();
        for &workers in workers {
            let dir = out.join(format!("{name}-{workers}"));
            let (run, _, _) = ours(store, workers, jobs, &dir.join("throughput"), false, fleet)?;
            let recovery_jobs = recovery_jobs(jobs, workers, fleet.slots, crate::plan::LEASE_TTL_US);
            let (_, recovery_us, recovery_steps) =
                ours(store, workers, recovery_jobs, &dir.join("recovery"), true, fleet)?;
            let base = baseline(store, workers, jobs, &dir, 1)?;
            let batched = baseline(store, workers, jobs, &dir, fleet.batch.max(2))?;
            let floor = crate::floor::floor(store, workers, jobs, &dir, fleet.batch)?;
            let row = Row {
                store: name.to_string(),
                workers,
                jobs,
                jobs_per_s: run.jobs_per_s,
                p50_us: run.p50_us,
                p99_us: run.p99_us,
                recovery_us,
                recovery_jobs,
                recovery_steps,
                baseline_jobs_per_s: base.jobs_per_s,
                baseline_p50_us: base.p50_us,
                baseline_p99_us: base.p99_us,
                batched_baseline_jobs_per_s: batched.jobs_per_s,
                floor_jobs_per_s: floor,
                slots: fleet.slots,
                batch: fleet.batch,
                linger_us: fleet.linger_us,
            };
            println!("{}", line(&row));
            if let (Some(us), Some(steps)) = (row.recovery_us, row.recovery_steps) {
                println!("  recovery: {}", steps.line(us));
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The header of [`line()`].
pub const HEADER: &str =
    "store     workers  jobs   ours jobs/s  p50 ms   p99 ms  recovery ms (of jobs)   baseline jobs/s  p50 ms   p99 ms   \
                          ratio   batched baseline   ratio    write floor   ratio";

/// One row, as printed.
pub fn line(row: &Row) -> String {
    format!(
        "{:<9} {:>7} {:>5} {:>13.1} {:>7.1} {:>8.1} {:>12} {:>9} {:>17.1} {:>7.1} {:>8.1} {:>6.0}% {:>18.1} {:>6.0}% {:>14.1} {:>6.0}%",
        row.store,
        row.workers,
        row.jobs,
        row.jobs_per_s,
        row.p50_us as f64 / 1e3,
        row.p99_us as f64 / 1e3,
        row.recovery_us.map_or("-".to_string(), |us| format!("{:.1}", us as f64 / 1e3)),
        format!("({})", row.recovery_jobs),
        row.baseline_jobs_per_s,
        row.baseline_p50_us as f64 / 1e3,
        row.baseline_p99_us as f64 / 1e3,
        row.ratio() * 100.0,
        row.batched_baseline_jobs_per_s,
        row.batched_ratio() * 100.0,
        row.floor_jobs_per_s,
        row.floor_ratio() * 100.0,
    )
}

#[cfg(test)]
mod tests {
    use super::{recovery_jobs, recovery_steps};
    use lease_core::{BatchId, Epoch, JobId, ReclaimerId};
    use lease_history::{Entry, Event, Node};

    fn fence(t_us: u64, job: u64, expires_at_us: u64) -> Entry {
        let batch = BatchId { reclaimer: ReclaimerId(0), seq: 1 };
        let (epoch, new_epoch, reclaimer) = (Epoch(1), Epoch(2), Node::Reclaimer(0));
        let event = Event::Reclaimed {
            job: JobId(job),
            epoch,
            expires_at_us,
            new_epoch,
            new_expires_at_us: t_us,
            reclaimer,
            batch,
        };
        Entry { t_us, node: Node::Table, event }
    }

    // Proves the recovery's steps are read from the history, from the kill: the held jobs' fences
    // after it (a fence before the kill, and one of a job the killed workers did not hold, are
    // not theirs), their leases' expiries, and the pace from the first fence to the last. None
    // when no held job was fenced.
    #[test]
    fn the_recovery_steps_are_the_held_jobs_expiries_and_fences() {
        let kill = 1_000;
        let history = [
            fence(500, 1, 400),
            fence(2_000, 2, 1_800),
            fence(2_500, 3, 1_900),
            fence(3_000, 9, 1_950),
            fence(4_000, 4, 1_990),
        ];
        let steps = recovery_steps(&history, kill, &[1, 2, 3, 4, 5]).expect("fences of held jobs");
        assert_eq!((steps.held, steps.fenced), (5, 3));
        assert_eq!((steps.first_expiry_us, steps.last_expiry_us), (800, 990));
        assert_eq!((steps.first_fence_us, steps.last_fence_us), (1_000, 3_000));
        assert_eq!(steps.us_per_lease, 1_000.0);
        assert!(steps.line(3_500).contains("5 jobs held at the kill"), "{}", steps.line(3_500));
        assert_eq!(recovery_steps(&history, kill, &[7]), None);
    }

    // The recovery run's burst keeps the workers left after the kill busy for a second at a
    // handler of a tenth of the lease: it grows where the fleet is wide (8 processes of 64 slots
    // would have served 500 jobs before the kill at 250 ms), and stays as asked where it is long
    // enough already.
    #[test]
    fn the_recovery_burst_outlasts_the_kill_whatever_the_fleet() {
        let ttl_us = 1_000_000;
        assert_eq!(recovery_jobs(500, 8, 64, ttl_us), 2_560);
        assert_eq!(recovery_jobs(500, 4, 64, ttl_us), 1_280);
        assert_eq!(recovery_jobs(500, 2, 64, ttl_us), 640);
        assert_eq!(recovery_jobs(5_000, 8, 64, ttl_us), 5_000);
        assert_eq!(recovery_jobs(100, 2, 4, ttl_us), 100);
        // One worker: it is killed, and the burst is sized as if one were left.
        assert_eq!(recovery_jobs(10, 1, 4, ttl_us), 40);
        // A longer lease allows a longer handler, so fewer jobs fill the second.
        assert_eq!(recovery_jobs(500, 8, 64, 4 * ttl_us), 640);
    }
}
