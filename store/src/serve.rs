//! Serving a request of `lease-core`'s state machines on a store: the one mapping from a
//! worker's or a reclaimer's request to a store call, and from the store's answer to the reply the
//! state machine takes back. The simulator's table and ledger nodes, the live runner's processes
//! and [`crate::service`] all serve through [`serve_worker`] and [`serve_reclaimer`].
//!
//! What stays with the caller is what no store call does: the transport, a call to the dependency
//! (an `Execute`), the lines of the caller's own (a worker's `executing`), and faults.

use crate::{Caller, Store, StoreError};
use lease_core::{
    Owner, ReclaimReply, ReclaimRequest, ReclaimerId, RequestId, Time, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::answers;
use lease_history::{Event, Node};

/// The bits of a request id a worker's life numbers its own requests in ([`life_request`]).
pub const LIFE_SHIFT: u32 = 40;

/// A reply, and the event of the history line the store wrote for it in the same transaction (the
/// line a caller that keeps its own history, as the simulator does, records).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Served<R> {
    /// The reply for the state machine.
    pub reply: R,
    /// The answer's line, as [`lease_history::answers`] makes it and the store logs it.
    pub event: Event,
}

/// Worker request `id` of the worker's life `life` (1, then one more per restart), told apart
/// from every other life's: a new life numbers its requests from 0 again, and the table answers a
/// retried acquire by its id ([`crate::TableStore::acquire_for`]), so an id must be its life's.
pub fn life_request(life: u64, id: RequestId) -> RequestId {
    assert!(id.0 < 1 << LIFE_SHIFT, "request {} past a life's numbering", id.0);
    assert!(life < 1 << (64 - LIFE_SHIFT), "life {life} past the request numbering");
    RequestId(life << LIFE_SHIFT | id.0)
}

/// Serves worker `worker`'s request `request`, numbered `id`, on `store` at the table's time
/// `now`, naming the worker on the store's lines. `id` must tell the worker's lives apart (see
/// [`life_request`]): an acquire is answered by it ([`crate::TableStore::acquire_for`]), so a
/// retried copy whose grant still stands gets that grant again.
///
/// An `Execute` is refused ([`StoreError::Execute`]): it is a call to the dependency, which the
/// caller makes.
pub fn serve_worker(
    store: &mut dyn Store,
    now: Time,
    worker: WorkerId,
    id: RequestId,
    request: WorkerRequest,
) -> Result<Served<WorkerReply>, StoreError> {
    store.set_caller(Caller { from: Some(Owner::Worker(worker)), batch: None });
    let reply = match request {
        WorkerRequest::Acquire => WorkerReply::Acquired(store.acquire_for(now, worker, id)?),
        WorkerRequest::Renew { job, epoch } => WorkerReply::Renewed(store.renew(now, job, epoch)?),
        WorkerRequest::Lookup { op, epoch } => WorkerReply::Looked(store.lookup(now, op, epoch)?),
        WorkerRequest::Execute { op, epoch } => return Err(StoreError::Execute { op, epoch }),
        WorkerRequest::Complete { job, epoch, output } => {
            WorkerReply::Completed(store.complete(now, job, epoch, output)?)
        }
        WorkerRequest::Requeue { job, epoch } => WorkerReply::Requeued(store.requeue(now, job, epoch)?),
        WorkerRequest::DeadLetter { job, epoch } => WorkerReply::Requeued(store.dead_letter(now, job, epoch)?),
        WorkerRequest::Release { job, epoch } => WorkerReply::Released(store.release(now, job, epoch)?),
    };
    Ok(Served { event: worker_line(worker, request, &reply), reply })
}

/// The line a store writes when it answers worker `worker`'s `request` with `reply`: the one
/// mapping from a worker's answer to its line ([`lease_history::answers`]), for a call alone and
/// for each call of a batch. A reply of another request's kind is a store's bug.
pub fn worker_line(worker: WorkerId, request: WorkerRequest, reply: &WorkerReply) -> Event {
    let asker = Caller { from: Some(Owner::Worker(worker)), batch: None }.asker();
    match (request, reply) {
        (WorkerRequest::Acquire, WorkerReply::Acquired(acquired)) => {
            answers::acquired(Node::Worker(worker.0), acquired)
        }
        (WorkerRequest::Renew { job, epoch }, WorkerReply::Renewed(renewal)) => {
            answers::renewal(&asker, job, epoch, renewal)
        }
        (WorkerRequest::Lookup { op, epoch }, WorkerReply::Looked(lookup)) => {
            answers::lookup(&asker, op, epoch, lookup)
        }
        (WorkerRequest::Complete { job, epoch, output }, WorkerReply::Completed(completion)) => {
            answers::completion(&asker, job, epoch, output, completion)
        }
        (WorkerRequest::Requeue { job, epoch }, WorkerReply::Requeued(requeue)) => {
            answers::requeue(&asker, job, epoch, requeue)
        }
        (WorkerRequest::DeadLetter { job, epoch }, WorkerReply::Requeued(ended)) => {
            answers::dead_letter(&asker, job, epoch, ended)
        }
        (WorkerRequest::Release { job, epoch }, WorkerReply::Released(release)) => {
            answers::release(&asker, job, epoch, release)
        }
        (request, reply) => panic!("a store answered {request:?} with {reply:?}"),
    }
}

