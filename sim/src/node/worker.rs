//! A worker node: drives a [`lease_core::Worker`] with its own drifting clock over the network,
//! and crashes at protocol points when the seed says so.

use super::{bind, receive, send};
use crate::history::{Event, Node};
use crate::net::{ledger_addr, table_addr, wire_id, Reply, Request, INCARNATION_SHIFT};
use crate::scenario::{Point, Strike};
use crate::world::Ctx;
use lease_core::{Apply, Execution, NodeId, RequestId, Worker, WorkerAction, WorkerReply, WorkerRequest};
use std::sync::Arc;

pub(super) async fn main(ctx: Arc<Ctx>, n: u32) {
    let node = Node::Worker(n);
    let incarnation = ctx.incarnate(node);
    let Some(endpoint) = bind(crate::net::worker_addr(n)).await else { return };
    let clock = ctx.params.worker_clocks[n as usize];
    let mut worker = Worker::new(NodeId(n), ctx.params.worker, ctx.bugs, clock.local(ctx.now()))
        .expect("scenario parameters are valid");
    loop {
        while let Some(action) = worker.poll() {
            match action {
                WorkerAction::Send(id, request) => {
                    let wire = wire_id(incarnation, id.0);
                    match request {
                        WorkerRequest::Execute { op, epoch } => {
                            let strike = ctx.strike(Point::BeforeEffect, op.job);
                            if strike == Some(Strike::Crash) {
                                return ctx.crash(node, Point::BeforeEffect, Some(op.job));
                            }
                            // The decision to execute is made now; a stall delays only the call.
                            ctx.record(node, Event::Executing { job: op.job, op, epoch });
                            if let Some(Strike::Stall(len_us)) = strike {
                                ctx.stall(node, len_us).await;
                            }
                            send(&endpoint, ledger_addr(), wire, Request::Worker(n, request)).await;
                        }
                        WorkerRequest::Complete { job, .. } => {
                            let strike = ctx.strike(Point::DuringAck, job);
                            if let Some(Strike::Stall(len_us)) = strike {
                                ctx.stall(node, len_us).await;
                            }
                            send(&endpoint, table_addr(), wire, Request::Worker(n, request)).await;
                            if strike == Some(Strike::Crash) {
                                return ctx.crash(node, Point::DuringAck, Some(job));
                            }
                        }
                        WorkerRequest::Lookup { .. } => {
                            send(&endpoint, ledger_addr(), wire, Request::Worker(n, request)).await
                        }
                        WorkerRequest::Renew { job, .. } => {
                            match ctx.strike(Point::BeforeRenew, job) {
                                Some(Strike::Crash) => return ctx.crash(node, Point::BeforeRenew, Some(job)),
                                Some(Strike::Stall(len_us)) => ctx.stall(node, len_us).await,
                                None => {}
                            }
                            send(&endpoint, table_addr(), wire, Request::Worker(n, request)).await
                        }
                        WorkerRequest::Acquire | WorkerRequest::Requeue { .. } => {
                            send(&endpoint, table_addr(), wire, Request::Worker(n, request)).await
                        }
                    }
                }
                WorkerAction::Adopted { job, op, output, epoch } => {
                    ctx.record(node, Event::Adopted { job, op, output, epoch })
                }
                WorkerAction::Abandoned { job, epoch, why } => {
                    ctx.record(node, Event::Abandoned { job, epoch, why: why.into() })
                }
            }
        }
        let wake = clock.global(worker.poll_timeout());
        let Ok(received) = receive(&ctx, &endpoint, wake.0.saturating_sub(ctx.now().0)).await else { return };
        let now = clock.local(ctx.now());
        let Some(envelope) = received else {
            worker.handle_timeout(now);
            continue;
        };
        if envelope.id >> INCARNATION_SHIFT != incarnation {
            continue; // A reply to this node's previous life.
        }
        let Reply::Worker(reply) = envelope.body else { panic!("a worker got {:?}", envelope.body) };
        if let WorkerReply::Executed(Execution::Done { apply: Apply::Applied, .. }) = reply {
            if let Some((job, _)) = worker.holding() {
                match ctx.strike(Point::AfterEffect, job) {
                    Some(Strike::Crash) => return ctx.crash(node, Point::AfterEffect, Some(job)),
                    Some(Strike::Stall(len_us)) => ctx.stall(node, len_us).await,
                    None => {}
                }
            }
        }
        worker.handle_reply(now, RequestId(envelope.id & ((1 << INCARNATION_SHIFT) - 1)), reply);
    }
}
