//! The line of each answer of the table and the ledger, from the request and its answer alone.
//!
//! One function per request, and the only place where a `lease-core` answer becomes a history
//! line: the simulator's table and ledger nodes, every `lease-store` backend and the live runner
//! write through these, so a rule's answer reads the same wherever it was decided.

use crate::{EffectRejectReason, Event, Listing, Node, OutcomeKind, RefuseReason, RefusedRequest};
use lease_core::{
    Acquired, Apply, BatchId, Completion, Enqueued, Epoch, Fencing, Grant, JobId, Lease, Lookup, OpId, Outcome,
    OutputId, Owner, Quarantine, Release, Renewal, Requeue, Terminal,
};

/// Who asked, as a line names it: the requesting worker or reclaimer (the table itself when the
/// caller is unnamed) and, for a reclaimer, its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asker {
    /// The requester.
    pub from: Node,
    /// The reclaim batch the request belongs to, if any.
    pub batch: Option<BatchId>,
}

impl Asker {
    /// A worker's or reclaimer's request, outside any batch.
    pub fn node(from: Node) -> Asker {
        Asker { from, batch: None }
    }

    /// A reclaimer's request in `batch`.
    pub fn in_batch(from: Node, batch: BatchId) -> Asker {
        Asker { from, batch: Some(batch) }
    }

    /// The batch a listing or a fence belongs to. A caller that names none is in batch 0 of its
    /// reclaimer (reclaimer 0 when the caller is not one): every `listed` and `reclaimed` line
    /// names a batch.
    fn batch_or_first(&self) -> BatchId {
        self.batch.unwrap_or(BatchId {
            reclaimer: lease_core::ReclaimerId(match self.from {
                Node::Reclaimer(n) => n,
                _ => 0,
            }),
            seq: 0,
        })
    }
}

impl From<Owner> for Node {
    fn from(owner: Owner) -> Node {
        match owner {
            Owner::Worker(worker) => Node::Worker(worker.0),
            Owner::Reclaimer(reclaimer) => Node::Reclaimer(reclaimer.0),
        }
    }
}

/// An enqueue's line.
pub fn enqueued(job: JobId, answer: &Enqueued) -> Event {
    match *answer {
        Enqueued::Accepted { backlog } => Event::Arrived { job, backlog },
        Enqueued::Duplicate => Event::Duplicate { job },
        Enqueued::Rejected(rejection) => Event::Rejected { job, reason: rejection.into() },
    }
}

/// An acquire's line, for worker `owner`.
pub fn acquired(owner: Node, answer: &Acquired) -> Event {
    match answer {
        Acquired::Granted(grant) => grant_line(grant, false),
        Acquired::Regranted(grant) => grant_line(grant, true),
        Acquired::Empty => Event::AcquireEmpty { owner },
        Acquired::Spent { job, epoch } => Event::AcquireSpent { owner, job: *job, epoch: *epoch },
    }
}

fn grant_line(grant: &Grant, again: bool) -> Event {
    let (lease, attempt) = (grant.lease, grant.attempt);
    let (job, epoch, owner, expires_at_us) = (lease.job, lease.epoch, Node::from(lease.owner), lease.expires_at.0);
    if again {
        return Event::Regranted { job, epoch, owner, expires_at_us, attempt };
    }
    Event::Granted { job, epoch, owner, expires_at_us, attempt }
}

/// A renewal's line.
pub fn renewal(asker: &Asker, job: JobId, epoch: Epoch, answer: &Renewal) -> Event {
    match *answer {
        Renewal::Renewed { epoch, expires_at } => {
            Event::Renewed { from: asker.from, job, epoch, expires_at_us: expires_at.0 }
        }
        Renewal::Refused(refusal) => refused(asker, job, epoch, RefusedRequest::Renew, refusal.into()),
    }
}

/// A completion's line.
pub fn completion(asker: &Asker, job: JobId, epoch: Epoch, output: OutputId, answer: &Completion) -> Event {
    match answer {
        Completion::Completed(ended) => terminal(asker, ended),
        Completion::AlreadyCompleted => Event::AlreadyCompleted { from: asker.from, job, epoch, output },
        Completion::Conflict { .. } => refused(asker, job, epoch, RefusedRequest::Complete, RefuseReason::Conflict),
        Completion::Refused(refusal) => refused(asker, job, epoch, RefusedRequest::Complete, (*refusal).into()),
    }
}

/// A requeue's line.
pub fn requeue(asker: &Asker, job: JobId, epoch: Epoch, answer: &Requeue) -> Event {
    match answer {
        Requeue::Requeued { attempts } => {
            Event::Requeued { from: asker.from, job, epoch, attempts: *attempts, batch: asker.batch }
        }
        Requeue::DeadLettered(ended) => terminal(asker, ended),
        Requeue::Refused(refusal) => refused(asker, job, epoch, RefusedRequest::Requeue, (*refusal).into()),
    }
}

/// A dead-letter's line (a worker's, after a permanent failure).
pub fn dead_letter(asker: &Asker, job: JobId, epoch: Epoch, answer: &Requeue) -> Event {
    match answer {
        Requeue::DeadLettered(ended) => {
            let mut event = terminal(asker, ended);
            if let Event::Terminal { permanent, .. } = &mut event {
                *permanent = true;
            }
            event
        }
        Requeue::Requeued { .. } => unreachable!("a dead-letter never requeues"),
        Requeue::Refused(refusal) => refused(asker, job, epoch, RefusedRequest::DeadLetter, (*refusal).into()),
    }
}

