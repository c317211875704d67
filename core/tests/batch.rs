//! Batched table calls: each job of a batch judged on its own record, exactly as the same single
//! calls at the same time would judge it.
//!
//! The property: any sequence of batched calls leaves a table, and gives answers, identical to a
//! twin that made each batch's calls one by one. The examples: one stale epoch among many is
//! refused alone; a misused batch (an unknown job, no job, more than `batch_max`) changes nothing.

use lease_core::{
    Acquired, Apply, Completion, EffectLedger, Enqueued, Epoch, Grant, JobId, LeaseTable, Lookup, OpId, OutputId,
    Refusal, Release, Renewal, Requeue, Span, TableConfig, TableError, Time, WorkerId,
};
use proptest::prelude::*;

const JOBS: u64 = 8;
/// Job ids an enqueue may name: the table's first `JOBS`, and some it has never seen.
const IDS: u64 = JOBS + 4;

fn config() -> TableConfig {
    TableConfig { capacity: JOBS as usize, lease_ttl: Span(100), batch_max: 4, attempts_max: 2 }
}

fn table() -> LeaseTable {
    let mut table = LeaseTable::new(config()).expect("a valid config");
    for job in 0..JOBS {
        assert!(matches!(table.enqueue(Time(0), JobId(job)).unwrap(), Enqueued::Accepted { .. }));
    }
    table
}

/// One batched call, its jobs named by index and its epochs relative to each job's current one
/// (0: current, 1: one behind, a stale holder's).
#[derive(Debug, Clone)]
enum Call {
    Acquire { owner: u32, want: usize },
    Renew(Vec<(u64, u64)>),
    Complete(Vec<(u64, u64, u64)>),
    Requeue(Vec<(u64, u64)>),
    Release(Vec<(u64, u64)>),
    Enqueue(Vec<u64>),
}

fn jobs_epochs() -> impl Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec((0..JOBS, 0..2u64), 1..=4)
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        (1..3u32, 1..=4usize).prop_map(|(owner, want)| Call::Acquire { owner, want }),
        jobs_epochs().prop_map(Call::Renew),
        proptest::collection::vec((0..JOBS, 0..2u64, 0..2u64), 1..=4).prop_map(Call::Complete),
        jobs_epochs().prop_map(Call::Requeue),
        jobs_epochs().prop_map(Call::Release),
        proptest::collection::vec(0..IDS, 1..=4).prop_map(Call::Enqueue),
    ]
}

/// Everything a caller can see of the table, per job.
fn seen(table: &LeaseTable) -> Vec<String> {
    let mut seen: Vec<String> = (0..IDS)
        .map(|n| {
            let job = JobId(n);
            format!(
                "{n}: {:?} {:?} {:?} {:?}",
                table.lease(job),
                table.terminal(job),
                table.attempts(job),
                table.epoch(job)
            )
        })
        .collect();
    seen.push(format!("backlog {} poll {:?}", table.backlog(), table.poll_timeout()));
    seen
}

fn epoch_of(table: &LeaseTable, job: u64, behind: u64) -> Epoch {
    let current = table.epoch(JobId(job)).unwrap_or(Epoch(0));
    Epoch(current.0.saturating_sub(behind))
}

