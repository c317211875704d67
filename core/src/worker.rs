//! The worker, as a sans-IO state machine: acquire, look up, adopt or execute, complete.
//!
//! The worker has no clock of its own: every `handle_*` call takes the worker's *local* time, so a
//! harness can give it a drifting clock. It never acts on a lease past its own estimate of expiry
//! minus `drift_margin` (self-fencing); the table and the ledger fence it anyway if it is late.
//!
//! Order of use, after any input (`handle_reply` or `handle_timeout`): drain [`Worker::poll`] until
//! it returns `None`, then sleep until [`Worker::poll_timeout`] and call `handle_timeout`.
//! Every request carries a [`RequestId`]; a reply to anything but the request in flight is late,
//! and ignored ([`Worker::awaiting`] says which request a reply would answer). A request that
//! times out is sent again under the same id (each is idempotent, an acquire included: the table
//! answers a retried acquire whose grant stands with the same grant), so the first answer to any
//! of its copies counts. An acquire is sent again under its id only while a grant answering the
//! new copy could still be kept (used, with a renewal's round trip to spare), counted from the
//! first copy; after that it is asked afresh.

use crate::answers::{Acquired, Completion, ConfigError, Lease, Release, Renewal, Requeue};
use crate::bug::{Bug, Bugs};
use crate::ids::{Epoch, JobId, OpId, OutputId, Owner, RequestId, WorkerId};
use crate::ledger::{Apply, Lookup};
use crate::time::{Span, Time};
use std::collections::VecDeque;

/// A worker's timing, all in its local clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConfig {
    /// The table's lease ttl.
    pub lease_ttl: Span,
    /// How often to renew a held lease.
    pub heartbeat_every: Span,
    /// How long before its estimate of expiry the worker stops acting: covers clock drift.
    pub drift_margin: Span,
    /// How long to wait for a reply before sending the request again.
    pub request_timeout: Span,
    /// How long to wait before asking again when the queue was empty.
    pub idle_backoff: Span,
    /// How long the table may hold an `Acquire` open when the queue is empty (long polling),
    /// answering as soon as a job arrives. The worker waits this much longer for an answer to an
    /// `Acquire` than to any other request. Zero: the table answers at once. A grant made at the
    /// end of the hold must still be usable when it arrives: see [`WorkerConfig::validate`].
    pub acquire_wait: Span,
}

impl WorkerConfig {
    /// How long after sending an acquire the worker acts on the grant that answers it: it
    /// counts its lease from when it asked, less the drift margin.
    pub fn grant_usable_for(&self) -> Span {
        Span(self.lease_ttl.0.saturating_sub(self.drift_margin.0))
    }

    /// The longest the table may hold an acquire open: a grant made later, whose answer then takes
    /// up to a round trip (`request_timeout`) to arrive, could reach the worker after it stopped
    /// acting on it. [`WorkerConfig::validate`] demands `acquire_wait` below it. It is also how
    /// long after an acquire's first copy a grant still arrives in time to be kept: with a
    /// renewal's round trip left before the worker must self-fence; a copy of the acquire goes out
    /// again only while its answer would come by then.
    pub fn acquire_hold_max(&self) -> Span {
        Span(self.grant_usable_for().0.saturating_sub(self.request_timeout.0))
    }

    /// Checks that the timing leaves room to act and to heartbeat, and that a grant always
    /// arrives in time to be used.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_ttl == Span::ZERO {
            return Err(ConfigError::ZeroLeaseTtl);
        }
        if self.drift_margin >= self.lease_ttl {
            return Err(ConfigError::WorkerTiming("drift_margin must be below lease_ttl"));
        }
        if self.heartbeat_every == Span::ZERO
            || self.heartbeat_every.0.saturating_add(self.drift_margin.0) >= self.lease_ttl.0
        {
            return Err(ConfigError::WorkerTiming(
                "heartbeat_every must be positive and below lease_ttl - drift_margin",
            ));
        }
        if self.request_timeout == Span::ZERO || self.idle_backoff == Span::ZERO {
            return Err(ConfigError::WorkerTiming("request_timeout and idle_backoff must be positive"));
        }
        if self.acquire_wait.0.saturating_add(self.request_timeout.0) >= self.grant_usable_for().0 {
            return Err(ConfigError::UnusableGrant {
                acquire_wait: self.acquire_wait,
                request_timeout: self.request_timeout,
                usable: self.grant_usable_for(),
            });
        }
        Ok(())
    }
}

