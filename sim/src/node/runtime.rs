//! The worker and reclaimer nodes: each runs `lease-runtime`, the code a service ships, on three
//! seams of this world's:
//!
//! - a [`Clock`]: the node's drifting local clock ([`LocalClock`]) over madsim's;
//! - a [`Client`]: madsim's network to the table and the ledger, through every fault of the wire
//!   ([`super::wire`]), each request tagged with the node's life so that a reply to an earlier
//!   life is known late, and one router per life that hands each reply, when due, to the call
//!   awaiting it;
//! - a [`Hook`]: the world's strikes at protocol points, a stall (the node does nothing) or a
//!   crash (the node is killed; the future never resolves).
//!
//! The handler is the ledger node's dependency, called over the network with the operation id and
//! the epoch, with its slowness, failures and lost answers, in one of two shapes
//! ([`crate::world::params::Params::recorders`]):
//!
//! - *fenced*: the dependency records its own output under the epoch, idempotent by operation,
//!   and the handler hands the ledger's answer back ([`Output::Recorded`]);
//! - *recording*: the dependency produces the output and records nothing; the handler returns it
//!   ([`Output::Named`]) and the runtime records it under the epoch ([`Client::record`]: a
//!   `Record` to the ledger), as a service's runtime does for a dependency that takes no token.
//!
//! A call whose answer does not come is made again, under the same wire id, until the runtime
//! cancels the handler.

use super::{bind, send, Mailbox};
use crate::clock::LocalClock;
use crate::faults::decide::Dealt;
use crate::net::{ledger_addr, table_addr, wire_id, Produced, Reply, Request, INCARNATION_SHIFT};
use crate::world::ctx::{Ctx, Owed};
use futures::channel::oneshot;
use futures::future::{BoxFuture, FutureExt};
use lease_core::{
    Acquired, Apply, Bugs, Completion, Epoch, Execution, JobId, OpId, OutputId, ReclaimReply, ReclaimRequest,
    ReclaimerId, Release, RequestId, Requeue, Rules, Span, Time, WorkerId, WorkerReply, WorkerRequest,
};
use lease_history::{AbandonReason, Event, MessageKind, Node, Point};
use lease_runtime::{
    Cancel, Client, Clock, HandlerError, Hook, Job, Metrics, Outcome, Output, ReclaimerOptions, Runtime, Started,
    WorkerOptions, SHUTDOWN_RELEASE,
};
use madsim::net::Endpoint;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing::Instrument;

