//! The table node: serves the lease table, and records what the table decided, with the exact
//! times and expiries it used.
//!
//! An `Acquire` that finds the queue empty is held open (long polling) for up to the workers'
//! `acquire_wait`, and answered as soon as a job can be granted: idle workers then cost one
//! message pair per wait instead of one per poll. Never longer than the worker can use a grant
//! for, less a round trip ([`lease_core::WorkerConfig::acquire_hold_max`]): a grant made later
//! would be dead on arrival. Held requests are volatile: a restart drops them, and the workers ask
//! again when their wait runs out.
//!
//! An acquire is answered by request id ([`lease_core::LeaseTable::acquire_for`]): a retried copy
//! whose grant still stands gets it again (`regranted`). An acquire from a worker's earlier life,
//! or from a worker that is down, came over a connection its crash reset: it is dropped unanswered,
//! when it arrives and again when a held one comes up, so that no dead process is granted a job.
//! So is a copy of an acquire whose exchange is over (see [`Sessions`]): the worker no longer
//! listens for its answer, and a grant to it would be a job nobody runs.
//!
//! A reclaimer's `as_of` (its own clock, which the table never uses, but a planted bug does) is put
//! on the table's scale first ([`on_table_scale`]), as a table comparing wall clocks would read it.

use super::wire::Letter;
use super::{bind, Mailbox};
use crate::clock::on_table_scale;
use crate::net::{table_addr, Envelope, INCARNATION_SHIFT};
use crate::net::{Reply, Request};
use crate::world::ctx::Ctx;
use crate::world::durable::answered;
use lease_core::{Acquired, JobId, ReclaimRequest, ReclaimerId, RequestId, WorkerId, WorkerReply, WorkerRequest};
use lease_history::answers;
use lease_history::Node;
use lease_store::{serve_reclaimer, serve_reclaimer_batch, serve_worker, serve_worker_batch, WorkerCall};
use madsim::net::Endpoint;
use std::collections::{BTreeMap, VecDeque};
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// An `Acquire`, or a batch of them, held open until a job can be granted or its wait runs out.
struct Parked {
    from: SocketAddr,
    /// The message's wire id.
    id: u64,
    /// Each acquire of the message: its worker, its request's wire id, and whether it is still
    /// held (a batch's slot that asked afresh meanwhile, or whose life ended, is not).
    calls: Vec<(u32, u64, bool)>,
    /// Whether the message is a batch ([`Request::WorkerBatch`]), answered as one.
    batch: bool,
    until_us: u64,
}

impl Parked {
    /// Whether a worker life that sent one of its acquires is still the worker's, and up.
    fn alive(&self, ctx: &Ctx) -> bool {
        self.calls.iter().any(|&(worker, id, held)| held && sender_alive(ctx, worker, id))
    }

    /// Whether it holds worker `worker`'s acquire `id`.
    fn holds(&self, worker: u32, id: u64) -> bool {
        self.calls.iter().any(|&(n, i, held)| held && n == worker && i == id)
    }

    /// Worker `worker` sent request `id`: a held acquire of its that it has moved past is not
    /// waited for. Whether it still holds any acquire.
    fn moved_past(&mut self, worker: u32, id: u64) -> bool {
        for (n, i, held) in &mut self.calls {
            if *n == worker && *i < id {
                *held = false;
            }
        }
        self.calls.iter().any(|&(_, _, held)| held)
    }

    /// The acquires to serve now: held, and sent by a life that is still up.
    fn live(&self, ctx: &Ctx) -> Vec<(u32, u64, WorkerRequest)> {
        let live = self.calls.iter().filter(|&&(worker, id, held)| held && sender_alive(ctx, worker, id));
        live.map(|&(worker, id, _)| (worker, id, WorkerRequest::Acquire)).collect()
    }

    /// The message answering it: `answers` for its live acquires, in order, none for the rest.
    fn answer(&self, ctx: &Ctx, mut answers: impl Iterator<Item = WorkerReply>) -> Reply {
        let mut each = self.calls.iter().map(|&(worker, id, held)| {
            (held && sender_alive(ctx, worker, id)).then(|| answers.next().expect("an answer per live acquire"))
        });
        match self.batch {
            true => Reply::WorkerBatch(each.collect()),
            false => Reply::Worker(each.next().flatten().expect("a single held acquire is live")),
        }
    }

    fn letter(&self) -> Letter {
        acquire_letter(self.calls[0].0)
    }
}