/// What a worker asks of the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerRequest {
    /// Ask the table for a lease on the oldest queued job.
    Acquire,
    /// Ask the table to extend the lease.
    Renew {
        /// The job.
        job: JobId,
        /// The lease's epoch.
        epoch: Epoch,
    },
    /// Ask the ledger what is recorded for the operation, raising its fence.
    Lookup {
        /// The operation.
        op: OpId,
        /// The lease's epoch.
        epoch: Epoch,
    },
    /// Call the dependency, which produces the output and applies it to the ledger.
    Execute {
        /// The operation.
        op: OpId,
        /// The lease's epoch.
        epoch: Epoch,
    },
    /// Ask the table to complete the job.
    Complete {
        /// The job.
        job: JobId,
        /// The lease's epoch.
        epoch: Epoch,
        /// The output, executed or adopted.
        output: OutputId,
    },
    /// Hand the job back after the dependency failed; the table counts the attempt.
    Requeue {
        /// The job.
        job: JobId,
        /// The lease's epoch.
        epoch: Epoch,
    },
    /// End the job as dead-lettered now, its attempts left unspent: the dependency refused it for
    /// good ([`Execution::Permanent`]), so no attempt is worth making again.
    DeadLetter {
        /// The job.
        job: JobId,
        /// The lease's epoch.
        epoch: Epoch,
    },
    /// Hand back a grant the worker never took (it answered an acquire the worker had given
    /// up), or, from the runtime at shutdown, one it never executed under: the table undoes the
    /// grant, attempt included. Sent once, not awaited.
    Release {
        /// The job.
        job: JobId,
        /// The grant's epoch.
        epoch: Epoch,
    },
}

/// The dependency's answer to [`WorkerRequest::Execute`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// The dependency produced `output` and the ledger answered `apply`.
    Done {
        /// The output produced.
        output: OutputId,
        /// The ledger's answer.
        apply: Apply,
    },
    /// The dependency failed before it produced anything.
    Failed,
    /// The dependency refused the job for good, before it produced anything (a malformed
    /// request, a document that no longer exists): trying again would fail again.
    Permanent,
}

/// A reply from the world to a worker's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerReply {
    /// The table answered an `Acquire`.
    Acquired(Acquired),
    /// The table answered a `Renew`.
    Renewed(Renewal),
    /// The ledger answered a `Lookup`.
    Looked(Lookup),
    /// The dependency answered an `Execute`.
    Executed(Execution),
    /// The table answered a `Complete`.
    Completed(Completion),
    /// The table answered a `Requeue` or a `DeadLetter`.
    Requeued(Requeue),
    /// The table answered a `Release`.
    Released(Release),
}

/// Why a worker stopped acting on a lease before the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandon {
    /// Its local estimate of expiry, minus the margin, has passed.
    SelfFenced,
    /// The table refused a renewal: the lease is gone.
    LeaseLost,
    /// The ledger fenced its effect: a newer epoch owns the operation.
    EffectFenced,
    /// Two different outputs claim the operation: left for a reclaimer to quarantine.
    Conflict,
    /// A grant answered an acquire the worker had given up: the worker never took the job, and
    /// releases it at once (the grant and its attempt are undone).
    Declined,
}

/// What a worker tells the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum WorkerAction {
    /// Send this request.
    Send(RequestId, WorkerRequest),
    /// The ledger held an output: the worker completes with it instead of executing.
    Adopted {
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The adopted output.
        output: OutputId,
        /// The lease's epoch.
        epoch: Epoch,
    },
    /// The worker stops acting on this lease.
    Abandoned {
        /// The job.
        job: JobId,
        /// The lease's epoch.
        epoch: Epoch,
        /// Why.
        why: Abandon,
    },
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    id: RequestId,
    request: WorkerRequest,
    /// When the first copy left: when it was decided, until [`Worker::handle_sent`] says later.
    sent_at: Time,
    deadline: Time,
    /// Whether the first copy is known to have left (or a later copy was decided).
    departed: bool,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    job: JobId,
    epoch: Epoch,
    /// Local time at which the worker stops acting: estimated expiry minus the drift margin.
    act_until: Time,
    next_heartbeat: Time,
    renew: Option<InFlight>,
}

