//! Batched calls on every store: one transaction per batch, each job judged on its own record,
//! and exactly the answers, rows and history lines of the same calls one by one.
//!
//! Each case runs one sequence of batches on a store, and the same calls one by one on a twin
//! store of the same kind; the answers, every job's row and the whole log must be identical, line
//! for line. On SQL stores a batch is one transaction: a misused batch (an unknown job at its end)
//! leaves no row changed and no line written.

mod common;

use common::pg;
use common::TempFile;
use lease_core::{
    Acquired, BatchId, Bugs, Enqueued, Epoch, JobId, Lease, OpId, OutputId, Owner, ReclaimRequest, ReclaimerId,
    RequestId, Span, TableConfig, TableError, Time, WorkerId, WorkerRequest,
};
use lease_store::{LedgerStore, MemoryStore, SqliteStore, Store, StoreError, TableStore};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::mem::discriminant;

const JOBS: u64 = 8;
/// Job ids an enqueue may name: the first `JOBS`, enqueued at the start, and some never seen.
const IDS: u64 = JOBS + 4;

fn config() -> TableConfig {
    TableConfig { capacity: JOBS as usize, lease_ttl: Span(100), batch_max: 4, attempts_max: 2 }
}

/// One batched call: jobs by index, epochs relative to the job's current one (0: current, 1: one
/// behind: a stale holder's).
#[derive(Debug, Clone)]
enum Call {
    Acquire {
        owner: u32,
        want: usize,
    },
    Renew(Vec<(u64, u64)>),
    Complete(Vec<(u64, u64, u64)>),
    Requeue(Vec<(u64, u64)>),
    Release(Vec<(u64, u64)>),
    Lookup(Vec<(u64, u64)>),
    Apply(Vec<(u64, u64, u64)>),
    /// A runtime's batch ([`TableStore::serve_batch`]): one kind (0 acquire, 1 renew, 2 lookup,
    /// 3 complete, 4 requeue; 5: records under each worker's name, `apply_as`), each item `(worker, job, behind, request or output)`; an acquire
    /// names each worker once (later ones are dropped), and a small request id repeats, so that
    /// a retried acquire finds its standing grant.
    Serve(u8, Vec<(u32, u64, u64, u64)>),
    /// Enqueues, each `(job, payload length)`: known ones, new ones, one named twice, and past
    /// the capacity while the first jobs are still open.
    Enqueue(Vec<(u64, u8)>),
    /// A reclaimer's step ([`lease_store::serve_reclaimer_batch`]): one kind (0 fence, 1 lookup,
    /// 2 requeue, 3 complete; 4: requeues and completions mixed, by the output's parity, in runs
    /// of one kind each served together), each item `(job, behind, output)`, all of one batch.
    Reclaim(u8, Vec<(u64, u64, u64)>),
}

fn named() -> impl Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec((0..JOBS, 0..2u64), 1..=4)
}

fn named_out() -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
    proptest::collection::vec((0..JOBS, 0..2u64, 0..2u64), 1..=4)
}

fn calls() -> impl Strategy<Value = Vec<(u64, Call)>> {
    let call = prop_oneof![
        3 => (1..3u32, 1..=4usize).prop_map(|(owner, want)| Call::Acquire { owner, want }),
        2 => named().prop_map(Call::Renew),
        2 => named_out().prop_map(Call::Complete),
        1 => named().prop_map(Call::Requeue),
        1 => named().prop_map(Call::Release),
        1 => named().prop_map(Call::Lookup),
        2 => named_out().prop_map(Call::Apply),
        4 => (0..6u8, proptest::collection::vec((1..5u32, 0..JOBS, 0..2u64, 0..3u64), 1..=4))
            .prop_map(|(kind, items)| Call::Serve(kind, items)),
        3 => (0..5u8, named_out()).prop_map(|(kind, items)| Call::Reclaim(kind, items)),
        1 => proptest::collection::vec((0..IDS, 0..3u8), 1..=4).prop_map(Call::Enqueue),
    ];
    proptest::collection::vec((0..60u64, call), 1..30)
}

fn epoch(store: &mut dyn Store, job: u64, behind: u64) -> Epoch {
    let current = store.job(JobId(job)).unwrap().map(|record| record.epoch).unwrap_or(Epoch(0));
    Epoch(current.0.saturating_sub(behind))
}

fn op(job: u64) -> OpId {
    OpId::for_job(JobId(job))
}

