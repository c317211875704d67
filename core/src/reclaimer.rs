//! The reclaimer, as a sans-IO state machine: list expired leases, fence each one, look its
//! operation up under the new epoch, then adopt, requeue or dead-letter it.
//!
//! On conflicting outputs it quarantines that job, raises an alert, and stops the batch: it
//! touches nothing further in it. Like the worker it takes its *local* time, and it drives the
//! same way: after any input drain [`Reclaimer::poll`], then sleep until
//! [`Reclaimer::poll_timeout`]. A request that times out is sent again under the same id, up to
//! `retries_max` times; after that it drops the rest of the batch until its next scan, and its own
//! fenced lease will expire and be reclaimed in turn.

use crate::answers::{Completion, ConfigError, Fencing, Lease, Quarantine, Requeue};
use crate::bug::{Bug, Bugs};
use crate::ids::{BatchId, Epoch, JobId, OpId, OutputId, ReclaimerId, RequestId};
use crate::ledger::Lookup;
use crate::time::{Span, Time};
use std::collections::VecDeque;

/// A reclaimer's timing, in its local clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReclaimerConfig {
    /// How long to wait between scans when the last one found fewer than a full batch.
    pub scan_every: Span,
    /// How long to wait for a reply before sending the request again.
    pub request_timeout: Span,
    /// How many times one request is sent again before the reclaimer moves on.
    pub retries_max: u32,
}

impl ReclaimerConfig {
    /// Checks the timing.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.scan_every == Span::ZERO || self.request_timeout == Span::ZERO {
            return Err(ConfigError::ReclaimerTiming("scan_every and request_timeout must be positive"));
        }
        Ok(())
    }
}

/// What a reclaimer asks of the world. Each carries the batch it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimRequest {
    /// Ask the table for expired leases, at most a batch. `as_of` is the reclaimer's own clock,
    /// which the table must not use. Every listing opens a batch, numbered as it is sent, so the
    /// history can tie the listing to every fence of its batch.
    ListExpired {
        /// The batch this listing opens.
        batch: BatchId,
        /// The reclaimer's local time.
        as_of: Time,
    },
    /// Compare-and-set the lease's epoch, taking the job over.
    Fence {
        /// The batch.
        batch: BatchId,
        /// The expired lease as listed.
        lease: Lease,
        /// The reclaimer's local time, which the table must not use.
        as_of: Time,
    },
    /// Ask the ledger what is recorded, raising its fence to the new epoch.
    Lookup {
        /// The batch.
        batch: BatchId,
        /// The operation.
        op: OpId,
        /// The reclaimer's epoch.
        epoch: Epoch,
    },
    /// Complete the job with the adopted output.
    Complete {
        /// The batch.
        batch: BatchId,
        /// The job.
        job: JobId,
        /// The reclaimer's epoch.
        epoch: Epoch,
        /// The adopted output.
        output: OutputId,
    },
    /// Requeue the job (or dead-letter it, out of attempts): nothing was recorded.
    Requeue {
        /// The batch.
        batch: BatchId,
        /// The job.
        job: JobId,
        /// The reclaimer's epoch.
        epoch: Epoch,
    },
    /// Quarantine the job: two different outputs claim its operation.
    Quarantine {
        /// The batch.
        batch: BatchId,
        /// The job.
        job: JobId,
        /// The reclaimer's epoch.
        epoch: Epoch,
        /// The output recorded first.
        recorded: OutputId,
        /// The rival output.
        rival: OutputId,
    },
}

impl ReclaimRequest {
    /// The batch the request belongs to (a listing opens its own).
    pub fn batch(self) -> BatchId {
        match self {
            ReclaimRequest::ListExpired { batch, .. }
            | ReclaimRequest::Fence { batch, .. }
            | ReclaimRequest::Lookup { batch, .. }
            | ReclaimRequest::Complete { batch, .. }
            | ReclaimRequest::Requeue { batch, .. }
            | ReclaimRequest::Quarantine { batch, .. } => batch,
        }
    }
}

/// A reply from the world to a reclaimer's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReclaimReply {
    /// The table listed these expired leases.
    Listed(Vec<Lease>),
    /// The table answered a `Fence`.
    Fenced(Fencing),
    /// The ledger answered a `Lookup`.
    Looked(Lookup),
    /// The table answered a `Complete`.
    Completed(Completion),
    /// The table answered a `Requeue`.
    Requeued(Requeue),
    /// The table answered a `Quarantine`.
    Quarantined(Quarantine),
}

