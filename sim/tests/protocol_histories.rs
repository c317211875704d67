//! Histories recorded from the real lease-core table and ledger, driven by a seeded schedule.
//!
//! This guards the checkers against false alarms: a seeded driver plays workers and reclaimers
//! that follow the protocol (workers self-fence by the lease expiry they were told, replies get
//! lost and effects get retried, nodes crash, time jumps), records every table and ledger answer
//! as the world does, and every such history must pass. With a planted table or ledger bug, or a
//! deliberately broken ledger or worker ([`Breakage`]), the same driver must make the checkers
//! name the broken rule.

use lease_check::conformance::Rule;
use lease_check::{check_history, Coverage, Invariant, Violation};
use lease_core::{
    Acquired, Apply, BatchId, Bug, Bugs, Completion, EffectLedger, Enqueued, Epoch, Fencing, JobId, Lease, LeaseTable,
    Lookup, OpId, OutputId, Quarantine, ReclaimerId, Renewal, Requeue, Span, TableConfig, Terminal, Time, WorkerId,
};
use lease_history::{
    AbandonReason, EffectRejectReason, Entry, Event, Listing, Node, Point, RefuseReason, RefusedRequest,
    HISTORY_VERSION,
};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::{BTreeMap, VecDeque};

const WORKERS: u32 = 3;
const RECLAIMERS: u32 = 2;
const STEPS: usize = 600;
const LEASE_TTL: Span = Span::from_us(1_000);
/// How long before the expiry it was told a driven worker stops acting.
const MARGIN_US: u64 = 100;

/// How a deliberately broken ledger, or worker, mistreats a second, different output for an
/// operation that already has one (which a correct ledger refuses as a `conflict`, keeping the
/// first, and a correct worker abandons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breakage {
    /// The ledger records it too, and answers `applied`: two outputs for one operation.
    SecondOutput,
    /// The ledger answers `conflict`, but quietly overwrites the record with it.
    Overwrite,
    /// The ledger answers `already_applied`, as if it were the recorded output repeated.
    AnyOutputIsARepeat,
    /// The ledger is correct, but the worker completes with its own output anyway.
    WorkerIgnoresConflict,
}

/// The driver's ledger: lease-core's, correct unless a [`Breakage`] is planted around it.
struct Ledger {
    inner: EffectLedger,
    breakage: Option<Breakage>,
    /// Outputs an overwriting ledger put over the record.
    overwritten: BTreeMap<OpId, OutputId>,
}

impl Ledger {
    fn new(bugs: Bugs, breakage: Option<Breakage>) -> Ledger {
        Ledger { inner: EffectLedger::with_bugs(bugs), breakage, overwritten: BTreeMap::new() }
    }

    fn lookup(&mut self, op: OpId, epoch: Epoch) -> Lookup {
        let lookup = self.inner.lookup(op, epoch);
        match (self.overwritten.get(&op), lookup) {
            (Some(&output), Lookup::Recorded(_) | Lookup::Conflict { .. }) => Lookup::Recorded(output),
            _ => lookup,
        }
    }