/// The call's answers, batched or one by one, as text.
fn run(store: &mut dyn Store, now: Time, call: &Call, batched: bool) -> String {
    // serve_worker names its worker for the calls after it too; a runtime's batch leaves the
    // caller as it was. Every call here starts unnamed.
    store.set_caller(lease_store::Caller::default());
    macro_rules! each {
        ($items:expr, $batch:ident, $single:ident, |$s:ident, $item:pat_param| $call:expr) => {{
            if batched {
                format!("{:?}", store.$batch(now, &$items).unwrap())
            } else {
                let answers: Vec<_> = $items
                    .iter()
                    .map(|&$item| {
                        let $s = &mut *store;
                        $call
                    })
                    .collect();
                format!("{answers:?}")
            }
        }};
    }
    match call {
        Call::Acquire { owner, want } => {
            let owner = WorkerId(*owner);
            if batched {
                return format!("{:?}", store.acquire_batch(now, owner, *want).unwrap());
            }
            let mut grants = Vec::new();
            for _ in 0..*want {
                match store.acquire(now, owner).unwrap() {
                    Acquired::Granted(grant) => grants.push(grant),
                    Acquired::Regranted(_) | Acquired::Spent { .. } => unreachable!("a fresh acquire is no copy"),
                    Acquired::Empty => break,
                }
            }
            format!("{grants:?}")
        }
        Call::Renew(n) => {
            let items: Vec<_> = n.iter().map(|&(j, b)| (JobId(j), epoch(store, j, b))).collect();
            each!(items, renew_batch, renew, |s, (job, e)| s.renew(now, job, e).unwrap())
        }
        Call::Complete(n) => {
            let items: Vec<_> = n.iter().map(|&(j, b, o)| (JobId(j), epoch(store, j, b), OutputId(o))).collect();
            each!(items, complete_batch, complete, |s, (job, e, o)| s.complete(now, job, e, o).unwrap())
        }
        Call::Requeue(n) => {
            let items: Vec<_> = n.iter().map(|&(j, b)| (JobId(j), epoch(store, j, b))).collect();
            each!(items, requeue_batch, requeue, |s, (job, e)| s.requeue(now, job, e).unwrap())
        }
        Call::Release(n) => {
            let items: Vec<_> = n.iter().map(|&(j, b)| (JobId(j), epoch(store, j, b))).collect();
            each!(items, release_batch, release, |s, (job, e)| s.release(now, job, e).unwrap())
        }
        Call::Lookup(n) => {
            let items: Vec<_> = n.iter().map(|&(j, b)| (op(j), epoch(store, j, b))).collect();
            each!(items, lookup_batch, lookup, |s, (o, e)| s.lookup(now, o, e).unwrap())
        }
        Call::Serve(5, items) => {
            let outputs: Vec<_> =
                items.iter().map(|&(w, j, b, x)| (WorkerId(w), op(j), epoch(store, j, b), OutputId(x))).collect();
            if batched {
                return format!("{:?}", store.apply_as(now, &outputs).unwrap());
            }
            let answers: Vec<_> = outputs
                .iter()
                .map(|&(w, o, e, x)| {
                    store.set_caller(lease_store::Caller { from: Some(lease_core::Owner::Worker(w)), batch: None });
                    store.apply(now, o, e, x).unwrap()
                })
                .collect();
            format!("{answers:?}")
        }
        Call::Serve(kind, items) => {
            let mut seen = Vec::new();
            let mut calls = Vec::new();
            for &(w, j, b, x) in items {
                let (job, e) = (JobId(j), epoch(store, j, b));
                let request = match kind {
                    0 if seen.contains(&w) => continue,
                    0 => WorkerRequest::Acquire,
                    1 => WorkerRequest::Renew { job, epoch: e },
                    2 => WorkerRequest::Lookup { op: op(j), epoch: e },
                    3 => WorkerRequest::Complete { job, epoch: e, output: OutputId(x) },
                    _ => WorkerRequest::Requeue { job, epoch: e },
                };
                seen.push(w);
                calls.push((WorkerId(w), RequestId(x), request));
            }
            if batched {
                return format!("{:?}", store.serve_batch(now, &calls).unwrap());
            }
            let answers: Vec<_> = calls
                .iter()
                .map(|&(w, id, request)| lease_store::serve_worker(&mut *store, now, w, id, request).unwrap().reply)
                .collect();
            format!("{answers:?}")
        }
        Call::Reclaim(kind, items) => {
            let (reclaimer, batch) = (ReclaimerId(9), BatchId { reclaimer: ReclaimerId(9), seq: 0 });
            let requests: Vec<ReclaimRequest> = items
                .iter()
                .map(|&(j, b, x)| {
                    let (job, epoch) = (JobId(j), epoch(store, j, b));
                    match (kind, x % 2) {
                        (0, _) => {
                            let lease = Lease { job, owner: Owner::Worker(WorkerId(1)), epoch, expires_at: now };
                            ReclaimRequest::Fence { batch, lease, as_of: now }
                        }
                        (1, _) => ReclaimRequest::Lookup { batch, op: op(j), epoch },
                        (2, _) | (4, 0) => ReclaimRequest::Requeue { batch, job, epoch },
                        _ => ReclaimRequest::Complete { batch, job, epoch, output: OutputId(x) },
                    }
                })
                .collect();
            let answers: Vec<_> = if batched {
                lease_store::serve_reclaimer_batch(&mut *store, now, reclaimer, &requests).unwrap()
            } else {
                requests
                    .iter()
                    .map(|&request| lease_store::serve_reclaimer(&mut *store, now, reclaimer, request).unwrap())
                    .collect()
            };
            format!("{answers:?}")
        }
        Call::Apply(n) => {
            let items: Vec<_> = n.iter().map(|&(j, b, x)| (op(j), epoch(store, j, b), OutputId(x))).collect();
            each!(items, apply_batch, apply, |s, (o, e, x)| s.apply(now, o, e, x).unwrap())
        }
        Call::Enqueue(n) => {
            let items: Vec<(JobId, Vec<u8>)> = n.iter().map(|&(j, len)| (JobId(j), vec![len; len.into()])).collect();
            if batched {
                return format!("{:?}", store.enqueue_batch(now, &items).unwrap());
            }
            let answers: Vec<_> =
                items.iter().map(|(job, payload)| store.enqueue_with(now, *job, payload).unwrap()).collect();
            format!("{answers:?}")
        }
    }
}