/// The life `incarnation` of worker `n`: one runtime, one slot, until the node is killed or told
/// to stop ([`Ctx::shutdown`]): then it drains as a service does, and exits.
pub(super) async fn worker(ctx: Arc<Ctx>, n: u32, incarnation: u64) {
    let node = Node::Worker(n);
    let Some(seams) =
        Seams::bind(&ctx, node, crate::net::worker_addr(n), ctx.params.worker_clocks[n as usize], incarnation).await
    else {
        return;
    };
    let slots = ctx.params.slot_nodes(node).into_iter().map(|slot| WorkerId(worker_of(slot))).collect();
    let mut options = WorkerOptions::new(slots, ctx.params.worker).planting(ctx.bugs);
    options.batch = ctx.params.batch;
    options.linger = ctx.params.linger;
    options.handlers = ctx.params.handlers as usize;
    if let Some(grace_us) = ctx.params.shutdown_grace_us {
        options.grace = Span::from_us(grace_us);
    }
    options.handler_timeout = ctx.params.handler_timeout_us.map(Span::from_us);
    let client = Arc::clone(&seams.wire);
    let timeout = ctx.params.worker.request_timeout;
    let records = ctx.params.records_itself(n);
    // The handlers running, as the simulator sees them: called, not yet returned, and not
    // cancelled (the runtime fires a handler's signal when it gives the handler up, then drops
    // it, perhaps a turn later). A process runs at most `handlers` at once.
    let (limit, running) =
        (ctx.params.handlers as usize, Arc::new(Mutex::new(Vec::<(Cancel, Arc<AtomicBool>)>::new())));
    let handlers = Arc::clone(&running);
    // Every handler's signal, called in this life: how many fired is how many the runtime
    // cancelled.
    let signals = Arc::new(Mutex::new(Vec::<Cancel>::new()));
    let called = Arc::clone(&signals);
    let lease_ttl = ctx.params.table.lease_ttl;
    let handler = move |job: Job| {
        // The handler is told its lease's deadline, the machine's estimate of expiry less the
        // margin, on the node's clock: a lease granted or renewed before now, so never more than
        // a lease from now (it may have passed: a stall at `before_effect` starts an effect late).
        let now = client.clock.local(client.ctx.now());
        assert!(
            job.deadline() > Time::ZERO && job.deadline() <= now + lease_ttl,
            "{node}: the handler for {} {} is told the deadline {}, at {now} with leases of {lease_ttl}",
            job.id,
            job.epoch,
            job.deadline()
        );
        // A handler is called for a lease still acted on: its signal has not fired.
        assert!(!job.cancel.is_cancelled(), "{node}: the handler for {} {} is called cancelled", job.id, job.epoch);
        let returned = Arc::new(AtomicBool::new(false));
        called.lock().expect("signals lock").push(job.cancel.clone());
        let mut running = running.lock().expect("handlers lock");
        running.retain(|(cancel, returned)| !cancel.is_cancelled() && !returned.load(Ordering::SeqCst));
        assert!(
            limit == 0 || running.len() < limit,
            "{node}: a handler for {} starts while {} run, and its options allow {limit} at once",
            job.id,
            running.len()
        );
        running.push((job.cancel.clone(), Arc::clone(&returned)));
        drop(running);
        let call = dependency(Arc::clone(&client), job, timeout, records);
        async move {
            let outcome = call.await;
            returned.store(true, Ordering::SeqCst);
            outcome
        }
    };
    let from = ctx.state().history.len();
    let (metrics, started_us) = (Arc::new(Metrics::new()), ctx.now().0);
    let runtime = seams.runtime().with_metrics(Arc::clone(&metrics));
    // A service reads its figures from the runtime: the metrics it was given.
    assert!(Arc::ptr_eq(&runtime.metrics(), &metrics), "{node}: the runtime reads other metrics than it was given");
    let (stop, told) = (ctx.stop_signal(node, incarnation), Arc::clone(&seams.wire.told));
    let work = runtime.work(options, handler, async move {
        stop.await;
        told.store(true, Ordering::SeqCst);
    });
    let tally = work.await.unwrap_or_else(|error| panic!("unworkable parameters: {error}"));
    if ctx.violated() {
        // The history stops at a violation: there is nothing left to audit against.
        return exit(&ctx, node, incarnation).await;
    }
    // A lease given up while buffered was released before the runtime returned.
    if let Some(unpaid) = ctx.unpaid_release(Some((node, incarnation))) {
        panic!("{unpaid}");
    }
    // Every handler it called returned, or was told its lease was given up: a handler dropped
    // with its signal unfired never hears that the work it started must stop.
    let unfinished = handlers
        .lock()
        .expect("handlers lock")
        .iter()
        .any(|(cancel, returned)| !cancel.is_cancelled() && !returned.load(Ordering::SeqCst));
    assert!(!unfinished, "{node} life {incarnation}: its runtime returned with a handler running, never cancelled");
    // It counts a handler cancelled when it fires the handler's signal, once a handler.
    let fired = signals.lock().expect("signals lock").iter().filter(|cancel| cancel.is_cancelled()).count();
    assert_eq!(
        tally.cancelled, fired as u64,
        "{node} life {incarnation}: its runtime counted {} handlers cancelled, and fired {fired} handlers' signals",
        tally.cancelled
    );
    let lines = |keep: &dyn Fn(&Event) -> bool| lines_since(&ctx, from, node, keep);
    // What it told its metrics, against its history: a service's dashboard must say what the
    // history says. A grant is told when its slot takes it, so at least every lease the process
    // looked up or executed under, and at most every grant and regrant made to its slots.
    let told = metrics.snapshot();
    let (granted, acted) = {
        let state = ctx.state();
        let ours = |n: Node| ctx.params.process_of(n) == node;
        let (mut granted, mut acted) = (0, std::collections::BTreeSet::new());
        for entry in &state.history[from..] {
            match entry.event {
                Event::Granted { owner, .. } | Event::Regranted { owner, .. } if ours(owner) => granted += 1,
                Event::Executing { job, epoch, .. } if ours(entry.node) => {
                    acted.insert((job, epoch));
                }
                Event::LookedUp { from: asker, job, epoch, .. } if ours(asker) => {
                    acted.insert((job, epoch));
                }
                _ => {}
            }
        }
        (granted, acted.len() as u64)
    };
    audit_within(node, incarnation, "grants told", told.grants, acted, granted);
    let adopted = lines(&|e| matches!(e, Event::Adopted { .. }));
    audit(node, incarnation, "adoptions told", told.adoptions, adopted, false);
    let self_fenced = lines(&|e| matches!(e, Event::Abandoned { why: AbandonReason::SelfFenced, .. }));
    audit(node, incarnation, "self-fences told", told.self_fences, self_fenced, false);
    let effects = &told.effect_seconds;
    audit(node, incarnation, "effects timed", effects.count, tally.handled, true);
    // Each handler call lasts no longer than the life (twice over: the node's clock drifts).
    let life_s = 2.0 * (ctx.now().0.saturating_sub(started_us) as f64 / 1e6) + 1e-3;
    assert!(
        effects.sum_seconds <= effects.count as f64 * life_s,
        "{node} life {incarnation}: its runtime timed {} effects at {} s in all, in a life of {life_s} s",
        effects.count,
        effects.sum_seconds
    );
    // A handler's own calls made again write `executing` too: one handler call per lease.
    let executed = {
        let state = ctx.state();
        let ours = |entry: &&lease_history::Entry| ctx.params.process_of(entry.node) == node;
        let leases = state.history[from..].iter().filter(ours).filter_map(|entry| match entry.event {
            Event::Executing { job, epoch, .. } => Some((job, epoch)),
            _ => None,
        });
        leases.collect::<std::collections::BTreeSet<_>>().len() as u64
    };
    let given_up = lines(&|e| matches!(e, Event::Abandoned { why, .. } if *why != AbandonReason::Shutdown));
    // A write of `executing` lines that committed, its answer lost, started none of their effects,
    // and such a lease may end with no other line of this process's (left to lapse: a deploy, a
    // pause): at most one handler call fewer for each line of such a write, which are the
    // `executing` lines just before its `lost` line (a write's lines are consecutive).
    let unknown = {
        let state = ctx.state();
        let (mut unknown, mut run) = (0, 0);
        for entry in &state.history[from..] {
            match entry.event {
                Event::Executing { .. } if ctx.params.process_of(entry.node) == node => run += 1,
                Event::Lost { message: MessageKind::Line, reply: true, peer, .. }
                    if ctx.params.process_of(peer) == node =>
                {
                    unknown += run;
                    run = 0;
                }
                _ => run = 0,
            }
        }
        unknown
    };
    // An effect decided (its `executing` line written with its turn's others) whose process
    // stalled before it started, and woke past its self-fence, is given up unstarted: at most one
    // handler call fewer for each lease given up.
    let low = executed.saturating_sub(given_up).saturating_sub(unknown);
    audit_within(node, incarnation, "handler calls", tally.handled, low, executed);
    audit(node, incarnation, "adoptions", tally.adopted, lines(&|e| matches!(e, Event::Adopted { .. })), false);
    audit(node, incarnation, "leases given up", tally.abandoned, given_up, false);
    let released = lines_since(
        &ctx,
        from,
        Node::Table,
        &|e| matches!(e, Event::Released { from, .. } if ctx.params.process_of(*from) == node),
    );
    audit(node, incarnation, "leases handed back", tally.released, released, true);
    // And against what its client handed it and was asked to send.
    let seen = std::mem::take(&mut *seams.wire.seen.lock().expect("seen lock"));
    audit(node, incarnation, "releases answered", tally.released, seen.released, false);
    // Before it is told to stop, a runtime sends a release of its own only for a lease its
    // machine gave up after its effect was decided and before it started; after, for leases it
    // hands back too.
    let own = (seen.own_releases_before_stop, seen.own_releases);
    audit_within(node, incarnation, "buffered leases handed back", tally.buffer_released, own.0, own.1);
    // A completion answered is counted once, for the request its machine awaits: not for a copy
    // answered again, nor for a lease its machine gave up meanwhile.
    let completed = seen.completed.len() as u64;
    audit_within(
        node,
        incarnation,
        "completions",
        tally.completed,
        completed.saturating_sub(tally.abandoned),
        completed,
    );
    // A grant that came once it was told to stop is handed back, its attempt undone: it takes
    // no job then, and a grant left to lapse charges its job an attempt that never ran. (A copy
    // of a grant it took before, answered again, is not a new one: it acted on that lease.)
    let unused = seen.granted_after_stop.difference(&seen.acted).copied().collect::<BTreeSet<_>>();
    if let Some((job, epoch)) = unused.difference(&seen.releases_sent).next() {
        panic!("{node} life {incarnation}: its runtime was granted {job} {epoch} after it was told to stop, and never released it");
    }
    // Every `executing` line the table refused: an effect it never started.
    audit(node, incarnation, "executing lines refused", tally.refused_lines, seen.refused_lines, false);
    // Every output it sent to be recorded, copies included.
    audit(node, incarnation, "outputs sent to record", tally.recorded, seen.records, false);
    // Its dashboard's dead-letters likewise: told once for each answer its machines awaited.
    let dead = seen.dead_lettered.len() as u64;
    audit_within(node, incarnation, "dead-letters told", told.dead_letters, dead.saturating_sub(tally.abandoned), dead);
    exit(&ctx, node, incarnation).await;
}

