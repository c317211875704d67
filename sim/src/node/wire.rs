//! What the network does to single messages: it carries each for its latency (a function of the
//! message and the seed, [`crate::world::ctx::Ctx::latency_us`]), and during the fault phase it
//! may lose one, hold one back for a short while, or deliver it twice, the copy some time after
//! the original (a retransmission crossing the first delivery). Requests and replies alike. The
//! faults are drawn from the world's wire stream at the seed's rates
//! ([`crate::faults::WindowFaults`]), or looked up in a plan, and written to the history (`lost`,
//! `delayed`, `duplicated`) when they happen, so a reader sees why a message came late or never.
//!
//! A message leaves at once, stamped with when it is due; the receiver holds it until then. So a
//! pause, crash or restart of its sender after it left does not touch it, a partition in force
//! when it is sent drops it, and a crash of its receiver loses what was on its way to it, as a
//! reset connection does.

use super::Envelope;
use crate::faults::decide::Site;
use crate::net::{Request, TAG};
use crate::world::ctx::Ctx;
use lease_core::{Epoch, JobId, ReclaimRequest, WorkerRequest};
use lease_history::{Event, MessageKind, Node};
use madsim::net::Endpoint;
use std::net::SocketAddr;
use std::sync::Arc;
use tracing::Instrument;

/// Who sends what to whom: what the history says of a message held back or doubled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Letter {
    /// The sender.
    pub from: Node,
    /// The receiver.
    pub to: Node,
    /// The request it makes or answers.
    pub message: MessageKind,
    /// Whether it is the answer.
    pub reply: bool,
    /// The job it is about, when it names one.
    pub job: Option<JobId>,
    /// The lease epoch it acts under, when it names one.
    pub epoch: Option<Epoch>,
}

impl Letter {
    /// `request`, on its way to `to`.
    pub fn request(request: &Request, to: Node) -> Letter {
        let (from, message, lease) = match request {
            // Named by its first job, as a worker's batch by its first request.
            Request::Enqueue(jobs) => (Node::Arrivals, MessageKind::Enqueue, (jobs.first().copied(), None)),
            Request::Produce(n, op, epoch) => (Node::Worker(*n), MessageKind::Execute, (Some(op.job), Some(*epoch))),
            Request::Record(n, op, epoch, _) => (Node::Worker(*n), MessageKind::Record, (Some(op.job), Some(*epoch))),
            // A batch is one message: named by its first request, which its sender and the lease it
            // names (a renewal's, a completion's) key its faults by.
            Request::WorkerBatch(calls) => {
                let &(n, _, first) = calls.first().expect("a batch holds a request");
                return Letter::request(&Request::Worker(n, first), to);
            }
            Request::ReclaimerBatch(n, requests) => {
                let &first = requests.first().expect("a batch holds a request");
                return Letter::request(&Request::Reclaimer(*n, first), to);
            }
            Request::RecordBatch(records) => {
                let &(n, op, epoch, output) = records.first().expect("a batch holds a record");
                return Letter::request(&Request::Record(n, op, epoch, output), to);
            }
            Request::Worker(n, request) => {
                let (message, job, epoch) = match *request {
                    WorkerRequest::Acquire => (MessageKind::Acquire, None, None),
                    WorkerRequest::Renew { job, epoch, .. } => (MessageKind::Renew, Some(job), Some(epoch)),
                    WorkerRequest::Lookup { op, epoch } => (MessageKind::Lookup, Some(op.job), Some(epoch)),
                    WorkerRequest::Execute { op, epoch } => (MessageKind::Execute, Some(op.job), Some(epoch)),
                    WorkerRequest::Complete { job, epoch, .. } => (MessageKind::Complete, Some(job), Some(epoch)),
                    WorkerRequest::Requeue { job, epoch, .. } => (MessageKind::Requeue, Some(job), Some(epoch)),
                    WorkerRequest::Release { job, epoch } => (MessageKind::Release, Some(job), Some(epoch)),
                    WorkerRequest::DeadLetter { job, epoch } => (MessageKind::DeadLetter, Some(job), Some(epoch)),
                };
                (Node::Worker(*n), message, (job, epoch))
            }
            Request::Reclaimer(n, request) => {
                let (message, job, epoch) = match *request {
                    ReclaimRequest::ListExpired { .. } => (MessageKind::List, None, None),
                    ReclaimRequest::Fence { lease, .. } => (MessageKind::Fence, Some(lease.job), Some(lease.epoch)),
                    ReclaimRequest::Lookup { op, epoch, .. } => (MessageKind::Lookup, Some(op.job), Some(epoch)),
                    ReclaimRequest::Complete { job, epoch, .. } => (MessageKind::Complete, Some(job), Some(epoch)),
                    ReclaimRequest::Requeue { job, epoch, .. } => (MessageKind::Requeue, Some(job), Some(epoch)),
                    ReclaimRequest::Quarantine { job, epoch, .. } => (MessageKind::Quarantine, Some(job), Some(epoch)),
                };
                (Node::Reclaimer(*n), message, (job, epoch))
            }
        };
        let (job, epoch) = lease;
        Letter { from, to, message, reply: false, job, epoch }
    }

    /// The answer to this request, on its way back.
    pub fn answer(self) -> Letter {
        Letter { from: self.to, to: self.from, reply: true, ..self }
    }
}