/// What a reclaimer tells the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum ReclaimAction {
    /// Send this request.
    Send(RequestId, ReclaimRequest),
    /// Another reclaimer or worker moved the job first.
    LostRace {
        /// The batch.
        batch: BatchId,
        /// The job.
        job: JobId,
        /// The epoch the reclaimer expected.
        expected: Epoch,
    },
    /// The ledger held an output: the reclaimer completes with it instead of a re-run.
    Adopted {
        /// The batch.
        batch: BatchId,
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The adopted output.
        output: OutputId,
        /// The reclaimer's epoch.
        epoch: Epoch,
    },
    /// Conflicting outputs: the batch stops here, and an operator must look. This is the alert.
    BatchStopped {
        /// The batch.
        batch: BatchId,
        /// The quarantined job.
        job: JobId,
        /// The output recorded first.
        recorded: OutputId,
        /// The rival output.
        rival: OutputId,
        /// Listed leases left untouched.
        untouched: usize,
    },
    /// A request went unanswered `retries_max` times; the reclaimer dropped the rest of the batch
    /// and scans again later.
    GaveUp {
        /// The batch.
        batch: BatchId,
        /// The job.
        job: JobId,
    },
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    id: RequestId,
    request: ReclaimRequest,
    deadline: Time,
    retries: u32,
}

#[derive(Debug, Clone)]
struct Batch {
    id: BatchId,
    pending: VecDeque<Lease>,
}

/// The reclaimer state machine. See the module doc.
#[derive(Debug, Clone)]
pub struct Reclaimer {
    id: ReclaimerId,
    config: ReclaimerConfig,
    bugs: Bugs,
    batch: Option<Batch>,
    inflight: Option<InFlight>,
    scan_at: Time,
    batches: u64,
    next_request: u64,
    actions: VecDeque<ReclaimAction>,
    last_now: Time,
}

impl Reclaimer {
    /// A fresh reclaimer, which scans at once. Fails on unworkable timing.
    pub fn new(id: ReclaimerId, config: ReclaimerConfig, bugs: Bugs, now: Time) -> Result<Reclaimer, ConfigError> {
        Reclaimer::numbering_batches_from(id, config, bugs, now, 0)
    }

    /// A fresh reclaimer whose batches are numbered from `seq` on. A reclaimer that restarts must
    /// not reuse the batch numbers of its previous life, or two batches would share one
    /// [`BatchId`].
    pub fn numbering_batches_from(
        id: ReclaimerId,
        config: ReclaimerConfig,
        bugs: Bugs,
        now: Time,
        seq: u64,
    ) -> Result<Reclaimer, ConfigError> {
        config.validate()?;
        let mut reclaimer = Reclaimer {
            id,
            config,
            bugs,
            batch: None,
            inflight: None,
            scan_at: now,
            batches: seq,
            next_request: 0,
            actions: VecDeque::new(),
            last_now: now,
        };
        reclaimer.tick(now);
        Ok(reclaimer)
    }

    /// The request a reply under `id` would answer now: the one in flight under that id. `None`
    /// for a late reply, which [`Reclaimer::handle_reply`] ignores.
    pub fn awaiting(&self, id: RequestId) -> Option<ReclaimRequest> {
        self.inflight.filter(|inflight| inflight.id == id).map(|inflight| inflight.request)
    }

    /// The next action, if any.
    pub fn poll(&mut self) -> Option<ReclaimAction> {
        self.actions.pop_front()
    }

    /// The local time at which `handle_timeout` must be called next.
    pub fn poll_timeout(&self) -> Time {
        self.inflight.map_or(self.scan_at, |inflight| inflight.deadline)
    }

    /// Time passed: retry, move on, or scan as due.
    pub fn handle_timeout(&mut self, now: Time) {
        self.advance(now);
        self.tick(now);
    }

    /// A reply arrived for request `id`; late replies are ignored.
    pub fn handle_reply(&mut self, now: Time, id: RequestId, reply: ReclaimReply) {
        self.advance(now);
        let Some(inflight) = self.inflight.filter(|inflight| inflight.id == id) else { return };
        self.inflight = None;
        self.on_reply(now, inflight.request, reply);
        self.tick(now);
    }

