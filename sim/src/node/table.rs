//! The table node: serves the lease table, and records what the table decided, with the exact
//! times and expiries it used.

use crate::history::{Event, Node, OutcomeKind};
use crate::net::{Reply, Request};
use crate::world::Ctx;
use lease_core::{
    Acquired, BatchId, Completion, Enqueued, Epoch, Fencing, JobId, NodeId, Outcome, OutputId, Quarantine,
    ReclaimReply, ReclaimRequest, Refusal, Rejection, Renewal, Requeue, Terminal, WorkerReply, WorkerRequest,
};

/// Answers one request to the table.
pub(super) fn serve(ctx: &Ctx, request: Request) -> Option<Reply> {
    let now = ctx.now();
    let mut state = ctx.state();
    let table = &mut state.table;
    let mut events: Vec<Event> = Vec::with_capacity(1);
    let reply = match request {
        Request::Enqueue(job) => match table.enqueue(now, job).expect("the table's clock only moves forward") {
            Enqueued::Accepted { backlog } => {
                events.push(Event::Arrived { job, backlog });
                Reply::Enqueued(None)
            }
            Enqueued::Duplicate => Reply::Enqueued(None),
            Enqueued::Rejected(rejection) => {
                let Rejection::QueueFull { .. } = rejection;
                events.push(Event::Rejected { job, reason: "queue_full".to_string() });
                Reply::Enqueued(Some(rejection))
            }
        },
        Request::Worker(n, request) => Reply::Worker(serve_worker(ctx, &mut events, table, n, request)),
        Request::Reclaimer(n, request) => Reply::Reclaimer(serve_reclaimer(ctx, &mut events, table, n, request)),
    };
    for event in events {
        state.record_at(now, Node::Table, event);
    }
    Some(reply)
}

fn serve_worker(
    ctx: &Ctx,
    events: &mut Vec<Event>,
    table: &mut lease_core::LeaseTable,
    n: u32,
    request: WorkerRequest,
) -> WorkerReply {
    let now = ctx.now();
    let misuse = "the table's clock only moves forward, and jobs are known";
    match request {
        WorkerRequest::Acquire => {
            let acquired = table.acquire(now, NodeId(n)).expect(misuse);
            if let Acquired::Granted(grant) = acquired {
                let lease = grant.lease;
                events.push(Event::Granted {
                    job: lease.job,
                    epoch: lease.epoch,
                    owner: Node::Worker(n),
                    expires_at_us: lease.expires_at.0,
                    attempt: grant.attempt,
                });
            }
            WorkerReply::Acquired(acquired)
        }
        WorkerRequest::Renew { job, epoch } => {
            let renewal = table.renew(now, job, epoch).expect(misuse);
            match renewal {
                Renewal::Renewed { epoch, expires_at } => {
                    events.push(Event::Renewed { job, epoch, expires_at_us: expires_at.0 })
                }
                Renewal::Refused(refusal) => events.push(refused(job, epoch, "renew", refusal)),
            }
            WorkerReply::Renewed(renewal)
        }
        WorkerRequest::Complete { job, epoch, output } => {
            let completion = table.complete(now, job, epoch, output).expect(misuse);
            completed(events, job, epoch, output, completion, None);
            WorkerReply::Completed(completion)
        }
        WorkerRequest::Requeue { job, epoch } => {
            let requeue = table.requeue(now, job, epoch).expect(misuse);
            requeued(events, job, epoch, requeue, None);
            WorkerReply::Requeued(requeue)
        }
        WorkerRequest::Lookup { .. } | WorkerRequest::Execute { .. } => {
            panic!("harness bug: {request:?} routed to the table")
        }
    }
}