/// The worker state machine. See the module doc.
#[derive(Debug, Clone)]
pub struct Worker {
    id: WorkerId,
    config: WorkerConfig,
    bugs: Bugs,
    held: Option<Held>,
    /// The main request in flight (acquire, lookup, execute, complete or requeue).
    main: Option<InFlight>,
    /// Local time of the next acquire when idle.
    acquire_at: Time,
    next_request: u64,
    /// Acquires given up unanswered, latest last (at most [`GIVEN_UP_KEPT`]), each with the
    /// lease a late answer to it brought and the worker declined, once one did: a grant
    /// answering one of them is declined, unless it is a copy of that same answer.
    given_up: VecDeque<(RequestId, Option<(JobId, Epoch)>)>,
    /// Acquires answered with a grant the worker took, latest last (at most [`GIVEN_UP_KEPT`]):
    /// a copy of such an acquire (sent again under its id when the first seemed lost) can reach
    /// the table after that lease ended, and be granted another job; that grant is declined.
    taken: VecDeque<(RequestId, (JobId, Epoch))>,
    actions: VecDeque<WorkerAction>,
    last_now: Time,
}

/// How many acquires given up unanswered (and how many answered and taken) a worker remembers.
/// One is given up per acquire timeout; the answer to an older one would come later than any
/// copy the network delays.
const GIVEN_UP_KEPT: usize = 4;

impl Worker {
    /// A fresh worker, which starts by asking for a lease. Fails on unworkable timing.
    pub fn new(id: WorkerId, config: WorkerConfig, bugs: Bugs, now: Time) -> Result<Worker, ConfigError> {
        config.validate()?;
        let mut worker = Worker {
            id,
            config,
            bugs,
            held: None,
            main: None,
            acquire_at: now,
            next_request: 0,
            given_up: VecDeque::new(),
            taken: VecDeque::new(),
            actions: VecDeque::new(),
            last_now: now,
        };
        worker.tick(now);
        Ok(worker)
    }

    /// This worker.
    pub fn id(&self) -> WorkerId {
        self.id
    }

    /// The job and epoch the worker believes it holds.
    pub fn holding(&self) -> Option<(JobId, Epoch)> {
        self.held.map(|held| (held.job, held.epoch))
    }

    /// The local time at which the worker stops acting on the lease it holds (its estimate of
    /// expiry less the drift margin; each renewal moves it later), if it holds one. A runtime
    /// hands it to the code that acts on the lease as its deadline.
    pub fn act_until(&self) -> Option<Time> {
        self.held.map(|held| held.act_until)
    }

    /// The request a reply under `id` would answer now: the renewal or the main request in flight
    /// under that id. `None` for a late reply (to a request the worker is done with), which
    /// [`Worker::handle_reply`] ignores.
    pub fn awaiting(&self, id: RequestId) -> Option<WorkerRequest> {
        let renew = self.held.and_then(|held| held.renew).filter(|renew| renew.id == id);
        renew.or(self.main.filter(|inflight| inflight.id == id)).map(|inflight| inflight.request)
    }

    /// The main request in flight (an acquire, lookup, execute, complete or requeue), if any:
    /// where the worker is in a job's course. A runtime that holds requests back to send them
    /// together reads it to tell whether more of a kind may still come.
    pub fn main_request(&self) -> Option<WorkerRequest> {
        self.main.map(|inflight| inflight.request)
    }

    /// The next action, if any.
    pub fn poll(&mut self) -> Option<WorkerAction> {
        self.actions.pop_front()
    }

    /// The local time at which `handle_timeout` must be called next.
    pub fn poll_timeout(&self) -> Time {
        let mut at = self.main.map_or(self.acquire_at, |inflight| inflight.deadline);
        if let Some(held) = self.held {
            // A heartbeat falls due only once the renewal in flight is answered or times out.
            at = at.min(held.renew.map_or(held.next_heartbeat, |renew| renew.deadline));
            if !self.bugs.on(Bug::WorkerWithoutSelfFence) {
                at = at.min(held.act_until);
            }
        }
        at
    }

    /// Time passed: self-fence, heartbeat, retry or acquire as due.
    pub fn handle_timeout(&mut self, now: Time) {
        self.advance(now);
        self.tick(now);
    }

