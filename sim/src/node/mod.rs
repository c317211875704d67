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
use crate::world::Ctx;
use madsim::net::Endpoint;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

/// The task a node runs, from its start or restart until it is killed.
pub(crate) fn main(ctx: Arc<Ctx>, node: Node) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    match node {
        Node::Table => Box::pin(table::main(ctx)),
        Node::Ledger => Box::pin(ledger::main(ctx)),
        Node::Worker(n) => Box::pin(worker::main(ctx, n)),
        Node::Reclaimer(n) => Box::pin(reclaimer::main(ctx, n)),
        Node::Arrivals => Box::pin(arrivals::main(ctx)),
        Node::World => unreachable!("the world is not a node"),
    }
}

/// Binds `addr`, or returns `None` when the node is being killed as it starts.
async fn bind(addr: SocketAddr) -> Option<Endpoint> {
    Endpoint::bind(addr).await.ok()
}

/// Sends a request to the table or the ledger, through the network's faults; a send that fails
/// (a dead network) is the same as a lost message.
async fn send(ctx: &Ctx, endpoint: &Endpoint, to: SocketAddr, id: u64, body: Request) {
    let peer = if to == crate::net::table_addr() { Node::Table } else { Node::Ledger };
    let letter = wire::Letter::request(&body, peer);
    wire::post(ctx, endpoint, to, letter, id, body).await
}

/// Receives one reply within `wait_us`: `Ok(Some)` a reply, `Ok(None)` the wait ran out,
/// `Err` the node's network is gone (it is being killed).
async fn receive(ctx: &Ctx, endpoint: &Endpoint, wait_us: u64) -> Result<Option<Envelope<Reply>>, ()> {
    ctx.armed();
    let wait = std::time::Duration::from_micros(wait_us.max(1));
    match madsim::time::timeout(wait, endpoint.recv_from_raw(TAG)).await {
        Err(_elapsed) => Ok(None),
        Ok(Err(_)) => Err(()),
        Ok(Ok((payload, _))) => Ok(Some(*payload.downcast::<Envelope<Reply>>().expect("only replies reach a client"))),
    }
}