    fn apply(&mut self, op: OpId, epoch: Epoch, output: OutputId) -> Apply {
        let apply = self.inner.apply(op, epoch, output);
        let Apply::Conflict { .. } = apply else { return apply };
        match self.breakage {
            None | Some(Breakage::WorkerIgnoresConflict) => apply,
            Some(Breakage::SecondOutput) => Apply::Applied,
            Some(Breakage::Overwrite) => {
                self.overwritten.insert(op, output);
                apply
            }
            Some(Breakage::AnyOutputIsARepeat) => Apply::AlreadyApplied,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Just granted: execute on a first attempt, else look up first.
    Fresh,
    /// Looked up, found nothing: may execute.
    Looked,
    /// The dependency is producing `output`; the ledger has not answered yet.
    InFlight(OutputId),
    /// The ledger holds `output`: complete with it.
    Done(OutputId),
}

#[derive(Debug, Clone, Copy)]
struct Held {
    job: JobId,
    epoch: Epoch,
    attempt: u32,
    expires_at: Time,
    phase: Phase,
}

#[derive(Debug, Default)]
struct ReclaimerState {
    batch: Option<BatchId>,
    pending: VecDeque<Lease>,
    batches: u64,
}

struct Driver {
    rng: Xoshiro256PlusPlus,
    now: Time,
    table: LeaseTable,
    ledger: Ledger,
    workers: BTreeMap<u32, Option<Held>>,
    reclaimers: BTreeMap<u32, ReclaimerState>,
    next_job: u64,
    history: Vec<Entry>,
    /// The worker or reclaimer taking the current step: the `from` of the answers it gets.
    actor: Node,
}

impl Driver {
    fn new(seed: u64, bug: Option<Bug>, breakage: Option<Breakage>) -> Driver {
        let config = TableConfig { capacity: 6, lease_ttl: LEASE_TTL, batch_max: 2, attempts_max: 3 };
        let bugs = Bugs::plant(bug);
        let mut driver = Driver {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            now: Time::ZERO,
            table: LeaseTable::with_bugs(config, bugs).expect("a workable config"),
            ledger: Ledger::new(bugs, breakage),
            workers: (1..=WORKERS).map(|worker| (worker, None)).collect(),
            reclaimers: (1..=RECLAIMERS).map(|reclaimer| (reclaimer, ReclaimerState::default())).collect(),
            next_job: 1,
            history: Vec::new(),
            actor: Node::Worker(1),
        };
        let run = Event::Run {
            history_version: HISTORY_VERSION,
            seed,
            scenario: "protocol_histories".into(),
            batch_max: config.batch_max,
            capacity: config.capacity,
            lease_ttl_us: LEASE_TTL.as_us(),
            attempts_max: config.attempts_max,
            bug: bug.map(|bug| bug.name().to_string()),
            store: None,
            drift_margin_us: None,
            latency_us: None,
            latency_calm_us: None,
            pruned_before_us: None,
            worker_processes: None,
            scan_every_us: None,
            params: String::new(),
        };
        driver.record(Node::World, run);
        driver
    }

    fn record(&mut self, node: Node, event: Event) {
        self.history.push(Entry { t_us: self.now.as_us(), node, event });
    }

    fn run(mut self) -> Vec<Entry> {
        for step in 0..STEPS {
            match self.rng.gen_range(0..10) {
                0 if step < STEPS / 2 => self.arrive(),
                0..=2 => self.now = self.now + Span::from_us(self.rng.gen_range(1..400)),
                3..=7 => {
                    let worker = self.rng.gen_range(1..=WORKERS);
                    self.work(worker);
                }
                _ => {
                    let reclaimer = self.rng.gen_range(1..=RECLAIMERS);
                    self.reclaim(reclaimer);
                }
            }
        }
        self.history
    }

    fn arrive(&mut self) {
        let job = JobId(self.next_job);
        self.next_job += 1;
        match self.table.enqueue(self.now, job).unwrap() {
            Enqueued::Accepted { backlog } => self.record(Node::Table, Event::Arrived { job, backlog }),
            Enqueued::Rejected(rejection) => {
                self.record(Node::Table, Event::Rejected { job, reason: rejection.into() })
            }
            Enqueued::Duplicate => unreachable!("fresh job ids"),
        }
    }

    /// An output of the dependency: two candidates per job, so a retry may conflict.
    fn produce(&mut self, job: JobId) -> OutputId {
        OutputId(job.0 * 16 + self.rng.gen_range(0..2))
    }

    fn work(&mut self, worker: u32) {
        self.actor = Node::Worker(worker);
        let Some(held) = self.workers[&worker] else { return self.acquire(worker) };
        let node = Node::Worker(worker);
        let live = self.now.as_us() + MARGIN_US < held.expires_at.as_us();
        let (job, epoch, op) = (held.job, held.epoch, OpId::for_job(held.job));
        match (self.rng.gen_range(0..10), held.phase) {
            (0, phase) => {
                let point = if matches!(phase, Phase::Done(_)) { Point::AfterEffect } else { Point::BeforeEffect };
                self.record(Node::World, Event::Crashed { target: node, point, job: Some(job) });
                self.drop_lease(worker);
            }
            (1, _) => self.renew(worker, held),
            (_, Phase::Fresh | Phase::Looked) if !live => self.abandon(worker, held, AbandonReason::SelfFenced),
            (_, Phase::Fresh) if held.attempt > 1 => self.look_up(worker, held),
            (_, Phase::Fresh | Phase::Looked) => {
                self.record(node, Event::Executing { job, op, epoch });
                let output = self.produce(job);
                self.set_phase(worker, Phase::InFlight(output));
            }
            (2, Phase::InFlight(_)) => {
                let from = self.actor;
                self.record(
                    Node::Ledger,
                    Event::DependencyFailed { from, job, op, epoch, after_effect: false, permanent: false },
                );
                let requeue = self.table.requeue(self.now, job, epoch).unwrap();
                self.record_requeue(job, epoch, requeue, None);
                self.drop_lease(worker);
            }
            (3, Phase::InFlight(output)) if live => {
                // The reply was lost: the effect lands, and the worker executes again.
                let _lost_reply = self.apply(op, epoch, output);
                self.record(node, Event::Executing { job, op, epoch });
                let output = self.produce(job);
                self.set_phase(worker, Phase::InFlight(output));
            }
            (_, Phase::InFlight(output)) => match self.apply(op, epoch, output) {
                Apply::Applied | Apply::AlreadyApplied => self.set_phase(worker, Phase::Done(output)),
                Apply::Fenced { .. } => self.abandon(worker, held, AbandonReason::EffectFenced),
                Apply::Conflict { .. } if self.ledger.breakage == Some(Breakage::WorkerIgnoresConflict) => {
                    self.set_phase(worker, Phase::Done(output))
                }
                Apply::Conflict { .. } => self.abandon(worker, held, AbandonReason::Conflict),
            },
            (_, Phase::Done(output)) => {
                let completion = self.table.complete(self.now, job, epoch, output).unwrap();
                self.record_completion(job, epoch, output, completion, None);
                self.drop_lease(worker);
            }
        }
    }

    fn acquire(&mut self, worker: u32) {
        let Acquired::Granted(grant) = self.table.acquire(self.now, WorkerId(worker)).unwrap() else {
            return self.record(Node::Table, Event::AcquireEmpty { owner: Node::Worker(worker) });
        };
        let lease = grant.lease;
        let event = Event::Granted {
            job: lease.job,
            epoch: lease.epoch,
            owner: Node::Worker(worker),
            expires_at_us: lease.expires_at.as_us(),
            attempt: grant.attempt,
        };
        self.record(Node::Table, event);
        let held = Held {
            job: lease.job,
            epoch: lease.epoch,
            attempt: grant.attempt,
            expires_at: lease.expires_at,
            phase: Phase::Fresh,
        };
        self.workers.insert(worker, Some(held));
    }

    fn renew(&mut self, worker: u32, held: Held) {
        match self.table.renew(self.now, held.job, held.epoch).unwrap() {
            Renewal::Renewed { epoch, expires_at } => {
                let from = self.actor;
                let event = Event::Renewed { from, job: held.job, epoch, expires_at_us: expires_at.as_us() };
                self.record(Node::Table, event);
                let renewed = Held { expires_at, ..held };
                self.workers.insert(worker, Some(renewed));
            }
            Renewal::Refused(refusal) => {
                self.refused(held.job, held.epoch, RefusedRequest::Renew, refusal.into(), None);
                self.abandon(worker, held, AbandonReason::LeaseLost);
            }
        }
    }

    fn look_up(&mut self, worker: u32, held: Held) {
        let (job, epoch, op) = (held.job, held.epoch, OpId::for_job(held.job));
        let lookup = self.ledger.lookup(op, epoch);
        self.record_lookup(job, op, epoch, lookup, None);
        match lookup {
            Lookup::Empty => self.set_phase(worker, Phase::Looked),
            Lookup::Recorded(output) => {
                self.record(Node::Worker(worker), Event::Adopted { job, op, output, epoch });
                self.set_phase(worker, Phase::Done(output));
            }
            Lookup::Conflict { .. } => self.abandon(worker, held, AbandonReason::Conflict),
        }
    }

    fn apply(&mut self, op: OpId, epoch: Epoch, output: OutputId) -> Apply {
        let apply = self.ledger.apply(op, epoch, output);
        let (job, from) = (op.job, self.actor);
        let event = match EffectRejectReason::of(apply) {
            None => Event::EffectApplied { from, job, op, epoch, output },
            Some(reason) => Event::EffectRejected { from, job, op, epoch, output, reason },
        };
        self.record_then(Node::Ledger, event, apply)
    }

    fn record_then(&mut self, node: Node, event: Event, apply: Apply) -> Apply {
        self.record(node, event);
        apply
    }

    fn set_phase(&mut self, worker: u32, phase: Phase) {
        let held = self.workers.get_mut(&worker).and_then(Option::as_mut).expect("a held lease");
        held.phase = phase;
    }

    fn abandon(&mut self, worker: u32, held: Held, why: AbandonReason) {
        let event = Event::Abandoned { job: held.job, epoch: held.epoch, why };
        self.record(Node::Worker(worker), event);
        self.drop_lease(worker);
    }

    fn drop_lease(&mut self, worker: u32) {
        self.workers.insert(worker, None);
    }

    fn reclaim(&mut self, reclaimer: u32) {
        self.actor = Node::Reclaimer(reclaimer);
        if self.reclaimers[&reclaimer].pending.is_empty() {
            let leases = self.table.expired(self.now, self.now).unwrap();
            let state = self.reclaimers.get_mut(&reclaimer).expect("a known reclaimer");
            let batch = BatchId { reclaimer: ReclaimerId(reclaimer), seq: state.batches };
            state.batches += 1;
            let listed = leases
                .iter()
                .map(|lease| Listing { job: lease.job, epoch: lease.epoch, expires_at_us: lease.expires_at.as_us() })
                .collect();
            let empty = leases.is_empty();
            state.batch = Some(batch).filter(|_| !empty);
            state.pending = leases.into();
            let event = Event::Listed { reclaimer: Node::Reclaimer(reclaimer), batch, leases: listed };
            self.record(Node::Table, event);
            if empty {
                return;
            }
        }
        let state = self.reclaimers.get_mut(&reclaimer).expect("a known reclaimer");
        let batch = state.batch.expect("a batch in progress");
        let lease = state.pending.pop_front().expect("a pending lease");
        let node = Node::Reclaimer(reclaimer);
        let (expired, ours) =
            match self.table.fence(self.now, lease.job, lease.epoch, ReclaimerId(reclaimer), self.now).unwrap() {
                Fencing::Won { expired, lease } => (expired, lease),
                Fencing::LostRace { current } => {
                    let event = Event::LostRace { job: lease.job, expected: lease.epoch, current, batch };
                    return self.record(Node::Table, event);
                }
                Fencing::NotExpired { expires_at } => {
                    let (job, expected, expires_at_us) = (lease.job, lease.epoch, expires_at.as_us());
                    return self.record(Node::Table, Event::NotExpired { job, expected, expires_at_us, batch });
                }
            };
        let reclaimed = Event::Reclaimed {
            job: ours.job,
            epoch: expired.epoch,
            expires_at_us: expired.expires_at.as_us(),
            new_epoch: ours.epoch,
            new_expires_at_us: ours.expires_at.as_us(),
            reclaimer: node,
            batch,
        };
        self.record(Node::Table, reclaimed);
        let (job, epoch, op) = (ours.job, ours.epoch, OpId::for_job(ours.job));
        let lookup = self.ledger.lookup(op, epoch);
        self.record_lookup(job, op, epoch, lookup, Some(batch));
        if self.rng.gen_range(0..5) == 0 {
            // The reply was lost: the reclaimer gives up on this lease. Having met a conflict, it
            // touches nothing more in the batch.
            if matches!(lookup, Lookup::Conflict { .. }) {
                self.reclaimers.get_mut(&reclaimer).expect("a known reclaimer").pending.clear();
            }
            return;
        }
        match lookup {
            Lookup::Empty => {
                let requeue = self.table.requeue(self.now, job, epoch).unwrap();
                self.record_requeue(job, epoch, requeue, Some(batch));
            }
            Lookup::Recorded(output) => {
                self.record(node, Event::Adopted { job, op, output, epoch });
                let completion = self.table.complete(self.now, job, epoch, output).unwrap();
                self.record_completion(job, epoch, output, completion, Some(batch));
            }
            Lookup::Conflict { recorded, rival } => {
                match self.table.quarantine(self.now, job, epoch, recorded, rival).unwrap() {
                    Quarantine::Quarantined(terminal) => self.record_terminal(terminal, Some(batch)),
                    Quarantine::Refused(refusal) => {
                        self.refused(job, epoch, RefusedRequest::Quarantine, refusal.into(), Some(batch))
                    }
                }
                let state = self.reclaimers.get_mut(&reclaimer).expect("a known reclaimer");
                let untouched = state.pending.len();
                state.pending.clear();
                let identities = [recorded, rival];
                self.record(node, Event::BatchStopped { batch, job, identities, untouched });
            }
        }
    }

    fn record_lookup(&mut self, job: JobId, op: OpId, epoch: Epoch, lookup: Lookup, batch: Option<BatchId>) {
        let (found, rival) = match lookup {
            Lookup::Empty => (None, None),
            Lookup::Recorded(output) => (Some(output), None),
            Lookup::Conflict { recorded, rival } => (Some(recorded), Some(rival)),
        };
        let from = self.actor;
        self.record(Node::Ledger, Event::LookedUp { from, job, op, epoch, found, rival, batch });
    }

    fn record_requeue(&mut self, job: JobId, epoch: Epoch, requeue: Requeue, batch: Option<BatchId>) {
        let from = self.actor;
        match requeue {
            Requeue::Requeued { attempts } => {
                self.record(Node::Table, Event::Requeued { from, job, epoch, attempts, batch })
            }
            Requeue::DeadLettered(terminal) => self.record_terminal(terminal, batch),
            Requeue::Refused(refusal) => self.refused(job, epoch, RefusedRequest::Requeue, refusal.into(), batch),
        }
    }

    fn record_completion(
        &mut self,
        job: JobId,
        epoch: Epoch,
        output: OutputId,
        completion: Completion,
        batch: Option<BatchId>,
    ) {
        match completion {
            Completion::Completed(terminal) => self.record_terminal(terminal, batch),
            Completion::AlreadyCompleted => {
                self.record(Node::Table, Event::AlreadyCompleted { from: self.actor, job, epoch, output })
            }
            Completion::Conflict { .. } => {
                self.refused(job, epoch, RefusedRequest::Complete, RefuseReason::Conflict, batch)
            }
            Completion::Refused(refusal) => self.refused(job, epoch, RefusedRequest::Complete, refusal.into(), batch),
        }
    }

    fn record_terminal(&mut self, terminal: Terminal, batch: Option<BatchId>) {
        let event =
            lease_history::answers::terminal(&lease_history::answers::Asker { from: self.actor, batch }, &terminal);
        self.record(Node::Table, event);
    }

    fn refused(
        &mut self,
        job: JobId,
        epoch: Epoch,
        request: RefusedRequest,
        reason: RefuseReason,
        batch: Option<BatchId>,
    ) {
        let event = Event::Refused { from: self.actor, job, epoch, request, reason, batch };
        self.record(Node::Table, event);
    }
}

const SEEDS: u64 = 300;

/// Every seed's verdict with `bug` planted.
fn sweep(bug: Option<Bug>) -> Vec<(u64, Result<Coverage, Violation>)> {
    sweep_with(bug, None)
}

/// Every seed's verdict with `bug` planted and the ledger broken by `breakage`.
fn sweep_with(bug: Option<Bug>, breakage: Option<Breakage>) -> Vec<(u64, Result<Coverage, Violation>)> {
    (0..SEEDS).map(|seed| (seed, check_history(&Driver::new(seed, bug, breakage).run()))).collect()
}

// Histories of the correct table and ledger, under lost replies, retries, crashes and expiries,
// never raise an alarm, and they do reach the situations the checkers judge.
#[test]
fn correct_protocol_histories_pass() {
    let mut total = Coverage::default();
    for (seed, verdict) in sweep(None) {
        match verdict {
            Ok(coverage) => total.merge(&coverage),
            Err(violation) => panic!("seed {seed}: false alarm: {violation}"),
        }
    }
    for name in [
        "reclaimed",
        "adopted_by_reclaimer",
        "adopted_by_worker",
        "crash_after_effect_adopted",
        "reclaimer_lost_race",
        "stale_effect_fenced",
        "stale_write_refused",
        "batch_stopped_on_conflict",
        "quarantined",
        "dead_lettered",
        "full_batch",
        "self_fenced",
        "lease_renewed",
    ] {
        assert!(total.get(name) > 0, "the driver never reached {name}: {total:?}");
    }
}

/// The invariants each planted table or ledger bug may first break, in the driver's histories,
/// and the conformance rule that names the table's or the ledger's wrong answer, which often
/// shows before the harm does (a listing of an unexpired lease, say, before its reclaim).
fn expected(bug: Bug) -> (&'static [Invariant], &'static [Rule]) {
    match bug {
        Bug::ReclaimBoundaryOffByOne => (&[Invariant::NoUnexpiredReclaim], &[Rule::ListingAnswer]),
        Bug::CompleteWithoutEpochCheck => (&[Invariant::Fencing], &[Rule::CompleteAnswer]),
        Bug::LedgerWithoutFence => (&[Invariant::Fencing], &[Rule::LedgerApplyAnswer]),
        // A fence without its compare-and-set takes over whatever epoch the job is at now, which
        // is not the lease the batch listed.
        Bug::ReclaimWithoutCas => {
            (&[Invariant::NoUnexpiredReclaim, Invariant::Fencing, Invariant::BoundedBatch], &[Rule::FenceAnswer])
        }
        Bug::UnboundedReclaimBatch => (&[Invariant::BoundedBatch], &[Rule::ListingAnswer]),
        _ => unreachable!("not driven here"),
    }
}

// Each planted table or ledger bug is caught in some seed, always as the rule it breaks.
#[test]
fn planted_bugs_are_named() {
    for bug in [
        Bug::ReclaimBoundaryOffByOne,
        Bug::CompleteWithoutEpochCheck,
        Bug::LedgerWithoutFence,
        Bug::ReclaimWithoutCas,
        Bug::UnboundedReclaimBatch,
    ] {
        let violations = sweep(Some(bug))
            .into_iter()
            .filter_map(|(seed, verdict)| verdict.err().map(|violation| (seed, violation)))
            .collect::<Vec<_>>();
        assert!(!violations.is_empty(), "{bug} was never caught");
        let (invariants, rules) = expected(bug);
        for (seed, violation) in violations {
            let named = match Rule::of(&violation) {
                Some(rule) => rules.contains(&rule),
                None => invariants.contains(&violation.invariant),
            };
            assert!(named, "{bug}, seed {seed}: {violation}");
        }
    }
}

// A ledger that takes a second output for an operation, in any of three ways (records both,
// overwrites the first, or takes the second as a repeat of the first), is caught in some seed,
// always as no_duplicate_effect; a worker that completes with its own output over the ledger's
// conflict is caught as consistency (or as bounded_batch's overwrite, when a lookup showed the
// conflict first). Correct histories of the same driver never trip either (see above).
#[test]
fn broken_ledgers_and_workers_are_caught() {
    let breakages = [
        (Breakage::SecondOutput, &[Invariant::NoDuplicateEffect][..]),
        (Breakage::Overwrite, &[Invariant::NoDuplicateEffect]),
        (Breakage::AnyOutputIsARepeat, &[Invariant::NoDuplicateEffect]),
        (Breakage::WorkerIgnoresConflict, &[Invariant::Consistency, Invariant::BoundedBatch]),
    ];
    for (breakage, expected) in breakages {
        let violations = sweep_with(None, Some(breakage))
            .into_iter()
            .filter_map(|(seed, verdict)| verdict.err().map(|violation| (seed, violation)))
            .collect::<Vec<_>>();
        assert!(!violations.is_empty(), "{breakage:?} was never caught");
        println!("{breakage:?}: caught in {} of {SEEDS} seeds", violations.len());
        let first_choice = violations.iter().filter(|(_, violation)| violation.invariant == expected[0]).count();
        assert!(first_choice > 0, "{breakage:?} was never caught as {}", expected[0]);
        for (seed, violation) in violations {
            assert!(expected.contains(&violation.invariant), "{breakage:?}, seed {seed}: {violation}");
        }
    }
}