    /// The first copy of request `id` left only at `now`: the process stalled between deciding the
    /// request and sending it (a GC pause in the middle of a write). Every answer to it comes
    /// after it left, so its lease estimate and its wait are counted from then: an acquire that a
    /// pause held back is still awaited when it finally leaves, and its grant is used, instead of
    /// being taken for lost and asked afresh while the table grants both. Later copies change
    /// nothing: the estimate stays that of the first.
    pub fn handle_sent(&mut self, now: Time, id: RequestId) {
        self.advance(now);
        let timeout = |worker: &Worker, inflight: &InFlight| now + worker.timeout(inflight.request);
        if let Some(mut inflight) = self.main.filter(|inflight| inflight.id == id && !inflight.departed) {
            inflight.sent_at = inflight.sent_at.max(now);
            inflight.deadline = inflight.deadline.max(timeout(self, &inflight));
            inflight.departed = true;
            self.main = Some(inflight);
        }
        if let Some(mut held) = self.held {
            if let Some(mut renew) = held.renew.filter(|renew| renew.id == id && !renew.departed) {
                renew.sent_at = renew.sent_at.max(now);
                renew.deadline = renew.deadline.max(timeout(self, &renew));
                renew.departed = true;
                held.renew = Some(renew);
                self.held = Some(held);
            }
        }
    }

    /// A reply arrived for request `id`.
    pub fn handle_reply(&mut self, now: Time, id: RequestId, reply: WorkerReply) {
        self.advance(now);
        if let Some(renew) = self.held.and_then(|held| held.renew).filter(|renew| renew.id == id) {
            self.on_renewed(now, renew, reply);
        } else if let Some(inflight) = self.main.filter(|inflight| inflight.id == id) {
            self.main = None;
            self.on_reply(now, inflight, reply);
        } else if let WorkerReply::Acquired(Acquired::Granted(grant) | Acquired::Regranted(grant)) = reply {
            let lease = Some((grant.lease.job, grant.lease.epoch));
            if let Some(given_up) = self.given_up.iter_mut().find(|(given_up, _)| *given_up == id) {
                // A copy of an answer already declined is no news; any other grant under this id
                // (a copy of the acquire, granted afresh) is declined in turn.
                if given_up.1 != lease {
                    given_up.1 = lease;
                    self.decline(now, grant.lease);
                }
            } else if self
                .taken
                .iter()
                .any(|&(taken, lease)| taken == id && lease != (grant.lease.job, grant.lease.epoch))
            {
                // A copy of an acquire whose answer the worker took, granted another job: the
                // swarm's large batches found it (a process paused with an acquire's copy
                // queued; the copy reached the table once the lease it had brought expired).
                self.decline(now, grant.lease);
            }
        }
        self.tick(now);
    }

    /// A grant answering an acquire this worker gave up unanswered: a copy of it (held back by
    /// a pause or the network) reached the table after the worker asked afresh. Nobody will run
    /// the job under this lease, so instead of leaving it leased until it expires, the worker
    /// releases it (a request it does not wait on: if it is lost, the lease expires as before),
    /// and the table undoes the grant, attempt included: the job was never tried. Also a grant
    /// answering a copy of an acquire the worker took another answer to: a copy sent again
    /// under the same id reached the table after the lease the first brought had ended, and was
    /// granted another job. A late copy of an answer the worker took (the same lease) is no
    /// news, and is ignored: the worker may have left that lease for a reclaimer on purpose (a
    /// conflict).
    fn decline(&mut self, now: Time, lease: Lease) {
        if lease.owner != Owner::Worker(self.id) || self.holding() == Some((lease.job, lease.epoch)) {
            return;
        }
        self.actions.push_back(WorkerAction::Abandoned { job: lease.job, epoch: lease.epoch, why: Abandon::Declined });
        let _not_awaited = self.send(now, WorkerRequest::Release { job: lease.job, epoch: lease.epoch });
    }

    fn on_renewed(&mut self, now: Time, renew: InFlight, reply: WorkerReply) {
        let held = self.held.as_mut().expect("a renewal in flight belongs to a held lease");
        held.renew = None;
        match reply {
            WorkerReply::Renewed(Renewal::Renewed { .. }) => {
                // The table extended from when it got the request, which is after we sent it.
                let asked = if self.bugs.on(Bug::LeaseCountedFromReply) { now } else { renew.sent_at };
                let act_until = (asked + self.config.lease_ttl).saturating_sub(self.config.drift_margin);
                held.act_until = held.act_until.max(act_until);
            }
            WorkerReply::Renewed(Renewal::Refused(_)) => self.abandon(Abandon::LeaseLost),
            other => panic!("a renewal answered with {other:?} at {now}"),
        }
    }