/// Sends `body` with wire id `id` to `to`, through the network's faults.
///
/// The message leaves now, stamped with when the network delivers it (`due_us`): its latency,
/// plus any hold-back; a copy, later still. The receiver holds it until then ([`super::Held`]):
/// the world's latencies cost no task or timer of their own.
pub(super) async fn post<T>(ctx: &Ctx, endpoint: &Endpoint, to: SocketAddr, letter: Letter, id: u64, body: T)
where
    T: Clone + Send + Sync + 'static,
{
    stamp(ctx, to, letter, id, body).send(ctx, endpoint).await
}

/// Sends `body` as [`post`] does, its fate dealt and its lines written now, and hands the send
/// itself to a task of its own: a server answers without waiting for its answer to leave.
/// (madsim sleeps at least a simulated millisecond in every send: a server that awaited each
/// answer could answer one a millisecond at most.) The task is the node's: a crash of the node
/// loses what it had not sent yet, as a reset connection does.
pub(super) fn post_detached<T>(
    ctx: &Arc<Ctx>,
    endpoint: &Arc<Endpoint>,
    to: SocketAddr,
    letter: Letter,
    id: u64,
    body: T,
) where
    T: Clone + Send + Sync + 'static,
{
    let outgoing = stamp(ctx, to, letter, id, body);
    let (ctx, endpoint) = (Arc::clone(ctx), Arc::clone(endpoint));
    let send = async move { outgoing.send(&ctx, &endpoint).await };
    madsim::task::spawn(crate::panics::contained(send.instrument(tracing::Span::current())));
}

/// A message whose fate is dealt and written, ready to leave.
struct Outgoing<T> {
    to: SocketAddr,
    from: Node,
    peer: Node,
    /// The message, unless the network loses it or it crosses a partition.
    envelope: Option<Envelope<T>>,
    /// The network's copy of it, if it makes one.
    copy: Option<Envelope<T>>,
}

/// Deals the fate of `body` on its way to `to` and writes its lines.
fn stamp<T: Clone>(ctx: &Ctx, to: SocketAddr, letter: Letter, id: u64, body: T) -> Outgoing<T> {
    let Letter { from, to: peer, message, reply, job, epoch } = letter;
    let hand_back = !reply
        && matches!(
            message,
            MessageKind::Requeue | MessageKind::Complete | MessageKind::Release | MessageKind::DeadLetter
        );
    // A message about a lease is named by its job and epoch, whoever holds it: a plan that
    // strikes it keeps striking it when shrinking hands the lease to another worker.
    let ends = if epoch.is_some() { None } else { Some((from, peer)) };
    let site = Site::Message { ends, message, reply, job, epoch };
    let fate = ctx.message_fate(site, hand_back && job.is_some());
    // A message about a lease is keyed, like its faults, by the lease and how many such messages
    // went before (the third renewal of j4 under e2), so that its latency stays put when a plan
    // loses another job; any other message by its ends and wire id.
    let latency_us = match (job, epoch) {
        (Some(job), Some(epoch)) => {
            let nth = ctx.nth_of_lease((message, reply, job, epoch));
            ctx.latency_us(&(message, reply, job, epoch, nth))
        }
        // A message about a job but no lease (an enqueue, and its answer) is keyed by its job and
        // how many such messages went before, not by the sender's wire id, which counts every
        // other job's offers: a plan that loses a job keeps the others' arrivals where they were.
        (Some(job), None) => {
            let nth = ctx.nth_of_job((from, peer, message, reply, job));
            ctx.latency_us(&(from, peer, message, reply, job, nth))
        }
        _ => ctx.latency_us(&(from, peer, message, reply, job, id)),
    };
    let due_us = ctx.now().0 + latency_us + fate.delay_us.unwrap_or(0);
    let copy = fate.copy_gap_us.map(|gap_us| Envelope { id, body: body.clone(), due_us: due_us + gap_us });
    let envelope = Envelope { id, body, due_us };
    // A message crossing a partition when it is sent is dropped: the partition's line says why.
    let cut = ctx.is_cut(from, peer);
    // Every line is written now, while the faults that dealt them are still on; then the sends.
    if fate.lost {
        ctx.record(Node::World, Event::Lost { target: from, peer, message, reply, job });
    } else if let Some(len_us) = fate.delay_us {
        ctx.record(Node::World, Event::Delayed { target: from, peer, message, reply, job, len_us });
    }
    if let Some(gap_us) = fate.copy_gap_us {
        ctx.record(Node::World, Event::Duplicated { target: from, peer, message, reply, job, gap_us });
    }
    let envelope = (!fate.lost && !cut).then_some(envelope);
    Outgoing { to, from, peer, envelope, copy }
}

impl<T: Send + Sync + 'static> Outgoing<T> {
    async fn send(self, ctx: &Ctx, endpoint: &Endpoint) {
        let Outgoing { to, from, peer, envelope, copy } = self;
        if let Some(envelope) = envelope {
            // A send that fails (a dead network) is the same as a lost message.
            drop(endpoint.send_to_raw(to, TAG, Box::new(envelope)).await);
        }
        // The copy is made once the original has left the sender, never before: a sender paused
        // in the middle of its send holds the original, and the network has nothing to copy yet.
        // A copy of a lost message is a retransmission, and it may arrive.
        //
        // The copy is the network's, so it leaves on the world's own node: the sender's send is
        // over when its original leaves. A sender that awaited the copy too could be paused
        // between the two, and would then take the original's departure to be after the pause
        // (see `Worker::handle_sent`): a window no real send has, which the swarm found at once.
        if let Some(copy) = copy {
            if !ctx.is_cut(from, peer) {
                let endpoint = endpoint.clone();
                ctx.chaos.spawn(crate::panics::contained(async move {
                    drop(endpoint.send_to_raw(to, TAG, Box::new(copy)).await)
                }));
            }
        }
    }
}
