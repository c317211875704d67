//! A service's seams (feature `store`): a [`Client`] over a `lease-store` store, and the host's
//! [`Clock`].
//!
//! **One thread per handle.** A store handle is synchronous (SQLite; PostgreSQL runs
//! `tokio-postgres` on a private runtime, which panics when opened or called inside another
//! runtime: "Cannot start a runtime from within a runtime"). So a [`StoreClient`] opens its
//! handle on a thread of its own and sends it every call over a channel; the answer comes back on
//! a oneshot channel that the async caller awaits. It therefore works inside `#[tokio::main]`,
//! and on any executor. The thread ends when the last clone of the client is dropped. Calls on
//! one handle take turns, which on SQLite also keeps the log in the order of the clock it reads.
//!
//! **Requests.** Every worker and reclaimer request is served by [`lease_store::serve_worker`]
//! and [`lease_store::serve_reclaimer`], the one mapping from a request to its store call; a
//! worker's request ids are numbered by the client's life ([`lease_store::life_request`]), so a
//! process that restarts with the same worker ids gets no grant of its previous life. A store
//! error is no answer to the runtime (the machine sends the request again); the client counts it
//! and keeps the last ([`StoreClient::errors`]).

use crate::seam::{Client, Clock};
use futures::channel::oneshot;
use futures::future::{self, BoxFuture};
use lease_core::{
    Apply, Enqueued, Epoch, JobId, OpId, OutputId, Owner, ReclaimReply, ReclaimRequest, ReclaimerId, RequestId,
    TableConfig, Time, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::{Entry, Event, Node};
use lease_store::{Caller, Place, Stamp, Store, StoreError};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// One call, run on the handle's thread.
type Call = Box<dyn FnOnce(&mut dyn Store) + Send>;

/// Store errors a client met, which it answered as "no answer".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Errors {
    /// How many.
    pub count: u64,
    /// The last one's message.
    pub last: Option<String>,
}

/// A [`Client`] over one store handle on a thread of its own (see the module doc). Cheap to
/// clone: the clones share the handle.
#[derive(Clone)]
pub struct StoreClient {
    calls: mpsc::Sender<Call>,
    clock: HostClock,
    life: u64,
    errors: Arc<Mutex<Errors>>,
}

impl std::fmt::Debug for StoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreClient").field("life", &self.life).finish_non_exhaustive()
    }
}

impl StoreClient {
    /// A client on `place` (a SQLite file or a PostgreSQL schema, created and migrated if
    /// needed) with `config`'s limits, on the table clock a service uses
    /// ([`lease_store::open`]: the host's, read on the handle's thread, for SQLite; the
    /// server's for PostgreSQL). `life` numbers this process's requests apart from its earlier
    /// lives' (1, then one more per restart; below 2^24).
    pub async fn open(
        place: &Place,
        config: TableConfig,
        clock: HostClock,
        life: u64,
    ) -> Result<StoreClient, StoreError> {
        let place = place.clone();
        StoreClient::start(move || lease_store::open(&place, config), clock, life).await
    }

    /// A client on the handle `open` makes, on the client's thread (so that a PostgreSQL handle's
    /// private runtime never meets the caller's).
    pub async fn start(
        open: impl FnOnce() -> Result<Box<dyn Store + Send>, StoreError> + Send + 'static,
        clock: HostClock,
        life: u64,
    ) -> Result<StoreClient, StoreError> {
        let _checked = lease_store::life_request(life, RequestId(0));
        let (calls, queue) = mpsc::channel::<Call>();
        let (opened, opening) = oneshot::channel();
        std::thread::Builder::new()
            .name("lease-store".to_string())
            .spawn(move || {
                let mut store = match open() {
                    Ok(store) => store,
                    Err(error) => return drop(opened.send(Err(error))),
                };
                let _ = opened.send(Ok(()));
                // Ends when every clone of the client is gone.
                for call in queue {
                    call(&mut *store);
                }
            })
            .map_err(StoreError::Io)?;
        opening.await.map_err(|_| gone())??;
        Ok(StoreClient { calls, clock, life, errors: Arc::default() })
    }

    /// Runs `call` on the handle, at the table's time read on the handle's thread.
    pub fn call<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut dyn Store, Time) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let (answer, answered) = oneshot::channel();
        let clock = self.clock;
        let sent = self.calls.send(Box::new(move |store: &mut dyn Store| {
            let _ = answer.send(call(store, clock.now()));
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

    /// The same handle, numbering a worker's requests by `life` instead: another process's
    /// client, or a restarted one's, on a handle shared with this one (on SQLite, one handle for
    /// every part of a service keeps its log in clock order).
    pub fn with_life(&self, life: u64) -> StoreClient {
        let _checked = lease_store::life_request(life, RequestId(0));
        StoreClient { life, ..self.clone() }
    }

    /// The store errors answered as no answer so far.
    pub fn errors(&self) -> Errors {
        self.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// `call`, an error counted and answered as `None`.
    fn answer<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut dyn Store, Time) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Option<T>> {
        let (answer, errors) = (self.call(call), Arc::clone(&self.errors));
        Box::pin(async move {
            let error = match answer.await {
                Ok(answer) => return Some(answer),
                Err(error) => error,
            };
            let mut errors = errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            errors.count += 1;
            errors.last = Some(error.to_string());
            None
        })
    }
}

/// The error of a call whose handle's thread has stopped.
fn gone() -> StoreError {
    StoreError::Io(std::io::Error::other("the store handle's thread has stopped"))
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

    fn payload(&self, job: JobId) -> BoxFuture<'static, Result<Vec<u8>, String>> {
        let read = self.call(move |store, _| store.payload(job));
        Box::pin(async move { read.await.map_err(|error| error.to_string()) })
    }

    fn line(&self, node: Node, event: Event) -> BoxFuture<'static, ()> {
        let written = self.answer(move |store, now| {
            let mut event = Some(event);
            let mut text = |stamp: Time| Some(Entry { t_us: stamp.0, node, event: event.take()? }.to_json());
            store.append(Stamp::Now(now), &node.to_string(), &mut text)
        });
        Box::pin(async move {
            let _stamp = written.await;
        })
    }
}