    fn on_reply(&mut self, now: Time, inflight: InFlight, reply: WorkerReply) {
        match (inflight.request, reply) {
            (WorkerRequest::Acquire, WorkerReply::Acquired(Acquired::Granted(grant) | Acquired::Regranted(grant))) => {
                let lease = grant.lease;
                assert_eq!(lease.owner, Owner::Worker(self.id), "granted a lease for another owner");
                if self.taken.len() == GIVEN_UP_KEPT {
                    self.taken.pop_front();
                }
                self.taken.push_back((inflight.id, (lease.job, lease.epoch)));
                let op = OpId::for_job(lease.job);
                let asked = if self.bugs.on(Bug::LeaseCountedFromReply) { now } else { inflight.sent_at };
                let act_until = (asked + self.config.lease_ttl).saturating_sub(self.config.drift_margin);
                // The first heartbeat is counted from where the lease estimate is: from the
                // acquire's first send, not from the grant's arrival. An acquire held at the table
                // (a long poll) or sent again arrives late in its lease; counted from its arrival,
                // the first renewal could leave after the worker had to self-fence, and a live,
                // connected worker lost its lease (heartbeats_keep_leases, slow-dependency seed 45:
                // granted 340 ms into a 557 ms lease, renewed 139 ms later, self-fenced 1 ms
                // before the renewal's answer).
                let next_heartbeat = asked + self.config.heartbeat_every;
                self.held = Some(Held { job: lease.job, epoch: lease.epoch, act_until, next_heartbeat, renew: None });
                // On a first attempt no earlier holder can have produced an output: skip the lookup.
                let request = if grant.attempt == 1 {
                    WorkerRequest::Execute { op, epoch: lease.epoch }
                } else {
                    WorkerRequest::Lookup { op, epoch: lease.epoch }
                };
                self.act(now, request);
            }
            // A spent copy is answered only to a copy of a request already answered: nothing.
            (WorkerRequest::Acquire, WorkerReply::Acquired(Acquired::Empty | Acquired::Spent { .. })) => {
                self.acquire_at = now + self.config.idle_backoff;
            }
            (WorkerRequest::Lookup { op, epoch }, WorkerReply::Looked(lookup)) => match lookup {
                Lookup::Empty => self.act(now, WorkerRequest::Execute { op, epoch }),
                Lookup::Recorded(output) => {
                    self.actions.push_back(WorkerAction::Adopted { job: op.job, op, output, epoch });
                    self.act(now, WorkerRequest::Complete { job: op.job, epoch, output });
                }
                Lookup::Conflict { .. } => self.abandon(Abandon::Conflict),
            },
            (WorkerRequest::Execute { op, epoch }, WorkerReply::Executed(execution)) => match execution {
                Execution::Done { output, apply: Apply::Applied | Apply::AlreadyApplied } => {
                    self.act(now, WorkerRequest::Complete { job: op.job, epoch, output });
                }
                Execution::Done { apply: Apply::Fenced { .. }, .. } => self.abandon(Abandon::EffectFenced),
                Execution::Done { apply: Apply::Conflict { .. }, .. } => self.abandon(Abandon::Conflict),
                Execution::Failed => self.act(now, WorkerRequest::Requeue { job: op.job, epoch }),
                Execution::Permanent => self.act(now, WorkerRequest::DeadLetter { job: op.job, epoch }),
            },
            (WorkerRequest::Complete { .. }, WorkerReply::Completed(_))
            | (WorkerRequest::Requeue { .. } | WorkerRequest::DeadLetter { .. }, WorkerReply::Requeued(_)) => {
                // Done with this job, whatever the answer: a refusal means someone else owns it.
                self.held = None;
                self.acquire_at = now;
            }
            (request, reply) => panic!("{request:?} answered with {reply:?}"),
        }
    }

    /// Sends `request` on the held lease, unless the worker must self-fence first.
    fn act(&mut self, now: Time, request: WorkerRequest) {
        let held = self.held.expect("acting without a lease");
        if now >= held.act_until && !self.bugs.on(Bug::WorkerWithoutSelfFence) {
            self.abandon(Abandon::SelfFenced);
            return;
        }
        self.send_main(now, request);
    }

    fn send_main(&mut self, now: Time, request: WorkerRequest) {
        assert!(self.main.is_none(), "two main requests in flight");
        let inflight = self.send(now, request);
        self.main = Some(inflight);
    }

