//! A reclaimer node: drives a [`lease_core::Reclaimer`] with its own drifting clock, and may
//! crash mid-reclaim, after it fenced a lease.

use super::{bind, receive, send};
use crate::history::{Event, Node};
use crate::net::{ledger_addr, table_addr, wire_id, Reply, Request, INCARNATION_SHIFT};
use crate::scenario::{Point, Strike};
use crate::world::Ctx;
use lease_core::{Fencing, NodeId, ReclaimAction, ReclaimReply, ReclaimRequest, Reclaimer, RequestId};
use std::sync::Arc;

pub(super) async fn main(ctx: Arc<Ctx>, n: u32) {
    let node = Node::Reclaimer(n);
    let incarnation = ctx.incarnate(node);
    let Some(endpoint) = bind(crate::net::reclaimer_addr(n)).await else { return };
    let clock = ctx.params.reclaimer_clocks[n as usize];
    let first_batch = (incarnation - 1) << 32;
    let local = clock.local(ctx.now());
    let mut reclaimer =
        Reclaimer::numbering_batches_from(NodeId(n), ctx.params.reclaimer, ctx.bugs, local, first_batch)
            .expect("scenario parameters are valid");
    loop {
        while let Some(action) = reclaimer.poll() {
            match action {
                ReclaimAction::Send(id, request) => {
                    let to = match request {
                        ReclaimRequest::Lookup { .. } => ledger_addr(),
                        _ => table_addr(),
                    };
                    send(&endpoint, to, wire_id(incarnation, id.0), Request::Reclaimer(n, request)).await;
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
        let Ok(received) = receive(&ctx, &endpoint, wake.0.saturating_sub(ctx.now().0)).await else { return };
        let now = clock.local(ctx.now());
        let Some(envelope) = received else {
            reclaimer.handle_timeout(now);
            continue;
        };
        if envelope.id >> INCARNATION_SHIFT != incarnation {
            continue;
        }
        let Reply::Reclaimer(reply) = envelope.body else { panic!("a reclaimer got {:?}", envelope.body) };
        if let ReclaimReply::Fenced(Fencing::Won { lease, .. }) = &reply {
            match ctx.strike(Point::MidReclaim, lease.job) {
                Some(Strike::Crash) => return ctx.crash(node, Point::MidReclaim, Some(lease.job)),
                Some(Strike::Stall(len_us)) => ctx.stall(node, len_us).await,
                None => {}
            }
        }
        reclaimer.handle_reply(now, RequestId(envelope.id & ((1 << INCARNATION_SHIFT) - 1)), reply);
    }
}
