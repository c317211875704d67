//! A service's seams (feature `store`): a [`Client`] over a `lease-store` store, and the host's
//! [`Clock`].
//!
//! **One thread per handle.** A store handle is synchronous (SQLite; PostgreSQL runs
//! `tokio-postgres` on a private runtime, which panics when opened or called inside another
//! runtime: "Cannot start a runtime from within a runtime"). So a [`StoreClient`] opens each
//! handle on a thread of its own and sends it every call over a channel; the answer comes back on
//! a oneshot channel that the async caller awaits. It therefore works inside `#[tokio::main]`,
//! and on any executor. The threads end when the last clone of the client is dropped.
//!
//! **A pool, and reconnects.** On PostgreSQL a client holds [`Connections::pool`] handles, each
//! with its own connection, which take the calls in turn from one queue: the calls of many slots
//! run side by side. On SQLite it holds one (its writers take turns in any case, and one handle
//! keeps the log in the order of the clock it reads). When a call finds its connection cut
//! ([`StoreError::is_disconnect`]: the server terminated it, restarted, or the network dropped
//! it), that call is answered as no answer, as a lost reply is, and the handle connects again at
//! once, then with a backoff that doubles from [`Connections::backoff_min`] to
//! [`Connections::backoff_max`] for as long as the server refuses. While every handle is down,
//! calls are answered at once with [`StoreError::Disconnected`], so nothing piles up; the
//! runtime's machines send their requests again on their own timers. Nothing is lost by this: an
//! answer lost with its commit is what the protocol already survives (a retried acquire is
//! granted the same lease, a record or completion sent again is answered as the first).
//!
//! **Requests.** Every worker and reclaimer request is served by [`lease_store::serve_worker`]
//! and [`lease_store::serve_reclaimer`], the one mapping from a request to its store call; a
//! worker's request ids are numbered by the client's life ([`lease_store::life_request`]), so a
//! process that restarts with the same worker ids gets no grant of its previous life, and no
//! answer meant for one (a copy of an acquire whose grant is spent gets nothing). A life is one
//! [`crate::Runtime::work`] call: its machines number their requests from 0, so a worker loop
//! started again in the same process takes a new life ([`StoreClient::with_life`]). A store
//! error is no answer to the runtime (the machine sends the request again); the client counts it
//! and keeps the last ([`StoreClient::errors`]).

use crate::seam::{Client, Clock, Started};
use crate::{Metrics, QueueFigures};
use futures::channel::oneshot;
use futures::future::{self, BoxFuture, FutureExt};
use lease_core::{
    Apply, Enqueued, Epoch, JobId, OpId, OutputId, Owner, ReclaimReply, ReclaimRequest, ReclaimerId, RequestId, Span,
    TableConfig, Time, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::{Entry, Event, Node};
use lease_store::{Caller, Place, Stamp, Store, StoreError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The host's clock in microseconds since the Unix epoch, made monotonic
/// ([`lease_store::HostClock`]); it sleeps on tokio's timer, so sleeping needs a tokio
/// runtime with its timer enabled.
#[derive(Debug, Clone, Copy)]
pub struct HostClock(lease_store::HostClock);

impl HostClock {
    /// Starts the clock now.
    pub fn start() -> HostClock {
        HostClock(lease_store::HostClock::start())
    }
}

impl Clock for HostClock {
    fn now(&self) -> Time {
        self.0.now()
    }

    fn sleep_until(&self, at: Time) -> BoxFuture<'static, ()> {
        let wait = Duration::from_micros(at.saturating_since(self.0.now()).as_us());
        Box::pin(tokio::time::sleep(wait))
    }
}

/// One call, run on a handle's thread: on its store, or on none while the connection is down.
/// It says whether it found the connection cut.
type Call = Box<dyn FnOnce(Option<&mut dyn Store>) -> bool + Send>;

/// How a handle is opened: again, each time its connection is made again.
type Open = Arc<dyn Fn() -> Result<Box<dyn Store + Send>, StoreError> + Send + Sync>;

/// Store errors a client met, which it answered as "no answer", and its connections' story.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Errors {
    /// How many.
    pub count: u64,
    /// The last one's message.
    pub last: Option<String>,
    /// Connections found cut.
    pub disconnects: u64,
    /// Connections made again.
    pub reconnects: u64,
    /// Attempts to connect again that failed (each waited its backoff).
    pub failed_reconnects: u64,
}