    fn send(&mut self, now: Time, request: WorkerRequest) -> InFlight {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.actions.push_back(WorkerAction::Send(id, request));
        InFlight { id, request, sent_at: now, deadline: now + self.timeout(request), departed: false }
    }

    /// How long to wait for an answer to `request`.
    fn timeout(&self, request: WorkerRequest) -> Span {
        match request {
            WorkerRequest::Acquire => self.config.request_timeout + self.config.acquire_wait,
            _ => self.config.request_timeout,
        }
    }

    fn abandon(&mut self, why: Abandon) {
        let held = self.held.take().expect("abandoning without a lease");
        self.main = None;
        self.acquire_at = self.last_now;
        self.actions.push_back(WorkerAction::Abandoned { job: held.job, epoch: held.epoch, why });
    }

    fn tick(&mut self, now: Time) {
        if let Some(held) = self.held {
            if now >= held.act_until && !self.bugs.on(Bug::WorkerWithoutSelfFence) {
                self.abandon(Abandon::SelfFenced);
            }
        }
        if let Some(inflight) = self.main.filter(|inflight| now >= inflight.deadline) {
            self.main = None;
            // Send it again under the same id, so that whichever answer comes first is taken.
            // `sent_at` stays that of the first send: the lease estimate stays conservative. So an
            // acquire goes out again only while a grant answering the new copy would arrive in time
            // to be kept: with a renewal's round trip left before the worker must self-fence.
            // Past that it is asked afresh (below), under a new id counted from now. (Once only
            // "in time to be used": the swarm's seed 700599 had a copy sent 148 ms into a 221 ms
            // estimate granted after a long poll; the grant came 13 ms before the self-fence, the
            // effect started, and the worker fenced itself with its renewal's answer on the way,
            // a live, connected worker losing its lease: heartbeats_keep_leases.)
            let answered_by = now + self.timeout(inflight.request);
            let keepable_until = inflight.sent_at + self.config.acquire_hold_max();
            if inflight.request != WorkerRequest::Acquire || answered_by <= keepable_until {
                self.actions.push_back(WorkerAction::Send(inflight.id, inflight.request));
                self.main = Some(InFlight { deadline: answered_by, departed: true, ..inflight });
            } else {
                if self.given_up.len() == GIVEN_UP_KEPT {
                    self.given_up.pop_front();
                }
                self.given_up.push_back((inflight.id, None));
            }
        }
        self.heartbeat(now);
        if self.held.is_none() && self.main.is_none() && now >= self.acquire_at {
            self.send_main(now, WorkerRequest::Acquire);
        }
    }

    fn heartbeat(&mut self, now: Time) {
        let Some(mut held) = self.held else { return };
        if held.renew.is_some_and(|renew| now >= renew.deadline) {
            held.renew = None; // Lost; the next heartbeat tries again.
        }
        if held.renew.is_none() && now >= held.next_heartbeat {
            let renew = self.send(now, WorkerRequest::Renew { job: held.job, epoch: held.epoch });
            held.renew = Some(renew);
            held.next_heartbeat = now + self.config.heartbeat_every;
        }
        self.held = Some(held);
    }

    fn advance(&mut self, now: Time) {
        assert!(now >= self.last_now, "worker time went backwards: {now} after {}", self.last_now);
        self.last_now = now;
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    // Proves timings read from a file cannot overflow the check that refuses them (the fuzz test
    // found `heartbeat_every + drift_margin` overflowing on a plan's u64::MAX): an unworkable
    // timing at the top of the range is an error, not a panic or a wrapped sum that passes.
    #[test]
    fn timings_at_the_top_of_the_range_are_refused_not_overflowed() {
        let good = WorkerConfig {
            lease_ttl: Span(1_000_000),
            heartbeat_every: Span(250_000),
            drift_margin: Span(125_000),
            request_timeout: Span(100_000),
            idle_backoff: Span(5_000),
            acquire_wait: Span(100_000),
        };
        assert_eq!(good.validate(), Ok(()));
        let heartbeat = WorkerConfig { heartbeat_every: Span(u64::MAX), ..good };
        assert!(matches!(heartbeat.validate(), Err(ConfigError::WorkerTiming(_))));
        let wait = WorkerConfig { acquire_wait: Span(u64::MAX), ..good };
        assert!(matches!(wait.validate(), Err(ConfigError::UnusableGrant { .. })));
    }
}
