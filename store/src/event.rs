//! The events a store writes to its log, one per request, in the transaction that answers it.
//!
//! Each is one line of the project's history contract (README, "The history"): the same `kind`
//! and field names, serialised by serde, so the log read in commit order is a history that
//! `lease-sim check` reads. The store keeps its own small type rather than depending on the
//! simulator (`lease-sim` depends on madsim; a service embedding the store must not): the line is
//! stored as JSON text, `t_us` and `node` first, exactly as the simulator writes it. The requester
//! (`from`, `owner`, `reclaimer`) and the reclaim `batch` are the caller's facts, named by the
//! handle's [`Caller`].

use lease_core::{
    Acquired, Apply, BatchId, Completion, Enqueued, Epoch, Fencing, Grant, JobId, Lease, Lookup, OpId, Outcome,
    OutputId, Owner, Quarantine, Refusal, Rejection, Release, Renewal, Requeue, Terminal, WorkerId,
};
use serde::Serialize;

/// Who is asking, as the history names it: the handle's node and, for a reclaimer, its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caller {
    /// The requesting worker or reclaimer; `None`: unnamed (written as `"table"`).
    pub from: Option<Owner>,
    /// The reclaim batch the request belongs to, if any.
    pub batch: Option<BatchId>,
}

impl Caller {
    /// The history's name of the requester.
    pub fn node(&self) -> String {
        self.from.map_or_else(|| "table".to_string(), |owner| owner.to_string())
    }
}

/// One of a listing's leases, as the `listed` line shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// The job.
    pub job: JobId,
    /// The lease's epoch.
    pub epoch: Epoch,
    /// The lease's expiry by the table's clock.
    pub expires_at_us: u64,
}

/// The request a `refused` line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// A renewal.
    Renew,
    /// A completion.
    Complete,
    /// A requeue.
    Requeue,
    /// A quarantine.
    Quarantine,
    /// A release.
    Release,
}

/// Why a request was refused, as the history spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Not the job's current epoch.
    StaleEpoch,
    /// The lease had expired by the table's clock.
    Expired,
    /// The job is queued.
    NotLeased,
    /// The job had ended.
    AlreadyTerminal,
    /// A completion with another output than the recorded one.
    Conflict,
}

impl From<Refusal> for Reason {
    fn from(refusal: Refusal) -> Reason {
        match refusal {
            Refusal::StaleEpoch { .. } => Reason::StaleEpoch,
            Refusal::Expired { .. } => Reason::Expired,
            Refusal::NotLeased => Reason::NotLeased,
            Refusal::AlreadyTerminal => Reason::AlreadyTerminal,
        }
    }
}

/// A terminal outcome's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// Completed.
    Completed,
    /// Dead-lettered.
    DeadLettered,
    /// Quarantined.
    Quarantined,
}

/// Why the ledger refused an effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectReason {
    /// Below the operation's fence.
    Fenced,
    /// Another output is recorded.
    Conflict,
    /// The same output is recorded.
    AlreadyApplied,
}

