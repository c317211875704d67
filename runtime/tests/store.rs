//! The runtime on real stores, inside `#[tokio::main]`-style runtimes (`#[tokio::test]`), on the
//! host's clock: SQLite (a temporary file) and PostgreSQL (a scratch schema on
//! `LEASE_PG_URL`, by default the local server; a missing server is said plainly, and fails the
//! test under `LEASE_PG_REQUIRED=1`). The same behaviours run on each.

use futures::future::{self, BoxFuture};
use lease_core::{
    Epoch, JobId, JobState, OpId, Outcome, OutputId, ReclaimReply, ReclaimRequest, ReclaimerConfig, ReclaimerId,
    RequestId, Span, TableConfig, WorkerConfig, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::{Event, Node};
use lease_runtime::store::{HostClock, StoreClient};
use lease_runtime::{output_id, Cancel, Client, HandlerError, Job, ReclaimerOptions, Runtime, WorkerOptions};
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
    let config = ReclaimerConfig { scan_every: TTL / 4, request_timeout: TTL / 5, retries_max: 3 };
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

async fn states(client: &StoreClient, count: u64) -> Vec<(JobState, u32)> {
    let records =
        client.call(move |store, _| (0..count).map(|job| store.job(JobId(job))).collect::<Result<Vec<_>, _>>());
    let records = records.await.expect("read the jobs");
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
    let text = client.call(|store, _| store.history()).await.expect("the log reads");
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
}

impl Meddling {
    fn new(inner: &StoreClient) -> Meddling {
        Meddling {
            inner: inner.clone(),
            lost_renewals: None,
            slow_acquires: Duration::ZERO,
            slow_lookups: Duration::ZERO,
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

    fn line(&self, node: Node, event: Event) -> BoxFuture<'static, ()> {
        self.inner.line(node, event)
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
    let slow = Meddling { slow_lookups: Duration::from_secs(2), ..Meddling::new(&client) };
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
    let log = client.call(|store, _| store.events()).await.unwrap();
    let count = |text: &str| log.iter().filter(|line| line.contains(text)).count();
    assert_eq!((count(r#""permanent":true"#), count(r#""kind":"requeued""#)), (2, 0), "{log:#?}");
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