    fn on_reply(&mut self, now: Time, request: ReclaimRequest, reply: ReclaimReply) {
        match (request, reply) {
            (ReclaimRequest::ListExpired { batch, .. }, ReclaimReply::Listed(leases)) => {
                self.start_batch(now, batch, leases)
            }
            (ReclaimRequest::Fence { batch, lease, .. }, ReclaimReply::Fenced(fencing)) => match fencing {
                Fencing::Won { lease: ours, .. } => {
                    let op = OpId::for_job(ours.job);
                    if self.bugs.on(Bug::ReclaimSkipsAdoption) {
                        self.send(now, ReclaimRequest::Requeue { batch, job: ours.job, epoch: ours.epoch });
                    } else {
                        self.send(now, ReclaimRequest::Lookup { batch, op, epoch: ours.epoch });
                    }
                }
                Fencing::LostRace { .. } | Fencing::NotExpired { .. } => {
                    let (job, expected) = (lease.job, lease.epoch);
                    self.actions.push_back(ReclaimAction::LostRace { batch, job, expected });
                }
            },
            (ReclaimRequest::Lookup { batch, op, epoch }, ReclaimReply::Looked(lookup)) => {
                let job = op.job;
                match lookup {
                    Lookup::Empty => self.send(now, ReclaimRequest::Requeue { batch, job, epoch }),
                    Lookup::Recorded(output) => {
                        self.actions.push_back(ReclaimAction::Adopted { batch, job, op, output, epoch });
                        self.send(now, ReclaimRequest::Complete { batch, job, epoch, output });
                    }
                    Lookup::Conflict { rival, .. } if self.bugs.on(Bug::ConflictDoesNotStopBatch) => {
                        self.send(now, ReclaimRequest::Complete { batch, job, epoch, output: rival });
                    }
                    Lookup::Conflict { recorded, rival } => {
                        self.send(now, ReclaimRequest::Quarantine { batch, job, epoch, recorded, rival });
                    }
                }
            }
            (ReclaimRequest::Quarantine { batch, job, recorded, rival, .. }, ReclaimReply::Quarantined(_)) => {
                // Stop whatever the table said: a refusal means someone else moved the job, and the
                // conflict still needs an operator.
                let untouched = self.batch.take().map_or(0, |batch| batch.pending.len());
                self.scan_at = now + self.config.scan_every;
                self.actions.push_back(ReclaimAction::BatchStopped { batch, job, recorded, rival, untouched });
            }
            (ReclaimRequest::Complete { .. }, ReclaimReply::Completed(_))
            | (ReclaimRequest::Requeue { .. }, ReclaimReply::Requeued(_)) => {}
            (request, reply) => panic!("{request:?} answered with {reply:?}"),
        }
    }

    fn start_batch(&mut self, now: Time, id: BatchId, leases: Vec<Lease>) {
        if leases.is_empty() {
            self.scan_at = now + self.config.scan_every;
            return;
        }
        self.batch = Some(Batch { id, pending: leases.into() });
    }

    /// Starts the next step: a retry, the next lease of the batch, or a scan.
    fn tick(&mut self, now: Time) {
        if let Some(mut inflight) = self.inflight.filter(|inflight| now >= inflight.deadline) {
            if inflight.retries < self.config.retries_max {
                // The same id: whichever copy is answered first counts. A fence retried under a new
                // id would lose the race to its own first copy.
                inflight.retries += 1;
                inflight.deadline = now + self.config.request_timeout;
                self.actions.push_back(ReclaimAction::Send(inflight.id, inflight.request));
                self.inflight = Some(inflight);
                return;
            }
            self.inflight = None;
            if let Some(batch) = self.batch_of(inflight.request) {
                // Whatever the silence hides (a partition, or a conflict it never heard about),
                // the rest of the batch waits for the next scan rather than run blind.
                let job = job_of(inflight.request).expect("batch requests name a job");
                self.actions.push_back(ReclaimAction::GaveUp { batch, job });
                self.batch = None;
                self.scan_at = if self.bugs.on(Bug::GiveUpWithoutBackOff) { now } else { now + self.config.scan_every };
            }
        }
        if self.inflight.is_some() {
            return;
        }
        if let Some(batch) = self.batch.as_mut() {
            if let Some(lease) = batch.pending.pop_front() {
                let batch = batch.id;
                self.send(now, ReclaimRequest::Fence { batch, lease, as_of: now });
                return;
            }
            // More may have expired meanwhile: scan again straight after a batch.
            self.batch = None;
            self.scan_at = now;
        }
        if now >= self.scan_at {
            let batch = BatchId { reclaimer: self.id, seq: self.batches };
            self.batches += 1;
            self.send(now, ReclaimRequest::ListExpired { batch, as_of: now });
        }
    }

    fn batch_of(&self, request: ReclaimRequest) -> Option<BatchId> {
        // A listing opens its batch rather than belonging to a running one.
        (!matches!(request, ReclaimRequest::ListExpired { .. })).then(|| request.batch())
    }

    fn send(&mut self, now: Time, request: ReclaimRequest) {
        assert!(self.inflight.is_none(), "two reclaim requests in flight");
        let id = self.next_id();
        self.actions.push_back(ReclaimAction::Send(id, request));
        self.inflight = Some(InFlight { id, request, deadline: now + self.config.request_timeout, retries: 0 });
    }

    fn next_id(&mut self) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        id
    }

    fn advance(&mut self, now: Time) {
        assert!(now >= self.last_now, "reclaimer time went backwards: {now} after {}", self.last_now);
        self.last_now = now;
    }
}

fn job_of(request: ReclaimRequest) -> Option<JobId> {
    match request {
        ReclaimRequest::ListExpired { .. } => None,
        ReclaimRequest::Fence { lease, .. } => Some(lease.job),
        ReclaimRequest::Lookup { op, .. } => Some(op.job),
        ReclaimRequest::Complete { job, .. }
        | ReclaimRequest::Requeue { job, .. }
        | ReclaimRequest::Quarantine { job, .. } => Some(job),
    }
}