/// How a [`StoreClient`] holds its connections (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connections {
    /// Handles, each on a connection and a thread of its own (PostgreSQL: 1 to
    /// [`Connections::POOL_MAX`]; SQLite: 1).
    pub pool: usize,
    /// The wait after a failed attempt to connect again, doubled on each failure...
    pub backoff_min: Duration,
    /// ...up to this.
    pub backoff_max: Duration,
}

impl Default for Connections {
    /// One handle; a backoff from 50 ms to 2 s.
    fn default() -> Connections {
        Connections { pool: 1, backoff_min: Duration::from_millis(50), backoff_max: Duration::from_secs(2) }
    }
}

impl Connections {
    /// The most handles a client holds.
    pub const POOL_MAX: usize = 64;

    /// A pool of `size` handles, with the default backoff.
    pub fn pool(size: usize) -> Connections {
        Connections { pool: size, ..Connections::default() }
    }

    /// Refuses a pool that cannot work on `place`.
    pub fn validate(&self, place: &Place) -> Result<(), StoreError> {
        let refuse = |why: String| Err(StoreError::Pool(why));
        self.validate_pool()?;
        if self.pool > 1 && matches!(place, Place::Sqlite { .. }) {
            return refuse(format!(
                "SQLite takes one connection, not {}: its writers take turns, and one handle keeps its log \
                 in clock order",
                self.pool
            ));
        }
        Ok(())
    }

    /// Refuses a pool that cannot work on any store: its size and its backoff.
    fn validate_pool(&self) -> Result<(), StoreError> {
        if self.pool == 0 || self.pool > Connections::POOL_MAX {
            let why = format!("a pool holds 1 to {} connections, not {}", Connections::POOL_MAX, self.pool);
            return Err(StoreError::Pool(why));
        }
        if self.backoff_min.is_zero() || self.backoff_min > self.backoff_max {
            return Err(StoreError::Pool(format!(
                "the reconnect backoff runs from a wait above zero to one at least as long: {:?} to {:?}",
                self.backoff_min, self.backoff_max
            )));
        }
        Ok(())
    }
}

/// What a client's handles share.
struct Shared {
    errors: Mutex<Errors>,
    /// Handles whose connection is up.
    up: AtomicUsize,
}

impl Shared {
    fn errors(&self) -> MutexGuard<'_, Errors> {
        self.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A [`Client`] over a pool of store handles, each on a thread of its own (see the module doc).
/// Cheap to clone: the clones share the handles.
#[derive(Clone)]
pub struct StoreClient {
    calls: mpsc::Sender<Call>,
    clock: HostClock,
    life: u64,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for StoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreClient").field("life", &self.life).finish_non_exhaustive()
    }
}

impl StoreClient {
    /// A client of one handle on `place` (a SQLite file or a PostgreSQL schema, created and
    /// migrated if needed) with `config`'s limits, on the table clock a service uses
    /// ([`lease_store::open`]: the host's, read on the handle's thread, for SQLite; the
    /// server's for PostgreSQL). `life` numbers this process's requests apart from its earlier
    /// lives' (1, then one more per restart; below 2^24).
    pub async fn open(
        place: &Place,
        config: TableConfig,
        clock: HostClock,
        life: u64,
    ) -> Result<StoreClient, StoreError> {
        StoreClient::open_with(place, config, clock, life, Connections::default()).await
    }

    /// [`StoreClient::open`], holding `connections`' pool.
    pub async fn open_with(
        place: &Place,
        config: TableConfig,
        clock: HostClock,
        life: u64,
        connections: Connections,
    ) -> Result<StoreClient, StoreError> {
        connections.validate(place)?;
        let place = place.clone();
        StoreClient::start_with(move || lease_store::open(&place, config), clock, life, connections).await
    }

