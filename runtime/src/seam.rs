//! The three seams the runtime is written against: a [`Clock`], a [`Client`] and a [`Hook`].
//! Each is a small object-safe trait whose calls return a [`BoxFuture`], so that a service puts
//! tokio and a store behind them and the simulator puts madsim's clock and network.

use futures::future::{self, BoxFuture, FutureExt};
use lease_core::{
    Apply, Epoch, JobId, OpId, OutputId, ReclaimReply, ReclaimRequest, ReclaimerId, RequestId, Time, WorkerId,
    WorkerReply, WorkerRequest,
};
use lease_history::{Event, Node};

/// A protocol point where a fault can strike ([`Hook::at`]): the history's own.
pub use lease_history::Point;

/// The node's local clock: the only way the runtime learns the time or waits.
pub trait Clock: Send + Sync {
    /// The local time now. Never goes backwards.
    fn now(&self) -> Time;
    /// A future that resolves once [`Clock::now`] has reached `at` (at once if it has).
    fn sleep_until(&self, at: Time) -> BoxFuture<'static, ()>;
}

/// The table and ledger calls. `None` is no answer (lost, or the caller gave up): the core's
/// retry handles it. The runtime bounds every call by the request's timeout, so a call that never
/// resolves is dropped then, not leaked, except an acquire and a release: they are awaited until
/// the client answers them or gives them up, however late, so that a late grant is declined (or
/// handed back at shutdown) rather than left leased to nobody, and a release is counted. A client
/// resolves every acquire and release in the end (a store call returns or fails; the simulator's
/// network answers them, or drops them with the node's life).
pub trait Client: Send + Sync {
    /// Worker `worker`'s request `id`, anything but an `Execute` (the runtime makes that call: it
    /// is the handler). `id` is the same for every copy of a request sent again: the table
    /// answers a retried acquire by it (`acquire_for`).
    fn worker(
        &self,
        worker: WorkerId,
        id: RequestId,
        request: WorkerRequest,
    ) -> BoxFuture<'static, Option<WorkerReply>>;

    /// Requests of one kind (`Acquire`, `Renew`, `Lookup`, `Complete` or `Requeue`) from many
    /// slots, made at one turn of the loop: one answer each, in order, each resolving as
    /// [`Client::worker`]'s would (`None`: no answer). A store answers them in one transaction
    /// (`lease_store::serve_worker_batch`), all at once; the default makes each call alone. The
    /// runtime sends a batch only when its `batch` option is above 1, and awaits each answer as
    /// it awaits a single call's: an acquire's until answered, any other's for the request's
    /// timeout. Each answer goes to its slot as it comes: one slow answer holds no other.
    fn worker_batch(
        &self,
        calls: Vec<(WorkerId, RequestId, WorkerRequest)>,
    ) -> Vec<BoxFuture<'static, Option<WorkerReply>>> {
        calls.into_iter().map(|(worker, id, request)| self.worker(worker, id, request)).collect()
    }

    /// Records `output`, which the handler produced for `op` under `epoch`, in the ledger
    /// (`LedgerStore::apply`): the ledger's answer.
    fn record(&self, worker: WorkerId, op: OpId, epoch: Epoch, output: OutputId) -> BoxFuture<'static, Option<Apply>>;

    /// Records many outputs, one per slot, made at one turn of the loop (as that many
    /// [`Client::record`] calls): one answer each, in order, each resolving as its call's would.
    /// A store records them in one
    /// transaction (`LedgerStore::apply_as`); the default makes each call alone.
    fn record_batch(&self, records: Vec<(WorkerId, OpId, Epoch, OutputId)>) -> Vec<BoxFuture<'static, Option<Apply>>> {
        records.into_iter().map(|(worker, op, epoch, output)| self.record(worker, op, epoch, output)).collect()
    }

    /// Reclaimer `reclaimer`'s request `id`.
    fn reclaimer(
        &self,
        reclaimer: ReclaimerId,
        id: RequestId,
        request: ReclaimRequest,
    ) -> BoxFuture<'static, Option<ReclaimReply>>;

    /// Reclaimer `reclaimer`'s requests of one step (a wave's fences, its lookups, or its
    /// requeues and completions; or a listing alone): one answer each, in order, each resolving as
    /// [`Client::reclaimer`]'s would. A store serves them in one transaction
    /// (`lease_store::serve_reclaimer_batch`); the default makes each call alone.
    fn reclaimer_batch(
        &self,
        reclaimer: ReclaimerId,
        calls: Vec<(RequestId, ReclaimRequest)>,
    ) -> Vec<BoxFuture<'static, Option<ReclaimReply>>> {
        calls.into_iter().map(|(id, request)| self.reclaimer(reclaimer, id, request)).collect()
    }

    /// Writes a line of the runtime's own (`executing`, `adopted`, `abandoned`, `batch_stopped`,
    /// `gave_up`) under `node`: lines no table or ledger call writes. Resolves to whether the line
    /// is known written: `false` if the store failed or could not be reached (it may still have
    /// committed), and the runtime starts no effect whose `executing` line is not known written.
    /// The default writes nothing, and says it did.
    fn line(&self, _node: Node, _event: Event) -> BoxFuture<'static, bool> {
        Box::pin(future::ready(true))
    }

    /// Writes many lines of the runtime's own, made at one turn of the loop (the `executing`
    /// lines of the effects its slots start together), as [`Client::line`] writes each: whether
    /// every one is known written. A store writes them in one transaction
    /// (`TableStore::append_all`); the default writes each alone, all at once.
    fn lines(&self, lines: Vec<(Node, Event)>) -> BoxFuture<'static, bool> {
        let written: Vec<_> = lines.into_iter().map(|(node, event)| self.line(node, event)).collect();
        Box::pin(future::join_all(written).map(|written| written.into_iter().all(|written| written)))
    }

    /// Writes the `executing` lines of effects about to start, made at one turn of the loop, each
    /// only while the store still holds its lease (`TableStore::append_started`), and reads the
    /// payloads of those written, for their handlers: `None` if the lines are not known written
    /// (they may still have committed; a payload that could not be read says the same), else
    /// each line's [`Started`]. A line the store refused is known not written: its lease expired
    /// or was taken while the line was on its way, and its effect must not start. The default
    /// writes them as [`Client::lines`] does, unguarded, with empty payloads: a store whose lines
    /// are written at once, as the runtime decides, and whose jobs carry no payload (the
    /// simulator's), has nothing to guard or read.
    fn started(&self, lines: Vec<(Node, Event)>) -> BoxFuture<'static, Option<Vec<Started>>> {
        let count = lines.len();
        Box::pin(self.lines(lines).map(move |written| written.then(|| vec![Started::Written(Vec::new()); count])))
    }
}

