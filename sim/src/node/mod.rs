//! The nodes of a world. Each is a factory: madsim calls [`main`] at start and after every
//! restart, and the node rebuilds itself from durable state (the table's and the ledger's live in
//! the world; workers and reclaimers keep none).

mod arrivals;
mod ledger;
mod runtime;
mod table;
mod wire;

use crate::net::{Envelope, Reply, Request, TAG};
use crate::world::ctx::Ctx;
use futures::stream::{FuturesUnordered, StreamExt};
use lease_history::Node;
use madsim::net::Endpoint;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tracing::Instrument;

/// The task a node runs, from its start or restart until it is killed: a new life of the node,
/// whose logs all sit in the span `node{node=w1 life=2}` (see [`crate::logs`]).
pub(crate) fn main(ctx: Arc<Ctx>, node: Node) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    assert!(node != Node::World, "the world is not a node");
    Box::pin(async move {
        // Counted when the life first runs: a node killed before that never lived.
        let life = ctx.incarnate(node);
        let span = tracing::debug_span!("node", node = %node, life);
        match node {
            Node::Table => table::main(ctx).instrument(span).await,
            Node::Ledger => ledger::main(ctx).instrument(span).await,
            Node::Worker(n) => runtime::worker(ctx, n, life).instrument(span).await,
            Node::Reclaimer(n) => runtime::reclaimer(ctx, n, life).instrument(span).await,
            Node::Arrivals => arrivals::main(ctx).instrument(span).await,
            Node::World => unreachable!("checked above"),
        }
    })
}

/// Binds `addr`, or returns `None` when the node is being killed as it starts.
async fn bind(addr: SocketAddr) -> Option<Endpoint> {
    Endpoint::bind(addr).await.ok()
}

/// Sends a request to the table or the ledger, through the network's faults; a send that fails
/// (a dead network) is the same as a lost message.
async fn send(ctx: &Ctx, endpoint: &Endpoint, to: SocketAddr, id: u64, body: Request) {
    let peer = if to == crate::net::table_addr() { Node::Table } else { Node::Ledger };
    tracing::trace!(to = %peer, id, request = ?body, "request sent");
    let letter = wire::Letter::request(&body, peer);
    wire::post(ctx, endpoint, to, letter, id, body).await
}

/// One pending `recv_from_raw`: what a node has asked its endpoint for and not yet got.
type Receiving<'a> = Pin<Box<dyn Future<Output = std::io::Result<(madsim::net::Payload, SocketAddr)>> + Send + 'a>>;

/// Messages that reached a node's mailbox before they were due, held until then: the network's
/// latency is the world's ([`wire`]), and madsim carries every message in a microsecond.
pub(crate) struct Held<T> {
    /// In order of due time, then of arrival.
    waiting: std::collections::VecDeque<(Envelope<T>, SocketAddr)>,
}

impl<T> Held<T> {
    pub(crate) fn new() -> Held<T> {
        Held { waiting: std::collections::VecDeque::new() }
    }

    /// Takes a message that just arrived: `Some` back when it is due by `now_us`, else held.
    pub(crate) fn arrived(
        &mut self,
        envelope: Envelope<T>,
        from: SocketAddr,
        now_us: u64,
    ) -> Option<(Envelope<T>, SocketAddr)> {
        if envelope.due_us <= now_us && self.waiting.front().is_none_or(|(first, _)| first.due_us > now_us) {
            return Some((envelope, from));
        }
        let at = self.waiting.partition_point(|(held, _)| held.due_us <= envelope.due_us);
        self.waiting.insert(at, (envelope, from));
        None
    }

    /// The first held message due by `now_us`, if any.
    pub(crate) fn due(&mut self, now_us: u64) -> Option<(Envelope<T>, SocketAddr)> {
        if self.waiting.front()?.0.due_us <= now_us {
            return self.waiting.pop_front();
        }
        None
    }

    /// When the first held message is due.
    pub(crate) fn next_due_us(&self) -> Option<u64> {
        self.waiting.front().map(|(first, _)| first.due_us)
    }
}

/// A client's incoming replies, received without ever losing one to a timeout, each when due.
///
/// madsim's `recv_from_raw` takes the message out of the mailbox and then sleeps (at least a
/// simulated millisecond) before it returns it; a timeout that fires in that millisecond drops the
/// future, and the message with it. That is a loss no fault dealt, and it goes on after the heal.
/// So the inbox keeps one receive pending across waits: a wait that runs out leaves it pending,
/// and the next wait finishes it. A reply that arrives before it is due is held until then.
pub(crate) struct Inbox<'a> {
    endpoint: &'a Endpoint,
    pending: Receiving<'a>,
    held: Held<Reply>,
}