    /// A client of one handle that `open` makes, on the client's thread (so that a PostgreSQL
    /// handle's private runtime never meets the caller's); `open` makes it again after a cut.
    pub async fn start(
        open: impl Fn() -> Result<Box<dyn Store + Send>, StoreError> + Send + Sync + 'static,
        clock: HostClock,
        life: u64,
    ) -> Result<StoreClient, StoreError> {
        StoreClient::start_with(open, clock, life, Connections::default()).await
    }

    /// A client of `connections.pool` handles that `open` makes, each on a thread of its own.
    /// Fails if any of them cannot open.
    pub async fn start_with(
        open: impl Fn() -> Result<Box<dyn Store + Send>, StoreError> + Send + Sync + 'static,
        clock: HostClock,
        life: u64,
        connections: Connections,
    ) -> Result<StoreClient, StoreError> {
        let _checked = lease_store::life_request(life, RequestId(0));
        connections.validate_pool()?;
        let open: Open = Arc::new(open);
        let (calls, queue) = mpsc::channel::<Call>();
        let queue = Arc::new(Mutex::new(queue));
        let shared = Arc::new(Shared { errors: Mutex::default(), up: AtomicUsize::new(0) });
        let mut opening = Vec::with_capacity(connections.pool);
        for index in 0..connections.pool {
            let (opened, answer) = oneshot::channel();
            let (open, queue, shared) = (Arc::clone(&open), Arc::clone(&queue), Arc::clone(&shared));
            std::thread::Builder::new()
                .name(format!("lease-store-{index}"))
                .spawn(move || {
                    let store = match open() {
                        Ok(store) => store,
                        Err(error) => return drop(opened.send(Err(error))),
                    };
                    shared.up.fetch_add(1, Ordering::SeqCst);
                    let _ = opened.send(Ok(()));
                    Handle { open, queue, shared, connections, store: Some(store) }.serve();
                })
                .map_err(StoreError::Io)?;
            opening.push(answer);
        }
        for answer in opening {
            answer.await.map_err(|_| gone())??;
        }
        Ok(StoreClient { calls, clock, life, shared })
    }

