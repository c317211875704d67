//! A document service on lease-runtime: 1,000 jobs, each naming its document in its payload, a mock
//! dependency called with each job's op id and epoch, two worker processes, the first killed mid-job.
//! Exits 0 only if every job ended exactly once with one effect, of its payload. SQLite (a new file) by
//! default; `--url URL`: PostgreSQL (a new schema, kept); `--metrics 127.0.0.1:9464`: /metrics until 2 s after.
use futures::future::{self, Either, FutureExt};
use lease_core::{JobId, JobState, OpId, Outcome, ReclaimerId, Span, TableConfig, WorkerId};
use lease_runtime::store::{prune_every, serve_metrics_at, HostClock, Retention, StoreClient};
use lease_runtime::{output_id, Job, ReclaimerOptions, Runtime, WorkerOptions};
use lease_store::Place;
use std::{collections::BTreeMap, sync::Arc, sync::Mutex, time::Duration};

const JOBS: u64 = 1_000;

/// The dependency, idempotent by operation id: a repeated call returns the first output. It keeps its effects.
type Renderer = Arc<Mutex<BTreeMap<OpId, Vec<u8>>>>;

async fn render(renderer: Renderer, job: Job) -> Vec<u8> {
    tokio::time::sleep(Duration::from_millis(2)).await;
    let page = format!("{} rendered as {} under {}", String::from_utf8_lossy(&job.payload), job.op, job.epoch);
    renderer.lock().unwrap().entry(job.op).or_insert_with(|| page.into_bytes()).clone()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = format!("document_service_{}", std::process::id());
    let path = std::env::temp_dir().join(format!("{name}.sqlite"));
    let arg = |name: &str| std::env::args().skip_while(|arg| arg != name).nth(1);
    let place = arg("--url").map_or(Place::Sqlite { path: path.clone() }, |url| Place::Postgres { url, schema: name });
    let (ttl, clock) = (Span::from_ms(500), HostClock::start());
    let table = TableConfig { capacity: JOBS as usize, lease_ttl: ttl, batch_max: 32, attempts_max: 3 };
    let client = StoreClient::open(&place, table, clock, 1).await?;
    // One transaction per 32 (`batch_max`); offered again after an error, the ones in answer duplicate.
    let documents = (0..JOBS).map(|job| (JobId(job), format!("doc-{job}.md").into_bytes())).collect();
    let _accepted = client.enqueue_batch(documents).await?;
    let runtime = Runtime::new(Arc::new(clock), Arc::new(client.clone()));
    tokio::spawn(prune_every(client.clone(), Retention::keep(Duration::from_secs(86_400)))); // ended: kept a day
    let (metrics, serving) = (runtime.metrics(), arg("--metrics"));
    if let Some(addr) = &serving {
        serve_metrics_at(addr, client.clone(), metrics.clone()).await?;
    }
    let renderer = Renderer::default();
    let process = |first: u32| {
        let options = WorkerOptions::with_ttl((first..first + 4).map(WorkerId).collect(), ttl);
        let renderer = renderer.clone();
        let handler = move |job: Job| render(renderer.clone(), job).map(Ok);
        runtime.work(options, handler, client.clone().drained()).boxed()
    };
    // The first process is killed after 200 ms, mid-job: its future is dropped.
    let killed = future::select(process(0), Box::pin(tokio::time::sleep(Duration::from_millis(200))));
    let reclaim = runtime.reclaim(ReclaimerOptions::with_ttl(ReclaimerId(0), ttl), client.clone().drained());
    let (killed, survivor, reclaimed) = future::join3(killed, process(4), reclaim).await;
    assert!(matches!(killed, Either::Right(_)), "the first process was killed before the jobs ended");
    let (survivor, reclaimed) = (survivor?, reclaimed?);
    let effects = renderer.lock().unwrap().clone();
    let log = client.call(|store, _| store.events()).await?;
    let applied = log.iter().filter(|line| line.contains(r#""kind":"effect_applied""#)).count() as u64;
    let mut wrong = 0;
    for job in (0..JOBS).map(JobId) {
        let record = client.call(move |store, _| store.job(job)).await?.expect("every job was enqueued");
        let own = format!("doc-{}.md ", job.0);
        let effect = effects.get(&OpId::for_job(job)).filter(|bytes| bytes.starts_with(own.as_bytes()));
        let completed = effect.map(|bytes| Outcome::Completed { output: output_id(bytes) });
        wrong += u64::from(!matches!(record.state, JobState::Terminal(ended) if Some(ended.outcome) == completed));
    }
    println!("{JOBS} jobs on {place}: {} effects, {applied} applied", effects.len());
    metrics.set_queue(client.queue_figures().await?);
    println!("{} leases of the killed one reclaimed; the survivor completed {}", reclaimed.fenced, survivor.completed);
    println!("metrics: {}", metrics.snapshot());
    if let Some(addr) = serving {
        println!("serving them at http://{addr}/metrics for 2 s more");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let _removed = std::fs::remove_file(&path);
    if wrong > 0 || applied != JOBS || effects.len() as u64 != JOBS {
        println!("FAILED: {wrong} jobs did not end exactly once with their one effect, of their payload");
        std::process::exit(1);
    }
    println!("held: every job ended exactly once, with one effect, rendered from its payload");
    Ok(())
}
