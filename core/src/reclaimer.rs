//! The reclaimer, as a sans-IO state machine: list expired leases, fence each one, look its
//! operation up under the new epoch, then adopt, requeue or dead-letter it.
//!
//! **Waves.** It works through a batch [`ReclaimerConfig::wave`] leases at a time: it fences a
//! wave's leases together, then looks up together the operations of the fences it won, then
//! requeues or completes them together. Each step waits for every answer of the one before, so a
//! store can serve a wave's requests in one transaction, and each lease is still judged on its own
//! epoch by the same rules. A wave of one is one lease at a time.
//!
//! On conflicting outputs it quarantines that job, raises an alert, and stops the batch: it
//! touches nothing further in it. A wave's lookups are answered before any of its leases is
//! finished, so when one of them shows a conflict, the reclaimer quarantines the first such job (in
//! listing order) and finishes none of the others: they stay fenced under its epoch, expire, and
//! are reclaimed by a later batch. Like the worker it takes its *local* time, and it drives the
//! same way: after any input drain [`Reclaimer::poll`], then sleep until
//! [`Reclaimer::poll_timeout`]. The requests of a step that time out are sent again under the same
//! ids, up to `retries_max` times; after that it gives up every job whose request went unanswered
//! and drops the rest of the batch until its next scan, and its own fenced leases will expire and
//! be reclaimed in turn.

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
    /// How many leases of a batch it fences, looks up and finishes together (at least 1). A wave
    /// larger than the batch is the whole batch.
    pub wave: u32,
}

impl ReclaimerConfig {
    /// Checks the timing.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.scan_every == Span::ZERO || self.request_timeout == Span::ZERO {
            return Err(ConfigError::ReclaimerTiming("scan_every and request_timeout must be positive"));
        }
        if self.wave == 0 {
            return Err(ConfigError::ReclaimerTiming("wave must be at least 1"));
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
    /// and scans again later. One for each job whose request of the step went unanswered.
    GaveUp {
        /// The batch.
        batch: BatchId,
        /// The job.
        job: JobId,
    },
}

/// The requests of one step, sent together, awaited together.
#[derive(Debug, Clone)]
struct InFlight {
    /// Those not answered yet, in the order sent.
    requests: Vec<(RequestId, ReclaimRequest)>,
    deadline: Time,
    retries: u32,
}

/// Where a batch's current wave is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Fencing its leases.
    Fence,
    /// Looking up the operations of the fences it won.
    Lookup,
    /// Requeueing or completing them.
    Finish,
    /// Quarantining the job whose lookup showed a conflict.
    Quarantine,
}

#[derive(Debug, Clone)]
struct Batch {
    id: BatchId,
    pending: VecDeque<Lease>,
    stage: Stage,
    /// The wave's fences won, in listing order (the reclaimer's own leases), each with its
    /// lookup's answer once it is in.
    won: Vec<(Lease, Option<Lookup>)>,
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

    /// The request a reply under `id` would answer now: one in flight under that id. `None` for a
    /// late reply, which [`Reclaimer::handle_reply`] ignores.
    pub fn awaiting(&self, id: RequestId) -> Option<ReclaimRequest> {
        let inflight = self.inflight.as_ref()?;
        inflight.requests.iter().find(|(sent, _)| *sent == id).map(|(_, request)| *request)
    }

    /// Whether any request is awaited: when none is, a reply to anything sent before is ignored.
    pub fn awaits_any(&self) -> bool {
        self.inflight.is_some()
    }

    /// The next action, if any.
    pub fn poll(&mut self) -> Option<ReclaimAction> {
        self.actions.pop_front()
    }

    /// The local time at which `handle_timeout` must be called next.
    pub fn poll_timeout(&self) -> Time {
        self.inflight.as_ref().map_or(self.scan_at, |inflight| inflight.deadline)
    }

    /// Time passed: retry, move on, or scan as due.
    pub fn handle_timeout(&mut self, now: Time) {
        self.advance(now);
        self.tick(now);
    }