    /// Runs `call` on the handle, at the table's time read on the handle's thread.
    pub fn call<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut dyn Store, Time) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let (answer, answered) = oneshot::channel();
        let clock = self.clock;
        let sent = self.calls.send(Box::new(move |store: Option<&mut dyn Store>| {
            let Some(store) = store else {
                let _ = answer.send(Err(StoreError::Disconnected("every connection is down".to_string())));
                return false;
            };
            let answered = call(store, clock.now());
            let cut = matches!(&answered, Err(error) if error.is_disconnect());
            let _ = answer.send(answered);
            cut
        }));
        if sent.is_err() {
            return Box::pin(future::ready(Err(gone())));
        }
        Box::pin(async move { answered.await.map_err(|_| gone())? })
    }

    /// Accepts `job` into the queue with no payload, unless known or at capacity.
    pub fn enqueue(&self, job: JobId) -> BoxFuture<'static, Result<Enqueued, StoreError>> {
        self.enqueue_with(job, Vec::new())
    }

    /// Accepts `job` into the queue with `payload` (the bytes its handler receives as
    /// [`crate::Job::payload`], at most [`lease_store::PAYLOAD_MAX`]), unless known or at
    /// capacity. The job id is the caller's idempotency key: an enqueue of a known job is
    /// accepted once ([`Enqueued::Duplicate`] after), and keeps the first payload.
    pub fn enqueue_with(&self, job: JobId, payload: Vec<u8>) -> BoxFuture<'static, Result<Enqueued, StoreError>> {
        self.call(move |store, now| {
            store.set_caller(Caller::default());
            store.enqueue_with(now, job, &payload)
        })
    }

    /// Accepts many jobs, each with its payload (empty for none), as that many
    /// [`StoreClient::enqueue_with`] calls would, in the order given, one transaction for each
    /// `batch_max` of them ([`lease_store::TableStore::enqueue_batch`]): a burst holds the
    /// queue's whole lock for a turn per batch, not one per job, so it goes in while a busy
    /// fleet waits for that lock behind it. The answers are in the order of `jobs`.
    ///
    /// An error may come after some batches committed: offer the same jobs again, and those
    /// already in answer [`Enqueued::Duplicate`] (the job id is the idempotency key).
    pub fn enqueue_batch(&self, jobs: Vec<(JobId, Vec<u8>)>) -> BoxFuture<'static, Result<Vec<Enqueued>, StoreError>> {
        if jobs.is_empty() {
            return Box::pin(future::ready(Ok(Vec::new())));
        }
        self.call(move |store, now| {
            store.set_caller(Caller::default());
            let mut answers = Vec::with_capacity(jobs.len());
            for chunk in jobs.chunks(store.config().batch_max) {
                answers.extend(store.enqueue_batch(now, chunk)?);
            }
            Ok(answers)
        })
    }

    /// The same handle, numbering a worker's requests by `life` instead: another process's
    /// client, or a restarted one's, on a handle shared with this one (on SQLite, one handle for
    /// every part of a service keeps its log in clock order).
    pub fn with_life(&self, life: u64) -> StoreClient {
        let _checked = lease_store::life_request(life, RequestId(0));
        StoreClient { life, ..self.clone() }
    }

    /// The store errors answered as no answer so far, and the connections cut and made again.
    pub fn errors(&self) -> Errors {
        self.shared.errors().clone()
    }

    /// `call`, an error counted and answered as `None`.
    fn answer<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut dyn Store, Time) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Option<T>> {
        let (answer, shared) = (self.call(call), Arc::clone(&self.shared));
        Box::pin(async move {
            let error = match answer.await {
                Ok(answer) => return Some(answer),
                Err(error) => error,
            };
            let mut errors = shared.errors();
            errors.count += 1;
            errors.last = Some(error.to_string());
            None
        })
    }
}

/// One handle of a client's pool, on its thread.
struct Handle {
    open: Open,
    queue: Arc<Mutex<mpsc::Receiver<Call>>>,
    shared: Arc<Shared>,
    connections: Connections,
    /// `None` while its connection is down.
    store: Option<Box<dyn Store + Send>>,
}

impl Handle {
    /// Serves calls until every clone of the client is gone, connecting again after a cut.
    fn serve(mut self) {
        let mut backoff = self.connections.backoff_min;
        let mut retry_at = Instant::now();
        loop {
            if let Some(store) = self.store.as_deref_mut() {
                let Ok(call) = lock(&self.queue).recv() else {
                    // Every clone of the client is gone. Up no more: a handle still down then
                    // stops trying, rather than reconnect for ever.
                    self.shared.up.fetch_sub(1, Ordering::SeqCst);
                    return;
                };
                if call(Some(store as &mut dyn Store)) {
                    // Cut: no later call of this handle goes out on it. Connect again at once.
                    self.store = None;
                    self.shared.up.fetch_sub(1, Ordering::SeqCst);
                    self.shared.errors().disconnects += 1;
                    retry_at = Instant::now();
                }
                continue;
            }
            let wait = retry_at.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                if self.shared.up.load(Ordering::SeqCst) > 0 {
                    // Another handle serves meanwhile: leave the calls to it.
                    std::thread::sleep(wait);
                    continue;
                }
                // Every handle is down: answer at once rather than let calls pile up.
                match lock(&self.queue).recv_timeout(wait) {
                    Ok(call) => drop(call(None)),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                continue;
            }
            match (self.open)() {
                Ok(store) => {
                    self.store = Some(store);
                    self.shared.up.fetch_add(1, Ordering::SeqCst);
                    self.shared.errors().reconnects += 1;
                    backoff = self.connections.backoff_min;
                }
                Err(error) => {
                    let mut errors = self.shared.errors();
                    errors.failed_reconnects += 1;
                    errors.last = Some(error.to_string());
                    retry_at = Instant::now() + backoff;
                    backoff = (backoff * 2).min(self.connections.backoff_max);
                }
            }
        }
    }
}