/// The lines `node`'s process (each of its slots) wrote since line `from` that `keep` keeps.
fn lines_since(ctx: &Ctx, from: usize, node: Node, keep: &dyn Fn(&Event) -> bool) -> u64 {
    let state = ctx.state();
    let ours = |entry: &&lease_history::Entry| ctx.params.process_of(entry.node) == node;
    state.history[from..].iter().filter(ours).filter(|entry| keep(&entry.event)).count() as u64
}

/// What a runtime counted in one life, which a service exports as its metrics, against what the
/// history of that life says: the same (`at_most`: no more, for a count of answers, some of which
/// are lost on the way). A mismatch is a crash of the run, which a sweep reports with its seed.
fn audit(node: Node, life: u64, what: &str, counted: u64, lines: u64, at_most: bool) {
    let agrees = if at_most { counted <= lines } else { counted == lines };
    assert!(agrees, "{node} life {life}: its runtime counted {counted} {what}, its history says {lines}");
}

/// [`audit`] with a range: what the runtime counted lies within what the history proves (`low`)
/// and what it allows (`high`).
fn audit_within(node: Node, life: u64, what: &str, counted: u64, low: u64, high: u64) {
    assert!(
        (low..=high).contains(&counted),
        "{node} life {life}: its runtime counted {counted} {what}, its history says {low} to {high}"
    );
}

/// The runtime of `node`'s life `life` returned, as it does only once told to stop: the node
/// exits, and never touches the network again.
async fn exit(ctx: &Ctx, node: Node, life: u64) {
    ctx.exited(node, life);
    futures::future::pending::<()>().await;
}

/// The life `incarnation` of reclaimer `n`, its batches numbered past its earlier lives'.
pub(super) async fn reclaimer(ctx: Arc<Ctx>, n: u32, incarnation: u64) {
    let node = Node::Reclaimer(n);
    let clock = ctx.params.reclaimer_clocks[n as usize];
    let Some(seams) = Seams::bind(&ctx, node, crate::net::reclaimer_addr(n), clock, incarnation).await else {
        return;
    };
    let first_batch = (incarnation - 1) << 32;
    let options = ReclaimerOptions {
        first_batch,
        ..ReclaimerOptions::new(ReclaimerId(n), ctx.params.reclaimer).planting(ctx.bugs)
    };
    let from = ctx.state().history.len();
    let metrics = Arc::new(Metrics::new());
    let runtime = seams.runtime().with_metrics(Arc::clone(&metrics));
    assert!(Arc::ptr_eq(&runtime.metrics(), &metrics), "{node}: the runtime reads other metrics than it was given");
    let reclaim = runtime.reclaim(options, ctx.stop_signal(node, incarnation));
    let tally = reclaim.await.unwrap_or_else(|error| panic!("unworkable parameters: {error}"));
    if ctx.violated() {
        return exit(&ctx, node, incarnation).await;
    }
    // A fence won is counted when the reclaimer takes the answer: at least every one it went on
    // to look up under its new epoch, at most every one the table says it won.
    let (won, taken) = {
        let state = ctx.state();
        let mut won = std::collections::BTreeSet::new();
        let mut taken = 0;
        for entry in &state.history[from..] {
            match entry.event {
                Event::Reclaimed { job, new_epoch, reclaimer, .. } if reclaimer == node => {
                    won.insert((job, new_epoch));
                }
                Event::LookedUp { from: asker, job, epoch, .. } if asker == node && won.remove(&(job, epoch)) => {
                    taken += 1;
                }
                _ => {}
            }
        }
        (taken + won.len() as u64, taken)
    };
    audit_within(node, incarnation, "fences counted", tally.fenced, taken, won);
    let told = metrics.snapshot();
    audit_within(node, incarnation, "reclaims told", told.reclaims, taken, won);
    let lines = |keep: &dyn Fn(&Event) -> bool| lines_since(&ctx, from, node, keep);
    audit(node, incarnation, "adoptions", tally.adopted, lines(&|e| matches!(e, Event::Adopted { .. })), false);
    let stopped = lines(&|e| matches!(e, Event::BatchStopped { .. }));
    audit(node, incarnation, "batches stopped", tally.stopped, stopped, false);
    let fenced = lines_since(
        &ctx,
        from,
        Node::Table,
        &|e| matches!(e, Event::Reclaimed { reclaimer, .. } if *reclaimer == node),
    );
    audit(node, incarnation, "fences won", tally.fenced, fenced, true);
    let scans = Scans::of(&ctx.state().history[from..], ReclaimerId(n), first_batch);
    audit_within(node, incarnation, "scans sent", tally.scans, scans.listed, u64::MAX);
    audit_within(node, incarnation, "races lost", tally.lost_races, scans.lost_taken, scans.lost);
    audit(node, incarnation, "batches given up", tally.gave_up, lines(&|e| matches!(e, Event::GaveUp { .. })), false);
    exit(&ctx, node, incarnation).await;
}

/// What the table's lines say of one reclaimer life's scans and the fences it lost: the lines of
/// its batches (numbered from `first`, so a late copy of an earlier life's request is not its).
#[derive(Debug, Default, PartialEq, Eq)]
struct Scans {
    /// Batches listed: each a scan the reclaimer sent at least once.
    listed: u64,
    /// Fences answered with a lost race (or a lease not expired): at most this many were taken,
    /// since an answer may be lost and a fence sent again is answered again.
    lost: u64,
    /// Lost fences the reclaimer is proven to have taken: a fence of a job listed after it, in the
    /// same batch, came to the table later (a batch given up is dropped, so the reclaimer moved
    /// past the job on its answer), and no copy of the same fence won (whose answer it may have
    /// taken instead).
    lost_taken: u64,
}