/// Whether every answer is an empty acquire.
fn all_empty(answers: &[WorkerReply]) -> bool {
    answers.iter().all(|answer| matches!(answer, WorkerReply::Acquired(Acquired::Empty)))
}

/// Whether worker `n`'s request with wire id `id` comes from its current, running life.
fn sender_alive(ctx: &Ctx, n: u32, id: u64) -> bool {
    ctx.is_current(Node::Worker(n), id >> INCARNATION_SHIFT)
}

/// Whether wire id `id` is in its slot's machine's numbering: every request but a release the
/// runtime sends on its own ([`lease_runtime::SHUTDOWN_RELEASE`], at shutdown or for a buffered job
/// whose lease its machine gave up), which no machine numbered. Taken as the worker's latest
/// request, such a release would make every later acquire of the slot a spent copy
/// ([`Sessions::spent`]; large-batches found a world whose processes stopped taking jobs so, once
/// a buffer released one). A machine's own release (of a declined grant) is numbered, and counts.
fn numbered(id: u64) -> bool {
    id & ((1 << super::runtime::SLOT_SHIFT) - 1) != lease_runtime::SHUTDOWN_RELEASE.0
}

/// Per worker, the latest request the table has had from it, and whether it was an acquire the
/// table granted. A worker numbers its requests upwards (its incarnation in the top bits) and has
/// at most one acquire out, so a copy of an earlier request, or of an acquire already answered
/// empty, reaches the table only after the worker is done with it (a copy sent on a timeout
/// that crossed the slow answer): served as new, it would grant a job to a worker that no longer
/// listens. Such a copy is dropped, as a transport drops a duplicate. A copy of the granted
/// acquire goes to the table, which answers it with the same grant while that stands. Volatile,
/// like the held requests: a restart of the table forgets it.
#[derive(Debug, Default)]
struct Sessions(BTreeMap<u32, Latest>);

#[derive(Debug, Clone, Copy)]
struct Latest {
    id: u64,
    granted: bool,
}

impl Sessions {
    /// Whether acquire `id` from worker `n` is a copy of a request whose exchange is over.
    fn spent(&self, n: u32, id: u64) -> bool {
        self.0.get(&n).is_some_and(|latest| id < latest.id || (id == latest.id && !latest.granted))
    }

    /// Worker `n` sent request `id`.
    fn saw(&mut self, n: u32, id: u64) {
        let latest = self.0.entry(n).or_insert(Latest { id, granted: false });
        if id > latest.id {
            *latest = Latest { id, granted: false };
        }
    }

    /// The table answered worker `n`'s request `id` with a grant, if `reply` is one.
    fn answered(&mut self, n: u32, id: u64, reply: &Reply) {
        let granted =
            matches!(reply, Reply::Worker(WorkerReply::Acquired(Acquired::Granted(_) | Acquired::Regranted(_))));
        if let Some(latest) = self.0.get_mut(&n).filter(|latest| latest.id == id && granted) {
            latest.granted = true;
        }
    }
}

