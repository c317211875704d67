//! # lease-runtime: the loop a service runs, and the code the simulator sweeps
//!
//! A service writes a handler, an async function from a [`Job`] to its output's bytes; the
//! runtime does the protocol around it, by driving `lease-core`'s sans-IO state machines: it
//! acquires, looks the operation up and adopts a recorded output instead of running the handler,
//! heartbeats while the handler runs however long it takes, self-fences before its local
//! estimate of expiry (the handler's [`Cancel`] fires and nothing is recorded under the lost
//! lease), records the output under the epoch, and completes. A reclaimer runtime drives the
//! reclaimer beside it.
//!
//! A handler whose dependency is *fenced* (it takes the operation id and the epoch, and records
//! its own output in the ledger atomically with the effect, so the storage checks the fencing
//! token) returns the ledger's answer instead, [`Output::Recorded`]: the runtime records nothing,
//! and the machine completes, or abandons the lease if the ledger answered `fenced` or
//! `conflict`. A dependency that names its output itself (a receipt id) returns
//! [`Output::Named`], which the runtime records.
//!
//! ```no_run
//! # async fn service(runtime: lease_runtime::Runtime, config: lease_core::WorkerConfig) {
//! use lease_runtime::{Job, WorkerOptions};
//! let options = WorkerOptions::new((0..4).map(lease_core::WorkerId).collect(), config);
//! let handler = |job: Job| async move {
//!     // Hand job.op (the idempotency key) and job.epoch (the fencing token) to the dependency.
//!     Ok(format!("rendered {}", job.id).into_bytes())
//! };
//! let tally = runtime.work(options, handler, futures::future::pending()).await;
//! # }
//! ```
//!
//! **The contract.** The runtime is written against three seams ([`Clock`], [`Client`], [`Hook`])
//! and the `futures` crate only: no executor, no spawn, no `cfg(madsim)`, no tokio in its loop,
//! no simulator branch. A service runs it on tokio over a `lease-store` store
//! ([`store::StoreClient`], [`store::HostClock`], feature `store`); the simulator runs it on
//! madsim, over its network, with its node's drifting clock and a hook that stalls and crashes at
//! protocol points (`lease-sim`'s `node/runtime.rs`: its worker and reclaimer nodes are this
//! runtime, and its handler is the world's fenced dependency). One future drives every job in
//! flight of a process ([`WorkerOptions::slots`],
//! one worker machine each).
//!
//! See [`worker`] for the loop, the protocol around the handler and the graceful shutdown, and
//! [`reclaimer`] for the reclaimer's. A whole service, on SQLite or PostgreSQL, with a worker
//! killed mid-job and every job checked to end once: `cargo run --release -p lease-runtime
//! --example document_service [-- --url URL] [--metrics 127.0.0.1:9464]` (80 lines).
//!
//! `lease-live`'s worker and reclaimer processes run this runtime, on [`store::StoreClient`],
//! with a fenced dependency as their handler and the live run's strike points as their hook; so
//! does the `service` example ([`service`]: crashes after the effect and a lost answer injected,
//! every job judged at the end).
//!
//! **What a handler gets and says.** A job's payload is the bytes it was enqueued with
//! ([`store::StoreClient::enqueue_with`], or many at once, in one transaction per `batch_max`:
//! [`store::StoreClient::enqueue_batch`]), read before the handler runs. A
//! [`HandlerError::Retryable`] requeues the job (its attempt counted); a
//! [`HandlerError::Permanent`] dead-letters it at once (`lease-core`'s `dead_letter` request),
//! and either says why on the history. At shutdown, a lease under which nothing ran goes back to
//! the queue, said on the history too (see [`worker`]).

pub mod job;
pub mod metrics;
pub mod reclaimer;
pub mod seam;
#[cfg(feature = "store")]
pub mod service;
#[cfg(feature = "store")]
pub mod store;
pub mod worker;

pub use job::{output_id, Cancel, Handler, HandlerError, Job, Outcome, Output};
pub use metrics::{Metrics, QueueFigures, Snapshot};
pub use reclaimer::{ReclaimTally, ReclaimerOptions, WAVE};
pub use seam::{Client, Clock, Hook, NoHook, Point, Started};
pub use worker::{WorkerOptions, WorkerTally, SHUTDOWN_RELEASE, SLOTS_MAX};

use lease_core::{ConfigError, Span, WorkerId};
use std::sync::Arc;

/// The seams a runtime runs on: a clock, a client and a hook, shared by every worker and
/// reclaimer runtime of a process. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    clock: Arc<dyn Clock>,
    client: Arc<dyn Client>,
    hook: Arc<dyn Hook>,
    metrics: Arc<Metrics>,
}

impl Runtime {
    /// A runtime on `clock` and `client`, whose protocol points pass at once ([`NoHook`]).
    pub fn new(clock: Arc<dyn Clock>, client: Arc<dyn Client>) -> Runtime {
        Runtime { clock, client, hook: Arc::new(NoHook), metrics: Arc::default() }
    }

    /// The same runtime counting into `metrics` (another runtime's, say, for one figure per
    /// process). A runtime's clones share its metrics.
    pub fn with_metrics(self, metrics: Arc<Metrics>) -> Runtime {
        Runtime { metrics, ..self }
    }

    /// What this runtime and its clones did ([`metrics`]).
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// The same runtime with `hook` at its protocol points (the simulator's faults).
    pub fn with_hook(self, hook: Arc<dyn Hook>) -> Runtime {
        Runtime { hook, ..self }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("now", &self.clock.now()).finish_non_exhaustive()
    }
}

/// Planted bugs in a runtime's machines. Every build a service makes has none: only
/// [`Planted::NONE`] can be named, unless the `planted-bugs` feature is on (the simulator and the
/// live runner turn it on, to prove that their checkers catch each bug through the very code a
/// service runs). A field of the options rather than a constructor's argument, so that no public
/// constructor takes bug flags and the options still take `..WorkerOptions::new(…)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planted(pub(crate) lease_core::Bugs);

impl Planted {
    /// No planted bug.
    pub const NONE: Planted = Planted(lease_core::Bugs::NONE);

    /// `bugs`, planted.
    #[cfg(feature = "planted-bugs")]
    pub fn new(bugs: lease_core::Bugs) -> Planted {
        Planted(bugs)
    }
}

/// Options a runtime cannot run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// A timing the core refuses.
    #[error(transparent)]
    Timing(#[from] ConfigError),
    /// No slot, or more than [`SLOTS_MAX`].
    #[error("a worker runtime drives 1 to {SLOTS_MAX} slots, not {count}")]
    Slots {
        /// The slots asked for.
        count: usize,
    },
    /// One worker id named for two slots: the table would take their acquires for one worker's.
    #[error("worker {0} is named for two slots: each slot is a worker of its own")]
    SlotTwice(WorkerId),
    /// A batch of no request, or of more than [`SLOTS_MAX`].
    #[error("a worker runtime batches 1 to {SLOTS_MAX} requests of a kind per call, not {batch}")]
    Batch {
        /// The batch asked for.
        batch: usize,
    },
    /// A batch's wait longer than half a request's timeout.
    #[error("a worker runtime's batches wait at most half a request's timeout ({request_timeout}), not {linger}")]
    Linger {
        /// The wait asked for.
        linger: Span,
        /// The machines' request timeout.
        request_timeout: Span,
    },
    /// More handlers at once than slots.
    #[error("a worker runtime runs 1 to its {slots} slots' handlers at once (0: every slot), not {handlers}")]
    Handlers {
        /// The handlers asked for.
        handlers: usize,
        /// The slots.
        slots: usize,
    },
}