/// What became of one `executing` line sent to [`Client::started`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// Written under a live lease: the effect starts, its handler given the job's payload (the
    /// bytes it was enqueued with; empty when it had none).
    Written(Vec<u8>),
    /// Refused: the store no longer held the lease when the line reached it. The effect never
    /// starts.
    Refused,
}

/// Protocol points, where the simulator stalls or crashes a node. The runtime awaits the future
/// [`Hook::at`] returns, at the point, in its one loop: a stall there is a pause of the whole
/// process (every job in flight waits), and a crash is a future that never resolves, whose task
/// the simulator drops. Where each point is awaited:
///
/// - `before_effect`: the effect is decided (the machine took the time, still acting on the
///   lease, and its `executing` line is written) and the handler not yet started: a stall is a
///   process paused between its last check and the dependency call, whose effect then comes late
///   (past the lease, for the dependency's fencing to refuse); a crash leaves the line with no
///   effect;
/// - `after_effect`: the ledger recorded the output (`applied`: the runtime's record, or a fenced
///   dependency's own), before the worker takes the answer;
/// - `during_ack`: before a completion is sent, the effect applied and not yet acknowledged (a
///   stall holds the acknowledgement past the lease, for the table to refuse; a crash leaves the
///   completion unsent, for a reclaimer to adopt);
/// - `before_renew`: before a heartbeat is sent;
/// - `before_renew_reply`: a heartbeat was answered, before the worker takes the answer;
/// - `before_listing`: before a reclaimer's scan is sent;
/// - `after_listing`: a scan listed expired leases, before the reclaimer fences them;
/// - `mid_reclaim`: a fence was won, before the reclaimer takes it.
pub trait Hook: Send + Sync {
    /// The future to await at `point`, on `node`, working on `job`.
    fn at(&self, node: Node, point: Point, job: Option<JobId>) -> BoxFuture<'static, ()>;
}

/// The hook of a service: every point passes at once.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl Hook for NoHook {
    fn at(&self, _node: Node, _point: Point, _job: Option<JobId>) -> BoxFuture<'static, ()> {
        Box::pin(future::ready(()))
    }
}