fn serve_reclaimer(
    ctx: &Ctx,
    events: &mut Vec<Event>,
    table: &mut lease_core::LeaseTable,
    n: u32,
    request: ReclaimRequest,
) -> ReclaimReply {
    let now = ctx.now();
    let misuse = "the table's clock only moves forward, and jobs are known";
    match request {
        ReclaimRequest::ListExpired { as_of } => ReclaimReply::Listed(table.expired(now, as_of).expect(misuse)),
        ReclaimRequest::Fence { batch, lease, as_of } => {
            let fencing = table.fence(now, lease.job, lease.epoch, NodeId(n), as_of).expect(misuse);
            if let Fencing::Won { expired, lease: ours } = fencing {
                events.push(Event::Reclaimed {
                    job: expired.job,
                    epoch: expired.epoch,
                    expires_at_us: expired.expires_at.0,
                    new_epoch: ours.epoch,
                    new_expires_at_us: ours.expires_at.0,
                    reclaimer: Node::Reclaimer(n),
                    batch,
                });
            }
            ReclaimReply::Fenced(fencing)
        }
        ReclaimRequest::Complete { batch, job, epoch, output } => {
            let completion = table.complete(now, job, epoch, output).expect(misuse);
            completed(events, job, epoch, output, completion, Some(batch));
            ReclaimReply::Completed(completion)
        }
        ReclaimRequest::Requeue { batch, job, epoch } => {
            let requeue = table.requeue(now, job, epoch).expect(misuse);
            requeued(events, job, epoch, requeue, Some(batch));
            ReclaimReply::Requeued(requeue)
        }
        ReclaimRequest::Quarantine { batch, job, epoch, recorded, rival } => {
            let quarantine = table.quarantine(now, job, epoch, recorded, rival).expect(misuse);
            match quarantine {
                Quarantine::Quarantined(terminal) => events.push(terminal_event(terminal, Some(batch))),
                Quarantine::Refused(refusal) => events.push(refused(job, epoch, "quarantine", refusal)),
            }
            ReclaimReply::Quarantined(quarantine)
        }
        ReclaimRequest::Lookup { .. } => panic!("harness bug: {request:?} routed to the table"),
    }
}

fn completed(
    events: &mut Vec<Event>,
    job: JobId,
    epoch: Epoch,
    output: OutputId,
    completion: Completion,
    batch: Option<BatchId>,
) {
    match completion {
        Completion::Completed(terminal) => events.push(terminal_event(terminal, batch)),
        Completion::AlreadyCompleted => events.push(Event::AlreadyCompleted { job, epoch, output }),
        Completion::Conflict { .. } => {
            events.push(Event::Refused { job, epoch, request: "complete".to_string(), reason: "conflict".to_string() })
        }
        Completion::Refused(refusal) => events.push(refused(job, epoch, "complete", refusal)),
    }
}

fn requeued(events: &mut Vec<Event>, job: JobId, epoch: Epoch, requeue: Requeue, batch: Option<BatchId>) {
    match requeue {
        Requeue::Requeued { attempts } => events.push(Event::Requeued { job, epoch, attempts, batch }),
        Requeue::DeadLettered(terminal) => events.push(terminal_event(terminal, batch)),
        Requeue::Refused(refusal) => events.push(refused(job, epoch, "requeue", refusal)),
    }
}

/// The `terminal` history event for a table outcome.
pub(crate) fn terminal_event(terminal: Terminal, batch: Option<BatchId>) -> Event {
    let (outcome, output, attempts, identities) = match terminal.outcome {
        Outcome::Completed { output } => (OutcomeKind::Completed, Some(output), None, None),
        Outcome::DeadLettered { attempts } => (OutcomeKind::DeadLettered, None, Some(attempts), None),
        Outcome::Quarantined { recorded, rival } => (OutcomeKind::Quarantined, None, None, Some([recorded, rival])),
    };
    Event::Terminal { job: terminal.job, outcome, output, epoch: terminal.epoch, attempts, identities, batch }
}

fn refused(job: JobId, epoch: Epoch, request: &str, refusal: Refusal) -> Event {
    let reason = match refusal {
        Refusal::StaleEpoch { .. } => "stale_epoch",
        Refusal::Expired { .. } => "expired",
        Refusal::NotLeased => "not_leased",
        Refusal::AlreadyTerminal => "already_terminal",
    };
    Event::Refused { job, epoch, request: request.to_string(), reason: reason.to_string() }
}