    /// A reply arrived for request `id`; late replies are ignored. The next step starts once every
    /// request of this one is answered.
    pub fn handle_reply(&mut self, now: Time, id: RequestId, reply: ReclaimReply) {
        self.advance(now);
        let Some(inflight) = self.inflight.as_mut() else { return };
        let Some(at) = inflight.requests.iter().position(|(sent, _)| *sent == id) else { return };
        let (_, request) = inflight.requests.remove(at);
        if inflight.requests.is_empty() {
            self.inflight = None;
        }
        self.on_reply(now, request, reply);
        self.tick(now);
    }

    fn on_reply(&mut self, now: Time, request: ReclaimRequest, reply: ReclaimReply) {
        match (request, reply) {
            (ReclaimRequest::ListExpired { batch, .. }, ReclaimReply::Listed(leases)) => {
                self.start_batch(now, batch, leases)
            }
            (ReclaimRequest::Fence { batch, lease, .. }, ReclaimReply::Fenced(fencing)) => match fencing {
                Fencing::Won { lease: ours, .. } => {
                    if let Some(current) = self.batch.as_mut().filter(|current| current.id == batch) {
                        current.won.push((ours, None));
                    }
                }
                Fencing::LostRace { .. } | Fencing::NotExpired { .. } => {
                    let (job, expected) = (lease.job, lease.epoch);
                    self.actions.push_back(ReclaimAction::LostRace { batch, job, expected });
                }
            },
            (ReclaimRequest::Lookup { batch, op, .. }, ReclaimReply::Looked(lookup)) => {
                if let Some(current) = self.batch.as_mut().filter(|current| current.id == batch) {
                    if let Some((_, looked)) = current.won.iter_mut().find(|(ours, _)| ours.job == op.job) {
                        *looked = Some(lookup);
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
        // Finishing stands for "no wave yet": the next step fences the first wave.
        let batch = Batch { id, pending: leases.into(), stage: Stage::Finish, won: Vec::new() };
        self.batch = Some(batch);
    }

    /// Starts the next step: a retry, the next step of the wave, the next wave, or a scan.
    fn tick(&mut self, now: Time) {
        if let Some(inflight) = self.inflight.as_mut().filter(|inflight| now >= inflight.deadline) {
            if inflight.retries < self.config.retries_max {
                // The same ids: whichever copy is answered first counts. A fence retried under a
                // new id would lose the race to its own first copy.
                inflight.retries += 1;
                inflight.deadline = now + self.config.request_timeout;
                for &(id, request) in &inflight.requests {
                    self.actions.push_back(ReclaimAction::Send(id, request));
                }
                return;
            }
            let unanswered = self.inflight.take().map(|inflight| inflight.requests).unwrap_or_default();
            if let Some(batch) = unanswered.first().and_then(|(_, request)| self.batch_of(*request)) {
                // Whatever the silence hides (a partition, or a conflict it never heard about),
                // the rest of the batch waits for the next scan rather than run blind.
                for (_, request) in unanswered {
                    let job = job_of(request).expect("batch requests name a job");
                    self.actions.push_back(ReclaimAction::GaveUp { batch, job });
                }
                self.batch = None;
                self.scan_at = if self.bugs.on(Bug::GiveUpWithoutBackOff) { now } else { now + self.config.scan_every };
            }
        }
        if self.inflight.is_some() {
            return;
        }
        if let Some(requests) = self.next_step(now) {
            self.send_all(now, requests);
            return;
        }
        if now >= self.scan_at {
            let batch = BatchId { reclaimer: self.id, seq: self.batches };
            self.batches += 1;
            self.send_all(now, vec![ReclaimRequest::ListExpired { batch, as_of: now }]);
        }
    }

    /// The requests of the batch's next step, once every answer of the last one is in: `None`
    /// when there is no batch, or it is through (and the reclaimer scans again straight away,
    /// since more may have expired meanwhile).
    fn next_step(&mut self, now: Time) -> Option<Vec<ReclaimRequest>> {
        let wave = self.config.wave as usize;
        let bugs = self.bugs;
        let batch = self.batch.as_mut()?;
        let id = batch.id;
        match batch.stage {
            Stage::Fence if !batch.won.is_empty() => {
                if bugs.on(Bug::ReclaimSkipsAdoption) {
                    batch.stage = Stage::Finish;
                    let requeue = |&(ours, _): &(Lease, _)| ReclaimRequest::Requeue {
                        batch: id,
                        job: ours.job,
                        epoch: ours.epoch,
                    };
                    return Some(batch.won.iter().map(requeue).collect());
                }
                batch.stage = Stage::Lookup;
                let lookup = |&(ours, _): &(Lease, _)| ReclaimRequest::Lookup {
                    batch: id,
                    op: OpId::for_job(ours.job),
                    epoch: ours.epoch,
                };
                return Some(batch.won.iter().map(lookup).collect());
            }
            Stage::Lookup => {
                batch.stage = Stage::Finish;
                let looked = batch.won.iter().filter_map(|&(ours, looked)| Some((ours, looked?)));
                let conflict = looked.clone().find(|(_, lookup)| matches!(lookup, Lookup::Conflict { .. }));
                let mut requests = Vec::new();
                if let Some((ours, Lookup::Conflict { recorded, rival })) = conflict {
                    if !bugs.on(Bug::ConflictDoesNotStopBatch) {
                        // The batch stops here: none of the wave's other leases is finished.
                        batch.stage = Stage::Quarantine;
                        let (job, epoch) = (ours.job, ours.epoch);
                        requests.push(ReclaimRequest::Quarantine { batch: id, job, epoch, recorded, rival });
                        if !bugs.on(Bug::WaveFinishesPastConflict) {
                            return Some(requests);
                        }
                    }
                }
                // The requeues, then the completions: each kind one run, served together.
                let mut completions = Vec::new();
                for (ours, lookup) in looked {
                    let (job, epoch) = (ours.job, ours.epoch);
                    if matches!(lookup, Lookup::Conflict { .. }) && !bugs.on(Bug::ConflictDoesNotStopBatch) {
                        continue; // Only with wave-finishes-past-conflict: its mates go on.
                    }
                    match lookup {
                        Lookup::Empty => requests.push(ReclaimRequest::Requeue { batch: id, job, epoch }),
                        Lookup::Recorded(output) => {
                            let op = OpId::for_job(job);
                            self.actions.push_back(ReclaimAction::Adopted { batch: id, job, op, output, epoch });
                            completions.push(ReclaimRequest::Complete { batch: id, job, epoch, output });
                        }
                        // Only with the planted bug: the rival overwrites what the ledger holds.
                        Lookup::Conflict { rival, .. } => {
                            completions.push(ReclaimRequest::Complete { batch: id, job, epoch, output: rival })
                        }
                    }
                }
                requests.extend(completions);
                if !requests.is_empty() {
                    return Some(requests);
                }
            }
            Stage::Fence | Stage::Finish => {}
            Stage::Quarantine => unreachable!("a quarantine's answer ends its batch"),
        }
        let batch = self.batch.as_mut().expect("the batch is still open");
        let fences: Vec<ReclaimRequest> = batch
            .pending
            .drain(..wave.min(batch.pending.len()))
            .map(|lease| ReclaimRequest::Fence { batch: id, lease, as_of: now })
            .collect();
        if fences.is_empty() {
            self.batch = None;
            self.scan_at = now;
            return None;
        }
        batch.stage = Stage::Fence;
        batch.won.clear();
        Some(fences)
    }

    fn batch_of(&self, request: ReclaimRequest) -> Option<BatchId> {
        // A listing opens its batch rather than belonging to a running one.
        (!matches!(request, ReclaimRequest::ListExpired { .. })).then(|| request.batch())
    }

    /// Sends one step's requests, numbered in order, under one deadline.
    fn send_all(&mut self, now: Time, requests: Vec<ReclaimRequest>) {
        assert!(self.inflight.is_none(), "two reclaim steps in flight");
        assert!(!requests.is_empty(), "an empty reclaim step");
        let requests: Vec<(RequestId, ReclaimRequest)> =
            requests.into_iter().map(|request| (self.next_id(), request)).collect();
        for &(id, request) in &requests {
            self.actions.push_back(ReclaimAction::Send(id, request));
        }
        self.inflight = Some(InFlight { requests, deadline: now + self.config.request_timeout, retries: 0 });
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
