//! A reclaimer node: drives a [`lease_core::Reclaimer`] with its own drifting clock, and may
//! crash mid-reclaim, after it fenced a lease.

use super::{bind, send, Inbox};
use crate::faults::decide::Dealt;
use crate::faults::Point;
use crate::net::{ledger_addr, table_addr, wire_id, Reply, Request, INCARNATION_SHIFT};
use crate::world::ctx::Ctx;
use lease_core::{Fencing, JobId, ReclaimAction, ReclaimReply, ReclaimRequest, Reclaimer, ReclaimerId, RequestId};
use lease_history::{Event, Node};
use std::sync::Arc;

/// The life `incarnation` of reclaimer `n` (see [`super::main`]).
pub(super) async fn main(ctx: Arc<Ctx>, n: u32, incarnation: u64) {
    let node = Node::Reclaimer(n);
    let Some(endpoint) = bind(crate::net::reclaimer_addr(n)).await else { return };
    let mut inbox = Inbox::new(&endpoint);
    let clock = ctx.params.reclaimer_clocks[n as usize];
    let first_batch = (incarnation - 1) << 32;
    let local = clock.local(ctx.now());
    let mut reclaimer =
        Reclaimer::numbering_batches_from(ReclaimerId(n), ctx.params.reclaimer, ctx.bugs, local, first_batch)
            .unwrap_or_else(|error| panic!("unworkable parameters: {error}"));
    loop {
        while let Some(action) = reclaimer.poll() {
            match action {
                ReclaimAction::Send(id, request) => {
                    let to = match request {
                        ReclaimRequest::Lookup { .. } => ledger_addr(),
                        _ => table_addr(),
                    };
                    if let ReclaimRequest::ListExpired { .. } = request {
                        // A scan timed to land just after an expiry, when the seed aims one there.
                        if let Some(Dealt::Stall { len_us }) = ctx.at_point(node, Point::BeforeListing, None) {
                            ctx.stall(node, Point::BeforeListing, None, len_us).await;
                        }
                    }
                    send(&ctx, &endpoint, to, wire_id(incarnation, id.0), Request::Reclaimer(n, request)).await;
                }
                // The table records its answer to the fence (`lost_race`, `not_expired`).
                ReclaimAction::LostRace { .. } => {}
                ReclaimAction::Adopted { job, op, output, epoch, .. } => {
                    ctx.record(node, Event::Adopted { job, op, output, epoch })
                }
                ReclaimAction::BatchStopped { batch, job, recorded, rival, untouched } => {
                    ctx.record(node, Event::BatchStopped { batch, job, identities: [recorded, rival], untouched })
                }
                ReclaimAction::GaveUp { .. } => {}
            }
        }
        let wake = clock.global(reclaimer.poll_timeout());
        let Ok(received) = inbox.receive(&ctx, wake.0.saturating_sub(ctx.now().0)).await else { return };
        let Some(envelope) = received else {
            reclaimer.handle_timeout(clock.local(ctx.now()));
            continue;
        };
        if envelope.id >> INCARNATION_SHIFT != incarnation {
            continue;
        }
        let Reply::Reclaimer(reply) = envelope.body else { panic!("a reclaimer got {:?}", envelope.body) };
        let id = RequestId(envelope.id & ((1 << INCARNATION_SHIFT) - 1));
        let struck = match (fence_won(&reclaimer, id, &reply), listing_taken(&reclaimer, id, &reply)) {
            (Some(job), _) => Some((Point::MidReclaim, job)),
            (None, Some(job)) => Some((Point::AfterListing, job)),
            (None, None) => None,
        };
        if let Some((point, job)) = struck {
            match ctx.at_point(node, point, Some(job)) {
                Some(Dealt::Crash { restart_after_us }) => return ctx.crash(node, point, Some(job), restart_after_us),
                Some(Dealt::Stall { len_us }) => ctx.stall(node, point, Some(job), len_us).await,
                _ => {}
            }
        }
        // Read the clock after any stall: the reclaimer takes the answer when it wakes.
        reclaimer.handle_reply(clock.local(ctx.now()), id, reply);
    }
}