/// Serves a runtime's batch of worker requests of one kind, each numbered by its life
/// ([`life_request`]), in one transaction on `store` at the table's time `now`: each answered as
/// [`serve_worker`] answers it alone, its line naming its own worker
/// ([`crate::TableStore::serve_batch`]). Each reply comes with its call's line, in the batch's
/// order: the lines the store wrote, one per call, consecutive, at `now`.
pub fn serve_worker_batch(
    store: &mut dyn Store,
    now: Time,
    calls: &[crate::WorkerCall],
) -> Result<Vec<Served<WorkerReply>>, StoreError> {
    let replies = store.serve_batch(now, calls)?;
    let served = calls.iter().zip(replies);
    Ok(served
        .map(|(&(worker, _, request), reply)| Served { event: worker_line(worker, request, &reply), reply })
        .collect())
}

/// Serves reclaimer `reclaimer`'s request on `store` at the table's time `now`, naming the
/// reclaimer and the request's batch on the store's lines. The request's `as_of` is passed as it
/// is: a caller whose reclaimers keep other clocks puts it on the table's scale first.
pub fn serve_reclaimer(
    store: &mut dyn Store,
    now: Time,
    reclaimer: ReclaimerId,
    request: ReclaimRequest,
) -> Result<Served<ReclaimReply>, StoreError> {
    store.set_caller(reclaimer_caller(reclaimer, request));
    let reply = match request {
        ReclaimRequest::ListExpired { as_of, .. } => ReclaimReply::Listed(store.expired(now, as_of)?),
        ReclaimRequest::Fence { lease, as_of, .. } => {
            ReclaimReply::Fenced(store.fence(now, lease.job, lease.epoch, reclaimer, as_of)?)
        }
        ReclaimRequest::Lookup { op, epoch, .. } => ReclaimReply::Looked(store.lookup(now, op, epoch)?),
        ReclaimRequest::Complete { job, epoch, output, .. } => {
            ReclaimReply::Completed(store.complete(now, job, epoch, output)?)
        }
        ReclaimRequest::Requeue { job, epoch, .. } => ReclaimReply::Requeued(store.requeue(now, job, epoch)?),
        ReclaimRequest::Quarantine { job, epoch, recorded, rival, .. } => {
            ReclaimReply::Quarantined(store.quarantine(now, job, epoch, recorded, rival)?)
        }
    };
    Ok(Served { event: reclaimer_line(reclaimer, request, &reply), reply })
}

/// Who asks, for reclaimer `reclaimer`'s `request`: the reclaimer, and the request's batch.
fn reclaimer_caller(reclaimer: ReclaimerId, request: ReclaimRequest) -> Caller {
    Caller { from: Some(Owner::Reclaimer(reclaimer)), batch: Some(request.batch()) }
}

/// The line a store writes when it answers reclaimer `reclaimer`'s `request` with `reply`: the one
/// mapping from a reclaimer's answer to its line, for a call alone and for each call of a step. A
/// reply of another request's kind is a store's bug.
pub fn reclaimer_line(reclaimer: ReclaimerId, request: ReclaimRequest, reply: &ReclaimReply) -> Event {
    let asker = reclaimer_caller(reclaimer, request).asker();
    match (request, reply) {
        (ReclaimRequest::ListExpired { .. }, ReclaimReply::Listed(leases)) => answers::listed(&asker, leases),
        (ReclaimRequest::Fence { lease, .. }, ReclaimReply::Fenced(fencing)) => {
            answers::fencing(&asker, lease.job, lease.epoch, fencing)
        }
        (ReclaimRequest::Lookup { op, epoch, .. }, ReclaimReply::Looked(lookup)) => {
            answers::lookup(&asker, op, epoch, lookup)
        }
        (ReclaimRequest::Complete { job, epoch, output, .. }, ReclaimReply::Completed(completion)) => {
            answers::completion(&asker, job, epoch, output, completion)
        }
        (ReclaimRequest::Requeue { job, epoch, .. }, ReclaimReply::Requeued(requeue)) => {
            answers::requeue(&asker, job, epoch, requeue)
        }
        (ReclaimRequest::Quarantine { job, epoch, .. }, ReclaimReply::Quarantined(quarantine)) => {
            answers::quarantine(&asker, job, epoch, quarantine)
        }
        (request, reply) => panic!("a store answered {request:?} with {reply:?}"),
    }
}