impl Scans {
    fn of(lines: &[lease_history::Entry], reclaimer: ReclaimerId, first: u64) -> Scans {
        use std::collections::{BTreeMap, BTreeSet};
        let ours = |batch: &lease_core::BatchId| batch.reclaimer == reclaimer && batch.seq >= first;
        // Each batch's listing order, `None` when two copies of its listing listed different leases.
        let mut orders: BTreeMap<u64, Option<Vec<JobId>>> = BTreeMap::new();
        let mut lost = 0;
        let (mut pending, mut taken, mut won) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for entry in lines {
            let (batch, job, lost_race) = match &entry.event {
                Event::Listed { batch, leases, .. } if ours(batch) => {
                    let order: Vec<JobId> = leases.iter().map(|listing| listing.job).collect();
                    let known = orders.entry(batch.seq).or_insert_with(|| Some(order.clone()));
                    if known.as_ref() != Some(&order) {
                        *known = None;
                    }
                    continue;
                }
                Event::Reclaimed { batch, job, .. } if ours(batch) => (batch.seq, *job, false),
                Event::LostRace { batch, job, .. } | Event::NotExpired { batch, job, .. } if ours(batch) => {
                    (batch.seq, *job, true)
                }
                _ => continue,
            };
            if lost_race {
                lost += 1;
            } else {
                won.insert((batch, job));
            }
            let Some(Some(order)) = orders.get(&batch) else { continue };
            let place = |job: JobId| order.iter().position(|listed| *listed == job);
            let Some(here) = place(job) else { continue };
            let passed: Vec<_> =
                pending.iter().filter(|(b, j)| *b == batch && place(*j).is_some_and(|p| p < here)).copied().collect();
            for key in passed {
                pending.remove(&key);
                taken.insert(key);
            }
            if lost_race {
                pending.insert((batch, job));
            }
        }
        Scans { listed: orders.len() as u64, lost, lost_taken: taken.difference(&won).count() as u64 }
    }
}

/// One life's seams.
struct Seams {
    clock: Arc<NodeClock>,
    wire: Arc<Wire>,
}

impl Seams {
    /// Binds the node's address and starts its router; `None` when the node is being killed as
    /// it starts.
    async fn bind(ctx: &Arc<Ctx>, node: Node, addr: SocketAddr, clock: LocalClock, incarnation: u64) -> Option<Seams> {
        let endpoint = Arc::new(bind(addr).await?);
        let waiting = Arc::new(Mutex::new(BTreeMap::new()));
        let router = route(Arc::clone(ctx), Arc::clone(&endpoint), Arc::clone(&waiting), incarnation);
        // On the node: killed with it.
        madsim::task::spawn(crate::panics::contained(router.instrument(tracing::Span::current())));
        let wire = Wire {
            ctx: Arc::clone(ctx),
            node,
            clock,
            endpoint,
            incarnation,
            waiting,
            crash_after_ack: Mutex::new(None),
            next_call: AtomicU64::new(CALL_IDS),
            told: Arc::new(AtomicBool::new(false)),
            seen: Arc::new(Mutex::new(Seen::default())),
            line_stalled: AtomicBool::new(false),
        };
        Some(Seams { clock: Arc::new(NodeClock { ctx: Arc::clone(ctx), clock }), wire: Arc::new(wire) })
    }

    fn runtime(&self) -> Runtime {
        let wire: Arc<Wire> = Arc::clone(&self.wire);
        Runtime::new(Arc::clone(&self.clock) as Arc<dyn Clock>, wire.clone() as Arc<dyn Client>)
            .with_hook(wire as Arc<dyn Hook>)
    }
}

/// The node's local clock, over madsim's.
struct NodeClock {
    ctx: Arc<Ctx>,
    clock: LocalClock,
}

impl Clock for NodeClock {
    fn now(&self) -> Time {
        self.clock.local(self.ctx.now())
    }

    fn sleep_until(&self, at: Time) -> BoxFuture<'static, ()> {
        let (ctx, clock) = (Arc::clone(&self.ctx), self.clock);
        Box::pin(async move {
            // madsim wakes no sooner than asked; the loop is for a local reading that rounds down.
            loop {
                let now = ctx.now();
                if clock.local(now) >= at {
                    return;
                }
                ctx.sleep_us(clock.global(at).0.saturating_sub(now.0).max(1)).await;
            }
        })
    }
}

/// The wire ids of handler calls start here, far above any request id of a machine's (and the
/// runtime's shutdown release), below the life's bits.
const CALL_IDS: u64 = 1 << (INCARNATION_SHIFT - 1);

/// The bits of a wire id a slot's machine numbers its requests in ([`Wire::slot_wire_id`]).
pub(super) const SLOT_SHIFT: u32 = 33;

/// Calls awaiting their reply, by wire id: the newest copy of a request sent again replaces the
/// one it retries.
type Waiting = Arc<Mutex<BTreeMap<u64, oneshot::Sender<Reply>>>>;

/// The node's network client and its hook.
struct Wire {
    ctx: Arc<Ctx>,
    node: Node,
    clock: LocalClock,
    endpoint: Arc<Endpoint>,
    incarnation: u64,
    waiting: Waiting,
    /// A crash dealt at `during_ack` for this job: it strikes once the completion has left, so
    /// the table may complete the job that a crashed worker acknowledged.
    crash_after_ack: Mutex<Option<(JobId, u64)>>,
    next_call: AtomicU64,
    /// Set once the runtime has taken its shutdown signal.
    told: Arc<AtomicBool>,
    /// What the runtime sent and was answered, for the audit of its tally.
    seen: Arc<Mutex<Seen>>,
    /// Set when the process stalls at `before_line`, taken by its next write of `executing`
    /// lines: a line refused after no such stall was decided on a lease already lost.
    line_stalled: AtomicBool,
}

/// What a worker runtime's client was asked to send and handed back in one life, against which
/// the runtime's tally is audited: a tally a service exports must count what happened.
#[derive(Debug, Default)]
struct Seen {
    /// Releases the runtime sent on its own ([`SHUTDOWN_RELEASE`]).
    own_releases: u64,
    /// Of those, the ones sent before it took its shutdown signal.
    own_releases_before_stop: u64,
    /// `released` answers handed to it.
    released: u64,
    /// The completions answered `completed` or `already_completed` handed to it, by slot and
    /// request (a batch and a copy sent alone may both be answered).
    completed: BTreeSet<(WorkerId, RequestId)>,
    /// The requests answered `dead_lettered` handed to it, likewise.
    dead_lettered: BTreeSet<(WorkerId, RequestId)>,
    /// The outputs it asked the client to record ([`Client::record`], each of a batch's).
    records: u64,
    /// The grants handed to it once it had taken its stop signal: it takes no job then.
    granted_after_stop: BTreeSet<(JobId, Epoch)>,
    /// The leases it sent a release for (its machines' or its own).
    releases_sent: BTreeSet<(JobId, Epoch)>,
    /// The leases it acted on: looked their operation up, or wrote their `executing` line.
    acted: BTreeSet<(JobId, Epoch)>,
    /// `executing` lines the table refused (their leases no longer held when they landed).
    refused_lines: u64,
}