pub(super) async fn main(ctx: Arc<Ctx>) {
    let Some(endpoint) = bind(table_addr()).await else { return };
    let endpoint = Arc::new(endpoint);
    let worker = ctx.params.worker;
    worker.validate().unwrap_or_else(|error| panic!("unworkable parameters: {error}"));
    let wait_us = worker.acquire_wait.min(worker.acquire_hold_max()).as_us();
    // In arrival order; every wait is the same length, so also in order of running out.
    let mut parked: VecDeque<Parked> = VecDeque::new();
    let mut sessions = Sessions::default();
    // One timer for the first held request, kept across messages: arming a fresh timeout for
    // every request the table receives would double the simulator's work while workers idle.
    let mut timer: Option<(u64, Pin<Box<madsim::time::Sleep>>)> = None;
    // Its receives kept pending across timer wake-ups: dropping one when a timer fires would lose
    // a request it had already taken (see [`super::Inbox`]). Requests that reached it before the
    // network's latency was over are held there, with one timer for the first of them.
    let mut mailbox = Mailbox::<Request>::new(Arc::clone(&endpoint));
    let mut due_timer: Option<(u64, Pin<Box<madsim::time::Sleep>>)> = None;
    loop {
        let (envelope, from) = match mailbox.held.due(ctx.now().0) {
            Some(due) => due,
            None => {
                let first_until = parked.front().map(|first| first.until_us);
                if timer.as_ref().map(|(until, _)| *until) != first_until {
                    timer = first_until.map(|until| arm(&ctx, until));
                }
                let next_due = mailbox.held.next_due_us();
                if due_timer.as_ref().map(|(due, _)| *due) != next_due {
                    due_timer = next_due.map(|due| arm(&ctx, due));
                }
                let woke = poll_fn(|cx| {
                    if let Poll::Ready(arrival) = mailbox.poll_arrival(cx) {
                        return Poll::Ready(arrival.map(|(envelope, from)| Woke::Message(envelope, from)));
                    }
                    if timer.as_mut().is_some_and(|(_, sleep)| sleep.as_mut().poll(cx).is_ready()) {
                        return Poll::Ready(Some(Woke::Parked));
                    }
                    if due_timer.as_mut().is_some_and(|(_, sleep)| sleep.as_mut().poll(cx).is_ready()) {
                        return Poll::Ready(Some(Woke::Due));
                    }
                    Poll::Pending
                })
                .await;
                let Some(woke) = woke else { return };
                match woke {
                    Woke::Message(envelope, from) => match mailbox.held.arrived(envelope, from, ctx.now().0) {
                        Some(due) => due,
                        None => continue,
                    },
                    Woke::Due => {
                        due_timer = None;
                        continue;
                    }
                    Woke::Parked => {
                        timer = None;
                        let now = ctx.now().0;
                        while parked.front().is_some_and(|first| first.until_us <= now) {
                            let first = parked.pop_front().expect("checked");
                            if !first.alive(&ctx) {
                                continue; // Its connection was reset: nobody to answer.
                            }
                            let empty = first.answer(&ctx, std::iter::repeat(WorkerReply::Acquired(Acquired::Empty)));
                            reply(&ctx, &endpoint, first.from, first.id, first.letter(), empty);
                        }
                        continue;
                    }
                }
            }
        };
        tracing::trace!(id = envelope.id, request = ?envelope.body, "request taken");
        let id = envelope.id;
        let letter = Letter::request(&envelope.body, Node::Table);
        match envelope.body {
            Request::WorkerBatch(calls) => {
                let acquires = calls.first().is_some_and(|&(_, _, request)| request == WorkerRequest::Acquire);
                // Each request as it would be taken alone: an acquire of a life that is over, or a
                // copy of one held or spent, is dropped (answered with nothing).
                let (mut taken, mut served) = (Vec::with_capacity(calls.len()), Vec::with_capacity(calls.len()));
                for &(worker, call, request) in &calls {
                    let dropped = acquires
                        && (!sender_alive(&ctx, worker, call)
                            || parked.iter().any(|p| p.holds(worker, call))
                            || sessions.spent(worker, call));
                    if !dropped {
                        sessions.saw(worker, call);
                        parked.retain_mut(|p| p.moved_past(worker, call));
                    }
                    taken.push((worker, call, !dropped));
                    if !dropped {
                        served.push((worker, call, request));
                    }
                }
                if served.is_empty() {
                    continue; // Nobody listens for any of its answers.
                }
                let answers = serve_batch(&ctx, Node::Table, &served);
                let held = Parked { from, id, calls: taken, batch: true, until_us: ctx.now().0 + wait_us };
                if acquires && wait_us > 0 && all_empty(&answers) {
                    parked.push_back(held);
                    continue;
                }
                for (&(worker, call, _), answer) in served.iter().zip(&answers) {
                    sessions.answered(worker, call, &Reply::Worker(answer.clone()));
                }
                let answer = match acquires {
                    true => held.answer(&ctx, answers.into_iter()),
                    false => Reply::WorkerBatch(answers.into_iter().map(Some).collect()),
                };
                reply(&ctx, &endpoint, from, id, letter, answer);
                if acquires {
                    continue;
                }
            }
            Request::Worker(worker, WorkerRequest::Acquire) => {
                if !sender_alive(&ctx, worker, id) {
                    continue; // Sent by a life that crashed since: its connection was reset.
                }
                if parked.iter().any(|p| p.holds(worker, id)) || sessions.spent(worker, id) {
                    continue; // A copy of a request held, or of one whose exchange is over.
                }
                sessions.saw(worker, id);
                // A held acquire that the worker has moved past (it asked afresh) is not waited for.
                parked.retain_mut(|p| p.moved_past(worker, id));
                let answer = serve(&ctx, id, envelope.body);
                if wait_us > 0 && matches!(answer, Reply::Worker(WorkerReply::Acquired(Acquired::Empty))) {
                    let calls = vec![(worker, id, true)];
                    parked.push_back(Parked { from, id, calls, batch: false, until_us: ctx.now().0 + wait_us });
                    continue;
                }
                sessions.answered(worker, id, &answer);
                reply(&ctx, &endpoint, from, id, letter, answer);
                continue;
            }
            body => {
                if let (&Request::Worker(worker, _), true) = (&body, numbered(id)) {
                    sessions.saw(worker, id);
                    parked.retain_mut(|p| p.moved_past(worker, id));
                }
                let answer = serve(&ctx, id, body);
                reply(&ctx, &endpoint, from, id, letter, answer);
            }
        }
        // Anything may have made a job grantable (an arrival, a requeue): serve the held first.
        while let Some(first) = parked.front() {
            if !first.alive(&ctx) {
                parked.pop_front(); // Its worker crashed while it was held: never granted.
                continue;
            }
            let answers = serve_batch_or_one(&ctx, first);
            if all_empty(&answers) {
                break;
            }
            let first = parked.pop_front().expect("checked");
            for (&(worker, call, _), answer) in first.live(&ctx).iter().zip(&answers) {
                sessions.answered(worker, call, &Reply::Worker(answer.clone()));
            }
            let answer = first.answer(&ctx, answers.into_iter());
            reply(&ctx, &endpoint, first.from, first.id, first.letter(), answer);
        }
    }
}

