//! The table node: serves the lease table, and records what the table decided, with the exact
//! times and expiries it used.
//!
//! An `Acquire` that finds the queue empty is held open (long polling) for up to the workers'
//! `acquire_wait`, and answered as soon as a job can be granted: idle workers then cost one
//! message pair per wait instead of one per poll. Held requests are volatile: a restart drops
//! them, and the workers ask again when their wait runs out.

use super::bind;
use crate::history::{Event, Listing, Node, RefuseReason, RefusedRequest};
use crate::net::{table_addr, Envelope, TAG};
use crate::net::{Reply, Request};
use crate::world::Ctx;
use lease_core::{
    Acquired, BatchId, Completion, Enqueued, Epoch, Fencing, JobId, NodeId, OutputId, Quarantine, ReclaimReply,
    ReclaimRequest, Refusal, Renewal, Requeue, WorkerReply, WorkerRequest,
};
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// An `Acquire` held open until a job can be granted or its wait runs out.
struct Parked {
    from: SocketAddr,
    id: u64,
    worker: u32,
    until_us: u64,
}

pub(super) async fn main(ctx: Arc<Ctx>) {
    let Some(endpoint) = bind(table_addr()).await else { return };
    let wait_us = ctx.params.worker.acquire_wait.as_us();
    // In arrival order; every wait is the same length, so also in order of running out.
    let mut parked: VecDeque<Parked> = VecDeque::new();
    // One timer for the first held request, kept across messages: arming a fresh timeout for
    // every request the table receives would double the simulator's work while workers idle.
    let mut timer: Option<(u64, Pin<Box<madsim::time::Sleep>>)> = None;
    loop {
        let first_until = parked.front().map(|first| first.until_us);
        if timer.as_ref().map(|(until, _)| *until) != first_until {
            timer = first_until.map(|until| {
                ctx.armed();
                let wait = Duration::from_micros(until.saturating_sub(ctx.now().0).max(1));
                (until, Box::pin(madsim::time::sleep(wait)))
            });
        }
        let mut receiving = pin!(endpoint.recv_from_raw(TAG));
        let received = poll_fn(|cx| {
            if let Poll::Ready(received) = receiving.as_mut().poll(cx) {
                return Poll::Ready(received.map(Some));
            }
            let fired = timer.as_mut().is_some_and(|(_, sleep)| sleep.as_mut().poll(cx).is_ready());
            if fired {
                return Poll::Ready(Ok(None));
            }
            Poll::Pending
        })
        .await;
        let Ok(received) = received else { return };
        let Some((payload, from)) = received else {
            timer = None;
            let now = ctx.now().0;
            while parked.front().is_some_and(|first| first.until_us <= now) {
                let first = parked.pop_front().expect("checked");
                reply(&endpoint, first.from, first.id, Reply::Worker(WorkerReply::Acquired(Acquired::Empty))).await;
            }
            continue;
        };
        let envelope = *payload.downcast::<Envelope<Request>>().expect("only requests reach the table");
        if let Request::Worker(worker, WorkerRequest::Acquire) = envelope.body {
            if parked.iter().any(|p| p.from == from && p.id == envelope.id) {
                continue; // A retried copy of a request already held.
            }
            let answer = serve(&ctx, envelope.body.clone());
            if wait_us > 0 && matches!(answer, Reply::Worker(WorkerReply::Acquired(Acquired::Empty))) {
                parked.push_back(Parked { from, id: envelope.id, worker, until_us: ctx.now().0 + wait_us });
                continue;
            }
            reply(&endpoint, from, envelope.id, answer).await;
            continue;
        }
        let answer = serve(&ctx, envelope.body);
        reply(&endpoint, from, envelope.id, answer).await;
        // Anything may have made a job grantable (an arrival, a requeue): serve the held first.
        while let Some(first) = parked.front() {
            let answer = serve(&ctx, Request::Worker(first.worker, WorkerRequest::Acquire));
            if matches!(answer, Reply::Worker(WorkerReply::Acquired(Acquired::Empty))) {
                break;
            }
            let first = parked.pop_front().expect("checked");
            reply(&endpoint, first.from, first.id, answer).await;
        }
    }
}

async fn reply(endpoint: &madsim::net::Endpoint, to: SocketAddr, id: u64, body: Reply) {
    // A lost reply is normal: the caller times out and asks again.
    let _ = endpoint.send_to_raw(to, TAG, Box::new(Envelope { id, body })).await;
}