impl Wire {
    /// Sends `request` to `to` under `wire`, and awaits its reply (`None`: a copy sent again took
    /// the wait over). A completion that a crash awaits is the node's last act.
    fn ask<R: Send + 'static>(
        &self,
        to: SocketAddr,
        wire: u64,
        request: Request,
        take: fn(Reply) -> R,
    ) -> BoxFuture<'static, Option<R>> {
        let (ctx, endpoint, waiting) = (Arc::clone(&self.ctx), Arc::clone(&self.endpoint), Arc::clone(&self.waiting));
        // A completion's crash strikes once the completion (alone, or in its batch) has left.
        let completes = |job: JobId| match &request {
            Request::Worker(_, WorkerRequest::Complete { job: sent, .. }) => *sent == job,
            Request::WorkerBatch(calls) => calls
                .iter()
                .any(|(_, _, request)| matches!(request, WorkerRequest::Complete { job: sent, .. } if *sent == job)),
            _ => false,
        };
        let crash = self.crash_after_ack.lock().expect("hook lock").take_if(|(struck, _)| completes(*struck));
        let node = self.node;
        Box::pin(async move {
            let (sender, reply) = oneshot::channel();
            waiting.lock().expect("router lock").insert(wire, sender);
            let _forget = Forget { waiting: &waiting, wire };
            let reply = reply; // Dropped before the guard, which then sees the call gone.
            if let Request::Worker(_, WorkerRequest::Execute { .. }) | Request::Produce(..) = request {
                // The effect leaves even if the handler is dropped now (self-fenced as its call
                // left): madsim's send sleeps a millisecond before the message is on the wire, and
                // a request written to a socket does not come back when its caller stops waiting.
                let (ctx, endpoint) = (Arc::clone(&ctx), Arc::clone(&endpoint));
                let sending = async move { send(&ctx, &endpoint, to, wire, request).await };
                madsim::task::spawn(crate::panics::contained(sending.instrument(tracing::Span::current())));
            } else {
                send(&ctx, &endpoint, to, wire, request).await;
            }
            if let Some((job, restart_after_us)) = crash {
                ctx.crash(node, Point::DuringAck, Some(job), restart_after_us);
                return futures::future::pending().await;
            }
            reply.await.ok().map(take)
        })
    }

    fn wire_id(&self, id: u64) -> u64 {
        wire_id(self.incarnation, id)
    }

    /// The wire id of slot `worker`'s request `id`: each slot's machine numbers its requests
    /// from 0, so the slot's place in its process (`k` of `n + k × workers`) goes above them.
    fn slot_wire_id(&self, worker: WorkerId, id: RequestId) -> u64 {
        let k = u64::from(worker.0 / self.ctx.params.workers.max(1));
        assert!(id.0 < 1 << SLOT_SHIFT && k < 1 << (INCARNATION_SHIFT - 1 - SLOT_SHIFT), "slot {k} request {}", id.0);
        self.wire_id(k << SLOT_SHIFT | id.0)
    }
}

impl Wire {
    /// Sends `calls` to `to` in chunks of `batch_max`, each chunk one message (`batch`) under a
    /// wire id of its own, answered with one answer per call (`take`); a chunk of one goes as a
    /// call alone (`alone`). One future per call, in order.
    fn in_chunks<C: Copy, A: Clone + Send + Sync + 'static>(
        &self,
        to: SocketAddr,
        calls: &[C],
        alone: impl Fn(C) -> BoxFuture<'static, Option<A>>,
        batch: impl Fn(&[C]) -> Request,
        take: fn(Reply) -> Vec<Option<A>>,
    ) -> Vec<BoxFuture<'static, Option<A>>> {
        let mut answers = Vec::with_capacity(calls.len());
        for chunk in calls.chunks(self.ctx.params.table.batch_max.max(1)) {
            if let [call] = *chunk {
                answers.push(alone(call));
                continue;
            }
            let id = self.wire_id(self.next_call.fetch_add(1, Ordering::Relaxed));
            let answered = self.ask(to, id, batch(chunk), take).shared();
            answers.extend((0..chunk.len()).map(|at| {
                let answered = answered.clone();
                Box::pin(async move { answered.await.and_then(|answers| answers.get(at).cloned().flatten()) })
                    as BoxFuture<'static, Option<A>>
            }));
        }
        answers
    }
}

/// Forgets a call's wait when the call ends or is dropped (it timed out), unless a copy sent
/// again has taken it over.
struct Forget<'a> {
    waiting: &'a Waiting,
    wire: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let mut waiting = self.waiting.lock().expect("router lock");
        if waiting.get(&self.wire).is_some_and(oneshot::Sender::is_canceled) {
            waiting.remove(&self.wire);
        }
    }
}

impl Wire {
    /// Notes a request the runtime sends, and counts what its answer hands back ([`Seen`]).
    fn counted(
        &self,
        worker: WorkerId,
        id: RequestId,
        request: WorkerRequest,
        call: BoxFuture<'static, Option<WorkerReply>>,
    ) -> BoxFuture<'static, Option<WorkerReply>> {
        if let WorkerRequest::Lookup { op, epoch } = request {
            self.seen.lock().expect("seen lock").acted.insert((op.job, epoch));
        }
        if let (WorkerRequest::Release { .. }, SHUTDOWN_RELEASE) = (request, id) {
            let mut seen = self.seen.lock().expect("seen lock");
            seen.own_releases += 1;
            seen.own_releases_before_stop += u64::from(!self.told.load(Ordering::SeqCst));
        }
        // A release counts as sent once the runtime polls its call (the message then leaves), not
        // when it asks for it: a call it drops unpolled never reaches the table.
        let call: BoxFuture<'static, Option<WorkerReply>> = match request {
            WorkerRequest::Release { job, epoch } => {
                let (seen, ctx, slot) = (Arc::clone(&self.seen), Arc::clone(&self.ctx), Node::Worker(worker.0));
                Box::pin(async move {
                    seen.lock().expect("seen lock").releases_sent.insert((job, epoch));
                    // A release a buffered lease given up was owed is paid (the world's
                    // `owed_releases`).
                    ctx.state().owed_releases.remove(&(slot, job, epoch));
                    call.await
                })
            }
            _ => call,
        };
        let (seen, told) = (Arc::clone(&self.seen), Arc::clone(&self.told));
        Box::pin(call.map(move |reply| {
            let mut seen = seen.lock().expect("seen lock");
            match (request, &reply) {
                (_, Some(WorkerReply::Acquired(Acquired::Granted(grant) | Acquired::Regranted(grant))))
                    if told.load(Ordering::SeqCst) =>
                {
                    seen.granted_after_stop.insert((grant.lease.job, grant.lease.epoch));
                }
                (WorkerRequest::Release { .. }, Some(WorkerReply::Released(Release::Released { .. }))) => {
                    seen.released += 1;
                }
                (
                    WorkerRequest::Complete { .. },
                    Some(WorkerReply::Completed(Completion::Completed(_) | Completion::AlreadyCompleted)),
                ) => {
                    seen.completed.insert((worker, id));
                }
                (_, Some(WorkerReply::Requeued(Requeue::DeadLettered(_)))) => {
                    seen.dead_lettered.insert((worker, id));
                }
                _ => {}
            }
            reply
        }))
    }

    /// Sends one output to the ledger to record, under a wire id of its own.
    fn ask_record(
        &self,
        worker: WorkerId,
        op: OpId,
        epoch: Epoch,
        output: OutputId,
    ) -> BoxFuture<'static, Option<Apply>> {
        let id = self.wire_id(self.next_call.fetch_add(1, Ordering::Relaxed));
        let take = |reply| match reply {
            Reply::Recorded(apply) => apply,
            other => panic!("a record got {other:?}"),
        };
        self.ask(ledger_addr(), id, Request::Record(worker.0, op, epoch, output), take)
    }

    /// Sends a slot's request, alone, to the node that serves it.
    fn ask_worker(
        &self,
        worker: WorkerId,
        id: RequestId,
        request: WorkerRequest,
    ) -> BoxFuture<'static, Option<WorkerReply>> {
        let to = match request {
            WorkerRequest::Lookup { .. } | WorkerRequest::Execute { .. } => ledger_addr(),
            _ => table_addr(),
        };
        let take = |reply| match reply {
            Reply::Worker(reply) => reply,
            other => panic!("a worker got {other:?}"),
        };
        self.ask(to, self.slot_wire_id(worker, id), Request::Worker(worker.0, request), take)
    }
}