/// Every job's row and operation's record, as text.
fn rows(store: &mut dyn Store) -> Vec<String> {
    (0..IDS)
        .map(|j| {
            let (job, record) = (store.job(JobId(j)).unwrap(), store.op(op(j)).unwrap());
            format!("{j}: {job:?} {record:?} {:?}", store.payload(JobId(j)).unwrap())
        })
        .collect()
}

/// Runs `calls` batched on `batched` and one by one on `single`, both fresh, and compares.
fn same(batched: &mut dyn Store, single: &mut dyn Store, calls: &[(u64, Call)]) -> Result<(), TestCaseError> {
    for job in 0..JOBS {
        assert!(matches!(batched.enqueue(Time(0), JobId(job)).unwrap(), Enqueued::Accepted { .. }));
        assert!(matches!(single.enqueue(Time(0), JobId(job)).unwrap(), Enqueued::Accepted { .. }));
    }
    let mut now = Time(0);
    for (step, (gap, call)) in calls.iter().enumerate() {
        now = Time(now.0 + gap);
        let a = run(batched, now, call, true);
        let b = run(single, now, call, false);
        prop_assert_eq!(&a, &b, "step {}: the answers to {:?}", step, call);
        prop_assert_eq!(rows(batched), rows(single), "step {}: the rows after {:?}", step, call);
    }
    prop_assert_eq!(batched.events().unwrap(), single.events().unwrap(), "the logs, line for line");
    Ok(())
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

#[test]
fn a_batch_is_its_calls_one_by_one_in_memory() {
    runner(256)
        .run(&calls(), |calls| {
            same(&mut MemoryStore::new(config()).unwrap(), &mut MemoryStore::new(config()).unwrap(), &calls)
        })
        .unwrap();
}

#[test]
fn a_batch_is_its_calls_one_by_one_on_sqlite() {
    runner(128)
        .run(&calls(), |calls| {
            let mut a = SqliteStore::open_in_memory(config()).unwrap();
            let mut b = SqliteStore::open_in_memory(config()).unwrap();
            same(&mut a, &mut b, &calls)
        })
        .unwrap();
}

#[test]
fn postgres_a_batch_is_its_calls_one_by_one() {
    if pg::scratch("batch_probe").is_none() {
        return;
    }
    runner(24)
        .run(&calls(), |calls| {
            let a = pg::scratch("batch_a").expect("the server answered a moment ago");
            let b = pg::scratch("batch_b").expect("the server answered a moment ago");
            same(&mut a.open(config(), Bugs::NONE), &mut b.open(config(), Bugs::NONE), &calls)
        })
        .unwrap();
}

/// A batch naming an unknown job after a known one: refused whole, nothing written.
fn a_misused_batch_writes_nothing(store: &mut dyn Store) {
    for job in 0..JOBS {
        assert!(matches!(store.enqueue(Time(0), JobId(job)).unwrap(), Enqueued::Accepted { .. }));
    }
    let grants = store.acquire_batch(Time(1), WorkerId(1), 2).unwrap();
    assert_eq!(grants.len(), 2);
    let (before, lines) = (rows(store), store.events().unwrap());
    let done = [(grants[0].lease.job, grants[0].lease.epoch, OutputId(1)), (JobId(99), Epoch(1), OutputId(1))];
    let error = store.complete_batch(Time(2), &done).unwrap_err();
    assert!(matches!(error, StoreError::Table(TableError::UnknownJob(JobId(99)))), "{error}");
    let renewals = [(grants[0].lease.job, grants[0].lease.epoch), (JobId(99), Epoch(1))];
    assert!(store.renew_batch(Time(2), &renewals).is_err());
    for asked in [0, 5] {
        let error = store.acquire_batch(Time(2), WorkerId(1), asked).unwrap_err();
        assert!(matches!(error, StoreError::Table(TableError::BatchSize { max: 4, .. })), "{error}");
    }
    // A wave of fences: an unknown job after an expired lease, or none, or too many.
    let expired = Time(1) + config().lease_ttl;
    let (first, reclaimer) = (grants[0].lease, ReclaimerId(9));
    let fences = [(first.job, first.epoch, expired), (JobId(99), Epoch(1), expired)];
    let error = store.fence_batch(expired, reclaimer, &fences).unwrap_err();
    assert!(matches!(error, StoreError::Table(TableError::UnknownJob(JobId(99)))), "{error}");
    for asked in [0, 5] {
        let fences: Vec<_> = (0..asked).map(|_| (first.job, first.epoch, expired)).collect();
        let error = store.fence_batch(expired, reclaimer, &fences).unwrap_err();
        assert!(matches!(error, StoreError::Table(TableError::BatchSize { max: 4, .. })), "{error}");
    }
    let ops: Vec<_> = (0..5).map(|j| (op(j), Epoch(1))).collect();
    assert!(matches!(store.lookup_batch(Time(2), &ops), Err(StoreError::Table(TableError::BatchSize { .. }))));
    // A runtime's batch: an unknown job after a known one, mixed kinds, one worker twice in an
    // acquire, a kind no batch takes, no request, too many.
    let (job, epoch) = (grants[0].lease.job, grants[0].lease.epoch);
    let renew = |job| (WorkerId(1), RequestId(9), WorkerRequest::Renew { job, epoch });
    let acquire = |w| (WorkerId(w), RequestId(9), WorkerRequest::Acquire);
    let unknown = store.serve_batch(Time(2), &[renew(job), renew(JobId(99))]).unwrap_err();
    assert!(matches!(unknown, StoreError::Table(TableError::UnknownJob(JobId(99)))), "{unknown}");
    for misused in [
        vec![renew(job), acquire(2)],
        vec![acquire(2), acquire(3), acquire(2)],
        vec![(WorkerId(1), RequestId(9), WorkerRequest::Release { job, epoch })],
    ] {
        let error = store.serve_batch(Time(2), &misused).unwrap_err();
        assert!(matches!(error, StoreError::Batch(_)), "{misused:?}: {error}");
    }
    let error = store.serve_batch(Time(2), &[]).unwrap_err();
    assert!(matches!(error, StoreError::Table(TableError::BatchSize { .. }) | StoreError::Batch(_)), "{error}");
    let five: Vec<_> = (2..7).map(acquire).collect();
    let error = store.serve_batch(Time(2), &five).unwrap_err();
    assert!(matches!(error, StoreError::Table(TableError::BatchSize { max: 4, .. })), "{error}");
    // Enqueues: none, too many, or a payload past the limit after a good job.
    for asked in [0, 5] {
        let jobs: Vec<_> = (JOBS..JOBS + asked).map(|j| (JobId(j), Vec::new())).collect();
        let error = store.enqueue_batch(Time(2), &jobs).unwrap_err();
        assert!(matches!(error, StoreError::Table(TableError::BatchSize { max: 4, .. })), "{error}");
    }
    let oversized = [(JobId(JOBS), vec![1]), (JobId(JOBS + 1), vec![0; lease_store::PAYLOAD_MAX + 1])];
    assert!(matches!(store.enqueue_batch(Time(2), &oversized), Err(StoreError::PayloadTooLarge { .. })));
    assert_eq!(rows(store), before, "no row changed");
    assert_eq!(store.events().unwrap(), lines, "no line written");
}

#[test]
fn a_misused_batch_writes_nothing_on_any_store() {
    a_misused_batch_writes_nothing(&mut MemoryStore::new(config()).unwrap());
    a_misused_batch_writes_nothing(&mut SqliteStore::open_in_memory(config()).unwrap());
    let file = TempFile::new("batch_misused");
    a_misused_batch_writes_nothing(&mut SqliteStore::open(file.path(), config()).unwrap());
    if let Some(scratch) = pg::scratch("batch_misused") {
        a_misused_batch_writes_nothing(&mut scratch.open(config(), Bugs::NONE));
    }
}

/// On the database's clock, a batch over different rows takes only the shared lock and those
/// rows: renewals, lookups, records and completions of four leases, one of them stale.
#[test]
fn postgres_a_batch_on_the_database_clock_locks_only_its_rows() {
    let Some(scratch) = pg::scratch("batch_database_clock") else { return };
    let config = TableConfig { lease_ttl: Span::from_secs(30), ..config() };
    let mut store = pg::open_on(&scratch.name, config, Bugs::NONE, lease_store::Clock::Database);
    for job in 0..4 {
        assert!(matches!(store.enqueue(Time(0), JobId(job)).unwrap(), Enqueued::Accepted { .. }));
    }
    let grants = store.acquire_batch(Time(0), WorkerId(1), 4).unwrap();
    let leases: Vec<_> = grants.iter().map(|g| (g.lease.job, g.lease.epoch)).collect();
    let stale = (leases[3].0, Epoch(leases[3].1 .0 + 1));
    let renewals = store.renew_batch(Time(0), &[leases[2], leases[0], leases[1], stale]).unwrap();
    assert!(renewals[..3].iter().all(|r| matches!(r, lease_core::Renewal::Renewed { .. })), "{renewals:?}");
    assert!(matches!(renewals[3], lease_core::Renewal::Refused(_)), "{renewals:?}");
    let ops: Vec<_> = leases.iter().map(|&(job, epoch)| (OpId::for_job(job), epoch)).collect();
    assert!(store.lookup_batch(Time(0), &ops).unwrap().iter().all(|l| *l == lease_core::Lookup::Empty));
    let outputs: Vec<_> = ops.iter().map(|&(op, epoch)| (op, epoch, OutputId(7))).collect();
    assert!(store.apply_batch(Time(0), &outputs).unwrap().iter().all(|a| *a == lease_core::Apply::Applied));
    let done: Vec<_> = leases.iter().map(|&(job, epoch)| (job, epoch, OutputId(7))).collect();
    let completions = store.complete_batch(Time(0), &done).unwrap();
    assert!(completions.iter().all(|c| matches!(c, lease_core::Completion::Completed(_))), "{completions:?}");
    assert_eq!(store.backlog().unwrap(), 0);
}

/// On the database's clock, batches run beside acquires, single calls and each other: an
/// acquiring worker completes what it is granted in batches, while a stale worker renews batches
/// of any jobs (queued ones among them, the head included) and another renews one at a time.
/// Nothing errs (no deadlock, no lost race), and every job ends completed once. (A smoke test:
/// the cycle `schema::SELECT_ACQUIRE_ROWS` rules out needs a stale batch to hold the head at the
/// moment an acquire would hold that batch's other row; the test after this one forces it.)
#[test]
fn postgres_batches_run_beside_acquires_and_single_calls() {
    let Some(scratch) = pg::scratch("batch_beside") else { return };
    let config = TableConfig { capacity: 200, lease_ttl: Span::from_secs(30), batch_max: 8, attempts_max: 3 };
    let open = || pg::open_on(&scratch.name, config, Bugs::NONE, lease_store::Clock::Database);
    let mut enqueuer = open();
    for job in 0..200 {
        assert!(matches!(enqueuer.enqueue(Time(0), JobId(job)).unwrap(), Enqueued::Accepted { .. }));
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let workers: Vec<_> = (1..=2u32)
            .map(|worker| {
                let (mut store, done) = (open(), &done);
                s.spawn(move || {
                    let mut completed = 0;
                    for request in 0.. {
                        let mut grants = Vec::new();
                        while grants.len() < 4 {
                            match store
                                .acquire_for(
                                    Time(0),
                                    WorkerId(worker),
                                    lease_core::RequestId(request * 8 + grants.len() as u64),
                                )
                                .unwrap()
                            {
                                Acquired::Granted(grant) => grants.push(grant),
                                Acquired::Regranted(_) | Acquired::Spent { .. } => unreachable!("every request is new"),
                                Acquired::Empty => break,
                            }
                        }
                        if grants.is_empty() {
                            break;
                        }
                        let finish: Vec<_> = grants.iter().map(|g| (g.lease.job, g.lease.epoch, OutputId(1))).collect();
                        for answer in store.complete_batch(Time(0), &finish).unwrap() {
                            assert!(matches!(answer, lease_core::Completion::Completed(_)), "{answer:?}");
                            completed += 1;
                        }
                    }
                    if worker == 2 {
                        done.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    completed
                })
            })
            .collect();
        let mut stale = open();
        let mut single = open();
        let mut n = 0u64;
        while !done.load(std::sync::atomic::Ordering::Relaxed) && n < 20_000 {
            let jobs: Vec<_> = (0..8).map(|k| (JobId((n * 7 + k * 13) % 200), Epoch(1))).collect();
            let mut distinct = jobs.clone();
            distinct.sort();
            distinct.dedup_by_key(|(job, _)| *job);
            let _ = stale.renew_batch(Time(0), &distinct).unwrap();
            let _ = single.renew(Time(0), JobId((n * 31) % 200), Epoch(2)).unwrap();
            n += 1;
        }
        let completed: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(completed, 200, "every job completed once");
    });
    assert_eq!(enqueuer.backlog().unwrap(), 0);
}

/// The cycle a batch beside an acquire could make, forced, for each kind of acquire (one, a batch
/// of one owner's, a runtime's batch of workers'): a stale batch of renewals or completions, under
/// the shared lock, holds a queued job the acquire wants (job 1), then locks a job of a higher key
/// that the acquire wants too (job 5: the job worker 1 was last granted, or, for the batch of one
/// owner's, the queue's head, enqueued before job 1). The acquire must lock its rows in job order,
/// so that it waits for job 1 holding nothing. Had it locked job 5 first (the granted job before
/// the head, or the heads in queue order), the batch's second lock would close a cycle, and
/// PostgreSQL would abort one of the two as a deadlock. Here the batch's second lock is granted,
/// and once the batch commits, the acquire grants the queue's first jobs.
#[test]
fn postgres_an_acquire_and_a_stale_batch_holding_the_head_never_deadlock() {
    type Acquire = fn(&mut lease_store::PostgresStore) -> Vec<JobId>;
    let one: Acquire = |store| match store.acquire_for(Time(0), WorkerId(1), RequestId(1)).unwrap() {
        Acquired::Granted(grant) => vec![grant.lease.job],
        other => panic!("{other:?}"),
    };
    let heads: Acquire =
        |store| store.acquire_batch(Time(0), WorkerId(2), 2).unwrap().iter().map(|g| g.lease.job).collect();
    let askers: Acquire = |store| {
        let calls = [(WorkerId(1), RequestId(1), WorkerRequest::Acquire)];
        store
            .serve_batch(Time(0), &calls)
            .unwrap()
            .iter()
            .map(|reply| match reply {
                lease_core::WorkerReply::Acquired(Acquired::Granted(grant)) => grant.lease.job,
                other => panic!("{other:?}"),
            })
            .collect()
    };
    for (kind, acquire, granted_first, expect) in [
        ("one", one, true, vec![JobId(1)]),
        ("heads", heads, false, vec![JobId(5), JobId(1)]),
        ("askers", askers, true, vec![JobId(1)]),
    ] {
        let Some(scratch) = pg::scratch(&format!("acquire_cycle_{kind}")) else { return };
        let config = TableConfig { capacity: 8, lease_ttl: Span::from_secs(30), batch_max: 4, attempts_max: 3 };
        let mut store = pg::open_on(&scratch.name, config, Bugs::NONE, lease_store::Clock::Database);
        // The queue: 5, then 1. Worker 1 is first granted 5, so the head is 1, below it.
        for job in [5, 1] {
            assert!(matches!(store.enqueue(Time(0), JobId(job)).unwrap(), Enqueued::Accepted { .. }));
        }
        if granted_first {
            assert!(
                matches!(store.acquire_for(Time(0), WorkerId(1), RequestId(0)).unwrap(), Acquired::Granted(g) if g.lease.job == JobId(5))
            );
        }
        // The stale batch: under the batch's lock, the head's row locked.
        let mut batch = postgres::Client::connect(&pg::url(), postgres::NoTls).expect("connect");
        batch.batch_execute(&format!("SET search_path TO {}; SET lock_timeout = '20s'", scratch.name)).unwrap();
        let mut tx = batch.transaction().unwrap();
        tx.batch_execute(lease_store::schema::LOCK_LOG_SHARED).unwrap();
        tx.query_one("SELECT job FROM lease_jobs WHERE job = 1 FOR UPDATE", &[]).unwrap();
        std::thread::scope(|s| {
            let acquiring = s.spawn(|| acquire(&mut store));
            // Until the acquire waits on a row lock (bounded: 20 s): a backend that holds the tuple
            // lock of a row of this schema's jobs and waits (other tests' waits do not count).
            let mut watcher = postgres::Client::connect(&pg::url(), postgres::NoTls).expect("connect");
            let waiting_on_jobs = format!(
                "SELECT COUNT(*) FROM pg_locks w JOIN pg_locks t ON t.pid = w.pid WHERE NOT w.granted \
                 AND t.locktype = 'tuple' AND t.relation = '{}.lease_jobs'::regclass",
                scratch.name
            );
            let waiting = (0..4_000).any(|_| {
                let row = watcher.query_one(&waiting_on_jobs, &[]).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(5));
                row.get::<_, i64>(0) > 0 || acquiring.is_finished()
            });
            assert!(
                waiting && !acquiring.is_finished(),
                "{kind}: the acquire did not wait for the head the batch holds"
            );
            // The batch's next row, in key order: free, for the acquire holds nothing yet.
            tx.query_one("SELECT job FROM lease_jobs WHERE job = 5 FOR UPDATE", &[]).unwrap();
            tx.commit().unwrap();
            let granted = acquiring.join().expect("the acquire ends without an error");
            assert_eq!(granted, expect, "{kind}: the acquire grants the queue's first jobs");
        });
        drop(store);
    }
}