/// Answers one request to the table.
fn serve(ctx: &Ctx, request: Request) -> Reply {
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
            Enqueued::Duplicate => {
                events.push(Event::Duplicate { job });
                Reply::Enqueued(None)
            }
            Enqueued::Rejected(rejection) => {
                events.push(Event::Rejected { job, reason: rejection.into() });
                Reply::Enqueued(Some(rejection))
            }
        },
        Request::Worker(n, request) => Reply::Worker(serve_worker(ctx, &mut events, table, n, request)),
        Request::Reclaimer(n, request) => Reply::Reclaimer(serve_reclaimer(ctx, &mut events, table, n, request)),
    };
    for event in events {
        state.record_at(now, Node::Table, event);
    }
    reply
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
    let from = Node::Worker(n);
    match request {
        WorkerRequest::Acquire => {
            let acquired = table.acquire(now, NodeId(n)).expect(misuse);
            match acquired {
                Acquired::Granted(grant) => {
                    let lease = grant.lease;
                    events.push(Event::Granted {
                        job: lease.job,
                        epoch: lease.epoch,
                        owner: from,
                        expires_at_us: lease.expires_at.0,
                        attempt: grant.attempt,
                    });
                }
                Acquired::Empty => events.push(Event::AcquireEmpty { owner: from }),
            }
            WorkerReply::Acquired(acquired)
        }
        WorkerRequest::Renew { job, epoch } => {
            let renewal = table.renew(now, job, epoch).expect(misuse);
            match renewal {
                Renewal::Renewed { epoch, expires_at } => {
                    events.push(Event::Renewed { from, job, epoch, expires_at_us: expires_at.0 })
                }
                Renewal::Refused(refusal) => {
                    events.push(refused(from, job, epoch, RefusedRequest::Renew, refusal, None))
                }
            }
            WorkerReply::Renewed(renewal)
        }
        WorkerRequest::Complete { job, epoch, output } => {
            let completion = table.complete(now, job, epoch, output).expect(misuse);
            completed(events, from, job, epoch, output, completion, None);
            WorkerReply::Completed(completion)
        }
        WorkerRequest::Requeue { job, epoch } => {
            let requeue = table.requeue(now, job, epoch).expect(misuse);
            requeued(events, from, job, epoch, requeue, None);
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
    let from = Node::Reclaimer(n);
    match request {
        ReclaimRequest::ListExpired { batch, as_of } => {
            let leases = table.expired(now, as_of).expect(misuse);
            let listed = leases
                .iter()
                .map(|lease| Listing { job: lease.job, epoch: lease.epoch, expires_at_us: lease.expires_at.0 })
                .collect();
            events.push(Event::Listed { reclaimer: from, batch, leases: listed });
            ReclaimReply::Listed(leases)
        }
        ReclaimRequest::Fence { batch, lease, as_of } => {
            let fencing = table.fence(now, lease.job, lease.epoch, NodeId(n), as_of).expect(misuse);
            let (job, expected) = (lease.job, lease.epoch);
            events.push(match fencing {
                Fencing::Won { expired, lease: ours } => Event::Reclaimed {
                    job: expired.job,
                    epoch: expired.epoch,
                    expires_at_us: expired.expires_at.0,
                    new_epoch: ours.epoch,
                    new_expires_at_us: ours.expires_at.0,
                    reclaimer: from,
                    batch,
                },
                Fencing::LostRace { current } => Event::LostRace { job, expected, current, batch },
                Fencing::NotExpired { expires_at } => {
                    Event::NotExpired { job, expected, expires_at_us: expires_at.0, batch }
                }
            });
            ReclaimReply::Fenced(fencing)
        }
        ReclaimRequest::Complete { batch, job, epoch, output } => {
            let completion = table.complete(now, job, epoch, output).expect(misuse);
            completed(events, from, job, epoch, output, completion, Some(batch));
            ReclaimReply::Completed(completion)
        }
        ReclaimRequest::Requeue { batch, job, epoch } => {
            let requeue = table.requeue(now, job, epoch).expect(misuse);
            requeued(events, from, job, epoch, requeue, Some(batch));
            ReclaimReply::Requeued(requeue)
        }
        ReclaimRequest::Quarantine { batch, job, epoch, recorded, rival } => {
            let quarantine = table.quarantine(now, job, epoch, recorded, rival).expect(misuse);
            events.push(match quarantine {
                Quarantine::Quarantined(terminal) => Event::terminal(from, terminal, Some(batch)),
                Quarantine::Refused(refusal) => {
                    refused(from, job, epoch, RefusedRequest::Quarantine, refusal, Some(batch))
                }
            });
            ReclaimReply::Quarantined(quarantine)
        }
        ReclaimRequest::Lookup { .. } => panic!("harness bug: {request:?} routed to the table"),
    }
}

fn completed(
    events: &mut Vec<Event>,
    from: Node,
    job: JobId,
    epoch: Epoch,
    output: OutputId,
    completion: Completion,
    batch: Option<BatchId>,
) {
    events.push(match completion {
        Completion::Completed(terminal) => Event::terminal(from, terminal, batch),
        Completion::AlreadyCompleted => Event::AlreadyCompleted { from, job, epoch, output },
        Completion::Conflict { .. } => Event::Refused {
            from,
            job,
            epoch,
            request: RefusedRequest::Complete,
            reason: RefuseReason::Conflict,
            batch,
        },
        Completion::Refused(refusal) => refused(from, job, epoch, RefusedRequest::Complete, refusal, batch),
    });
}

fn requeued(
    events: &mut Vec<Event>,
    from: Node,
    job: JobId,
    epoch: Epoch,
    requeue: Requeue,
    batch: Option<BatchId>,
) {
    events.push(match requeue {
        Requeue::Requeued { attempts } => Event::Requeued { from, job, epoch, attempts, batch },
        Requeue::DeadLettered(terminal) => Event::terminal(from, terminal, batch),
        Requeue::Refused(refusal) => refused(from, job, epoch, RefusedRequest::Requeue, refusal, batch),
    });
}

fn refused(
    from: Node,
    job: JobId,
    epoch: Epoch,
    request: RefusedRequest,
    refusal: Refusal,
    batch: Option<BatchId>,
) -> Event {
    Event::Refused { from, job, epoch, request, reason: refusal.into(), batch }
}
