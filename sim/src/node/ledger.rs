//! The ledger node: the effect ledger, and the slow, failing dependency in front of it.
//!
//! Lookups are answered at once. An `Execute` is a call to the fenced dependency: after its
//! latency it either fails before producing anything, or produces the operation's output and
//! applies it to the ledger under the caller's epoch. During the fault phase the dependency may
//! also answer "failed" after the effect happened (a timeout after the fact), or write a second,
//! different output for the same operation (a non-idempotent dependency), which the ledger keeps
//! as a rival.
//!
//! A `Produce` is a call to the same dependency by a recording handler: the same latency and
//! failures, but it records nothing, and answers the output (a lost answer is a failure, the
//! output unrecorded). The runtime then records the output itself: a `Record`, applied at once
//! under the caller's epoch.

use super::wire::Letter;
use super::{bind, Mailbox};
use crate::faults::decide::{Question, Visit};
use crate::net::{ledger_addr, Produced, Reply, Request};
use crate::world::ctx::Ctx;
use crate::world::durable::answered;
use lease_core::{
    Apply, Epoch, Execution, OpId, OutputId, ReclaimRequest, ReclaimerId, RequestId, Time, WorkerId, WorkerReply,
    WorkerRequest,
};
use lease_history::answers::{self, Asker};
use lease_history::Node;
use lease_store::{serve_reclaimer, serve_reclaimer_batch, serve_worker, Served, Store, StoreError};
use madsim::net::Endpoint;
use std::net::SocketAddr;
use std::sync::Arc;
use tracing::Instrument;

pub(super) async fn main(ctx: Arc<Ctx>) {
    let Some(endpoint) = bind(ledger_addr()).await else { return };
    let endpoint = Arc::new(endpoint);
    let mut mailbox = Mailbox::<Request>::new(Arc::clone(&endpoint));
    loop {
        let Some((envelope, from)) = mailbox.next(&ctx).await else { return };
        tracing::trace!(id = envelope.id, request = ?envelope.body, "request taken");
        let id = envelope.id;
        let letter = Letter::request(&envelope.body, Node::Ledger);
        let reply = match envelope.body {
            Request::Worker(n, request @ WorkerRequest::Lookup { .. }) => {
                Reply::Worker(lookup(&ctx, |store, now| serve_worker(store, now, WorkerId(n), RequestId(id), request)))
            }
            Request::Reclaimer(n, request @ ReclaimRequest::Lookup { .. }) => {
                Reply::Reclaimer(lookup(&ctx, |store, now| serve_reclaimer(store, now, ReclaimerId(n), request)))
            }
            Request::ReclaimerBatch(n, requests)
                if requests.iter().all(|request| matches!(request, ReclaimRequest::Lookup { .. })) =>
            {
                let now = ctx.now();
                let mut state = ctx.state();
                let served = answered(serve_reclaimer_batch(state.durable.store(), now, ReclaimerId(n), &requests));
                Reply::ReclaimerBatch(state.record_served(now, Node::Ledger, served))
            }
            Request::Worker(_, WorkerRequest::Execute { op, epoch }) | Request::Produce(_, op, epoch) => {
                let fenced = matches!(envelope.body, Request::Worker(..));
                let call = dependency(ctx.clone(), Arc::clone(&endpoint), from, letter, id, op, epoch, fenced);
                // In the ledger's span: the call is this life's work.
                madsim::task::spawn(crate::panics::contained(call.instrument(tracing::Span::current())));
                continue;
            }
            Request::Record(n, op, epoch, output) => Reply::Recorded(apply(&ctx, Node::Worker(n), op, epoch, output)),
            // One transaction: every record applied at one time, one line after another.
            Request::RecordBatch(records) => {
                ctx.served_batch(crate::world::Events::RECORDS, records.len());
                let apply = |(n, op, epoch, output)| apply(&ctx, Node::Worker(n), op, epoch, output);
                Reply::RecordedBatch(records.into_iter().map(apply).collect())
            }
            Request::WorkerBatch(calls)
                if calls.iter().all(|(_, _, request)| matches!(request, WorkerRequest::Lookup { .. })) =>
            {
                let answers = super::table::serve_batch(&ctx, Node::Ledger, &calls);
                Reply::WorkerBatch(answers.into_iter().map(Some).collect())
            }
            other => panic!("harness bug: {other:?} routed to the ledger"),
        };
        super::wire::post_detached(&ctx, &endpoint, from, letter.answer(), id, reply);
    }
}