/// The queue's lock: a handle that panicked mid-call leaves the queue as it was.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The error of a call whose handle's thread has stopped.
fn gone() -> StoreError {
    StoreError::Io(std::io::Error::other("the store handle's thread has stopped"))
}

/// `serve` over `items` in chunks of at most the table's `batch_max`, one transaction each: the
/// answers, in order.
fn in_chunks<I, A>(
    store: &mut dyn Store,
    items: &[I],
    mut serve: impl FnMut(&mut dyn Store, &[I]) -> Result<Vec<A>, StoreError>,
) -> Result<Vec<A>, StoreError> {
    let max = store.config().batch_max.max(1);
    let mut answers = Vec::with_capacity(items.len());
    for chunk in items.chunks(max) {
        answers.extend(serve(&mut *store, chunk)?);
    }
    Ok(answers)
}

/// The `count` answers of one batched store call, each its own future (they resolve together).
fn each_of<T: Clone + Send + Sync + 'static>(
    answered: BoxFuture<'static, Option<Vec<T>>>,
    count: usize,
) -> Vec<BoxFuture<'static, Option<T>>> {
    let shared = answered.shared();
    (0..count)
        .map(|at| {
            let shared = shared.clone();
            Box::pin(async move { shared.await.and_then(|answers| answers.get(at).cloned()) }) as BoxFuture<'static, _>
        })
        .collect()
}