/// The answers of one call, batched or one by one, as text.
fn run(table: &mut LeaseTable, now: Time, call: &Call, batched: bool) -> String {
    match call {
        Call::Acquire { owner, want } => {
            let owner = WorkerId(*owner);
            let grants: Vec<Grant> = if batched {
                table.acquire_batch(now, owner, *want).unwrap()
            } else {
                let mut grants = Vec::new();
                for _ in 0..*want {
                    match table.acquire(now, owner).unwrap() {
                        Acquired::Granted(grant) => grants.push(grant),
                        Acquired::Regranted(_) | Acquired::Spent { .. } => unreachable!("a fresh acquire is no copy"),
                        Acquired::Empty => break,
                    }
                }
                grants
            };
            format!("{grants:?}")
        }
        Call::Renew(named) => {
            let leases: Vec<_> = named.iter().map(|&(j, b)| (JobId(j), epoch_of(table, j, b))).collect();
            if batched {
                format!("{:?}", table.renew_batch(now, &leases).unwrap())
            } else {
                let answers: Vec<Renewal> =
                    leases.iter().map(|&(job, epoch)| table.renew(now, job, epoch).unwrap()).collect();
                format!("{answers:?}")
            }
        }
        Call::Complete(named) => {
            let done: Vec<_> = named.iter().map(|&(j, b, o)| (JobId(j), epoch_of(table, j, b), OutputId(o))).collect();
            if batched {
                format!("{:?}", table.complete_batch(now, &done).unwrap())
            } else {
                let answers: Vec<Completion> =
                    done.iter().map(|&(job, epoch, out)| table.complete(now, job, epoch, out).unwrap()).collect();
                format!("{answers:?}")
            }
        }
        Call::Requeue(named) => {
            let leases: Vec<_> = named.iter().map(|&(j, b)| (JobId(j), epoch_of(table, j, b))).collect();
            if batched {
                format!("{:?}", table.requeue_batch(now, &leases).unwrap())
            } else {
                let answers: Vec<Requeue> =
                    leases.iter().map(|&(job, epoch)| table.requeue(now, job, epoch).unwrap()).collect();
                format!("{answers:?}")
            }
        }
        Call::Enqueue(named) => {
            let jobs: Vec<JobId> = named.iter().map(|&j| JobId(j)).collect();
            if batched {
                format!("{:?}", table.enqueue_batch(now, &jobs).unwrap())
            } else {
                let answers: Vec<Enqueued> = jobs.iter().map(|&job| table.enqueue(now, job).unwrap()).collect();
                format!("{answers:?}")
            }
        }
        Call::Release(named) => {
            let leases: Vec<_> = named.iter().map(|&(j, b)| (JobId(j), epoch_of(table, j, b))).collect();
            if batched {
                format!("{:?}", table.release_batch(now, &leases).unwrap())
            } else {
                let answers: Vec<Release> =
                    leases.iter().map(|&(job, epoch)| table.release(now, job, epoch).unwrap()).collect();
                format!("{answers:?}")
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_batch_is_exactly_its_calls_one_by_one(calls in proptest::collection::vec((0..60u64, call()), 1..40)) {
        let (mut batched, mut single) = (table(), table());
        let mut now = Time(0);
        for (step, (gap, call)) in calls.iter().enumerate() {
            now = Time(now.0 + gap);
            let a = run(&mut batched, now, call, true);
            let b = run(&mut single, now, call, false);
            prop_assert_eq!(&a, &b, "step {}: answers to {:?}", step, call);
            prop_assert_eq!(seen(&batched), seen(&single), "step {}: the tables after {:?}", step, call);
        }
    }
}

#[test]
fn one_stale_epoch_among_many_is_refused_alone() {
    let mut table = table();
    let grants = table.acquire_batch(Time(1), WorkerId(1), 4).unwrap();
    assert_eq!(grants.iter().map(|g| g.lease.job).collect::<Vec<_>>(), [0, 1, 2, 3].map(JobId));
    let epochs: Vec<Epoch> = grants.iter().map(|g| g.lease.epoch).collect();
    // Each grant is its own lease: epochs count per job, so a first grant is epoch 1 for every job.
    assert!(epochs.iter().all(|&epoch| epoch == Epoch(1)), "{epochs:?}");
    // Job 2's lease is handed back and granted anew: the first holder's epoch is now stale.
    assert!(matches!(table.release(Time(2), JobId(2), epochs[2]).unwrap(), Release::Released { .. }));
    let regrant = table.acquire_batch(Time(3), WorkerId(2), 1).unwrap();
    assert_eq!(regrant[0].lease.job, JobId(2));
    let done: Vec<_> = grants.iter().map(|g| (g.lease.job, g.lease.epoch, OutputId(7))).collect();
    let answers = table.complete_batch(Time(4), &done).unwrap();
    for (n, answer) in answers.iter().enumerate() {
        match n {
            2 => assert!(
                matches!(answer, Completion::Refused(Refusal::StaleEpoch { .. })),
                "the stale one is refused: {answer:?}"
            ),
            _ => assert!(matches!(answer, Completion::Completed(_)), "job {n}: {answer:?}"),
        }
    }
    assert_eq!(table.lease(JobId(2)).map(|l| l.epoch), Some(regrant[0].lease.epoch), "its new holder keeps it");
    // A renewal naming a lease taken meanwhile: refused alone, the other renewed.
    let renewals = table.renew_batch(Time(5), &[(JobId(2), epochs[2]), (JobId(2), regrant[0].lease.epoch)]).unwrap();
    assert!(matches!(renewals[0], Renewal::Refused(Refusal::StaleEpoch { .. })), "{renewals:?}");
    assert!(matches!(renewals[1], Renewal::Renewed { expires_at: Time(105), .. }), "{renewals:?}");
}

#[test]
fn a_misused_batch_changes_nothing() {
    let mut table = table();
    let before = seen(&table);
    let max = config().batch_max;
    for want in [0, max + 1] {
        assert_eq!(
            table.acquire_batch(Time(1), WorkerId(1), want).unwrap_err(),
            TableError::BatchSize { asked: want, max }
        );
    }
    assert_eq!(table.renew_batch(Time(1), &[]).unwrap_err(), TableError::BatchSize { asked: 0, max });
    let too_many: Vec<_> = (0..=max as u64).map(|j| (JobId(j), Epoch(1))).collect();
    assert_eq!(table.requeue_batch(Time(1), &too_many).unwrap_err(), TableError::BatchSize { asked: max + 1, max });
    assert_eq!(table.enqueue_batch(Time(1), &[]).unwrap_err(), TableError::BatchSize { asked: 0, max });
    let arrivals: Vec<JobId> = (JOBS..=JOBS + max as u64).map(JobId).collect();
    assert_eq!(table.enqueue_batch(Time(1), &arrivals).unwrap_err(), TableError::BatchSize { asked: max + 1, max });
    assert_eq!(seen(&table), before, "no job of a refused batch is in");
    let grants = table.acquire_batch(Time(2), WorkerId(1), 2).unwrap();
    let after_grant = seen(&table);
    assert_ne!(before, after_grant);
    // An unknown job anywhere in the batch: misuse, found before the known one is completed.
    let done = [(grants[0].lease.job, grants[0].lease.epoch, OutputId(1)), (JobId(99), Epoch(1), OutputId(1))];
    assert_eq!(table.complete_batch(Time(3), &done).unwrap_err(), TableError::UnknownJob(JobId(99)));
    assert_eq!(seen(&table), after_grant, "nothing changed");
    // Time going backwards refuses the whole batch too.
    assert!(matches!(
        table.renew_batch(Time(1), &[(grants[0].lease.job, grants[0].lease.epoch)]).unwrap_err(),
        TableError::TimeWentBackwards { .. }
    ));
    assert_eq!(seen(&table), after_grant);
    // A batch asks for more than the queue holds: it gets what there is.
    assert_eq!(table.acquire_batch(Time(4), WorkerId(2), 4).unwrap().len(), 4);
    assert_eq!(table.acquire_batch(Time(4), WorkerId(2), 4).unwrap().len(), 2);
    assert!(table.acquire_batch(Time(4), WorkerId(2), 4).unwrap().is_empty());
}

#[test]
fn an_enqueue_batch_judges_each_job_against_the_ones_before_it() {
    let mut table = LeaseTable::new(TableConfig { capacity: 3, ..config() }).unwrap();
    assert_eq!(table.enqueue(Time(0), JobId(1)).unwrap(), Enqueued::Accepted { backlog: 1 });
    // Known before, named twice, accepted up to the capacity, then refused: each on its own.
    let answers = table.enqueue_batch(Time(1), &[JobId(1), JobId(2), JobId(2), JobId(3)]).unwrap();
    assert_eq!(
        answers,
        [
            Enqueued::Duplicate,
            Enqueued::Accepted { backlog: 2 },
            Enqueued::Duplicate,
            Enqueued::Accepted { backlog: 3 }
        ]
    );
    let full = table.enqueue_batch(Time(2), &[JobId(4), JobId(3)]).unwrap();
    assert_eq!(full, [Enqueued::Rejected(lease_core::Rejection::QueueFull { capacity: 3 }), Enqueued::Duplicate]);
    // In the order named: the queue serves them as they were accepted.
    let served: Vec<JobId> =
        table.acquire_batch(Time(3), WorkerId(1), 3).unwrap().iter().map(|g| g.lease.job).collect();
    assert_eq!(served, [JobId(1), JobId(2), JobId(3)]);
}

/// One batched ledger call: lookups or records, operations by index, epochs absolute.
#[derive(Debug, Clone)]
enum LedgerCall {
    Lookup(Vec<(u64, u64)>),
    Apply(Vec<(u64, u64, u64)>),
}

fn ledger_call() -> impl Strategy<Value = LedgerCall> {
    prop_oneof![
        proptest::collection::vec((0..4u64, 0..4u64), 1..=4).prop_map(LedgerCall::Lookup),
        proptest::collection::vec((0..4u64, 0..4u64, 0..3u64), 1..=4).prop_map(LedgerCall::Apply),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_ledger_batch_is_exactly_its_calls_one_by_one(calls in proptest::collection::vec(ledger_call(), 1..30)) {
        let (mut batched, mut single) = (EffectLedger::new(), EffectLedger::new());
        let op = |n: u64| OpId::for_job(JobId(n));
        for call in &calls {
            let (a, b) = match call {
                LedgerCall::Lookup(named) => {
                    let ops: Vec<_> = named.iter().map(|&(o, e)| (op(o), Epoch(e))).collect();
                    let one_by_one: Vec<Lookup> = ops.iter().map(|&(o, e)| single.lookup(o, e)).collect();
                    (format!("{:?}", batched.lookup_batch(&ops)), format!("{one_by_one:?}"))
                }
                LedgerCall::Apply(named) => {
                    let outputs: Vec<_> = named.iter().map(|&(o, e, x)| (op(o), Epoch(e), OutputId(x))).collect();
                    let one_by_one: Vec<Apply> = outputs.iter().map(|&(o, e, x)| single.apply(o, e, x)).collect();
                    (format!("{:?}", batched.apply_batch(&outputs)), format!("{one_by_one:?}"))
                }
            };
            prop_assert_eq!(a, b, "answers to {:?}", call);
            for n in 0..4 {
                prop_assert_eq!(batched.op(op(n)), single.op(op(n)), "op {} after {:?}", n, call);
            }
        }
    }
}

#[test]
fn one_fenced_record_among_many_is_refused_alone() {
    let mut ledger = EffectLedger::new();
    let op = |n: u64| OpId::for_job(JobId(n));
    // A newer holder of op 1 looked it up under epoch 3: the old holder's epoch 2 is fenced.
    assert_eq!(ledger.lookup_batch(&[(op(0), Epoch(2)), (op(1), Epoch(3))]), [Lookup::Empty, Lookup::Empty]);
    let answers = ledger.apply_batch(&[(op(0), Epoch(2), OutputId(5)), (op(1), Epoch(2), OutputId(5))]);
    assert_eq!(answers, [Apply::Applied, Apply::Fenced { fence: Epoch(3) }]);
    assert_eq!((ledger.recorded(op(0)), ledger.recorded(op(1))), (Some(OutputId(5)), None));
}