/// On the database's clock, an acquire that would grant nothing answers without taking the
/// queue's lock (`schema::SELECT_NOTHING_TO_GRANT`), so an idle worker's poll does not wait for an
/// acquire that holds it: with the lock held by another transaction, polls of an empty queue
/// answer empty, one at a time and in a batch. It answers so only when the acquire would: a job
/// queued is granted, and a copy of the request that got a worker's last grant is answered
/// from that grant (regranted), alone or in a batch beside a fresh request, which finds nothing.
#[test]
fn postgres_an_acquire_of_an_empty_queue_takes_no_lock_and_answers_as_the_acquire_would() {
    let Some(scratch) = pg::scratch("nothing_to_grant") else { return };
    let config = TableConfig { capacity: 8, lease_ttl: Span::from_secs(30), batch_max: 4, attempts_max: 3 };
    let mut store = pg::open_on(&scratch.name, config, Bugs::NONE, lease_store::Clock::Database);
    let acquire = |w: u32, r: u64| (WorkerId(w), RequestId(r), WorkerRequest::Acquire);
    let empty = lease_core::WorkerReply::Acquired(Acquired::Empty);
    // Another acquire holds the queue's lock: polls of the empty queue answer all the same.
    let mut other = postgres::Client::connect(&pg::url(), postgres::NoTls).expect("connect");
    other.batch_execute(&format!("SET search_path TO {}", scratch.name)).unwrap();
    let mut tx = other.transaction().unwrap();
    tx.batch_execute(lease_store::schema::LOCK_QUEUE).unwrap();
    let (answers, answered) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let store = &mut store;
        s.spawn(move || {
            let one = store.acquire_for(Time(0), WorkerId(1), RequestId(0)).unwrap();
            let plain = store.acquire(Time(0), WorkerId(1)).unwrap();
            let heads = store.acquire_batch(Time(0), WorkerId(1), 2).unwrap();
            let batch = store.serve_batch(Time(0), &[acquire(1, 1), acquire(2, 1)]).unwrap();
            answers.send((one, plain, heads, batch)).unwrap();
        });
        let polled = answered.recv_timeout(std::time::Duration::from_secs(20));
        tx.commit().unwrap(); // Else a poll that waits for the lock would wait for ever.
        let (one, plain, heads, batch) = polled.expect("the polls waited for the queue's lock");
        assert_eq!((one, plain), (Acquired::Empty, Acquired::Empty));
        assert!(heads.is_empty(), "{heads:?}");
        assert_eq!(batch, [empty, empty]);
    });
    granted_then_regranted(&mut store);
}