impl Client for StoreClient {
    fn worker(
        &self,
        worker: WorkerId,
        id: RequestId,
        request: WorkerRequest,
    ) -> BoxFuture<'static, Option<WorkerReply>> {
        let id = lease_store::life_request(self.life, id);
        self.answer(move |store, now| Ok(lease_store::serve_worker(store, now, worker, id, request)?.reply))
    }

    fn worker_batch(
        &self,
        calls: Vec<(WorkerId, RequestId, WorkerRequest)>,
    ) -> Vec<BoxFuture<'static, Option<WorkerReply>>> {
        let count = calls.len();
        let life = self.life;
        let calls: Vec<_> = calls
            .into_iter()
            .map(|(worker, id, request)| (worker, lease_store::life_request(life, id), request))
            .collect();
        let answered = self.answer(move |store, now| {
            in_chunks(store, &calls, |store, chunk| {
                let served = lease_store::serve_worker_batch(store, now, chunk)?;
                Ok(served.into_iter().map(|served| served.reply).collect())
            })
        });
        each_of(answered, count)
    }

    fn record_batch(&self, records: Vec<(WorkerId, OpId, Epoch, OutputId)>) -> Vec<BoxFuture<'static, Option<Apply>>> {
        let count = records.len();
        let answered =
            self.answer(move |store, now| in_chunks(store, &records, |store, chunk| store.apply_as(now, chunk)));
        each_of(answered, count)
    }

    fn record(&self, worker: WorkerId, op: OpId, epoch: Epoch, output: OutputId) -> BoxFuture<'static, Option<Apply>> {
        self.answer(move |store, now| {
            // The output is recorded under the worker's name, as the dependency's write for it.
            store.set_caller(Caller { from: Some(Owner::Worker(worker)), batch: None });
            store.apply(now, op, epoch, output)
        })
    }

    fn reclaimer(
        &self,
        reclaimer: ReclaimerId,
        _id: RequestId,
        request: ReclaimRequest,
    ) -> BoxFuture<'static, Option<ReclaimReply>> {
        self.answer(move |store, now| Ok(lease_store::serve_reclaimer(store, now, reclaimer, request)?.reply))
    }

    fn reclaimer_batch(
        &self,
        reclaimer: ReclaimerId,
        calls: Vec<(RequestId, ReclaimRequest)>,
    ) -> Vec<BoxFuture<'static, Option<ReclaimReply>>> {
        let count = calls.len();
        let requests: Vec<ReclaimRequest> = calls.into_iter().map(|(_, request)| request).collect();
        let answered = self.answer(move |store, now| {
            let served = lease_store::serve_reclaimer_batch(store, now, reclaimer, &requests)?;
            Ok(served.into_iter().map(|served| served.reply).collect())
        });
        each_of(answered, count)
    }

    fn line(&self, node: Node, event: Event) -> BoxFuture<'static, bool> {
        let written = self.answer(move |store, now| {
            let mut event = Some(event);
            let mut text = |stamp: Time| Some(Entry { t_us: stamp.0, node, event: event.take()? }.to_json());
            store.append(Stamp::Now(now), &node.to_string(), &mut text)
        });
        Box::pin(async move { written.await.is_some() })
    }

    fn lines(&self, lines: Vec<(Node, Event)>) -> BoxFuture<'static, bool> {
        let written = self.answer(move |store, now| {
            let mut lines = Some(lines);
            let mut texts = |stamp: Time| {
                let lines = lines.take().unwrap_or_default();
                let text =
                    |(node, event): (Node, Event)| (node.to_string(), Entry { t_us: stamp.0, node, event }.to_json());
                lines.into_iter().map(text).collect()
            };
            store.append_all(now, &mut texts)
        });
        Box::pin(async move { written.await.is_some() })
    }

    /// The lines in one transaction (`TableStore::append_started`), then the payloads of those
    /// written in one read (`TableStore::payloads`), on one turn of the store's connection. A
    /// payload read that fails makes the lines unknown: they committed, and the runtime sends
    /// their effects again, as after a write whose answer was lost.
    fn started(&self, lines: Vec<(Node, Event)>) -> BoxFuture<'static, Option<Vec<Started>>> {
        let written = self.answer(move |store, now| {
            let leases: Vec<(JobId, Epoch)> = lines
                .iter()
                .map(|(_, event)| match *event {
                    Event::Executing { job, epoch, .. } => Ok((job, epoch)),
                    ref other => Err(StoreError::Corrupt(format!("a started effect's line is {other:?}"))),
                })
                .collect::<Result<_, _>>()?;
            let mut text = |stamp: Time, index: usize| {
                let (node, event) = lines[index].clone();
                (node.to_string(), Entry { t_us: stamp.0, node, event }.to_json())
            };
            let (_, written) = store.append_started(now, &leases, &mut text)?;
            let jobs: Vec<JobId> =
                leases.iter().zip(&written).filter(|(_, &written)| written).map(|(&(job, _), _)| job).collect();
            let payloads = store.payloads(&jobs)?;
            if payloads.len() != jobs.len() {
                return Err(StoreError::Corrupt(format!("{} payloads read for {} jobs", payloads.len(), jobs.len())));
            }
            let mut payloads = payloads.into_iter();
            let started = written.iter().map(|&written| match written {
                true => payloads.next().map_or(Started::Refused, Started::Written),
                false => Started::Refused,
            });
            Ok(started.collect())
        });
        Box::pin(written)
    }
}

impl StoreClient {
    /// The table's figures now ([`lease_store::TableStore::figures`]): its jobs by state, and
    /// how long the longest-waiting queued job has waited, by the host's clock against the
    /// table's (on PostgreSQL the server's: equal up to the skew between the two).
    pub async fn queue_figures(&self) -> Result<QueueFigures, StoreError> {
        let figures = self.call(|store, _| store.figures()).await?;
        let now = self.clock.now();
        Ok(QueueFigures {
            queued: figures.queued,
            leased: figures.leased,
            completed: figures.completed,
            dead_lettered: figures.dead_lettered,
            quarantined: figures.quarantined,
            oldest_waiting_us: figures.oldest_queued_at.map(|at| now.saturating_since(at).as_us()),
        })
    }
}

/// Reads the table's figures into `metrics`' gauges every `every`, for ever: run it beside the
/// runtimes. A read that fails is skipped, and the gauges keep their last values.
pub async fn watch_queue(client: StoreClient, metrics: Arc<Metrics>, every: Duration) {
    loop {
        if let Ok(figures) = client.queue_figures().await {
            metrics.set_queue(figures);
        }
        tokio::time::sleep(every).await;
    }
}