/// Serves a lookup on the ledger, through `serve` ([`lease_store::serve_worker`] or
/// [`lease_store::serve_reclaimer`]), and records its line.
fn lookup<R>(ctx: &Ctx, serve: impl FnOnce(&mut dyn Store, Time) -> Result<Served<R>, StoreError>) -> R {
    let now = ctx.now();
    let mut state = ctx.state();
    let served = answered(serve(state.durable.store(), now));
    state.record_at(now, Node::Ledger, served.event);
    served.reply
}

/// One call to the dependency, on its own task so that slow calls overlap: the fenced
/// dependency's (`fenced`: an `Execute`, which applies its output under the caller's epoch) or a
/// recording handler's (a `Produce`, which records nothing).
#[allow(clippy::too_many_arguments, reason = "one call's whole context, passed once to its task")]
async fn dependency(
    ctx: Arc<Ctx>,
    endpoint: Arc<Endpoint>,
    to: SocketAddr,
    letter: Letter,
    id: u64,
    op: OpId,
    epoch: Epoch,
    fenced: bool,
) {
    let caller = letter.from;
    let (call, latency_us) = ctx.call(op.job, epoch, id);
    ctx.sleep_us(latency_us).await;
    let reply = if fenced {
        Reply::Worker(WorkerReply::Executed(execute(&ctx, call, caller, op, epoch)))
    } else {
        Reply::Produced(produce(&ctx, call, caller, op, epoch))
    };
    super::wire::post(&ctx, &endpoint, to, letter.answer(), id, reply).await;
}

/// The fenced dependency's answer to `caller`'s call `call`.
fn execute(ctx: &Ctx, call: Option<Visit>, caller: Node, op: OpId, epoch: Epoch) -> Execution {
    if ctx.params.is_poison(op.job) {
        return ctx.refuse(caller, op, epoch);
    }
    if ctx.call_fault(call, Question::FailBefore) {
        return ctx.fail(caller, op, epoch, false);
    }
    let output = output_of(ctx.params.seed, op, epoch, 0);
    let apply = apply(ctx, caller, op, epoch, output);
    // A rival comes from a dependency that timed out, retried on its own, and produced a second
    // identity: the caller hears "failed", though two outputs now claim the operation.
    let rival = ctx.call_fault(call, Question::Rival);
    if rival {
        let _ = apply_rival(ctx, op, epoch, output);
    }
    if rival || ctx.call_fault(call, Question::LostReply) {
        ctx.fail(caller, op, epoch, true)
    } else {
        Execution::Done { output, apply }
    }
}

/// A recording handler's dependency's answer to `caller`'s call `call`: the output, recorded
/// nowhere, or a failure before it (a lost answer is one too: a timeout), or a refusal for good.
fn produce(ctx: &Ctx, call: Option<Visit>, caller: Node, op: OpId, epoch: Epoch) -> Produced {
    if ctx.params.is_poison(op.job) {
        let _refused = ctx.refuse(caller, op, epoch);
        return Produced::Refused;
    }
    if ctx.call_fault(call, Question::FailBefore) || ctx.call_fault(call, Question::LostReply) {
        let _failed = ctx.fail(caller, op, epoch, false);
        return Produced::Failed;
    }
    Produced::Output(output_of(ctx.params.seed, op, epoch, 0))
}

/// The dependency's own second write: `from` is the ledger, no worker asked for it.
fn apply_rival(ctx: &Ctx, op: OpId, epoch: Epoch, output: OutputId) -> Apply {
    apply(ctx, Node::Ledger, op, epoch, OutputId(output.0 ^ 0x9e37_79b9_7f4a_7c15))
}

fn apply(ctx: &Ctx, from: Node, op: OpId, epoch: Epoch, output: OutputId) -> Apply {
    let now = ctx.now();
    let mut state = ctx.state();
    let apply = answered(state.durable.by(from, None).apply(now, op, epoch, output));
    state.record_at(now, Node::Ledger, answers::apply(&Asker::node(from), op, epoch, output, &apply));
    apply
}

/// The output a call produces: the same request (operation and epoch) gives the same document,
/// so a retried call is idempotent; another epoch's call gives another identity.
pub(crate) fn output_of(seed: u64, op: OpId, epoch: Epoch, salt: u64) -> OutputId {
    let mut x = seed ^ op.job.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (op.step as u64) << 48;
    x ^= epoch.0.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ salt;
    // splitmix64's finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    OutputId(x ^ (x >> 31))
}