impl<'a> Inbox<'a> {
    /// The inbox of `endpoint`.
    pub(crate) fn new(endpoint: &'a Endpoint) -> Inbox<'a> {
        Inbox { endpoint, pending: Box::pin(endpoint.recv_from_raw(TAG)), held: Held::new() }
    }

    /// Receives one reply within `wait_us`: `Ok(Some)` a reply, `Ok(None)` the wait ran out,
    /// `Err` the node's network is gone (it is being killed).
    pub(crate) async fn receive(&mut self, ctx: &Ctx, wait_us: u64) -> Result<Option<Envelope<Reply>>, ()> {
        let deadline = ctx.now().0 + wait_us.max(1);
        loop {
            let now = ctx.now().0;
            if let Some((envelope, _)) = self.held.due(now) {
                tracing::trace!(id = envelope.id, reply = ?envelope.body, "reply taken");
                return Ok(Some(envelope));
            }
            if now >= deadline {
                return Ok(None);
            }
            let until = self.held.next_due_us().map_or(deadline, |due| due.min(deadline));
            ctx.armed();
            let wait = std::time::Duration::from_micros(until.saturating_sub(now).max(1));
            let Ok(received) = madsim::time::timeout(wait, &mut self.pending).await else { continue };
            self.pending = Box::pin(self.endpoint.recv_from_raw(TAG));
            let (payload, from) = received.map_err(|_| ())?;
            let envelope = *payload.downcast::<Envelope<Reply>>().expect("only replies reach a client");
            if let Some((envelope, _)) = self.held.arrived(envelope, from, ctx.now().0) {
                tracing::trace!(id = envelope.id, reply = ?envelope.body, "reply taken");
                return Ok(Some(envelope));
            }
        }
    }
}

/// How many receives a node keeps pending at once. madsim's `recv_from_raw` sleeps (a whole
/// simulated millisecond, by its timer's floor) after it takes a message and before it returns it,
/// so a node with one receive pending takes at most one message a millisecond; and the mailbox
/// behind it is not FIFO (it takes a waiting message out with `swap_remove`, which moves the newest
/// into its place), so under a steady load one message can wait there for good: a loss that no
/// fault dealt and the history never shows. (With a local buffer, large-batches found a renewal
/// batch kept so from the table for 200 ms, until its leases self-fenced; `docs/figures.md`.) With
/// this many pending, a message goes straight to a waiting receive as it arrives: a node takes up
/// to this many a millisecond, and none waits behind newer ones.
pub(crate) const RECEIVES: usize = 16;

/// A node's incoming messages of kind `T`, each taken when it is due: [`RECEIVES`] receives are
/// kept pending across waits (madsim's `recv_from_raw` takes the message out of the mailbox and
/// then sleeps before it returns it, so a receive dropped when a wait runs out would lose it; see
/// [`Inbox`]), and a message that arrives before it is due is held until then.
pub(crate) struct Mailbox<T> {
    endpoint: Arc<Endpoint>,
    /// Each is replaced once it has returned. Polled as they are woken (madsim wakes in a
    /// deterministic order): polling every pending receive on every wake cost the swarm a fifth
    /// of its speed.
    receiving: FuturesUnordered<Receiving<'static>>,
    /// What arrived before it was due.
    pub(crate) held: Held<T>,
}

impl<T: Send + 'static> Mailbox<T> {
    /// The mailbox of `endpoint`.
    pub(crate) fn new(endpoint: Arc<Endpoint>) -> Mailbox<T> {
        let receiving = (0..RECEIVES).map(|_| Mailbox::<T>::receive(&endpoint)).collect();
        Mailbox { endpoint, receiving, held: Held::new() }
    }

    fn receive(endpoint: &Arc<Endpoint>) -> Receiving<'static> {
        let endpoint = Arc::clone(endpoint);
        Box::pin(async move { endpoint.recv_from_raw(TAG).await })
    }

    /// A message that reached the node, due or not; `None` once the node's network is gone (it
    /// is being killed).
    pub(crate) fn poll_arrival(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Envelope<T>, SocketAddr)>> {
        let Poll::Ready(received) = self.receiving.poll_next_unpin(cx) else { return Poll::Pending };
        let received = received.expect("a mailbox always keeps its receives pending");
        self.receiving.push(Mailbox::<T>::receive(&self.endpoint));
        let Ok((payload, from)) = received else { return Poll::Ready(None) };
        let envelope = *payload.downcast::<Envelope<T>>().expect("each node takes one kind of message");
        Poll::Ready(Some((envelope, from)))
    }

    /// The next message due, in order of due time, then of arrival; `None` once the node's
    /// network is gone (it is being killed).
    pub(crate) async fn next(&mut self, ctx: &Ctx) -> Option<(Envelope<T>, SocketAddr)> {
        loop {
            let now = ctx.now().0;
            if let Some(due) = self.held.due(now) {
                return Some(due);
            }
            let arrival = match self.held.next_due_us() {
                None => Some(poll_fn(|cx| self.poll_arrival(cx)).await),
                Some(due) => {
                    ctx.armed();
                    let wait = std::time::Duration::from_micros(due.saturating_sub(now).max(1));
                    madsim::time::timeout(wait, poll_fn(|cx| self.poll_arrival(cx))).await.ok()
                }
            };
            let Some(arrival) = arrival else { continue };
            let (envelope, from) = arrival?;
            if let Some(due) = self.held.arrived(envelope, from, ctx.now().0) {
                return Some(due);
            }
        }
    }
}