/// Binds `addr` for [`serve_metrics`]: a loopback address only (the figures name the queue's
/// load to whoever asks; expose them further through a proxy that authenticates).
pub async fn bind_metrics(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, std::io::Error> {
    if !addr.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the metrics endpoint listens on loopback only (127.0.0.1 or ::1), not {addr}"),
        ));
    }
    tokio::net::TcpListener::bind(addr).await
}

/// Serves `metrics`' [`crate::Snapshot::prometheus`] at `GET /metrics` on `listener`, for ever,
/// one connection at a time (a scrape is one small read); any other request is answered 404.
pub async fn serve_metrics(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let mut request = [0u8; 1024];
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut request)).await;
        let Ok(Ok(len)) = read else { continue };
        let asked = String::from_utf8_lossy(&request[..len]);
        let response = match asked.split_whitespace().take(2).collect::<Vec<_>>()[..] {
            ["GET", "/metrics"] => {
                let body = metrics.snapshot().prometheus();
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                )
            }
            _ => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string(),
        };
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

impl StoreClient {
    /// Resolves once no accepted job is left to end (the backlog read every 20 ms; a read that
    /// fails is tried again): a shutdown signal for a run of a fixed batch of jobs.
    pub async fn drained(self) {
        while !self.call(|store, _| store.backlog()).await.is_ok_and(|backlog| backlog == 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Serves `metrics` at `http://ADDR/metrics` ([`bind_metrics`]: loopback only) and keeps its
/// gauges fresh from `client` every 250 ms ([`watch_queue`]), both on tasks of the current tokio
/// runtime, until it stops. Fails if `addr` is no loopback address or cannot be bound.
pub async fn serve_metrics_at(addr: &str, client: StoreClient, metrics: Arc<Metrics>) -> Result<(), std::io::Error> {
    let invalid = |error| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("metrics at {addr}: {error}"));
    let addr: std::net::SocketAddr = addr.parse().map_err(invalid)?;
    let listener = bind_metrics(addr).await?;
    tokio::spawn(serve_metrics(listener, Arc::clone(&metrics)));
    tokio::spawn(watch_queue(client, metrics, Duration::from_millis(250)));
    Ok(())
}

/// How long ended jobs and their history lines are kept, and how a client prunes them
/// ([`prune_every`], [`lease_store::TableStore::prune`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Jobs that ended longer ago than this are pruned, with their lines.
    pub keep: Duration,
    /// How often to prune.
    pub every: Duration,
    /// The most jobs (and the most lines of no one job) one prune's transaction removes: a prune
    /// is a run of short transactions, never one long one.
    pub batch: usize,
}

impl Retention {
    /// Keeps ended jobs for `keep`, pruning every minute, 500 jobs a transaction.
    pub fn keep(keep: Duration) -> Retention {
        Retention { keep, every: Duration::from_secs(60), batch: 500 }
    }
}

/// Prunes, every `retention.every`, the jobs that ended more than `retention.keep` ago (by the
/// host's clock against the table's), in batches of `retention.batch` until a batch finds
/// nothing, for ever: run it beside the runtimes. A failed prune is tried at the next turn.
/// Returns at once, having pruned nothing, on a store that keeps nothing durable (in memory).
pub async fn prune_every(client: StoreClient, retention: Retention) {
    let (keep, batch) = (Span::from_us(u64::try_from(retention.keep.as_micros()).unwrap_or(u64::MAX)), retention.batch);
    loop {
        let before = Time(client.clock.now().0.saturating_sub(keep.as_us()));
        loop {
            match client.call(move |store, _| store.prune(before, batch)).await {
                Ok(pruned) if pruned.jobs + pruned.lines > 0 => continue,
                Err(StoreError::NotDurable) => return,
                _ => break,
            }
        }
        tokio::time::sleep(retention.every).await;
    }
}