/// After polls of an empty queue: a queued job is granted; a copy of its request is answered from
/// the grant, alone and beside a fresh request of another worker, though nothing is queued any
/// more; a fresh request finds nothing.
fn granted_then_regranted(store: &mut impl TableStore) {
    let acquire = |w: u32, r: u64| (WorkerId(w), RequestId(r), WorkerRequest::Acquire);
    let empty = lease_core::WorkerReply::Acquired(Acquired::Empty);
    assert!(matches!(store.enqueue(Time(0), JobId(0)).unwrap(), Enqueued::Accepted { .. }));
    let Acquired::Granted(grant) = store.acquire_for(Time(0), WorkerId(1), RequestId(2)).unwrap() else {
        panic!("a queued job is granted")
    };
    assert_eq!(store.acquire_for(Time(0), WorkerId(1), RequestId(2)).unwrap(), Acquired::Regranted(grant));
    let batch = store.serve_batch(Time(0), &[acquire(2, 2), acquire(1, 2)]).unwrap();
    assert_eq!(batch, [empty, lease_core::WorkerReply::Acquired(Acquired::Regranted(grant))]);
    assert_eq!(store.acquire_for(Time(0), WorkerId(1), RequestId(3)).unwrap(), Acquired::Empty);
}

/// The same on a SQLite file under the database's clock: with another connection holding the
/// write lock (`BEGIN IMMEDIATE`), polls of the empty queue answer empty from a read, one at a time
/// and in a batch; then [`granted_then_regranted`].
#[test]
fn sqlite_an_acquire_of_an_empty_queue_takes_no_write_lock_and_answers_as_the_acquire_would() {
    let file = TempFile::new("nothing_to_grant");
    let config = TableConfig { capacity: 8, lease_ttl: Span::from_secs(30), batch_max: 4, attempts_max: 3 };
    let mut store = SqliteStore::open_on(file.path(), config, lease_store::Clock::Database).expect("open");
    let acquire = |w: u32, r: u64| (WorkerId(w), RequestId(r), WorkerRequest::Acquire);
    let empty = lease_core::WorkerReply::Acquired(Acquired::Empty);
    let mut other = rusqlite::Connection::open(file.path()).expect("open the file again");
    let tx = other.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).unwrap();
    let (answers, answered) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let store = &mut store;
        s.spawn(move || {
            let one = store.acquire_for(Time(0), WorkerId(1), RequestId(0)).unwrap();
            let heads = store.acquire_batch(Time(0), WorkerId(1), 2).unwrap();
            let batch = store.serve_batch(Time(0), &[acquire(1, 1), acquire(2, 1)]).unwrap();
            answers.send((one, heads, batch)).unwrap();
        });
        let polled = answered.recv_timeout(std::time::Duration::from_secs(20));
        tx.commit().unwrap(); // Else a poll that waits for the lock would wait its busy timeout.
        let (one, heads, batch) = polled.expect("the polls waited for the write lock");
        assert_eq!(one, Acquired::Empty);
        assert!(heads.is_empty(), "{heads:?}");
        assert_eq!(batch, [empty, empty]);
    });
    granted_then_regranted(&mut store);
}