impl Client for Wire {
    fn worker(
        &self,
        worker: WorkerId,
        id: RequestId,
        request: WorkerRequest,
    ) -> BoxFuture<'static, Option<WorkerReply>> {
        self.counted(worker, id, request, self.ask_worker(worker, id, request))
    }

    /// One message for each `batch_max` requests of the batch (as a store's client makes one
    /// transaction of each), under a wire id of its own (a copy of one of its requests sent alone
    /// later goes under that request's): the table (the ledger, for lookups) serves it in one
    /// transaction and answers it with one message. Lost, every request of it is unanswered.
    fn worker_batch(
        &self,
        calls: Vec<(WorkerId, RequestId, WorkerRequest)>,
    ) -> Vec<BoxFuture<'static, Option<WorkerReply>>> {
        let to = match calls.first() {
            Some((_, _, WorkerRequest::Lookup { .. })) => ledger_addr(),
            _ => table_addr(),
        };
        let take = |reply| match reply {
            Reply::WorkerBatch(answers) => answers,
            other => panic!("a worker's batch got {other:?}"),
        };
        let batch = |chunk: &[(WorkerId, RequestId, WorkerRequest)]| {
            let calls = chunk.iter().map(|&(worker, id, request)| (worker.0, self.slot_wire_id(worker, id), request));
            Request::WorkerBatch(calls.collect())
        };
        let alone = |(worker, id, request)| self.ask_worker(worker, id, request);
        let answers = self.in_chunks(to, &calls, alone, batch, take);
        let calls = calls.into_iter().zip(answers);
        calls.map(|((worker, id, request), call)| self.counted(worker, id, request, call)).collect()
    }

    /// A recording handler's output, to the ledger: each call under a wire id of its own.
    fn record(&self, worker: WorkerId, op: OpId, epoch: Epoch, output: OutputId) -> BoxFuture<'static, Option<Apply>> {
        self.seen.lock().expect("seen lock").records += 1;
        self.ask_record(worker, op, epoch, output)
    }

    /// One message for each `batch_max` records, as [`Client::worker_batch`] sends requests: the
    /// ledger records them in one transaction.
    fn record_batch(&self, records: Vec<(WorkerId, OpId, Epoch, OutputId)>) -> Vec<BoxFuture<'static, Option<Apply>>> {
        let take = |reply| match reply {
            Reply::RecordedBatch(answers) => answers.into_iter().map(Some).collect(),
            other => panic!("a batch of records got {other:?}"),
        };
        let batch = |chunk: &[(WorkerId, OpId, Epoch, OutputId)]| {
            Request::RecordBatch(
                chunk.iter().map(|&(worker, op, epoch, output)| (worker.0, op, epoch, output)).collect(),
            )
        };
        self.seen.lock().expect("seen lock").records += records.len() as u64;
        let alone = |(worker, op, epoch, output)| self.ask_record(worker, op, epoch, output);
        self.in_chunks(ledger_addr(), &records, alone, batch, take)
    }

    fn reclaimer(
        &self,
        reclaimer: ReclaimerId,
        id: RequestId,
        request: ReclaimRequest,
    ) -> BoxFuture<'static, Option<ReclaimReply>> {
        let to = match request {
            ReclaimRequest::Lookup { .. } => ledger_addr(),
            _ => table_addr(),
        };
        let take = |reply| match reply {
            Reply::Reclaimer(reply) => reply,
            other => panic!("a reclaimer got {other:?}"),
        };
        self.ask(to, self.wire_id(id.0), Request::Reclaimer(reclaimer.0, request), take)
    }

    /// A step's requests to the table in one message and its lookups to the ledger in another,
    /// each under the wire id of its first request (a copy of the step sent again goes under the
    /// same, unless its first was answered): the node serves the message as a store serves a
    /// step ([`lease_store::serve_reclaimer_batch`]) and answers it with one message. A request
    /// alone goes as [`Client::reclaimer`] sends it.
    fn reclaimer_batch(
        &self,
        reclaimer: ReclaimerId,
        calls: Vec<(RequestId, ReclaimRequest)>,
    ) -> Vec<BoxFuture<'static, Option<ReclaimReply>>> {
        let mut answers: Vec<Option<BoxFuture<'static, Option<ReclaimReply>>>> = calls.iter().map(|_| None).collect();
        for at_ledger in [false, true] {
            let group: Vec<usize> = (0..calls.len())
                .filter(|&at| matches!(calls[at].1, ReclaimRequest::Lookup { .. }) == at_ledger)
                .collect();
            if let [at] = group[..] {
                answers[at] = Some(self.reclaimer(reclaimer, calls[at].0, calls[at].1));
                continue;
            }
            let Some(&first) = group.first() else { continue };
            let to = if at_ledger { ledger_addr() } else { table_addr() };
            let take = |reply| match reply {
                Reply::ReclaimerBatch(answers) => answers,
                other => panic!("a reclaimer's step got {other:?}"),
            };
            let requests = group.iter().map(|&at| calls[at].1).collect();
            let id = self.wire_id(calls[first].0 .0);
            let answered = self.ask(to, id, Request::ReclaimerBatch(reclaimer.0, requests), take).shared();
            for (nth, &at) in group.iter().enumerate() {
                let answered = answered.clone();
                answers[at] =
                    Some(Box::pin(async move { answered.await.and_then(|answers| answers.get(nth).cloned()) }));
            }
        }
        answers.into_iter().map(|answer| answer.expect("every request sent")).collect()
    }

    fn lines(&self, lines: Vec<(Node, Event)>) -> BoxFuture<'static, bool> {
        // A store writes a batch of lines in one transaction: an empty one is a round trip for
        // nothing, at every turn of the loop.
        assert!(!lines.is_empty(), "{}: its runtime writes an empty batch of lines", self.node);
        Box::pin(futures::future::ready(self.write(lines)))
    }

    fn line(&self, node: Node, event: Event) -> BoxFuture<'static, bool> {
        Box::pin(futures::future::ready(self.write(vec![(node, event)])))
    }

    /// As a store writes them ([`lease_store::TableStore::append_started`]): each line only while
    /// the table still holds its lease, by the table's clock now ([`Rules::may_start`]); the others
    /// are refused, and nothing says so on the history. A line lands late after a stall at
    /// `before_line` ([`crate::faults::WindowFaults::line_stall_rate`]).
    fn started(&self, lines: Vec<(Node, Event)>) -> BoxFuture<'static, Option<Vec<Started>>> {
        let (now, rules) = (self.ctx.now(), Rules { config: self.ctx.params.table, bugs: Bugs::NONE });
        let live: Vec<bool> = {
            let mut state = self.ctx.state();
            let store = state.durable.store();
            let mut live = |event: &Event| match *event {
                Event::Executing { job, epoch, .. } => {
                    let record = store.job(job).unwrap_or_else(|error| panic!("store: {error}"));
                    record.is_some_and(|record| rules.may_start(now, &record, epoch))
                }
                _ => true,
            };
            lines.iter().map(|(_, event)| live(event)).collect()
        };
        // A line is refused only when it lands after its lease: after a stall on its way, or
        // decided on a lease already lost. The second is a runtime that failed to fence itself,
        // which no history shows (the store writes no line for it): its audit says so.
        let stalled = self.line_stalled.swap(false, Ordering::Relaxed);
        // (A lease a faulty table took while it was live is no fault of the runtime's: the
        // history's checkers judge the table.)
        let refused = lines.iter().zip(&live).find(|(_, &live)| !live).map(|((_, event), _)| event);
        if let Some(&Event::Executing { job, epoch, .. }) = refused.filter(|_| !stalled) {
            let expired_at = self.ctx.state().history.iter().rev().find_map(|entry| match entry.event {
                Event::Granted { job: j, epoch: e, expires_at_us, .. }
                | Event::Regranted { job: j, epoch: e, expires_at_us, .. }
                | Event::Renewed { job: j, epoch: e, expires_at_us, .. }
                    if (j, e) == (job, epoch) =>
                {
                    Some(expires_at_us)
                }
                _ => None,
            });
            if expired_at.is_some_and(|expired_at| now.0 >= expired_at) {
                panic!(
                    "{} life {}: its runtime decided the effect of {job} {epoch} on a lease that had expired: its executing line, with no stall on its way, came at {}us, after the lease's expiry at {}us",
                    self.node,
                    self.incarnation,
                    now.0,
                    expired_at.unwrap_or_default()
                );
            }
        }
        self.seen.lock().expect("seen lock").refused_lines += live.iter().filter(|&&live| !live).count() as u64;
        let kept: Vec<(Node, Event)> =
            lines.into_iter().zip(&live).filter(|(_, &live)| live).map(|(line, _)| line).collect();
        let written = kept.is_empty() || self.write(kept);
        // The simulator's jobs carry no payload.
        let started = live.iter().map(|&live| if live { Started::Written(Vec::new()) } else { Started::Refused });
        Box::pin(futures::future::ready(written.then(|| started.collect())))
    }
}