/// One history line's payload; `kind` is the variant's snake_case name. Fields as in the README.
#[allow(missing_docs)] // Each field is documented once, in the README's table of kinds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// An arrival accepted.
    Arrived { job: JobId, backlog: usize },
    /// An arrival rejected.
    Rejected { job: JobId, reason: &'static str },
    /// An enqueue of a known job.
    Duplicate { job: JobId },
    /// A grant.
    Granted { job: JobId, epoch: Epoch, owner: String, expires_at_us: u64, attempt: u32 },
    /// A retried acquire's standing grant.
    Regranted { job: JobId, epoch: Epoch, owner: String, expires_at_us: u64, attempt: u32 },
    /// Nothing queued.
    AcquireEmpty { owner: String },
    /// A renewal.
    Renewed { from: String, job: JobId, epoch: Epoch, expires_at_us: u64 },
    /// A reclaim listing.
    Listed {
        reclaimer: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
        leases: Vec<Listing>,
    },
    /// A fence won.
    Reclaimed {
        job: JobId,
        epoch: Epoch,
        expires_at_us: u64,
        new_epoch: Epoch,
        new_expires_at_us: u64,
        reclaimer: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// A fence lost.
    LostRace {
        job: JobId,
        expected: Epoch,
        current: Epoch,
        #[serde(skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// A fence refused: renewed since the listing.
    NotExpired {
        job: JobId,
        expected: Epoch,
        expires_at_us: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// A ledger lookup.
    LookedUp {
        from: String,
        job: JobId,
        op: OpId,
        epoch: Epoch,
        #[serde(skip_serializing_if = "Option::is_none")]
        found: Option<OutputId>,
        #[serde(skip_serializing_if = "Option::is_none")]
        rival: Option<OutputId>,
        #[serde(skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// An effect recorded.
    EffectApplied { from: String, job: JobId, op: OpId, epoch: Epoch, output: OutputId },
    /// An effect refused.
    EffectRejected { from: String, job: JobId, op: OpId, epoch: Epoch, output: OutputId, reason: EffectReason },
    /// A terminal outcome.
    Terminal {
        from: String,
        job: JobId,
        outcome: OutcomeKind,
        #[serde(skip_serializing_if = "Option::is_none")]
        output: Option<OutputId>,
        epoch: Epoch,
        #[serde(skip_serializing_if = "Option::is_none")]
        attempts: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        identities: Option<[OutputId; 2]>,
        #[serde(skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// An idempotent repeat of a completion.
    AlreadyCompleted { from: String, job: JobId, epoch: Epoch, output: OutputId },
    /// Back in the queue.
    Requeued {
        from: String,
        job: JobId,
        epoch: Epoch,
        attempts: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// A grant undone.
    Released { from: String, job: JobId, epoch: Epoch, attempts: u32 },
    /// A request refused.
    Refused {
        from: String,
        job: JobId,
        epoch: Epoch,
        request: Request,
        reason: Reason,
        #[serde(skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
}

impl Event {
    /// The node that writes the line: the ledger's kinds are the ledger's, the rest the table's.
    pub fn node(&self) -> &'static str {
        match self {
            Event::LookedUp { .. } | Event::EffectApplied { .. } | Event::EffectRejected { .. } => "ledger",
            _ => "table",
        }
    }

    /// The history line, `t_us` and `node` first, as the simulator writes it.
    pub fn line(&self, t_us: u64) -> String {
        let payload = serde_json::to_string(self).expect("an event serialises");
        let rest = payload.strip_prefix('{').expect("an event is an object");
        format!(r#"{{"t_us":{t_us},"node":"{}",{rest}"#, self.node())
    }
}

/// The line for a terminal outcome.
fn terminal(caller: &Caller, terminal: &Terminal) -> Event {
    let (outcome, output, attempts, identities) = match terminal.outcome {
        Outcome::Completed { output } => (OutcomeKind::Completed, Some(output), None, None),
        Outcome::DeadLettered { attempts } => (OutcomeKind::DeadLettered, None, Some(attempts), None),
        Outcome::Quarantined { recorded, rival } => (OutcomeKind::Quarantined, None, None, Some([recorded, rival])),
    };
    Event::Terminal {
        from: caller.node(),
        job: terminal.job,
        outcome,
        output,
        epoch: terminal.epoch,
        attempts,
        identities,
        batch: caller.batch,
    }
}

fn refused(caller: &Caller, job: JobId, epoch: Epoch, request: Request, reason: Reason) -> Event {
    Event::Refused { from: caller.node(), job, epoch, request, reason, batch: caller.batch }
}

fn grant_line(grant: &Grant, again: bool) -> Event {
    let (lease, attempt) = (grant.lease, grant.attempt);
    let (job, epoch, owner, expires_at_us) = (lease.job, lease.epoch, lease.owner.to_string(), lease.expires_at.0);
    if again {
        return Event::Regranted { job, epoch, owner, expires_at_us, attempt };
    }
    Event::Granted { job, epoch, owner, expires_at_us, attempt }
}

/// The line of each answer, from the request and its answer alone: one function per request,
/// shared by every store.
impl Event {
    /// An enqueue's line.
    pub fn enqueued(job: JobId, answer: &Enqueued) -> Event {
        match *answer {
            Enqueued::Accepted { backlog } => Event::Arrived { job, backlog },
            Enqueued::Duplicate => Event::Duplicate { job },
            Enqueued::Rejected(Rejection::QueueFull { .. }) => Event::Rejected { job, reason: "queue_full" },
        }
    }

    /// An acquire's line.
    pub fn acquired(owner: WorkerId, answer: &Acquired) -> Event {
        match answer {
            Acquired::Granted(grant) => grant_line(grant, false),
            Acquired::Regranted(grant) => grant_line(grant, true),
            Acquired::Empty => Event::AcquireEmpty { owner: owner.to_string() },
        }
    }

    /// A renewal's line.
    pub fn renewal(caller: &Caller, job: JobId, epoch: Epoch, answer: &Renewal) -> Event {
        match *answer {
            Renewal::Renewed { epoch, expires_at } => {
                Event::Renewed { from: caller.node(), job, epoch, expires_at_us: expires_at.0 }
            }
            Renewal::Refused(refusal) => refused(caller, job, epoch, Request::Renew, refusal.into()),
        }
    }

    /// A completion's line.
    pub fn completion(caller: &Caller, job: JobId, epoch: Epoch, output: OutputId, answer: &Completion) -> Event {
        match answer {
            Completion::Completed(ended) => terminal(caller, ended),
            Completion::AlreadyCompleted => Event::AlreadyCompleted { from: caller.node(), job, epoch, output },
            Completion::Conflict { .. } => refused(caller, job, epoch, Request::Complete, Reason::Conflict),
            Completion::Refused(refusal) => refused(caller, job, epoch, Request::Complete, (*refusal).into()),
        }
    }

    /// A requeue's line.
    pub fn requeue(caller: &Caller, job: JobId, epoch: Epoch, answer: &Requeue) -> Event {
        match answer {
            Requeue::Requeued { attempts } => {
                Event::Requeued { from: caller.node(), job, epoch, attempts: *attempts, batch: caller.batch }
            }
            Requeue::DeadLettered(ended) => terminal(caller, ended),
            Requeue::Refused(refusal) => refused(caller, job, epoch, Request::Requeue, (*refusal).into()),
        }
    }

    /// A release's line.
    pub fn release(caller: &Caller, job: JobId, epoch: Epoch, answer: &Release) -> Event {
        match *answer {
            Release::Released { attempts } => Event::Released { from: caller.node(), job, epoch, attempts },
            Release::Refused(refusal) => refused(caller, job, epoch, Request::Release, refusal.into()),
        }
    }

    /// A listing's line.
    pub fn listed(caller: &Caller, leases: &[Lease]) -> Event {
        let leases = leases
            .iter()
            .map(|lease| Listing { job: lease.job, epoch: lease.epoch, expires_at_us: lease.expires_at.0 })
            .collect();
        Event::Listed { reclaimer: caller.node(), batch: caller.batch, leases }
    }

    /// A fence's line.
    pub fn fencing(caller: &Caller, job: JobId, expected: Epoch, answer: &Fencing) -> Event {
        let batch = caller.batch;
        match *answer {
            Fencing::Won { expired, lease } => Event::Reclaimed {
                job,
                epoch: expired.epoch,
                expires_at_us: expired.expires_at.0,
                new_epoch: lease.epoch,
                new_expires_at_us: lease.expires_at.0,
                reclaimer: lease.owner.to_string(),
                batch,
            },
            Fencing::LostRace { current } => Event::LostRace { job, expected, current, batch },
            Fencing::NotExpired { expires_at } => {
                Event::NotExpired { job, expected, expires_at_us: expires_at.0, batch }
            }
        }
    }

    /// A quarantine's line.
    pub fn quarantine(caller: &Caller, job: JobId, epoch: Epoch, answer: &Quarantine) -> Event {
        match answer {
            Quarantine::Quarantined(ended) => terminal(caller, ended),
            Quarantine::Refused(refusal) => refused(caller, job, epoch, Request::Quarantine, (*refusal).into()),
        }
    }

    /// A ledger lookup's line.
    pub fn lookup(caller: &Caller, op: OpId, epoch: Epoch, answer: &Lookup) -> Event {
        let (found, rival) = match *answer {
            Lookup::Empty => (None, None),
            Lookup::Recorded(output) => (Some(output), None),
            Lookup::Conflict { recorded, rival } => (Some(recorded), Some(rival)),
        };
        Event::LookedUp { from: caller.node(), job: op.job, op, epoch, found, rival, batch: caller.batch }
    }

    /// A ledger apply's line.
    pub fn apply(caller: &Caller, op: OpId, epoch: Epoch, output: OutputId, answer: &Apply) -> Event {
        // An unnamed caller of the ledger is the ledger's own dependency writing on its own.
        let from = caller.from.map_or_else(|| "ledger".to_string(), |owner| owner.to_string());
        let job = op.job;
        let reason = match answer {
            Apply::Applied => return Event::EffectApplied { from, job, op, epoch, output },
            Apply::AlreadyApplied => EffectReason::AlreadyApplied,
            Apply::Fenced { .. } => EffectReason::Fenced,
            Apply::Conflict { .. } => EffectReason::Conflict,
        };
        Event::EffectRejected { from, job, op, epoch, output, reason }
    }
}