// Proves each row's guard in PostgreSQL's one-statement batch writes (a batch's rows are locked
// before its decision, so these guards never fire in a run: they are the compare-and-set that
// stands if a lock is ever missed, and this test is what a mistake in them fails). Two leased
// jobs; a batched write of both whose old record for job 1 is stale (epoch 0, not 1) writes job 2
// alone, returns only job 2, and leaves job 1's row as it was; likewise a batched ledger write
// over two operations writes only the one whose old output matches, never overwriting a
// recorded output. Fails if a guard column is dropped from `UPDATE_JOBS` or `UPDATE_OPS`, or
// if `UPDATE_JOBS` stamps a row it did not write.
#[test]
fn postgres_a_batched_write_checks_each_rows_guard() {
    use lease_store::schema;
    let Some(scratch) = pg::scratch("batched_guards") else { return };
    drop(scratch.open(config(), Bugs::NONE)); // migrated
    let mut client = postgres::Client::connect(&pg::url(), postgres::NoTls).expect("connect");
    client.batch_execute(&format!("SET search_path TO {}", scratch.name)).expect("search path");
    for job in [1i64, 2] {
        let insert = "INSERT INTO lease_jobs (job, state, epoch, attempts, owner, lease_epoch, expires_at_us) \
                      VALUES ($1, 'leased', 1, 1, 'w1', 1, 1000)";
        client.execute(insert, &[&job]).expect("a leased job");
    }
    let i = |values: [i64; 2]| values.to_vec();
    let o = |values: [Option<i64>; 2]| values.to_vec();
    let t = |values: [&str; 2]| values.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    let none: Vec<Option<i64>> = vec![None, None];
    let none_text: Vec<Option<String>> = vec![None, None];
    let (jobs, terminal, leased) = (i([1, 2]), t(["terminal", "terminal"]), t(["leased", "leased"]));
    let (epochs, attempts, completed) = (i([1, 1]), i([1, 1]), vec![Some("completed".to_string()); 2]);
    let outputs = o([Some(7), Some(8)]);
    let old_epochs = i([0, 1]); // job 1's old record is stale
    let old_lease = o([Some(1), Some(1)]);
    let old_expiry = o([Some(1000), Some(1000)]);
    let ended_at = o([Some(900), Some(900)]);
    let params: [&(dyn postgres::types::ToSql + Sync); 20] = [
        &jobs,
        &terminal,
        &epochs,
        &attempts,
        &none,
        &none_text,
        &none,
        &none,
        &completed,
        &outputs,
        &none,
        &epochs.iter().map(|&e| Some(e)).collect::<Vec<_>>(),
        &attempts.iter().map(|&a| Some(a)).collect::<Vec<_>>(),
        &leased,
        &old_epochs,
        &attempts,
        &old_lease,
        &old_expiry,
        &none,
        &ended_at,
    ];
    let wrote: Vec<i64> =
        client.query(schema::UPDATE_JOBS, &params).expect("update").iter().map(|r| r.get(0)).collect();
    assert_eq!(wrote, [2], "only the row whose old record matched");
    let states: Vec<(i64, String, Option<i64>)> = client
        .query("SELECT job, state, ended_at_us FROM lease_jobs ORDER BY job", &[])
        .expect("rows")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    let stamped = [(1, "leased".to_string(), None), (2, "terminal".to_string(), Some(900))];
    assert_eq!(states, stamped, "job 2 alone written, with the time it ended");
    // The ledger: op (1, 0) has output 5 recorded; op (2, 0) nothing.
    client.execute("INSERT INTO lease_ledger (job, step, fence, output) VALUES (1, 0, 1, 5)", &[]).expect("op 1");
    client.execute("INSERT INTO lease_ledger (job, step, fence) VALUES (2, 0, 1)", &[]).expect("op 2");
    let (steps, fences, new) = (i([0, 0]), i([1, 1]), o([Some(6), Some(6)]));
    // Job 1's caller believes nothing is recorded (stale): its write must not replace output 5.
    let ops: [&(dyn postgres::types::ToSql + Sync); 7] = [&jobs, &steps, &fences, &new, &none, &none, &none];
    let wrote: Vec<i64> = client.query(schema::UPDATE_OPS, &ops).expect("ops").iter().map(|r| r.get(0)).collect();
    assert_eq!(wrote, [2], "only the operation whose old output matched");
    let outputs: Vec<Option<i64>> = client
        .query("SELECT output FROM lease_ledger ORDER BY job", &[])
        .expect("ops")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(outputs, [Some(5), Some(6)], "a recorded output is never overwritten");
}