impl Wire {
    /// Writes `lines` as a store writes them, in one transaction, and says whether they are known
    /// written. A batch with an `executing` line may fail, where the world deals that fault
    /// ([`crate::faults::WindowFaults::line_loss_rate`], keyed by its first `executing` line): before
    /// it commits (nothing written), or after (every line written, its answer lost). Any other
    /// line of the runtime's own is written, always.
    fn write(&self, lines: Vec<(Node, Event)>) -> bool {
        let first = lines.iter().find_map(|(node, event)| match *event {
            Event::Executing { job, epoch, .. } => Some((*node, job, epoch)),
            _ => None,
        });
        let failed = first.and_then(|(node, job, epoch)| Some((node, job, self.ctx.line_fate(job, epoch)?)));
        if let Some((node, job, false)) = failed {
            self.ctx.line_lost(node, job, false);
            return false;
        }
        for (node, event) in lines {
            self.write_one(node, event);
        }
        if let Some((node, job, true)) = failed {
            self.ctx.line_lost(node, job, true);
            return false;
        }
        true
    }

    /// Writes one line of the runtime's own, and keeps the audit's count of what it says.
    fn write_one(&self, node: Node, event: Event) {
        let (job, abandoned) = match event {
            Event::Executing { job, epoch, .. } => {
                self.seen.lock().expect("seen lock").acted.insert((job, epoch));
                (Some(job), None)
            }
            Event::Abandoned { job, epoch, why } => (Some(job), Some((epoch, why))),
            _ => (None, None),
        };
        self.ctx.record(node, event);
        if let Some(job) = job {
            // A buffered lease leaves the buffer when its effect starts, or when it is given up:
            // then its runtime owes a release (the world's `owed_releases`). So does a lease it
            // hands back at shutdown: the `abandoned` line, then the release, in the same turn.
            let mut state = self.ctx.state();
            let buffered = state.buffered.remove(&(node, job)) == Some(self.incarnation);
            let owed = match abandoned {
                Some((_, AbandonReason::Shutdown)) => Some(Owed::HandedBack),
                Some(_) if buffered => Some(Owed::Buffered),
                _ => None,
            };
            if let (Some(owed), Some((epoch, _))) = (owed, abandoned) {
                let line = state.history.len();
                state.owed_releases.insert((node, job, epoch), (self.incarnation, line, owed));
            }
        }
    }
}

impl Hook for Wire {
    fn at(&self, node: Node, point: Point, job: Option<JobId>) -> BoxFuture<'static, ()> {
        let ctx = Arc::clone(&self.ctx);
        if let (Point::Buffered, Some(job)) = (point, job) {
            ctx.state().buffered.insert((node, job), self.incarnation);
        }
        match ctx.at_point(node, point, job) {
            Some(Dealt::Crash { restart_after_us }) if point == Point::DuringAck => {
                let job = job.expect("an acknowledgement names its job");
                *self.crash_after_ack.lock().expect("hook lock") = Some((job, restart_after_us));
                Box::pin(futures::future::ready(()))
            }
            Some(Dealt::Crash { restart_after_us }) => {
                ctx.crash(node, point, job, restart_after_us);
                Box::pin(futures::future::pending())
            }
            Some(Dealt::Stall { len_us }) => {
                if point == Point::BeforeLine {
                    self.line_stalled.store(true, Ordering::Relaxed);
                }
                Box::pin(async move { ctx.stall(node, point, job, len_us).await })
            }
            _ => Box::pin(futures::future::ready(())),
        }
    }
}