/// Serves a held message's live acquires again: a batch's together, a single one alone.
fn serve_batch_or_one(ctx: &Ctx, held: &Parked) -> Vec<WorkerReply> {
    let live = held.live(ctx);
    if held.batch {
        return serve_batch(ctx, Node::Table, &live);
    }
    let (worker, id, request) = live[0];
    match serve(ctx, id, Request::Worker(worker, request)) {
        Reply::Worker(answer) => vec![answer],
        other => panic!("an acquire answered {other:?}"),
    }
}

/// Serves a runtime's batch as every caller of a store serves one
/// ([`lease_store::serve_worker_batch`]), in one transaction at one time, and records the line of
/// each of its requests, in order, under `node` (the table, or the ledger for lookups).
pub(super) fn serve_batch(ctx: &Ctx, node: Node, calls: &[(u32, u64, WorkerRequest)]) -> Vec<WorkerReply> {
    let now = ctx.now();
    if let Some((_, _, first)) = calls.first() {
        ctx.served_batch(crate::world::Events::batch_kind(first), calls.len());
    }
    let mut state = ctx.state();
    let calls: Vec<WorkerCall> = calls.iter().map(|&(n, id, request)| (WorkerId(n), RequestId(id), request)).collect();
    let served = answered(serve_worker_batch(state.durable.store(), now, &calls));
    state.record_served(now, node, served)
}

/// Answers the request `letter` describes, through the network's faults. A lost reply is normal:
/// the caller times out and asks again.
fn reply(ctx: &Arc<Ctx>, endpoint: &Arc<Endpoint>, to: SocketAddr, id: u64, letter: Letter, body: Reply) {
    super::wire::post_detached(ctx, endpoint, to, letter.answer(), id, body)
}

/// What woke the table.
enum Woke {
    /// A message reached the node.
    Message(Envelope<Request>, SocketAddr),
    /// The first parked acquire ran out.
    Parked,
    /// The first held request is due.
    Due,
}

/// A timer that fires at world time `until_us`, with that time.
fn arm(ctx: &Ctx, until_us: u64) -> (u64, Pin<Box<madsim::time::Sleep>>) {
    ctx.armed();
    let wait = Duration::from_micros(until_us.saturating_sub(ctx.now().0).max(1));
    (until_us, Box::pin(madsim::time::sleep(wait)))
}

/// Worker `n`'s acquire, as the network carries it.
fn acquire_letter(n: u32) -> Letter {
    Letter::request(&Request::Worker(n, WorkerRequest::Acquire), Node::Table)
}

