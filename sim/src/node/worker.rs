//! A worker node: drives a [`lease_core::Worker`] with its own drifting clock over the network,
//! and crashes at protocol points when the seed says so.

use super::{bind, send, Inbox};
use crate::faults::decide::Dealt;
use crate::faults::Point;
use crate::net::{ledger_addr, table_addr, wire_id, Reply, Request, INCARNATION_SHIFT};
use crate::world::ctx::Ctx;
use lease_core::{Apply, Execution, JobId, RequestId, Worker, WorkerAction, WorkerId, WorkerReply, WorkerRequest};
use lease_history::{Event, Node};
use std::sync::Arc;

/// The life `incarnation` of worker `n` (see [`super::main`]).
pub(super) async fn main(ctx: Arc<Ctx>, n: u32, incarnation: u64) {
    let node = Node::Worker(n);
    let Some(endpoint) = bind(crate::net::worker_addr(n)).await else { return };
    let mut inbox = Inbox::new(&endpoint);
    let clock = ctx.params.worker_clocks[n as usize];
    let mut worker = Worker::new(WorkerId(n), ctx.params.worker, ctx.bugs, clock.local(ctx.now()))
        .unwrap_or_else(|error| panic!("unworkable parameters: {error}"));
    loop {
        while let Some(action) = worker.poll() {
            match action {
                WorkerAction::Send(id, request) => {
                    let wire = wire_id(incarnation, id.0);
                    match request {
                        WorkerRequest::Execute { op, epoch } => {
                            let strike = ctx.at_point(node, Point::BeforeEffect, Some(op.job));
                            if let Some(Dealt::Crash { restart_after_us }) = strike {
                                return crash(&ctx, node, Point::BeforeEffect, op.job, restart_after_us);
                            }
                            // The decision to execute is made now; a stall delays only the call.
                            ctx.record(node, Event::Executing { job: op.job, op, epoch });
                            if let Some(Dealt::Stall { len_us }) = strike {
                                ctx.stall(node, Point::BeforeEffect, Some(op.job), len_us).await;
                            }
                            send(&ctx, &endpoint, ledger_addr(), wire, Request::Worker(n, request)).await;
                        }
                        WorkerRequest::Complete { job, .. } => {
                            let strike = ctx.at_point(node, Point::DuringAck, Some(job));
                            if let Some(Dealt::Stall { len_us }) = strike {
                                ctx.stall(node, Point::DuringAck, Some(job), len_us).await;
                            }
                            send(&ctx, &endpoint, table_addr(), wire, Request::Worker(n, request)).await;
                            if let Some(Dealt::Crash { restart_after_us }) = strike {
                                return crash(&ctx, node, Point::DuringAck, job, restart_after_us);
                            }
                        }
                        WorkerRequest::Lookup { .. } => {
                            send(&ctx, &endpoint, ledger_addr(), wire, Request::Worker(n, request)).await
                        }
                        WorkerRequest::Renew { job, .. } => {
                            match ctx.at_point(node, Point::BeforeRenew, Some(job)) {
                                Some(Dealt::Crash { restart_after_us }) => {
                                    return crash(&ctx, node, Point::BeforeRenew, job, restart_after_us)
                                }
                                Some(Dealt::Stall { len_us }) => {
                                    ctx.stall(node, Point::BeforeRenew, Some(job), len_us).await
                                }
                                _ => {}
                            }
                            send(&ctx, &endpoint, table_addr(), wire, Request::Worker(n, request)).await
                        }
                        WorkerRequest::Acquire | WorkerRequest::Requeue { .. } | WorkerRequest::Release { .. } => {
                            send(&ctx, &endpoint, table_addr(), wire, Request::Worker(n, request)).await
                        }
                    }
                    // A pause may have held the message back: tell the worker when it left.
                    worker.handle_sent(clock.local(ctx.now()), id);
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
        let Ok(received) = inbox.receive(&ctx, wake.0.saturating_sub(ctx.now().0)).await else { return };
        let Some(envelope) = received else {
            worker.handle_timeout(clock.local(ctx.now()));
            continue;
        };
        if envelope.id >> INCARNATION_SHIFT != incarnation {
            continue; // A reply to this node's previous life.
        }
        let Reply::Worker(reply) = envelope.body else { panic!("a worker got {:?}", envelope.body) };
        let id = RequestId(envelope.id & ((1 << INCARNATION_SHIFT) - 1));
        let struck = match (effect_accepted(&worker, id, &reply), renewal_answered(&worker, id, &reply)) {
            (Some(job), _) => Some((Point::AfterEffect, job)),
            (None, Some(job)) => Some((Point::BeforeRenewReply, job)),
            (None, None) => None,
        };
        if let Some((point, job)) = struck {
            match ctx.at_point(node, point, Some(job)) {
                Some(Dealt::Crash { restart_after_us }) => return crash(&ctx, node, point, job, restart_after_us),
                Some(Dealt::Stall { len_us }) => ctx.stall(node, point, Some(job), len_us).await,
                _ => {}
            }
        }
        // Read the clock after any stall: the worker takes the answer when it wakes.
        worker.handle_reply(clock.local(ctx.now()), id, reply);
    }
}

/// The job whose renewal `reply` answers: the renewal in flight, whatever the table said.
fn renewal_answered(worker: &Worker, id: RequestId, reply: &WorkerReply) -> Option<JobId> {
    let WorkerReply::Renewed(_) = reply else { return None };
    match worker.awaiting(id) {
        Some(WorkerRequest::Renew { job, .. }) => Some(job),
        _ => None,
    }
}

/// The job whose effect the ledger just accepted, as the worker will take it: `reply` must answer
/// the execute in flight (not a late copy of an earlier one), for the job and epoch the worker
/// holds. Only then is the worker at the after-effect point, and only for that job.
fn effect_accepted(worker: &Worker, id: RequestId, reply: &WorkerReply) -> Option<JobId> {
    let WorkerReply::Executed(Execution::Done { apply: Apply::Applied, .. }) = reply else { return None };
    let Some(WorkerRequest::Execute { op, epoch }) = worker.awaiting(id) else { return None };
    (worker.holding() == Some((op.job, epoch))).then_some(op.job)
}

/// Crashes this worker at `point`, working on `job`.
fn crash(ctx: &Ctx, node: Node, point: Point, job: JobId, restart_after_us: u64) {
    ctx.crash(node, point, Some(job), restart_after_us)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::{Acquired, Bugs, Epoch, Grant, Lease, OpId, OutputId, Owner, Span, Time, WorkerConfig};

    fn config() -> WorkerConfig {
        WorkerConfig {
            lease_ttl: Span(1_000),
            heartbeat_every: Span(300),
            drift_margin: Span(200),
            request_timeout: Span(500),
            idle_backoff: Span(50),
            acquire_wait: Span::ZERO,
        }
    }

    fn sent(worker: &mut Worker) -> (RequestId, WorkerRequest) {
        let actions: Vec<WorkerAction> = std::iter::from_fn(|| worker.poll()).collect();
        match actions.as_slice() {
            [.., WorkerAction::Send(id, request)] => (*id, *request),
            other => panic!("no send in {other:?}"),
        }
    }

    fn grant(job: u64, epoch: u64, at: u64) -> WorkerReply {
        let owner = Owner::Worker(WorkerId(0));
        let lease = Lease { job: JobId(job), owner, epoch: Epoch(epoch), expires_at: Time(at + 1_000) };
        WorkerReply::Acquired(Acquired::Granted(Grant { lease, attempt: 1 }))
    }

    const APPLIED: WorkerReply = WorkerReply::Executed(Execution::Done { output: OutputId(7), apply: Apply::Applied });

    // Proves the after-effect strike hits the right job: a worker executes job 1, completes it and
    // executes job 2; a late copy of job 1's applied effect arrives while it holds job 2. Only the
    // reply to the execute in flight, job 2's, puts the worker at the after-effect point, and for
    // job 2; the late reply, any other reply, and an applied reply to a non-execute, do not.
    #[test]
    fn only_the_answer_to_the_execute_in_flight_strikes_after_the_effect() {
        let mut worker = Worker::new(WorkerId(0), config(), Bugs::NONE, Time(0)).unwrap();
        let (acquire, _) = sent(&mut worker);
        worker.handle_reply(Time(1), acquire, grant(1, 1, 1));
        let (first, request) = sent(&mut worker);
        assert_eq!(request, WorkerRequest::Execute { op: OpId::for_job(JobId(1)), epoch: Epoch(1) });
        assert_eq!(effect_accepted(&worker, first, &APPLIED), Some(JobId(1)));
        worker.handle_reply(Time(2), first, APPLIED);
        let (complete, _) = sent(&mut worker);
        assert_eq!(effect_accepted(&worker, complete, &APPLIED), None, "an applied reply to a complete");
        worker.handle_reply(Time(3), complete, WorkerReply::Completed(lease_core::Completion::AlreadyCompleted));
        let (acquire, _) = sent(&mut worker);
        worker.handle_reply(Time(4), acquire, grant(2, 1, 4));
        let (second, _) = sent(&mut worker);
        assert_eq!(worker.holding(), Some((JobId(2), Epoch(1))));
        assert_eq!(effect_accepted(&worker, first, &APPLIED), None, "a late copy of job 1's answer");
        let again = WorkerReply::Executed(Execution::Done { output: OutputId(7), apply: Apply::AlreadyApplied });
        assert_eq!(effect_accepted(&worker, second, &again), None, "no new effect was accepted");
        assert_eq!(effect_accepted(&worker, second, &APPLIED), Some(JobId(2)));
    }
}