/// The `executing` lines of effects about to start: each written only while its own lease is
/// held (current epoch, unexpired by the line's time), judged lease by lease, never refused whole.
fn executing_lines_only_under_live_leases(store: &mut dyn Store) {
    for job in 0..JOBS {
        assert!(matches!(store.enqueue(Time(0), JobId(job)).unwrap(), Enqueued::Accepted { .. }));
    }
    let grants = store.acquire_batch(Time(1), WorkerId(1), 3).unwrap();
    let lease = |index: usize| (grants[index].lease.job, grants[index].lease.epoch);
    let expires_at = grants[0].lease.expires_at;
    assert_eq!(expires_at, Time(101));
    let (done, _) = lease(2);
    let completed = store.complete(Time(2), done, grants[2].lease.epoch, OutputId(7)).unwrap();
    assert!(matches!(completed, lease_core::Completion::Completed { .. }), "{completed:?}");
    let mut written_lines = Vec::new();
    let mut started = |store: &mut dyn Store, now: Time, leases: &[(JobId, Epoch)]| {
        let mut line = |stamp: Time, index: usize| {
            let (job, epoch) = leases[index];
            (
                "w1".to_string(),
                format!(r#"{{"t_us":{},"node":"w1","kind":"executing","job":{},"epoch":{}}}"#, stamp.0, job.0, epoch.0),
            )
        };
        let (stamp, written) = store.append_started(now, leases, &mut line).unwrap();
        assert_eq!(stamp, now);
        for (index, &live) in written.iter().enumerate() {
            if live {
                written_lines.push(leases[index]);
            }
        }
        written
    };
    let (stale_job, stale_epoch) = lease(1);
    let mixed = [lease(0), (stale_job, Epoch(stale_epoch.0 + 1)), lease(2), (JobId(99), Epoch(1))];
    let before = store.events().unwrap().len();
    assert_eq!(started(store, Time(50), &mixed), vec![true, false, false, false], "live, stale, ended, unknown");
    assert_eq!(store.events().unwrap().len(), before + 1, "one line written");
    // The same lease twice in one call: both judged, both written.
    assert_eq!(started(store, Time(60), &[lease(0), lease(0)]), vec![true, true]);
    // At the last microsecond of the lease, and at its expiry.
    assert_eq!(started(store, Time(expires_at.0 - 1), &[lease(1)]), vec![true]);
    assert_eq!(started(store, expires_at, &[lease(1), lease(0)]), vec![false, false], "expired");
    let kept: Vec<String> = store.events().unwrap().into_iter().filter(|line| line.contains("executing")).collect();
    assert_eq!(kept.len(), written_lines.len(), "{kept:#?}");
    assert!(kept.iter().all(|line| !line.contains(&format!(r#""t_us":{}"#, expires_at.0))), "{kept:#?}");
}

#[test]
fn executing_lines_are_written_only_under_live_leases_on_any_store() {
    executing_lines_only_under_live_leases(&mut MemoryStore::new(config()).unwrap());
    executing_lines_only_under_live_leases(&mut SqliteStore::open_in_memory(config()).unwrap());
    let file = TempFile::new("batch_started");
    executing_lines_only_under_live_leases(&mut SqliteStore::open(file.path(), config()).unwrap());
    if let Some(scratch) = pg::scratch("batch_started") {
        executing_lines_only_under_live_leases(&mut scratch.open(config(), Bugs::NONE));
    }
}