/// The handler: the ledger's dependency, called with the operation id and the epoch, and called
/// again under the same wire id (idempotent by operation) while its answer does not come within
/// `timeout` of the node's clock. Fenced, it records its output itself; `records`, the runtime
/// records what it produced. The runtime cancels it when it stops acting on the lease.
async fn dependency(wire: Arc<Wire>, job: Job, timeout: Span, records: bool) -> Outcome<Output> {
    let id = wire.wire_id(wire.next_call.fetch_add(1, Ordering::Relaxed));
    let worker = job.worker.0;
    let request = match records {
        true => Request::Produce(worker, job.op, job.epoch),
        false => Request::Worker(worker, WorkerRequest::Execute { op: job.op, epoch: job.epoch }),
    };
    let clock = NodeClock { ctx: Arc::clone(&wire.ctx), clock: wire.clock };
    for attempt in 0u64.. {
        if attempt > 0 {
            // A call made again is an effect sent again: on the history, and past the same point,
            // as the runtime's first. A runtime that failed to cancel this handler when it lost
            // the lease shows here, as an effect started after the lease expired.
            let (node, op, epoch) = (Node::Worker(worker), job.op, job.epoch);
            wire.ctx.record(node, Event::Executing { job: op.job, op, epoch });
            wire.at(node, Point::BeforeEffect, Some(op.job)).await;
        }
        let call = wire.ask(ledger_addr(), id, request.clone(), |reply| reply);
        let timeout = clock.sleep_until(clock.now() + timeout);
        match futures::future::select(call, timeout).await {
            futures::future::Either::Left((Some(Reply::Worker(WorkerReply::Executed(execution))), _)) => {
                return match execution {
                    Execution::Done { output, apply } => Ok(Output::Recorded { output, apply }),
                    // The dependency wrote its `dependency_failed` line itself.
                    Execution::Failed => Err(HandlerError::Reported("the dependency failed".to_string())),
                    Execution::Permanent => Err(HandlerError::ReportedPermanent("the dependency refused".to_string())),
                };
            }
            futures::future::Either::Left((Some(Reply::Produced(produced)), _)) => {
                return match produced {
                    Produced::Output(output) => Ok(Output::Named(output)),
                    Produced::Failed => Err(HandlerError::Reported("the dependency failed".to_string())),
                    Produced::Refused => Err(HandlerError::ReportedPermanent("the dependency refused".to_string())),
                };
            }
            futures::future::Either::Left((Some(other), _)) => panic!("a dependency call got {other:?}"),
            _ => {}
        }
    }
    unreachable!("a handler makes fewer than 2^64 calls")
}

fn worker_of(node: Node) -> u32 {
    match node {
        Node::Worker(n) => n,
        other => panic!("{other} runs no handler"),
    }
}

/// The node's replies, each handed when due to the call that awaits it; a reply to an earlier
/// life, or to a call no longer awaited, is dropped.
async fn route(ctx: Arc<Ctx>, endpoint: Arc<Endpoint>, waiting: Waiting, incarnation: u64) {
    let mut mailbox = Mailbox::<Reply>::new(endpoint);
    loop {
        let Some((envelope, _)) = mailbox.next(&ctx).await else { return };
        tracing::trace!(id = envelope.id, reply = ?envelope.body, "reply taken");
        if envelope.id >> INCARNATION_SHIFT != incarnation {
            continue; // A reply to this node's previous life.
        }
        if let Some(sender) = waiting.lock().expect("router lock").remove(&envelope.id) {
            let _gone = sender.send(envelope.body);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Scans;
    use lease_core::{BatchId, Epoch, JobId, ReclaimerId};
    use lease_history::{Entry, Event, Listing, Node};

    fn batch(seq: u64) -> BatchId {
        BatchId { reclaimer: ReclaimerId(1), seq }
    }

    fn line(event: Event) -> Entry {
        Entry { t_us: 0, node: Node::Table, event }
    }

    fn listed(seq: u64, jobs: &[u64]) -> Entry {
        let leases = jobs.iter().map(|&job| Listing { job: JobId(job), epoch: Epoch(1), expires_at_us: 0 }).collect();
        line(Event::Listed { reclaimer: Node::Reclaimer(1), batch: batch(seq), leases })
    }

    fn lost(seq: u64, job: u64) -> Entry {
        line(Event::LostRace { job: JobId(job), expected: Epoch(1), current: Epoch(2), batch: batch(seq) })
    }

    fn won(seq: u64, job: u64) -> Entry {
        line(Event::Reclaimed {
            job: JobId(job),
            epoch: Epoch(1),
            expires_at_us: 0,
            new_epoch: Epoch(2),
            new_expires_at_us: 0,
            reclaimer: Node::Reclaimer(1),
            batch: batch(seq),
        })
    }

    #[test]
    fn a_lost_race_counts_as_taken_only_once_the_reclaimer_fenced_a_later_job_of_its_batch() {
        let lines = [listed(5, &[1, 2, 3]), lost(5, 1), lost(5, 1), won(5, 2), lost(5, 3)];
        // Job 1's race was lost twice (a fence sent again) and taken once; job 3's answer may
        // never have arrived.
        assert_eq!(Scans::of(&lines, ReclaimerId(1), 0), Scans { listed: 1, lost: 3, lost_taken: 1 });
    }

    #[test]
    fn a_race_both_lost_and_won_by_copies_of_one_fence_is_not_proven_taken() {
        let lines = [listed(5, &[1, 2]), lost(5, 1), won(5, 1), lost(5, 2)];
        assert_eq!(Scans::of(&lines, ReclaimerId(1), 0), Scans { listed: 1, lost: 2, lost_taken: 0 });
    }

    #[test]
    fn an_earlier_lifes_batches_and_another_reclaimers_are_not_this_lifes() {
        let mut other = listed(7, &[1, 2]);
        if let Event::Listed { batch, .. } = &mut other.event {
            batch.reclaimer = ReclaimerId(2);
        }
        let lines = [listed(3, &[1, 2]), lost(3, 1), lost(3, 2), other, listed(9, &[4]), listed(9, &[4])];
        assert_eq!(Scans::of(&lines, ReclaimerId(1), 4), Scans { listed: 1, lost: 0, lost_taken: 0 });
    }

    #[test]
    fn a_batch_listed_twice_differently_proves_no_order() {
        let lines = [listed(5, &[1, 2]), listed(5, &[2, 1]), lost(5, 1), lost(5, 2)];
        assert_eq!(Scans::of(&lines, ReclaimerId(1), 0), Scans { listed: 1, lost: 2, lost_taken: 0 });
    }
}