/// Answers one request to the table; `id` is its wire id, the same for every copy. A worker's
/// or a reclaimer's request is served as every caller of a store serves it
/// ([`lease_store::serve_worker`], [`lease_store::serve_reclaimer`]), which gives the line the
/// store wrote with the answer: the world's history records that line.
fn serve(ctx: &Ctx, id: u64, request: Request) -> Reply {
    let now = ctx.now();
    let mut state = ctx.state();
    let table = &mut state.durable;
    let (reply, event) = match request {
        // One job or a batch, in one transaction, a line for each.
        Request::Enqueue(jobs) => {
            let jobs: Vec<(JobId, Vec<u8>)> = jobs.into_iter().map(|job| (job, Vec::new())).collect();
            let enqueued = answered(table.by(Node::Table, None).enqueue_batch(now, &jobs));
            for (&(job, _), answer) in jobs.iter().zip(&enqueued) {
                state.record_at(now, Node::Table, answers::enqueued(job, answer));
            }
            return Reply::Enqueued;
        }
        Request::Worker(n, request) => {
            let at_ledger = matches!(request, WorkerRequest::Lookup { .. } | WorkerRequest::Execute { .. });
            assert!(!at_ledger, "harness bug: {request:?} routed to the table");
            // The wire id carries the worker's incarnation: a restarted worker's requests are new.
            let served = answered(serve_worker(table.store(), now, WorkerId(n), RequestId(id), request));
            (Reply::Worker(served.reply), served.event)
        }
        request
        @ (Request::Produce(..) | Request::Record(..) | Request::RecordBatch(..) | Request::WorkerBatch(..)) => {
            panic!("harness bug: {request:?} routed to the table")
        }
        Request::Reclaimer(n, request) => {
            assert!(!matches!(request, ReclaimRequest::Lookup { .. }), "harness bug: {request:?} routed to the table");
            let served = answered(serve_reclaimer(table.store(), now, ReclaimerId(n), on_table_scale_of(request)));
            (Reply::Reclaimer(served.reply), served.event)
        }
        // A wave's step, as a store serves it: each kind together, a line for each request.
        Request::ReclaimerBatch(n, requests) => {
            let at_ledger = requests.iter().any(|request| matches!(request, ReclaimRequest::Lookup { .. }));
            assert!(!at_ledger, "harness bug: {requests:?} routed to the table");
            let requests: Vec<ReclaimRequest> = requests.into_iter().map(on_table_scale_of).collect();
            let served = answered(serve_reclaimer_batch(table.store(), now, ReclaimerId(n), &requests));
            return Reply::ReclaimerBatch(state.record_served(now, Node::Table, served));
        }
    };
    state.record_at(now, Node::Table, event);
    reply
}

/// A reclaimer's request with its `as_of` put on the table's scale ([`on_table_scale`]).
fn on_table_scale_of(request: ReclaimRequest) -> ReclaimRequest {
    match request {
        ReclaimRequest::ListExpired { batch, as_of } => {
            ReclaimRequest::ListExpired { batch, as_of: on_table_scale(as_of) }
        }
        ReclaimRequest::Fence { batch, lease, as_of } => {
            ReclaimRequest::Fence { batch, lease, as_of: on_table_scale(as_of) }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::{Epoch, JobId};

    fn granted() -> Reply {
        let lease = lease_core::Lease {
            job: JobId(1),
            owner: lease_core::Owner::Worker(WorkerId(0)),
            epoch: Epoch(1),
            expires_at: lease_core::Time(100),
        };
        Reply::Worker(WorkerReply::Acquired(Acquired::Granted(lease_core::Grant { lease, attempt: 1 })))
    }

    const EMPTY: Reply = Reply::Worker(WorkerReply::Acquired(Acquired::Empty));

    // Proves which copies of an acquire the table drops: once worker 0's acquire 5 was answered
    // empty, a copy of it is spent (the worker may have moved on); once its acquire 6 was granted,
    // a copy of 6 is not (it goes to the table, for a regrant) but a copy of 5 is; after any later
    // request (7, a renewal) both are. Another worker's ids are its own.
    #[test]
    fn a_copy_of_an_acquire_whose_exchange_is_over_is_spent() {
        let mut sessions = Sessions::default();
        assert!(!sessions.spent(0, 5), "a first request is new");
        sessions.saw(0, 5);
        sessions.answered(0, 5, &EMPTY);
        assert!(sessions.spent(0, 5));
        assert!(!sessions.spent(0, 6));
        sessions.saw(0, 6);
        sessions.answered(0, 6, &granted());
        assert!(!sessions.spent(0, 6), "a copy of the granted acquire may be regranted");
        assert!(sessions.spent(0, 5));
        sessions.saw(0, 7);
        assert!(sessions.spent(0, 6) && sessions.spent(0, 5));
        assert!(!sessions.spent(1, 5), "worker 1's request 5 is not worker 0's");
        // A late answer to an older request changes nothing.
        sessions.answered(0, 6, &granted());
        assert!(sessions.spent(0, 6));
        // An older id seen late does not move the session back.
        sessions.saw(0, 3);
        assert!(sessions.spent(0, 6) && !sessions.spent(0, 8));
    }
}
