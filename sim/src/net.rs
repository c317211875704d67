//! What crosses madsim's network: requests and replies in envelopes, sent as raw payloads (no
//! serialisation: the simulated network carries Rust values).

use lease_core::{Apply, Epoch, JobId, OpId, OutputId, ReclaimReply, ReclaimRequest, WorkerReply, WorkerRequest};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The single message tag every node listens on.
pub const TAG: u64 = 1;
/// The port every node binds.
pub const PORT: u16 = 1;

/// A request, and who sends it.
#[derive(Debug, Clone)]
pub enum Request {
    /// From worker `n`.
    Worker(u32, WorkerRequest),
    /// From a worker process's runtime: requests of one kind (an acquire, a renewal, a lookup, a
    /// completion or a requeue) that several of its slots made at one turn, each with its slot
    /// and the wire id it would go under alone. The table (the ledger, for lookups) serves them
    /// in one transaction ([`lease_store::serve_worker_batch`]): lost, held back or doubled as
    /// one message.
    WorkerBatch(Vec<(u32, u64, WorkerRequest)>),
    /// From reclaimer `n`.
    Reclaimer(u32, ReclaimRequest),
    /// From reclaimer `n`'s runtime: the requests of one step of a wave (its fences, its lookups,
    /// or its requeues and completions), which the table (the ledger, for lookups) serves as a
    /// store does ([`lease_store::serve_reclaimer_batch`]): lost, held back or doubled as one
    /// message.
    ReclaimerBatch(u32, Vec<ReclaimRequest>),
    /// From the arrival generator: one job, or every job due at once (`Params::enqueue_batch`),
    /// served in one transaction ([`lease_store::TableStore::enqueue_batch`]), and lost, held back
    /// or doubled as one message.
    Enqueue(Vec<JobId>),
    /// From worker `n`'s recording handler: a call to the dependency that produces the
    /// operation's output and records nothing (the runtime records it: [`Request::Record`]).
    Produce(u32, OpId, Epoch),
    /// From worker `n`'s runtime: record its handler's output in the ledger, under the epoch.
    Record(u32, OpId, Epoch, OutputId),
    /// From a worker process's runtime: the outputs several of its slots' handlers made at one
    /// turn, each a [`Request::Record`] of its slot's. The ledger records them in one transaction
    /// ([`lease_runtime::Client::record_batch`]): lost, held back or doubled as one message.
    RecordBatch(Vec<(u32, OpId, Epoch, OutputId)>),
}

/// A reply to a [`Request`].
#[derive(Debug, Clone)]
pub enum Reply {
    /// To a worker.
    Worker(WorkerReply),
    /// To a [`Request::WorkerBatch`]: an answer per request, in order; `None` for one the table
    /// dropped unserved (an acquire of a life that is over, or a copy of one whose exchange is).
    WorkerBatch(Vec<Option<WorkerReply>>),
    /// To a reclaimer.
    Reclaimer(ReclaimReply),
    /// To a [`Request::ReclaimerBatch`]: an answer per request, in order.
    ReclaimerBatch(Vec<ReclaimReply>),
    /// To the arrival generator: its offer was served. What became of each job is the table's
    /// line for it (`arrived`, `duplicate` or `rejected`); the generator offers none again.
    Enqueued,
    /// To a [`Request::Produce`].
    Produced(Produced),
    /// To a [`Request::Record`]: the ledger's answer.
    Recorded(Apply),
    /// To a [`Request::RecordBatch`]: the ledger's answer to each record, in order.
    RecordedBatch(Vec<Apply>),
}

/// A recording handler's dependency call's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Produced {
    /// The output, recorded nowhere yet.
    Output(OutputId),
    /// The dependency failed before it produced anything (its `dependency_failed` says so).
    Failed,
    /// The dependency refused the job for good (its `dependency_failed`, `permanent`).
    Refused,
}

/// A message with the id that pairs a reply with its request. The id carries the sender's
/// incarnation in its top bits, so a reply addressed to a node's previous life is recognisably late.
#[derive(Debug, Clone)]
pub struct Envelope<T> {
    /// Request id on the wire.
    pub id: u64,
    /// The request or reply.
    pub body: T,
    /// When the network delivers it, on the world's clock: the receiver holds a message that
    /// reaches its mailbox sooner (madsim carries every message in a microsecond) until then.
    pub due_us: u64,
}

/// Bits of a wire id that hold the node's own request counter.
pub const INCARNATION_SHIFT: u32 = 40;

/// The wire id for request `id` of incarnation `incarnation`.
pub fn wire_id(incarnation: u64, id: u64) -> u64 {
    assert!(id < 1 << INCARNATION_SHIFT);
    incarnation << INCARNATION_SHIFT | id
}

/// The address of the table.
pub fn table_addr() -> SocketAddr {
    addr([10, 0, 0, 1])
}

/// The address of the ledger and its dependency.
pub fn ledger_addr() -> SocketAddr {
    addr([10, 0, 0, 2])
}

/// The address of worker `n`.
pub fn worker_addr(n: u32) -> SocketAddr {
    addr([10, 0, 1, n as u8 + 1])
}

/// The address of reclaimer `n`.
pub fn reclaimer_addr(n: u32) -> SocketAddr {
    addr([10, 0, 2, n as u8 + 1])
}

/// The address of the arrival generator.
pub fn arrivals_addr() -> SocketAddr {
    addr([10, 0, 3, 1])
}

fn addr(octets: [u8; 4]) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(octets)), PORT)
}
