//! The nodes of a world. Each is a factory: madsim calls [`main`] at start and after every
//! restart, and the node rebuilds itself from durable state (the table's and the ledger's live in
//! the world; workers and reclaimers keep none).

mod arrivals;
mod ledger;
mod reclaimer;
mod table;
mod wire;
mod worker;

use crate::history::Node;
use crate::net::{Envelope, Reply, Request, TAG};
use crate::world::ctx::Ctx;
use madsim::net::Endpoint;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
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
            Node::Worker(n) => worker::main(ctx, n, life).instrument(span).await,
            Node::Reclaimer(n) => reclaimer::main(ctx, n, life).instrument(span).await,
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

/// A client's incoming replies, received without ever losing one to a timeout.
///
/// madsim's `recv_from_raw` takes the message out of the mailbox and then sleeps (at least a
/// simulated millisecond) before it returns it; a timeout that fires in that millisecond drops the
/// future, and the message with it. That is a loss no fault dealt, and it goes on after the heal.
/// So the inbox keeps one receive pending across waits: a wait that runs out leaves it pending,
/// and the next wait finishes it.
pub(crate) struct Inbox<'a> {
    endpoint: &'a Endpoint,
    pending: Receiving<'a>,
}

impl<'a> Inbox<'a> {
    /// The inbox of `endpoint`.
    pub(crate) fn new(endpoint: &'a Endpoint) -> Inbox<'a> {
        Inbox { endpoint, pending: Box::pin(endpoint.recv_from_raw(TAG)) }
    }

    /// Receives one reply within `wait_us`: `Ok(Some)` a reply, `Ok(None)` the wait ran out,
    /// `Err` the node's network is gone (it is being killed).
    pub(crate) async fn receive(&mut self, ctx: &Ctx, wait_us: u64) -> Result<Option<Envelope<Reply>>, ()> {
        ctx.armed();
        let wait = std::time::Duration::from_micros(wait_us.max(1));
        let Ok(received) = madsim::time::timeout(wait, &mut self.pending).await else { return Ok(None) };
        self.pending = Box::pin(self.endpoint.recv_from_raw(TAG));
        let (payload, _) = received.map_err(|_| ())?;
        let envelope = *payload.downcast::<Envelope<Reply>>().expect("only replies reach a client");
        tracing::trace!(id = envelope.id, reply = ?envelope.body, "reply taken");
        Ok(Some(envelope))
    }
}
