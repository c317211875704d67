//! The runtime on real stores, inside `#[tokio::main]`-style runtimes (`#[tokio::test]`), on the
//! host's clock: SQLite (a temporary file) and PostgreSQL (a scratch schema on
//! `LEASE_PG_URL`, by default the local server; a missing server is said plainly, and fails the
//! test under `LEASE_PG_REQUIRED=1`). The same behaviours run on each.

use futures::future::{self, BoxFuture};
use lease_core::{
    Enqueued, Epoch, JobId, JobState, OpId, Outcome, OutputId, ReclaimReply, ReclaimRequest, ReclaimerConfig,
    ReclaimerId, RequestId, Span, TableConfig, WorkerConfig, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::{Event, Node};
use lease_runtime::store::{HostClock, StoreClient};
use lease_runtime::{output_id, Cancel, Client, HandlerError, Job, ReclaimerOptions, Runtime, Started, WorkerOptions};
use lease_store::Place;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TTL: Span = Span::from_ms(1_000);

fn table() -> TableConfig {
    TableConfig { capacity: 64, lease_ttl: TTL, batch_max: 8, attempts_max: 3 }
}

/// Heartbeats every 120 ms, a 200 ms margin, requests timing out after 200 ms: room for a loaded
/// 2-core machine (a 400 ms lease with 80 ms timeouts self-fenced there once, a renewal late).
fn worker_config() -> WorkerConfig {
    WorkerConfig {
        lease_ttl: TTL,
        heartbeat_every: Span::from_ms(120),
        drift_margin: TTL / 5,
        request_timeout: TTL / 5,
        idle_backoff: TTL / 20,
        acquire_wait: Span::ZERO,
    }
}

fn reclaimer() -> ReclaimerOptions {
    let config = ReclaimerConfig { scan_every: TTL / 4, request_timeout: TTL / 5, retries_max: 3, wave: 8 };
    ReclaimerOptions::new(ReclaimerId(0), config)
}

fn slots(count: u32) -> Vec<WorkerId> {
    (0..count).map(WorkerId).collect()
}

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// A client on a store, and how to tidy up after it.
struct Opened {
    client: StoreClient,
    clock: HostClock,
    _scratch: Scratch,
}

/// What a test leaves behind: a SQLite file, or a PostgreSQL schema, removed on drop.
enum Scratch {
    File(std::path::PathBuf),
    Schema { url: String, name: String },
}

impl Drop for Scratch {
    fn drop(&mut self) {
        match self {
            Scratch::File(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut path = path.clone().into_os_string();
                    path.push(suffix);
                    let _ = std::fs::remove_file(path);
                }
            }
            Scratch::Schema { url, name } => {
                // The synchronous admin client runs a runtime of its own: on a thread of its own.
                let (url, sql) = (url.clone(), format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
                let dropped = std::thread::spawn(move || {
                    let mut admin = postgres::Client::connect(&url, postgres::NoTls)?;
                    admin.batch_execute(&sql)
                });
                let _ = dropped.join();
            }
        }
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn unique(stem: &str) -> String {
    format!("{stem}_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn sqlite(test: &str) -> Option<Opened> {
    let path = std::env::temp_dir().join(format!("{}.sqlite", unique(&format!("lease_runtime_{test}"))));
    let scratch = Scratch::File(path.clone());
    let clock = HostClock::start();
    let client = StoreClient::open(&Place::Sqlite { path }, table(), clock, 1).await.expect("open SQLite");
    Some(Opened { client, clock, _scratch: scratch })
}

async fn postgres(test: &str) -> Option<Opened> {
    let url = std::env::var("LEASE_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let required = std::env::var("LEASE_PG_REQUIRED").is_ok_and(|value| value == "1");
    let name = unique(&format!("lease_runtime_{test}"));
    let scratch = Scratch::Schema { url: url.clone(), name: name.clone() };
    let clock = HostClock::start();
    let place = Place::Postgres { url: url.clone(), schema: name };
    match StoreClient::open(&place, table(), clock, 1).await {
        Ok(client) => Some(Opened { client, clock, _scratch: scratch }),
        Err(error) if !required => {
            say(&format!("{test} on PostgreSQL: NOT RUN: no server answers at {url} ({error}); set LEASE_PG_URL"));
            None
        }
        Err(error) => panic!("{test}: no PostgreSQL server at {url} ({error}), and LEASE_PG_REQUIRED=1"),
    }
}

async fn enqueue(client: &StoreClient, count: u64) {
    for job in 0..count {
        let answer = client.enqueue(JobId(job)).await.expect("enqueue");
        assert!(matches!(answer, lease_core::Enqueued::Accepted { .. }), "{answer:?}");
    }
}

/// `call` on the client, tried again while it finds the connection cut (a test that cuts
/// connections reads through them; a handle reconnects at once).
async fn read<T: Send + 'static>(
    client: &StoreClient,
    call: impl Fn(&mut dyn lease_store::Store) -> Result<T, lease_store::StoreError> + Send + Sync + Clone + 'static,
) -> T {
    for _ in 0..100 {
        let call = call.clone();
        match client.call(move |store, _| call(store)).await {
            Ok(answer) => return answer,
            Err(error) if error.is_disconnect() => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(error) => panic!("the store read fails: {error}"),
        }
    }
    panic!("the store's connection stayed cut for 2 s: {:?}", client.errors())
}

async fn states(client: &StoreClient, count: u64) -> Vec<(JobState, u32)> {
    let records =
        read(client, move |store| (0..count).map(|job| store.job(JobId(job))).collect::<Result<Vec<_>, _>>()).await;
    records.into_iter().map(|record| record.expect("every job is known")).map(|r| (r.state, r.attempts)).collect()
}

/// Resolves once jobs `0..count` have all ended, or panics after `limit`.
fn all_ended(
    client: &StoreClient,
    count: u64,
    limit: Duration,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let client = client.clone();
    async move {
        let started = std::time::Instant::now();
        loop {
            let ended = states(&client, count).await.iter().all(|(state, _)| matches!(state, JobState::Terminal(_)));
            if ended {
                return;
            }
            assert!(started.elapsed() < limit, "the jobs did not end within {limit:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The store's log as a history, judged by every checker of `lease-check` (its lines and the
/// runtime's own: `executing`, `abandoned`, `adopted`).
async fn judge(client: &StoreClient) {
    let text = read(client, |store| store.history()).await;
    let entries =
        lease_history::parse_jsonl(&text).unwrap_or_else(|error| panic!("the history does not parse: {error}"));
    lease_check::check_history(&entries).unwrap_or_else(|violation| panic!("{violation}\n{text}"));
}

fn output_bytes(job: JobId, call: u64) -> Vec<u8> {
    format!("document {job}, run {call}").into_bytes()
}

fn completed_with(state: &JobState) -> Option<OutputId> {
    match state {
        JobState::Terminal(terminal) => match terminal.outcome {
            Outcome::Completed { output } => Some(output),
            _ => None,
        },
        _ => None,
    }
}

/// A client that meddles with the answers of a store: it loses those to one lease's renewals
/// (the table takes them), and holds back those to acquires and lookups.
#[derive(Clone)]
struct Meddling {
    inner: StoreClient,
    lost_renewals: Option<(JobId, Epoch)>,
    slow_acquires: Duration,
    slow_lookups: Duration,
    /// The first write of `executing` lines is held this long before it reaches the store (a
    /// write waiting for a lock): then the rest pass at once.
    slow_first_lines: Duration,
    lines_held: Arc<AtomicU64>,
}

impl Meddling {
    fn new(inner: &StoreClient) -> Meddling {
        Meddling {
            inner: inner.clone(),
            lost_renewals: None,
            slow_acquires: Duration::ZERO,
            slow_lookups: Duration::ZERO,
            slow_first_lines: Duration::ZERO,
            lines_held: Arc::default(),
        }
    }
}

impl Client for Meddling {
    fn worker(
        &self,
        worker: WorkerId,
        id: RequestId,
        request: WorkerRequest,
    ) -> BoxFuture<'static, Option<WorkerReply>> {
        let answer = self.inner.worker(worker, id, request);
        let lost = matches!(request, WorkerRequest::Renew { job, epoch } if Some((job, epoch)) == self.lost_renewals);
        let held = match request {
            WorkerRequest::Acquire => self.slow_acquires,
            WorkerRequest::Lookup { .. } => self.slow_lookups,
            _ => Duration::ZERO,
        };
        Box::pin(async move {
            let answer = answer.await.filter(|_| !lost);
            tokio::time::sleep(held).await;
            answer
        })
    }

    fn record(
        &self,
        worker: WorkerId,
        op: OpId,
        epoch: Epoch,
        output: OutputId,
    ) -> BoxFuture<'static, Option<lease_core::Apply>> {
        self.inner.record(worker, op, epoch, output)
    }

    fn reclaimer(
        &self,
        reclaimer: ReclaimerId,
        id: RequestId,
        request: ReclaimRequest,
    ) -> BoxFuture<'static, Option<ReclaimReply>> {
        self.inner.reclaimer(reclaimer, id, request)
    }

    fn line(&self, node: Node, event: Event) -> BoxFuture<'static, bool> {
        self.inner.line(node, event)
    }

    fn started(&self, lines: Vec<(Node, Event)>) -> BoxFuture<'static, Option<Vec<Started>>> {
        let first = self.lines_held.fetch_add(1, Ordering::SeqCst) == 0;
        let held = if first { self.slow_first_lines } else { Duration::ZERO };
        let inner = self.inner.clone();
        Box::pin(async move {
            tokio::time::sleep(held).await;
            inner.started(lines).await
        })
    }
}

// An `executing` line that reaches the store after its lease expired is refused, and its effect
// never starts: the first write of the line is held 1.5 ttl (a write waiting for the lock, as a
// live run on SQLite once waited 540 ms and wrote the line 337 ms after the lease expired). The
// runtime decided the effect while the lease was live, so only the store's guard stands between
// the late line and a history that says an effect started after its lease. The lease lapses, a
// reclaimer requeues the job (nothing recorded), and the second grant runs the handler once and
// completes. The history has no `executing` line under the first epoch, and lease-check accepts
// it. Fails if the store writes the late line (self_fencing), or if the runtime starts an effect
// whose line was refused.
async fn late_executing_line_is_refused(opened: Opened) {
    let Opened { client, clock, .. } = opened;
    enqueue(&client, 1).await;
    let calls = Arc::new(AtomicU64::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |job: Job| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok(output_bytes(job.id, call)) }
        }
    };
    let held = Duration::from_micros(TTL.as_us() * 3 / 2);
    let slow = Meddling { slow_first_lines: held, ..Meddling::new(&client) };
    let runtime = Runtime::new(Arc::new(clock), Arc::new(slow));
    let limit = Duration::from_secs(10);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, all_ended(&client, 1, limit));
    let reclaim = runtime.reclaim(reclaimer(), all_ended(&client, 1, limit));
    let (worked, reclaimed) = future::join(work, reclaim).await;
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    let log = client.call(|store, _| store.events()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one handler call, under the second lease: {log:#?}");
    assert_eq!((worked.refused_lines, reclaimed.fenced), (1, 1), "{worked:?} {reclaimed:?}");
    let executing: Vec<&String> = log.iter().filter(|line| line.contains(r#""kind":"executing""#)).collect();
    assert_eq!(executing.len(), 1, "{log:#?}");
    assert!(!executing[0].contains(r#""epoch":1,"#), "the late line was written: {log:#?}");
    let states = states(&client, 1).await;
    assert_eq!(completed_with(&states[0].0), Some(output_id(&output_bytes(JobId(0), 1))), "{states:?}");
    judge(&client).await;
}

#[tokio::test]
async fn sqlite_a_late_executing_line_is_refused() {
    late_executing_line_is_refused(sqlite("late").await.unwrap()).await;
}

#[tokio::test]
async fn postgres_a_late_executing_line_is_refused() {
    if let Some(opened) = postgres("late").await {
        late_executing_line_is_refused(opened).await;
    }
}

// A handler five ttls long (5 s on a 1 s lease) keeps its lease by heartbeats: it runs once,
// nothing is reclaimed, and the job completes with its output. The store's log holds exactly
// one applied effect and at least ten renewals.
async fn long_handler_keeps_its_lease(opened: Opened) {
    let Opened { client, clock, .. } = opened;
    enqueue(&client, 1).await;
    let calls = Arc::new(AtomicU64::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |job: Job| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                tokio::time::sleep(Duration::from_micros(5 * TTL.as_us())).await;
                Ok(output_bytes(job.id, call))
            }
        }
    };
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    let limit = Duration::from_secs(10);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, all_ended(&client, 1, limit));
    let reclaim = runtime.reclaim(reclaimer(), all_ended(&client, 1, limit));
    let (worked, reclaimed) = future::join(work, reclaim).await;
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!((worked.abandoned, worked.cancelled, reclaimed.fenced), (0, 0, 0), "{worked:?} {reclaimed:?}");
    let states = states(&client, 1).await;
    assert_eq!(completed_with(&states[0].0), Some(output_id(&output_bytes(JobId(0), 1))), "{states:?}");
    let log = client.call(|store, _| store.events()).await.unwrap();
    let count = |kind: &str| log.iter().filter(|line| line.contains(&format!(r#""kind":"{kind}""#))).count();
    assert_eq!(count("effect_applied"), 1, "one effect");
    assert!(count("renewed") >= 10, "5 s of heartbeats every 120 ms: {} renewals", count("renewed"));
    assert_eq!(client.errors().count, 0, "{:?}", client.errors());
    judge(&client).await;
}

// A handler hung past the self-fence (its lease's renewals unanswered) is cancelled; the
// reclaimer fences the expired lease and requeues it (nothing was recorded); the second run
// completes the job, once, with the second run's output.
async fn hung_handler_is_cancelled_and_its_job_ends_once(opened: Opened) {
    let Opened { client, clock, .. } = opened;
    enqueue(&client, 1).await;
    let cancels: Arc<Mutex<Vec<Cancel>>> = Arc::default();
    let calls = Arc::new(AtomicU64::new(0));
    let handler = {
        let (cancels, calls) = (Arc::clone(&cancels), Arc::clone(&calls));
        move |job: Job| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            cancels.lock().unwrap().push(job.cancel.clone());
            async move {
                if job.epoch == Epoch(1) {
                    future::pending::<()>().await;
                }
                Ok(output_bytes(job.id, call))
            }
        }
    };
    let losing = Meddling { lost_renewals: Some((JobId(0), Epoch(1))), ..Meddling::new(&client) };
    let runtime = Runtime::new(Arc::new(clock), Arc::new(losing));
    let limit = Duration::from_secs(10);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, all_ended(&client, 1, limit));
    let reclaim = runtime.reclaim(reclaimer(), all_ended(&client, 1, limit));
    let (worked, reclaimed) = future::join(work, reclaim).await;
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 2, "a second run after the reclaim");
    assert!(cancels.lock().unwrap()[0].is_cancelled(), "the hung handler's cancellation fired");
    assert_eq!((worked.cancelled, reclaimed.fenced), (1, 1), "{worked:?} {reclaimed:?}");
    let states = states(&client, 1).await;
    assert_eq!(completed_with(&states[0].0), Some(output_id(&output_bytes(JobId(0), 2))), "{states:?}");
    let log = client.call(|store, _| store.events()).await.unwrap();
    let terminal = log.iter().filter(|line| line.contains(r#""kind":"terminal""#)).count();
    assert_eq!(terminal, 1, "the job ended once");
    let lines: Vec<serde_json::Value> = log.iter().map(|line| serde_json::from_str(line).unwrap()).collect();
    let applied: Vec<_> = lines.iter().filter(|line| line["kind"] == "effect_applied").collect();
    assert_eq!(applied.len(), 1, "one effect: {applied:?}");
    assert_ne!(applied[0]["epoch"], 1, "nothing recorded under the lost lease: {applied:?}");
    assert!(lines.iter().any(|line| line["kind"] == "abandoned"), "the worker wrote its abandoned line");
    judge(&client).await;
}

// Graceful shutdown: two slots, four jobs; job 1 hangs, the others take 100 ms. The signal comes
// at 150 ms, the grace is 300 ms: what runs finishes, nothing new starts, job 1 is cancelled and
// its lease, whose handler had started, left to expire; a reclaimer requeues it. Every job is
// then completed or queued, none leased, none lost, and the history passes every checker.
async fn shutdown_finishes_or_hands_back_every_job(opened: Opened) {
    let Opened { client, clock, .. } = opened;
    enqueue(&client, 4).await;
    let started = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let started = Arc::clone(&started);
        move |job: Job| {
            started.lock().unwrap().push(job.id);
            async move {
                if job.id == JobId(1) {
                    future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok(output_bytes(job.id, 1))
            }
        }
    };
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    let options = WorkerOptions { grace: Span::from_ms(300), ..WorkerOptions::new(slots(2), worker_config()) };
    let shutdown = tokio::time::sleep(Duration::from_millis(150));
    let worked = runtime.work(options, handler, shutdown).await.unwrap();
    assert_eq!((worked.cancelled, worked.left), (1, 1), "{worked:?}");
    // A slot whose acquire was answered only after the signal (a loaded machine is slow enough)
    // hands that grant straight back: counted, and on the log as a release.
    let log = client.call(|store, _| store.events()).await.unwrap();
    let released = log.iter().filter(|line| line.contains(r#""kind":"released""#)).count() as u64;
    assert_eq!(worked.released, released, "{worked:?} {log:#?}");
    let requeued = {
        let client = client.clone();
        async move {
            while matches!(states(&client, 2).await[1].0, JobState::Leased(_)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let reclaimed = runtime.reclaim(reclaimer(), requeued).await.unwrap();
    assert_eq!(reclaimed.fenced, 1, "{reclaimed:?}");
    let states = states(&client, 4).await;
    assert!(states.iter().all(|(state, _)| !matches!(state, JobState::Leased(_))), "none leased: {states:?}");
    assert_eq!(states[1], (JobState::Queued, 1), "job 1 requeued, its attempt counted");
    let completed = states.iter().filter(|(state, _)| completed_with(state).is_some()).count() as u64;
    assert_eq!(completed, worked.completed, "{states:?}");
    let queued = states.iter().filter(|(state, _)| *state == JobState::Queued).count() as u64;
    assert_eq!(completed + queued, 4, "every job finished or queued: {states:?}");
    for job in started.lock().unwrap().iter().filter(|&&job| job != JobId(1)) {
        assert!(completed_with(&states[job.0 as usize].0).is_some(), "{job} started and finished: {states:?}");
    }
    judge(&client).await;
}

// Graceful shutdown hands back the grants it never ran, and says so. First, the answers to two
// slots' acquires come after the signal (the store granted at once; the answers are held 100 ms,
// the signal comes at 30 ms): both grants go straight back. Then both jobs, their first leases
// expired and reclaimed, are granted again (attempt 2) and their lookups' answers held past the
// grace: at the grace's end, both leases are released. Each release is preceded by the worker's
// `abandoned` `shutdown`, every attempt it spent is undone, and lease-check accepts the history.
async fn shutdown_hands_back_the_grants_it_never_ran(opened: Opened) {
    let Opened { client, clock, .. } = opened;
    enqueue(&client, 2).await;
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    let handler = |job: Job| async move { Ok(output_bytes(job.id, 1)) };
    let slow = Meddling { slow_acquires: Duration::from_millis(100), ..Meddling::new(&client) };
    let slow_acquires = Runtime::new(Arc::new(clock), Arc::new(slow));
    let options = WorkerOptions { grace: Span::from_ms(300), ..WorkerOptions::new(slots(2), worker_config()) };
    let worked = slow_acquires.work(options, handler, tokio::time::sleep(Duration::from_millis(30))).await.unwrap();
    assert_eq!((worked.released, worked.handled, worked.left), (2, 0, 0), "{worked:?}");
    assert_eq!(states(&client, 2).await, vec![(JobState::Queued, 0); 2], "both back, no attempt counted");

    // Both jobs' first leases, taken by workers that never act on them, expire and are reclaimed.
    for worker in [8, 9] {
        let taken = client.worker(WorkerId(worker), RequestId(1), WorkerRequest::Acquire).await;
        assert!(matches!(taken, Some(WorkerReply::Acquired(lease_core::Acquired::Granted(_)))), "{taken:?}");
    }
    let requeued = {
        let client = client.clone();
        async move {
            while states(&client, 2).await.iter().any(|(state, _)| matches!(state, JobState::Leased(_))) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(runtime.reclaim(reclaimer(), requeued).await.unwrap().fenced, 2);
    // The process starts again: a new life, whose requests its store tells apart from the first
    // life's (a copy of an acquire the first life's grant answered gets nothing).
    let again = client.with_life(2);
    let slow = Meddling { slow_lookups: Duration::from_secs(2), ..Meddling::new(&again) };
    let slow_lookups = Runtime::new(Arc::new(clock), Arc::new(slow));
    let options = WorkerOptions { grace: Span::from_ms(100), ..WorkerOptions::new(slots(2), worker_config()) };
    let worked = slow_lookups.work(options, handler, tokio::time::sleep(Duration::from_millis(50))).await.unwrap();
    let log = client.call(|store, _| store.events()).await.unwrap();
    assert_eq!((worked.released, worked.handled, worked.left), (2, 0, 0), "{worked:?} {log:#?}");
    assert_eq!(states(&client, 2).await, vec![(JobState::Queued, 1); 2], "both back, their second grants undone");
    let log = client.call(|store, _| store.events()).await.unwrap();
    let count = |text: &str| log.iter().filter(|line| line.contains(text)).count();
    assert_eq!((count(r#""why":"shutdown""#), count(r#""kind":"released""#)), (4, 4), "{log:#?}");
    judge(&client).await;
}

// A handler that refuses its job for good (a payload it cannot read): the runtime dead-letters
// the job at once, after one call of three attempts, says why on the history (`dependency_failed`,
// `permanent`), and lease-check accepts the dead-letter. The other job, whose payload reads,
// completes; each handler saw its own payload.
async fn permanent_failure_dead_letters_at_once(opened: Opened) {
    let Opened { client, clock, .. } = opened;
    for (job, payload) in [(0, b"not a document".to_vec()), (1, b"doc-1.md".to_vec())] {
        assert!(matches!(
            client.enqueue_with(JobId(job), payload).await.unwrap(),
            lease_core::Enqueued::Accepted { .. }
        ));
    }
    let seen: Arc<Mutex<Vec<(JobId, Vec<u8>)>>> = Arc::default();
    let handler = {
        let seen = Arc::clone(&seen);
        move |job: Job| {
            seen.lock().unwrap().push((job.id, job.payload.clone()));
            async move {
                if !job.payload.starts_with(b"doc-") {
                    return Err(HandlerError::Permanent("not a document".to_string()));
                }
                Ok(job.payload)
            }
        }
    };
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    let limit = Duration::from_secs(10);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, all_ended(&client, 2, limit));
    work.await.unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, vec![(JobId(0), b"not a document".to_vec()), (JobId(1), b"doc-1.md".to_vec())], "one call each");
    let states = states(&client, 2).await;
    let dead = JobState::Terminal(lease_core::Terminal {
        job: JobId(0),
        epoch: Epoch(1),
        outcome: Outcome::DeadLettered { attempts: 1 },
    });
    assert_eq!(states[0], (dead, 1), "dead-lettered after its first attempt");
    assert_eq!(completed_with(&states[1].0), Some(output_id(b"doc-1.md")), "{states:?}");
    let seen = runtime.metrics().snapshot();
    assert_eq!((seen.grants, seen.dead_letters, seen.effect_seconds.count), (2, 1, 2), "{seen:?}");
    let log = client.call(|store, _| store.events()).await.unwrap();
    let count = |text: &str| log.iter().filter(|line| line.contains(text)).count();
    assert_eq!((count(r#""permanent":true"#), count(r#""kind":"requeued""#)), (2, 0), "{log:#?}");
    judge(&client).await;
}

// A burst enqueued at once: one transaction per `batch_max` (8) jobs, each job answered as its
// single enqueue (the one named twice is a duplicate the second time, the backlog counts up
// across the batches), each with its payload; offered again, every job answers duplicate. The
// runtime then serves them all, each handler reading its own payload.
async fn a_burst_enqueued_in_batches_is_served(opened: Opened) {
    let Opened { client, clock, .. } = opened;
    let payload = |job: u64| format!("doc-{job}").into_bytes();
    let mut jobs: Vec<(JobId, Vec<u8>)> = (0..19).map(|job| (JobId(job), payload(job))).collect();
    jobs.insert(9, (JobId(3), b"a second payload".to_vec()));
    let answers = client.enqueue_batch(jobs.clone()).await.unwrap();
    let mut expected: Vec<Enqueued> = (1..=19).map(|backlog| Enqueued::Accepted { backlog }).collect();
    expected.insert(9, Enqueued::Duplicate);
    assert_eq!(answers, expected);
    assert!(client.enqueue_batch(jobs).await.unwrap().iter().all(|answer| *answer == Enqueued::Duplicate));
    assert!(client.enqueue_batch(Vec::new()).await.unwrap().is_empty(), "nothing offered, nothing asked");
    let handler = |job: Job| async move { Ok(job.payload) };
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    let work = runtime.work(
        WorkerOptions::new(slots(2), worker_config()),
        handler,
        all_ended(&client, 19, Duration::from_secs(10)),
    );
    work.await.unwrap();
    for (job, (state, _)) in states(&client, 19).await.into_iter().enumerate() {
        assert_eq!(completed_with(&state), Some(output_id(&payload(job as u64))), "job {job}: the first payload");
    }
    let log = client.call(|store, _| store.events()).await.unwrap();
    let count = |kind: &str| log.iter().filter(|line| line.contains(&format!(r#""kind":"{kind}""#))).count();
    assert_eq!((count("arrived"), count("duplicate")), (19, 21), "a line for every offer: {log:#?}");
    judge(&client).await;
}

// A handler that fails (retryable) on its first run: the runtime requeues the job, says why on
// the history (the dependency's `dependency_failed`, before any effect), and the second run
// completes it. lease-check judges the log: a requeue with no failure to explain it is refused.
async fn failed_handler_is_requeued_and_says_why(opened: Opened) {
    let Opened { client, clock, .. } = opened;
    enqueue(&client, 1).await;
    let calls = Arc::new(AtomicU64::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |job: Job| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if call == 1 {
                    return Err(HandlerError::Retryable("the renderer is down".to_string()));
                }
                Ok(output_bytes(job.id, call))
            }
        }
    };
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    let limit = Duration::from_secs(10);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, all_ended(&client, 1, limit));
    let reclaim = runtime.reclaim(reclaimer(), all_ended(&client, 1, limit));
    let (worked, reclaimed) = future::join(work, reclaim).await;
    let (_worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the handler ran again after its failure");
    assert_eq!(reclaimed.fenced, 0, "the worker requeued the job itself");
    let states = states(&client, 1).await;
    assert_eq!(completed_with(&states[0].0), Some(output_id(&output_bytes(JobId(0), 2))), "{states:?}");
    let log = client.call(|store, _| store.events()).await.unwrap();
    let count = |kind: &str| log.iter().filter(|line| line.contains(&format!(r#""kind":"{kind}""#))).count();
    assert_eq!((count("requeued"), count("dependency_failed"), count("effect_applied")), (1, 1, 1), "{log:#?}");
    judge(&client).await;
}

/// A store client that notes the largest batch of each kind a runtime sends it.
#[derive(Clone)]
struct Counting {
    inner: StoreClient,
    largest: Arc<Mutex<std::collections::BTreeMap<&'static str, usize>>>,
}

impl Client for Counting {
    fn worker(
        &self,
        worker: WorkerId,
        id: RequestId,
        request: WorkerRequest,
    ) -> BoxFuture<'static, Option<WorkerReply>> {
        self.inner.worker(worker, id, request)
    }

    fn worker_batch(
        &self,
        calls: Vec<(WorkerId, RequestId, WorkerRequest)>,
    ) -> Vec<BoxFuture<'static, Option<WorkerReply>>> {
        let kind = match calls[0].2 {
            WorkerRequest::Acquire => "acquire",
            WorkerRequest::Renew { .. } => "renew",
            WorkerRequest::Complete { .. } => "complete",
            _ => "other",
        };
        let mut largest = self.largest.lock().unwrap();
        let seen = largest.entry(kind).or_default();
        *seen = (*seen).max(calls.len());
        self.inner.worker_batch(calls)
    }

    fn record(
        &self,
        worker: WorkerId,
        op: OpId,
        epoch: Epoch,
        output: OutputId,
    ) -> BoxFuture<'static, Option<lease_core::Apply>> {
        self.inner.record(worker, op, epoch, output)
    }

    fn record_batch(
        &self,
        records: Vec<(WorkerId, OpId, Epoch, OutputId)>,
    ) -> Vec<BoxFuture<'static, Option<lease_core::Apply>>> {
        let mut largest = self.largest.lock().unwrap();
        let seen = largest.entry("record").or_default();
        *seen = (*seen).max(records.len());
        self.inner.record_batch(records)
    }

    fn reclaimer(
        &self,
        reclaimer: ReclaimerId,
        id: RequestId,
        request: ReclaimRequest,
    ) -> BoxFuture<'static, Option<ReclaimReply>> {
        self.inner.reclaimer(reclaimer, id, request)
    }

    fn line(&self, node: Node, event: Event) -> BoxFuture<'static, bool> {
        self.inner.line(node, event)
    }

    fn started(&self, lines: Vec<(Node, Event)>) -> BoxFuture<'static, Option<Vec<Started>>> {
        let mut largest = self.largest.lock().unwrap();
        let seen = largest.entry("executing").or_default();
        *seen = (*seen).max(lines.len());
        self.inner.started(lines)
    }
}

// Batches on a real store: eight slots sending batches of up to eight, 48 jobs, the first eight
// of whose handlers take three ttls (so their heartbeats go out together), the rest 5 ms, beside
// a reclaimer. The store serves each batch in one transaction (`serve_worker_batch`, `apply_as`,
// and `append_started` for the `executing` lines of effects started together). Every job
// ends completed once, with its one handler run's output; the log holds one applied effect per
// job; acquires, renewals and completions each went out in batches of more than one; no store
// call failed; and the exported history passes every checker of lease-check. Each handler gets
// its own job's payload (odd jobs have one), read with the batch's lines. Fails if a batch's
// answers reach the wrong slots, if a payload reaches the wrong handler, if a batch's line names
// the wrong worker, or if the store serves a batch other than as its calls one by one.
async fn batched_fleet_runs_every_job_once(opened: Opened) {
    const JOBS: u64 = 48;
    let Opened { client, clock, .. } = opened;
    // Every odd job has a payload of its own; the even ones none.
    let payload = |job: u64| if job % 2 == 1 { format!("doc-{job}").into_bytes() } else { Vec::new() };
    for job in 0..JOBS {
        let answer = client.enqueue_with(JobId(job), payload(job)).await.expect("enqueue");
        assert!(matches!(answer, lease_core::Enqueued::Accepted { .. }), "{answer:?}");
    }
    let calls: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(vec![0; JOBS as usize]));
    let handler = {
        let calls = Arc::clone(&calls);
        move |job: Job| {
            let call = {
                let mut calls = calls.lock().unwrap();
                calls[job.id.0 as usize] += 1;
                calls[job.id.0 as usize]
            };
            assert_eq!(job.payload, payload(job.id.0), "{}'s own payload", job.id);
            async move {
                let long = if job.id.0 < 8 { 3 * TTL.as_us() } else { 5_000 };
                tokio::time::sleep(Duration::from_micros(long)).await;
                Ok(output_bytes(job.id, call))
            }
        }
    };
    let counting = Counting { inner: client.clone(), largest: Arc::default() };
    let runtime = Runtime::new(Arc::new(clock), Arc::new(counting.clone()));
    let limit = Duration::from_secs(30);
    let options = WorkerOptions { batch: 8, ..WorkerOptions::new(slots(8), worker_config()) };
    let work = runtime.work(options, handler, all_ended(&client, JOBS, limit));
    let reclaim = runtime.reclaim(reclaimer(), all_ended(&client, JOBS, limit));
    let (worked, reclaimed) = future::join(work, reclaim).await;
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!((worked.handled, worked.completed, reclaimed.fenced), (JOBS, JOBS, 0), "{worked:?} {reclaimed:?}");
    assert!(calls.lock().unwrap().iter().all(|&n| n == 1), "each handler ran once: {:?}", calls.lock().unwrap());
    for (job, (state, _)) in states(&client, JOBS).await.iter().enumerate() {
        let output = output_id(&output_bytes(JobId(job as u64), 1));
        assert_eq!(completed_with(state), Some(output), "job {job}: {state:?}");
    }
    let log = client.call(|store, _| store.events()).await.unwrap();
    let applied = log.iter().filter(|line| line.contains(r#""kind":"effect_applied""#)).count();
    assert_eq!(applied, JOBS as usize, "one effect per job");
    let largest = counting.largest.lock().unwrap().clone();
    for kind in ["acquire", "renew", "executing", "record", "complete"] {
        assert!(largest.get(kind).is_some_and(|&n| n > 1), "{kind}s went out in batches: {largest:?}");
    }
    assert_eq!(client.errors().count, 0, "{:?}", client.errors());
    judge(&client).await;
}

#[tokio::test]
async fn sqlite_a_batched_fleet_runs_every_job_once() {
    batched_fleet_runs_every_job_once(sqlite("batched").await.unwrap()).await;
}

#[tokio::test]
async fn postgres_a_batched_fleet_runs_every_job_once() {
    if let Some(opened) = postgres("batched").await {
        batched_fleet_runs_every_job_once(opened).await;
    }
}

#[tokio::test]
async fn sqlite_a_failed_handler_is_requeued_and_says_why() {
    failed_handler_is_requeued_and_says_why(sqlite("failed").await.unwrap()).await;
}

#[tokio::test]
async fn postgres_a_failed_handler_is_requeued_and_says_why() {
    if let Some(opened) = postgres("failed").await {
        failed_handler_is_requeued_and_says_why(opened).await;
    }
}

#[tokio::test]
async fn sqlite_a_handler_five_ttls_long_keeps_its_lease() {
    long_handler_keeps_its_lease(sqlite("long").await.unwrap()).await;
}

#[tokio::test]
async fn sqlite_a_hung_handler_is_cancelled_and_its_job_ends_once() {
    hung_handler_is_cancelled_and_its_job_ends_once(sqlite("hung").await.unwrap()).await;
}

#[tokio::test]
async fn sqlite_shutdown_finishes_or_hands_back_every_job() {
    shutdown_finishes_or_hands_back_every_job(sqlite("shutdown").await.unwrap()).await;
}

#[tokio::test]
async fn sqlite_a_burst_enqueued_in_batches_is_served() {
    a_burst_enqueued_in_batches_is_served(sqlite("burst").await.unwrap()).await;
}

#[tokio::test]
async fn postgres_a_burst_enqueued_in_batches_is_served() {
    if let Some(opened) = postgres("burst").await {
        a_burst_enqueued_in_batches_is_served(opened).await;
    }
}

#[tokio::test]
async fn sqlite_a_permanent_failure_dead_letters_at_once() {
    permanent_failure_dead_letters_at_once(sqlite("permanent").await.unwrap()).await;
}

#[tokio::test]
async fn postgres_a_permanent_failure_dead_letters_at_once() {
    if let Some(opened) = postgres("permanent").await {
        permanent_failure_dead_letters_at_once(opened).await;
    }
}

#[tokio::test]
async fn sqlite_shutdown_hands_back_the_grants_it_never_ran() {
    shutdown_hands_back_the_grants_it_never_ran(sqlite("handback").await.unwrap()).await;
}

#[tokio::test]
async fn postgres_shutdown_hands_back_the_grants_it_never_ran() {
    if let Some(opened) = postgres("handback").await {
        shutdown_hands_back_the_grants_it_never_ran(opened).await;
    }
}

#[tokio::test]
async fn postgres_a_handler_five_ttls_long_keeps_its_lease() {
    if let Some(opened) = postgres("long").await {
        long_handler_keeps_its_lease(opened).await;
    }
}

#[tokio::test]
async fn postgres_a_hung_handler_is_cancelled_and_its_job_ends_once() {
    if let Some(opened) = postgres("hung").await {
        hung_handler_is_cancelled_and_its_job_ends_once(opened).await;
    }
}

#[tokio::test]
async fn postgres_shutdown_finishes_or_hands_back_every_job() {
    if let Some(opened) = postgres("shutdown").await {
        shutdown_finishes_or_hands_back_every_job(opened).await;
    }
}

/// Runs `sql` on a connection of its own (the synchronous admin client runs a runtime of its own:
/// on a thread of its own) and returns the first column of its one row.
async fn admin(url: &str, sql: String, param: String) -> i64 {
    let (url, (done, answer)) = (url.to_string(), futures::channel::oneshot::channel());
    std::thread::spawn(move || {
        let ran = postgres::Client::connect(&url, postgres::NoTls)
            .and_then(|mut admin| admin.query_one(sql.as_str(), &[&param]))
            .map(|row| row.get::<_, i64>(0));
        let _ = done.send(ran);
    });
    answer.await.expect("the admin thread answers").expect("the admin statement runs")
}

// Proves a fleet survives a database that cuts every connection, twice, mid-run: two worker
// processes (a pool of two connections each, four slots each), a reclaimer and the enqueuing
// client, all on one `application_name`, run 300 jobs whose handler takes 5 ms. When 100 and then
// 200 handler calls have started, `pg_terminate_backend` cuts every connection of that name. Each
// handle finds its connection cut, answers that call as no answer, and connects again; the
// machines send again what went unanswered. Every job then ends exactly once, completed with the
// output of one of its handler's runs, and the exported history passes every checker of
// lease-check. Fails if a handle never reconnects (the run stalls), if a cut loses or doubles a
// job, or if a line is written out of turn around a cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_fleet_reconnects_after_every_connection_is_cut() {
    use lease_runtime::store::Connections;
    const JOBS: u64 = 300;
    let base = std::env::var("LEASE_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let name = unique("lease_runtime_cut");
    let url = format!("{base}{}application_name={name}", if base.contains('?') { '&' } else { '?' });
    let _scratch = Scratch::Schema { url: base.clone(), name: name.clone() };
    let place = Place::Postgres { url: url.clone(), schema: name.clone() };
    let clock = HostClock::start();
    let main = match StoreClient::open(&place, table_of(JOBS as usize), clock, 1).await {
        Ok(client) => client,
        Err(error) if std::env::var("LEASE_PG_REQUIRED").is_ok_and(|value| value == "1") => {
            panic!("no PostgreSQL server at {base} ({error}), and LEASE_PG_REQUIRED=1")
        }
        Err(error) => return say(&format!("the cut test on PostgreSQL: NOT RUN: no server at {base} ({error})")),
    };
    for job in 0..JOBS {
        let answer = main.enqueue_with(JobId(job), format!("payload {job}").into_bytes()).await.expect("enqueue");
        assert!(matches!(answer, lease_core::Enqueued::Accepted { .. }), "{answer:?}");
    }
    let calls: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(vec![0; JOBS as usize]));
    let started = Arc::new(AtomicU64::new(0));
    let handler = {
        let (calls, started) = (Arc::clone(&calls), Arc::clone(&started));
        move |job: Job| {
            let call = {
                let mut calls = calls.lock().unwrap();
                calls[job.id.0 as usize] += 1;
                calls[job.id.0 as usize]
            };
            started.fetch_add(1, Ordering::SeqCst);
            async move {
                assert_eq!(job.payload, format!("payload {}", job.id.0).into_bytes(), "the job's own payload");
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(output_bytes(job.id, call))
            }
        }
    };
    let (stop, stopped) = futures::channel::oneshot::channel::<()>();
    let stopped = futures::FutureExt::shared(futures::FutureExt::map(stopped, drop));
    let mut fleet = Vec::new();
    let mut clients = vec![main.clone()];
    for process in 0..2u32 {
        let client = StoreClient::open_with(
            &place,
            table_of(JOBS as usize),
            clock,
            2 + u64::from(process),
            Connections::pool(2),
        )
        .await
        .expect("a worker process's pool opens");
        clients.push(client.clone());
        let runtime = Runtime::new(Arc::new(clock), Arc::new(client));
        let slots = (process * 4..process * 4 + 4).map(WorkerId).collect();
        let work = runtime.work(WorkerOptions::new(slots, worker_config()), handler.clone(), stopped.clone());
        fleet.push(tokio::spawn(async move { format!("{:?}", work.await.expect("the worker runs")) }));
    }
    let reclaiming = StoreClient::open(&place, table_of(JOBS as usize), clock, 9).await.expect("the reclaimer opens");
    clients.push(reclaiming.clone());
    let reclaim = Runtime::new(Arc::new(clock), Arc::new(reclaiming)).reclaim(reclaimer(), stopped.clone());
    fleet.push(tokio::spawn(async move { format!("{:?}", reclaim.await.expect("the reclaimer runs")) }));

    let began = std::time::Instant::now();
    let mut cuts = Vec::new();
    for at in [100, 200] {
        while started.load(Ordering::SeqCst) < at {
            assert!(began.elapsed() < Duration::from_secs(60), "{at} handler calls within a minute");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let cut = admin(
            &base,
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1"
                .to_string(),
            name.clone(),
        )
        .await;
        cuts.push((began.elapsed(), cut));
    }
    // `drained` reads through every cut: a read that finds its connection down is tried again.
    let drained = tokio::time::timeout(Duration::from_secs(60), main.clone().drained()).await;
    assert!(drained.is_ok(), "the backlog drained within a minute: {:?}", main.errors());
    let drained = began.elapsed();
    let _ = stop.send(());
    let mut tallies = Vec::new();
    for process in fleet {
        tallies.push(process.await.expect("a process of the fleet ends"));
    }
    let errors: Vec<_> = clients.iter().map(StoreClient::errors).collect();
    let (disconnects, reconnects): (u64, u64) =
        (errors.iter().map(|e| e.disconnects).sum(), errors.iter().map(|e| e.reconnects).sum());
    let answered_none: u64 = errors.iter().map(|e| e.count).sum();
    let runs: u64 = calls.lock().unwrap().iter().sum();
    say(&format!(
        "the cut test: {JOBS} jobs, connections cut {:?} (at, how many), drained after {drained:?}; \
         {disconnects} cuts found, {reconnects} reconnects, {answered_none} calls answered as no answer, \
         {runs} handler runs; the fleet's tallies {tallies:?}",
        cuts
    ));
    // The first cut finds all six connections; the second, the fleet's five (the enqueuing
    // client, idle since, finds its cut only at its next call).
    assert!(cuts[0].1 >= 6 && cuts[1].1 >= 5, "every connection of the fleet was cut, twice: {cuts:?}");
    assert!(disconnects >= 6 && reconnects >= disconnects, "each cut was found and mended: {errors:?}");
    let states = states(&main, JOBS).await;
    let calls = calls.lock().unwrap().clone();
    for (job, (state, _)) in states.iter().enumerate() {
        let output = completed_with(state).unwrap_or_else(|| panic!("job {job} completed: {state:?}"));
        let ran = (1..=calls[job]).any(|call| output_id(&output_bytes(JobId(job as u64), call)) == output);
        assert!(ran, "job {job} completed with the output of one of its {} runs", calls[job]);
    }
    let log = read(&main, |store| store.events()).await;
    let terminal = log.iter().filter(|line| line.contains(r#""kind":"terminal""#)).count();
    assert_eq!(terminal as u64, JOBS, "every job ended exactly once");
    judge(&main).await;
}

fn table_of(capacity: usize) -> TableConfig {
    TableConfig { capacity, ..table() }
}

// Proves a pool that cannot work is refused before anything opens, each with a reason: no
// connection, more than the most, a pool on SQLite (its writers take turns), and a backoff that
// waits nothing or shrinks.
#[tokio::test]
async fn a_pool_that_cannot_work_is_refused_plainly() {
    use lease_runtime::store::Connections;
    let sqlite = Place::Sqlite { path: std::env::temp_dir().join(format!("{}.sqlite", unique("lease_pool"))) };
    let postgres = Place::Postgres { url: "postgres://nobody@127.0.0.1:1/none".to_string(), schema: "s".to_string() };
    let cases = [
        (&postgres, Connections::pool(0), "1 to 64 connections, not 0"),
        (&postgres, Connections::pool(65), "not 65"),
        (&sqlite, Connections::pool(2), "SQLite takes one connection, not 2"),
        (&postgres, Connections { backoff_min: Duration::ZERO, ..Connections::pool(2) }, "above zero"),
        (&postgres, Connections { backoff_max: Duration::from_millis(1), ..Connections::pool(2) }, "at least as long"),
    ];
    for (place, connections, says) in cases {
        let refused = StoreClient::open_with(place, table(), HostClock::start(), 1, connections).await;
        let message = refused.expect_err("refused").to_string();
        assert!(message.contains(says), "{connections:?} on {place}: {message}");
    }
    assert!(Connections::pool(64).validate(&postgres).is_ok() && Connections::pool(1).validate(&sqlite).is_ok());
}

/// `GET path` on `addr`: the status line and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("the endpoint accepts");
    stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

// Proves the figures a dashboard scrapes: on SQLite, two jobs of three run to completion (one
// handler each), and the table's figures are read into the gauges; `GET /metrics` then answers
// Prometheus text with every counter, the effect histogram and the gauges, each figure the
// snapshot's; another path is answered 404; an address off loopback is refused.
#[tokio::test]
async fn the_metrics_endpoint_serves_the_figures_in_prometheus_text() {
    use lease_runtime::store::{bind_metrics, serve_metrics};
    let Opened { client, clock, .. } = sqlite("metrics").await.expect("SQLite opens");
    enqueue(&client, 3).await;
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    let handler = |job: Job| async move { Ok(output_bytes(job.id, 1)) };
    let two_done = {
        let client = client.clone();
        async move {
            while client.queue_figures().await.map_or(true, |figures| figures.completed < 2) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let options = WorkerOptions { grace: Span::ZERO, ..WorkerOptions::new(slots(1), worker_config()) };
    let worked = runtime.work(options, handler, two_done).await.expect("the worker runs");
    let metrics = runtime.metrics();
    metrics.set_queue(client.queue_figures().await.expect("the figures read"));
    let listener = bind_metrics("127.0.0.1:0".parse().unwrap()).await.expect("loopback binds");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_metrics(listener, Arc::clone(&metrics)));
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let seen = metrics.snapshot();
    let queue = seen.queue.expect("the figures were set");
    // A completion still in flight at the stop may land after the runtime stopped counting.
    assert!(queue.completed >= worked.completed.max(2), "{queue:?} {worked:?}");
    assert_eq!(queue.completed + queue.queued + queue.leased, 3, "{queue:?}");
    for line in [
        format!("lease_grants_total {}", seen.grants),
        "lease_reclaims_total 0".to_string(),
        format!("lease_effect_seconds_count {}", seen.effect_seconds.count),
        format!("lease_effect_seconds_bucket{{le=\"+Inf\"}} {}", seen.effect_seconds.count),
        format!("lease_jobs{{state=\"completed\"}} {}", queue.completed),
        format!("lease_jobs{{state=\"queued\"}} {}", queue.queued),
        "lease_jobs{state=\"quarantined\"} 0".to_string(),
        "# TYPE lease_oldest_waiting_seconds gauge".to_string(),
    ] {
        assert!(body.lines().any(|got| got == line), "serves {line:?}:\n{body}");
    }
    assert!(seen.grants >= 2 && seen.effect_seconds.count >= 2, "{seen:?}");
    assert_eq!(get(addr, "/other").await.0, "HTTP/1.1 404 Not Found");
    let refused = bind_metrics("0.0.0.0:0".parse().unwrap()).await.expect_err("off loopback");
    assert!(refused.to_string().contains("loopback only"), "{refused}");
}

// Proves an idle fleet costs no durable row: a worker runtime of four slots (polling an empty
// queue every 50 ms each) and a reclaimer (scanning every 250 ms) run over an empty table for
// LEASE_IDLE_SECONDS (2 s by default), and the log holds no new line, nor the tables a new row:
// an empty answer is not written down. The count is printed (set LEASE_IDLE_SECONDS=60 for a
// minute's figure).
async fn an_idle_fleet_writes_nothing(opened: Opened, store: &str) {
    let Opened { client, clock, .. } = opened;
    let seconds: u64 = std::env::var("LEASE_IDLE_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    let rows = |client: &StoreClient| {
        client.call(|store, _| {
            let figures = store.figures()?;
            Ok(store.events()?.len() as u64 + figures.queued + figures.leased + figures.completed)
        })
    };
    let before = rows(&client).await.expect("the log reads");
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    let idle = || tokio::time::sleep(Duration::from_secs(seconds));
    let handler = |job: Job| async move { Ok(output_bytes(job.id, 1)) };
    let work = runtime.work(WorkerOptions::new(slots(4), worker_config()), handler, idle());
    let reclaim = runtime.reclaim(reclaimer(), idle());
    let (worked, reclaimed) = future::join(work, reclaim).await;
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    let written = rows(&client).await.expect("the log reads") - before;
    say(&format!(
        "an idle fleet on {store} (4 workers polling every 50 ms, 1 reclaimer scanning every 250 ms, {} scans): \
         {written} rows in {seconds} s",
        reclaimed.scans
    ));
    assert_eq!((worked.handled, reclaimed.fenced), (0, 0), "nothing to do");
    assert!(reclaimed.scans >= 3 * seconds, "the reclaimer scanned, about 4 times a second: {reclaimed:?}");
    assert_eq!(written, 0, "an idle fleet writes no row");
}

#[tokio::test]
async fn sqlite_an_idle_fleet_writes_nothing() {
    an_idle_fleet_writes_nothing(sqlite("idle").await.unwrap(), "sqlite").await;
}

#[tokio::test]
async fn postgres_an_idle_fleet_writes_nothing() {
    let Some(opened) = postgres("idle").await else { return };
    an_idle_fleet_writes_nothing(opened, "postgres").await;
}

// Proves retention on a running service: 20 jobs run to completion on SQLite while two jobs stay
// leased (their handler hangs); `prune_every`, keeping nothing, 3 jobs a transaction, removes
// every ended job and its lines, batch after batch, and leaves the two live jobs, every line of
// theirs, and a history that passes every checker.
#[tokio::test]
async fn prune_every_removes_the_ended_jobs_of_a_running_service() {
    use lease_runtime::store::{prune_every, Retention};
    let Opened { client, clock, .. } = sqlite("retention").await.expect("SQLite opens");
    enqueue(&client, 22).await;
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    let handler = |job: Job| async move {
        if job.id.0 >= 20 {
            future::pending::<()>().await; // held, heartbeating, for the whole test
        }
        Ok(output_bytes(job.id, 1))
    };
    let (stop, stopped) = futures::channel::oneshot::channel::<()>();
    let options = WorkerOptions { grace: Span::ZERO, ..WorkerOptions::new(slots(4), worker_config()) };
    let work = tokio::spawn(runtime.work(options, handler, futures::FutureExt::map(stopped, drop)));
    let retention = Retention { keep: Duration::ZERO, every: Duration::from_millis(10), batch: 3 };
    tokio::spawn(prune_every(client.clone(), retention));
    let began = std::time::Instant::now();
    loop {
        let figures = client.queue_figures().await.expect("the figures read");
        let lines = client.call(|store, _| store.events()).await.expect("the log reads");
        let only_live = lines.iter().all(|line| line.contains(r#""job":20"#) || line.contains(r#""job":21"#));
        if figures.leased == 2 && figures.queued == 0 && figures.completed == 0 && only_live {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(20), "pruned within 20 s: {figures:?} {lines:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pruned = client.call(|store, _| store.job(JobId(0))).await.unwrap();
    assert!(pruned.is_none(), "an ended job is gone: {pruned:?}");
    for job in [20, 21] {
        let record = client.call(move |store, _| store.job(JobId(job))).await.unwrap().expect("a live job is kept");
        assert!(matches!(record.state, JobState::Leased(_)), "{record:?}");
        let arrived = format!(r#""kind":"arrived","job":{job}"#);
        let lines = client.call(|store, _| store.events()).await.unwrap();
        assert!(lines.iter().any(|line| line.contains(&arrived)), "job {job}'s first line is kept");
    }
    judge(&client).await;
    let _ = stop.send(());
    let _ = work.await;
}

// Proves a pool opens on a schema nobody created yet: its eight handles open at once, and each
// creates the schema if missing (found by `pool_bench`: `CREATE SCHEMA IF NOT EXISTS` raced
// itself, and one handle failed on the catalog's unique index), then serves.
#[tokio::test]
async fn postgres_a_pool_opens_on_a_new_schema() {
    use lease_runtime::store::Connections;
    let url = std::env::var("LEASE_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    for round in 0..3 {
        let name = unique(&format!("lease_runtime_pool_{round}"));
        let _scratch = Scratch::Schema { url: url.clone(), name: name.clone() };
        let place = Place::Postgres { url: url.clone(), schema: name };
        let opened = StoreClient::open_with(&place, table(), HostClock::start(), 1, Connections::pool(8)).await;
        let client = match opened {
            Ok(client) => client,
            Err(error) if std::env::var("LEASE_PG_REQUIRED").is_ok_and(|value| value == "1") => {
                panic!("a pool of 8 opens on a new schema: {error}")
            }
            Err(error) => return say(&format!("the pool test on PostgreSQL: NOT RUN ({error})")),
        };
        enqueue(&client, 3).await;
        assert_eq!(client.queue_figures().await.unwrap().queued, 3);
    }
}