/// Serves reclaimer `reclaimer`'s requests of one step on `store` at the table's time `now`, in
/// as few transactions as they allow: each run of requests of one kind and one batch (a wave's
/// fences, its lookups, its requeues, its completions) in one transaction per `batch_max` of them
/// ([`crate::TableStore::fence_batch`], [`crate::LedgerStore::lookup_batch`],
/// [`crate::TableStore::requeue_batch`], [`crate::TableStore::complete_batch`]). Each is answered
/// as [`serve_reclaimer`] answers it alone, its line written in the same transaction, and the
/// answers and lines come in the order asked (a reclaimer asks a wave's requeues before its
/// completions, so a finishing step is two runs). A listing or a quarantine is served alone. An
/// error ends the call: the transactions before it have committed, and a request sent again is
/// answered as the protocol answers a copy.
pub fn serve_reclaimer_batch(
    store: &mut dyn Store,
    now: Time,
    reclaimer: ReclaimerId,
    requests: &[ReclaimRequest],
) -> Result<Vec<Served<ReclaimReply>>, StoreError> {
    let mut served = Vec::with_capacity(requests.len());
    let mut rest = requests;
    while let Some(first) = rest.first() {
        let same = |other: &ReclaimRequest| {
            std::mem::discriminant(other) == std::mem::discriminant(first) && other.batch() == first.batch()
        };
        let run = rest.iter().take_while(|request| same(request)).count();
        served.extend(serve_together(store, now, reclaimer, &rest[..run])?);
        rest = &rest[run..];
    }
    Ok(served)
}

/// The arguments of each request of `chunk`, by `args`, in order.
fn each<T>(chunk: &[ReclaimRequest], args: impl Fn(ReclaimRequest) -> Option<T>) -> Vec<T> {
    chunk.iter().filter_map(|&request| args(request)).collect()
}