/// A release's line.
pub fn release(asker: &Asker, job: JobId, epoch: Epoch, answer: &Release) -> Event {
    match *answer {
        Release::Released { attempts } => Event::Released { from: asker.from, job, epoch, attempts },
        Release::Refused(refusal) => refused(asker, job, epoch, RefusedRequest::Release, refusal.into()),
    }
}

/// A listing's line.
pub fn listed(asker: &Asker, leases: &[Lease]) -> Event {
    let leases =
        leases.iter().map(|lease| Listing { job: lease.job, epoch: lease.epoch, expires_at_us: lease.expires_at.0 });
    Event::Listed { reclaimer: asker.from, batch: asker.batch_or_first(), leases: leases.collect() }
}

/// A fence's line.
pub fn fencing(asker: &Asker, job: JobId, expected: Epoch, answer: &Fencing) -> Event {
    let batch = asker.batch_or_first();
    match *answer {
        Fencing::Won { expired, lease } => Event::Reclaimed {
            job,
            epoch: expired.epoch,
            expires_at_us: expired.expires_at.0,
            new_epoch: lease.epoch,
            new_expires_at_us: lease.expires_at.0,
            reclaimer: Node::from(lease.owner),
            batch,
        },
        Fencing::LostRace { current } => Event::LostRace { job, expected, current, batch },
        Fencing::NotExpired { expires_at } => Event::NotExpired { job, expected, expires_at_us: expires_at.0, batch },
    }
}

/// A quarantine's line.
pub fn quarantine(asker: &Asker, job: JobId, epoch: Epoch, answer: &Quarantine) -> Event {
    match answer {
        Quarantine::Quarantined(ended) => terminal(asker, ended),
        Quarantine::Refused(refusal) => refused(asker, job, epoch, RefusedRequest::Quarantine, (*refusal).into()),
    }
}

/// A ledger lookup's line.
pub fn lookup(asker: &Asker, op: OpId, epoch: Epoch, answer: &Lookup) -> Event {
    let (found, rival) = match *answer {
        Lookup::Empty => (None, None),
        Lookup::Recorded(output) => (Some(output), None),
        Lookup::Conflict { recorded, rival } => (Some(recorded), Some(rival)),
    };
    Event::LookedUp { from: asker.from, job: op.job, op, epoch, found, rival, batch: asker.batch }
}

/// A ledger apply's line. An unnamed caller of the ledger is the dependency writing on its own:
/// its lines name the ledger.
pub fn apply(asker: &Asker, op: OpId, epoch: Epoch, output: OutputId, answer: &Apply) -> Event {
    let (from, job) = (asker.from, op.job);
    match EffectRejectReason::of(*answer) {
        None => Event::EffectApplied { from, job, op, epoch, output },
        Some(reason) => Event::EffectRejected { from, job, op, epoch, output, reason },
    }
}

/// A terminal outcome's line, reached on `asker`'s request.
pub fn terminal(asker: &Asker, ended: &Terminal) -> Event {
    let (outcome, output, attempts, identities) = match ended.outcome {
        Outcome::Completed { output } => (OutcomeKind::Completed, Some(output), None, None),
        Outcome::DeadLettered { attempts } => (OutcomeKind::DeadLettered, None, Some(attempts), None),
        Outcome::Quarantined { recorded, rival } => (OutcomeKind::Quarantined, None, None, Some([recorded, rival])),
    };
    Event::Terminal {
        from: asker.from,
        job: ended.job,
        outcome,
        output,
        epoch: ended.epoch,
        attempts,
        identities,
        batch: asker.batch,
        permanent: false,
    }
}

fn refused(asker: &Asker, job: JobId, epoch: Epoch, request: RefusedRequest, reason: RefuseReason) -> Event {
    Event::Refused { from: asker.from, job, epoch, request, reason, batch: asker.batch }
}

/// The node that writes an answer's line: the ledger's answers are the ledger's, every other the
/// table's.
pub fn writer(event: &Event) -> Node {
    match event {
        Event::LookedUp { .. } | Event::EffectApplied { .. } | Event::EffectRejected { .. } => Node::Ledger,
        _ => Node::Table,
    }
}

/// Whether a store writes this answer down. An empty poll (`acquire_empty`) and an empty scan (a
/// `listed` with no lease) are not: they change nothing, and an idle fleet would otherwise write a
/// durable row per poll and per scan, for ever. A world's history keeps them (they cost nothing
/// there, and the report reads the polls); a store's log is the history without them.
pub fn is_written(event: &Event) -> bool {
    match event {
        Event::AcquireEmpty { .. } | Event::AcquireSpent { .. } => false,
        Event::Listed { leases, .. } => !leases.is_empty(),
        _ => true,
    }
}

/// An answer's line, stamped `t_us` by the node that writes it: one JSON object, as a history
/// file holds it.
pub fn line(t_us: u64, event: Event) -> String {
    crate::Entry { t_us, node: writer(&event), event }.to_json()
}
