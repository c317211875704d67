//! # lease-core: lease recovery for job queues, without duplicate effects
//!
//! The contract first: this crate is **sans-IO and fully deterministic**. It has no async, no
//! clock reads, no randomness, no threads and no I/O. Every call takes the current time as a
//! parameter ([`Time`], integer microseconds), takes a request or an event in, and returns a typed
//! outcome or an action out. The same core can sit behind a simulated network (see `lease-sim`),
//! a real database, or a network service, unchanged.
//!
//! The parts, named as in the protocol:
//!
//! - [`LeaseTable`]: the single authority on leases. Its clock alone decides expiry. Every grant
//!   and every reclaim raises the job's [`Epoch`] (fencing token); a request with a stale epoch is
//!   refused with a typed [`Refusal`]. Reclaim takes expired leases only, at most `batch_max` at a
//!   time, by compare-and-set on the epoch. The queue is bounded by `capacity`.
//! - [`EffectLedger`]: the dependency's output store, keyed by [`OpId`], which is derived from the
//!   job alone. It holds one output per operation and a fence, and never overwrites.
//! - [`Worker`]: acquire, look up, adopt or execute, complete; heartbeats; self-fences before its
//!   local estimate of expiry.
//! - [`Reclaimer`]: list expired leases, fence, look up under the new epoch, then adopt, requeue or
//!   dead-letter; on conflicting outputs, quarantine, alert and stop the batch.
//!
//! Three kinds of failure are kept apart: a broken invariant is an `assert!` (on in every build);
//! an expected protocol outcome (a stale epoch, a lost race, a fenced write) is a typed value; an
//! `Err` is a caller's misuse ([`TableError`], [`ConfigError`]).

pub mod answers;
pub mod bug;
pub mod ids;
pub mod ledger;
pub mod reclaimer;
pub mod rules;
pub mod table;
pub mod time;
pub mod worker;

pub use answers::{
    Acquired, Completion, ConfigError, Enqueued, Fencing, Grant, Lease, Outcome, Quarantine, Refusal, Rejection,
    Release, Renewal, Requeue, TableConfig, TableError, Terminal, RECLAIM_TICK, RENEW_GRACE,
};
pub use bug::{Bug, Bugs, UnknownBug};
pub use ids::{BatchId, Epoch, JobId, OpId, OutputId, Owner, ReclaimerId, RequestId, WorkerId};
pub use ledger::{Apply, EffectLedger, Lookup, OpRecord};
pub use reclaimer::{ReclaimAction, ReclaimReply, ReclaimRequest, Reclaimer, ReclaimerConfig};
pub use rules::{Decision, JobRecord, JobState, LastGrant, Place, Rules};
pub use table::LeaseTable;
pub use time::{Span, Time};
pub use worker::{Abandon, Execution, Worker, WorkerAction, WorkerConfig, WorkerReply, WorkerRequest};