/// Requests of one kind and one batch, together where the kind allows.
fn serve_together(
    store: &mut dyn Store,
    now: Time,
    reclaimer: ReclaimerId,
    requests: &[ReclaimRequest],
) -> Result<Vec<Served<ReclaimReply>>, StoreError> {
    let Some(&first) = requests.first() else { return Ok(Vec::new()) };
    let together = requests.len() > 1
        && matches!(
            first,
            ReclaimRequest::Fence { .. }
                | ReclaimRequest::Lookup { .. }
                | ReclaimRequest::Requeue { .. }
                | ReclaimRequest::Complete { .. }
        );
    if !together {
        return requests.iter().map(|&request| serve_reclaimer(store, now, reclaimer, request)).collect();
    }
    let max = store.config().batch_max.max(1);
    let mut served = Vec::with_capacity(requests.len());
    for chunk in requests.chunks(max) {
        store.set_caller(reclaimer_caller(reclaimer, first));
        // Each call's arguments, in the order asked (every request of the chunk is of `first`'s kind).
        let replies: Vec<ReclaimReply> = match first {
            ReclaimRequest::Fence { .. } => {
                let fences = each(chunk, |request| match request {
                    ReclaimRequest::Fence { lease, as_of, .. } => Some((lease.job, lease.epoch, as_of)),
                    _ => None,
                });
                store.fence_batch(now, reclaimer, &fences)?.into_iter().map(ReclaimReply::Fenced).collect()
            }
            ReclaimRequest::Lookup { .. } => {
                let ops = each(chunk, |request| match request {
                    ReclaimRequest::Lookup { op, epoch, .. } => Some((op, epoch)),
                    _ => None,
                });
                store.lookup_batch(now, &ops)?.into_iter().map(ReclaimReply::Looked).collect()
            }
            ReclaimRequest::Requeue { .. } => {
                let leases = each(chunk, |request| match request {
                    ReclaimRequest::Requeue { job, epoch, .. } => Some((job, epoch)),
                    _ => None,
                });
                store.requeue_batch(now, &leases)?.into_iter().map(ReclaimReply::Requeued).collect()
            }
            ReclaimRequest::Complete { .. } => {
                let done = each(chunk, |request| match request {
                    ReclaimRequest::Complete { job, epoch, output, .. } => Some((job, epoch, output)),
                    _ => None,
                });
                store.complete_batch(now, &done)?.into_iter().map(ReclaimReply::Completed).collect()
            }
            ReclaimRequest::ListExpired { .. } | ReclaimRequest::Quarantine { .. } => {
                unreachable!("served one at a time above")
            }
        };
        let each = chunk.iter().zip(replies);
        served
            .extend(each.map(|(&request, reply)| Served { event: reclaimer_line(reclaimer, request, &reply), reply }));
    }
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryStore, SqliteStore};
    use lease_core::{Acquired, BatchId, Epoch, JobId, OpId, OutputId, Span, TableConfig};

    /// The line `store` logged last, and the line of `served`'s event at `now`: they must be one.
    fn logged_as_served<R>(store: &mut dyn Store, now: Time, served: &Served<R>) {
        let last = store.events().expect("the log reads").pop().expect("a line was logged");
        assert_eq!(last, answers::line(now.0, served.event.clone()));
    }

    // Proves that a served request's event is the line the store wrote for it, on the in-memory
    // store and on SQLite, for a worker's requests (acquire, lookup, completion) and a reclaimer's
    // (listing, fence, lookup, requeue), and that an `Execute` is refused as the dependency's.
    #[test]
    fn a_served_event_is_the_line_the_store_wrote() {
        let config = TableConfig { capacity: 4, lease_ttl: Span::from_ms(10), batch_max: 2, attempts_max: 3 };
        let stores: [Box<dyn Store>; 2] =
            [Box::new(MemoryStore::new(config).unwrap()), Box::new(SqliteStore::open_in_memory(config).unwrap())];
        for mut store in stores {
            let store = &mut *store;
            let (worker, reclaimer) = (WorkerId(1), ReclaimerId(2));
            let (job, op) = (JobId(7), OpId::for_job(JobId(7)));
            let _ = store.enqueue(Time(1), job).unwrap();
            let acquired = serve_worker(store, Time(2), worker, life_request(1, RequestId(0)), WorkerRequest::Acquire);
            let acquired = acquired.unwrap();
            logged_as_served(store, Time(2), &acquired);
            let WorkerReply::Acquired(Acquired::Granted(grant)) = acquired.reply else { panic!("{acquired:?}") };
            let epoch = grant.lease.epoch;
            let looked = serve_worker(store, Time(3), worker, RequestId(1), WorkerRequest::Lookup { op, epoch });
            logged_as_served(store, Time(3), &looked.unwrap());
            let execute = WorkerRequest::Execute { op, epoch };
            let refused = serve_worker(store, Time(4), worker, RequestId(2), execute);
            assert!(matches!(refused, Err(StoreError::Execute { .. })), "{refused:?}");
            let batch = BatchId { reclaimer, seq: 0 };
            let expired_at = Time(2) + Span::from_ms(10);
            let list = ReclaimRequest::ListExpired { batch, as_of: expired_at };
            let listed = serve_reclaimer(store, expired_at, reclaimer, list).unwrap();
            logged_as_served(store, expired_at, &listed);
            assert_eq!(listed.reply, ReclaimReply::Listed(vec![grant.lease]));
            let fence = ReclaimRequest::Fence { batch, lease: grant.lease, as_of: expired_at };
            let fenced = serve_reclaimer(store, expired_at, reclaimer, fence).unwrap();
            logged_as_served(store, expired_at, &fenced);
            let next = Epoch(epoch.0 + 1);
            let lookup = ReclaimRequest::Lookup { batch, op, epoch: next };
            let looked = serve_reclaimer(store, expired_at, reclaimer, lookup).unwrap();
            logged_as_served(store, expired_at, &looked);
            let requeue = ReclaimRequest::Requeue { batch, job, epoch: next };
            let requeued = serve_reclaimer(store, expired_at, reclaimer, requeue).unwrap();
            logged_as_served(store, expired_at, &requeued);
            let complete = WorkerRequest::Complete { job, epoch, output: OutputId(9) };
            let late = serve_worker(store, expired_at, worker, RequestId(3), complete).unwrap();
            logged_as_served(store, expired_at, &late);
        }
    }

    // Proves that a life's request ids are its own: the same request of two lives is two ids.
    #[test]
    fn each_life_numbers_its_requests_apart() {
        assert_ne!(life_request(1, RequestId(0)), life_request(2, RequestId(0)));
        assert_eq!(life_request(1, RequestId(5)), RequestId(1 << LIFE_SHIFT | 5));
    }
}
