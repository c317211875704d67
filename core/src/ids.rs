//! Identities: jobs, operations, epochs, outputs, workers, reclaimers and lease owners.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A job, stable for the job's whole life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u64);

/// The operation a job performs on the dependency.
///
/// Derived from the job and its step only, never from the attempt, worker or epoch, so every
/// attempt, worker and reclaim of a job names the same operation in the effect ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId {
    /// The job this operation belongs to.
    pub job: JobId,
    /// The step of the job; a single-step job uses step 0.
    pub step: u32,
}

impl OpId {
    /// The operation of a single-step job.
    pub fn for_job(job: JobId) -> OpId {
        OpId { job, step: 0 }
    }
}

/// A fencing token: per job, strictly increasing on every grant and every reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch after this one.
    pub fn next(self) -> Epoch {
        Epoch(self.0.checked_add(1).expect("epoch overflow"))
    }
}

/// The identity of one output the dependency produced (a document, a payment, a message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OutputId(pub u64);

/// Identifies one request of a worker or a reclaimer, the same for every copy of it that is sent
/// again: a late reply is told from the awaited one by it, and the table knows a retried acquire by
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// A worker: it acquires jobs, executes or adopts their effects, and completes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkerId(pub u32);

/// A reclaimer: it fences expired leases and adopts, requeues or quarantines their jobs.
///
/// A type of its own, apart from [`WorkerId`], so that worker 0 and reclaimer 0 can never be
/// taken for one lease owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReclaimerId(pub u32);

/// Who holds a lease: a worker (granted by an acquire) or a reclaimer (taken by a fence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// A worker, granted the lease.
    Worker(WorkerId),
    /// A reclaimer, which fenced the lease away from its last holder.
    Reclaimer(ReclaimerId),
}

/// One reclaim batch: the reclaimer that ran it and its sequence number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BatchId {
    /// The reclaimer that ran the batch.
    pub reclaimer: ReclaimerId,
    /// The batch's number at that reclaimer, counting from 0.
    pub seq: u64,
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "j{}", self.0)
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.job, self.step)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}

impl fmt::Display for OutputId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "o{:x}", self.0)
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

impl fmt::Display for ReclaimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Worker(worker) => worker.fmt(f),
            Owner::Reclaimer(reclaimer) => reclaimer.fmt(f),
        }
    }
}

impl From<WorkerId> for Owner {
    fn from(worker: WorkerId) -> Owner {
        Owner::Worker(worker)
    }
}

impl From<ReclaimerId> for Owner {
    fn from(reclaimer: ReclaimerId) -> Owner {
        Owner::Reclaimer(reclaimer)
    }
}