/// The first job of a listing that answers the listing in flight and found expired leases: the
/// reclaimer is about to fence them.
fn listing_taken(reclaimer: &Reclaimer, id: RequestId, reply: &ReclaimReply) -> Option<JobId> {
    let ReclaimReply::Listed(leases) = reply else { return None };
    let Some(ReclaimRequest::ListExpired { .. }) = reclaimer.awaiting(id) else { return None };
    leases.first().map(|lease| lease.job)
}

/// The job the reclaimer just fenced, as it will take it: `reply` must be a won fence answering
/// the fence in flight, for the job that fence names. A late copy of an earlier fence's answer
/// does not put the reclaimer mid-reclaim.
fn fence_won(reclaimer: &Reclaimer, id: RequestId, reply: &ReclaimReply) -> Option<JobId> {
    let ReclaimReply::Fenced(Fencing::Won { lease: ours, .. }) = reply else { return None };
    let Some(ReclaimRequest::Fence { lease, .. }) = reclaimer.awaiting(id) else { return None };
    (lease.job == ours.job).then_some(ours.job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::{Bugs, LeaseTable, ReclaimerConfig, Span, TableConfig, Time, WorkerId};

    fn sent(reclaimer: &mut Reclaimer) -> (RequestId, ReclaimRequest) {
        let actions: Vec<ReclaimAction> = std::iter::from_fn(|| reclaimer.poll()).collect();
        match actions.as_slice() {
            [.., ReclaimAction::Send(id, request)] => (*id, *request),
            other => panic!("no send in {other:?}"),
        }
    }

    // Proves the mid-reclaim strike hits the fence the reclaimer awaits: two expired leases are
    // listed; the first fence is won and the job requeued, then a late copy of the first win
    // arrives while the second fence is in flight. Only the answer to the fence in flight strikes,
    // for its own job; the late copy, and a win answering any other request, do not.
    #[test]
    fn only_the_answer_to_the_fence_in_flight_strikes_mid_reclaim() {
        let config = TableConfig { capacity: 4, lease_ttl: Span(100), batch_max: 2, attempts_max: 3 };
        let mut table = LeaseTable::new(config).unwrap();
        for job in [1, 2] {
            let _ = table.enqueue(Time(0), JobId(job)).unwrap();
            let _ = table.acquire(Time(0), WorkerId(0)).unwrap();
        }
        let config = ReclaimerConfig { scan_every: Span(50), request_timeout: Span(20), retries_max: 2 };
        let mut reclaimer = Reclaimer::new(ReclaimerId(0), config, Bugs::NONE, Time(100)).unwrap();
        let (list, _) = sent(&mut reclaimer);
        reclaimer.handle_reply(Time(100), list, ReclaimReply::Listed(table.expired(Time(100), Time(100)).unwrap()));
        let fence = |table: &mut LeaseTable, request: ReclaimRequest, at: u64| {
            let ReclaimRequest::Fence { lease, .. } = request else { panic!("{request:?} is no fence") };
            let fencing = table.fence(Time(at), lease.job, lease.epoch, ReclaimerId(0), Time(at)).unwrap();
            ReclaimReply::Fenced(fencing)
        };
        let (first, request) = sent(&mut reclaimer);
        let first_won = fence(&mut table, request, 101);
        assert_eq!(fence_won(&reclaimer, list, &first_won), None, "the listing is not in flight");
        assert_eq!(fence_won(&reclaimer, first, &first_won), Some(JobId(1)));
        reclaimer.handle_reply(Time(101), first, first_won.clone());
        let (lookup, _) = sent(&mut reclaimer);
        assert_eq!(fence_won(&reclaimer, lookup, &first_won), None, "a won fence answers no lookup");
        reclaimer.handle_reply(Time(102), lookup, ReclaimReply::Looked(lease_core::Lookup::Empty));
        let (requeue, ReclaimRequest::Requeue { job, epoch, .. }) = sent(&mut reclaimer) else { panic!("no requeue") };
        reclaimer.handle_reply(
            Time(103),
            requeue,
            ReclaimReply::Requeued(table.requeue(Time(103), job, epoch).unwrap()),
        );
        let (second, request) = sent(&mut reclaimer);
        let second_won = fence(&mut table, request, 104);
        assert_eq!(fence_won(&reclaimer, first, &first_won), None, "a late copy of the first win");
        assert_eq!(fence_won(&reclaimer, second, &second_won), Some(JobId(2)));
    }
}
