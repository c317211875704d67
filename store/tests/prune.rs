//! Retention ([`lease_store::TableStore::prune`]): terminal jobs and their lines removed after an
//! age, in bounded batches, never a line of a job kept, on SQLite (a file) and PostgreSQL (a
//! scratch schema); the in-memory store, which keeps nothing durable, refuses plainly.

mod common;

use common::{pg, TempFile};
use lease_core::{Acquired, BatchId, Enqueued, Epoch, Fencing, JobId, OpId, OutputId, Owner, ReclaimerId};
use lease_core::{Span, TableConfig, Time, WorkerId};
use lease_history::{Entry, Event};
use lease_store::{Caller, MemoryStore, Pruned, SqliteStore, Stamp, Store, StoreError, TableStore};

fn config() -> TableConfig {
    TableConfig { capacity: 8, lease_ttl: Span::from_ms(1), batch_max: 4, attempts_max: 3 }
}

fn granted(store: &mut dyn Store, at: u64, worker: u32) -> (JobId, Epoch) {
    store.set_caller(Caller { from: Some(Owner::Worker(WorkerId(worker))), batch: None });
    match store.acquire(Time(at), WorkerId(worker)).expect("acquire") {
        Acquired::Granted(grant) => (grant.lease.job, grant.lease.epoch),
        other => panic!("a grant at {at}: {other:?}"),
    }
}

fn judge(name: &str, store: &mut dyn Store) {
    let history = store.history().expect("the history reads");
    let entries = lease_history::parse_jsonl(&history).expect("the history parses");
    lease_check::check_history(&entries).unwrap_or_else(|violation| panic!("{name}: {violation}\n{history}"));
}

/// The log's lines about `job`.
fn lines_of(store: &mut dyn Store, job: JobId) -> Vec<String> {
    let lines = store.events().expect("the log reads");
    let about = |line: &String| serde_json::from_str::<lease_history::Entry>(line).unwrap().job() == Some(job);
    lines.into_iter().filter(about).collect()
}

// Proves a prune removes what ended long enough ago and nothing a kept job needs. Six jobs: job 0
// completes at 110, job 1's lease expires and a reclaimer lists it (a line about no one job),
// fences it and requeues it; job 2 completes at 1,310, job 3 is dead-lettered at 1,410; jobs 1,
// 4 and 5 wait. Pruning what ended before 1,350, one job a call, takes job 0, then job 2, then
// nothing; every line of the kept jobs is as it was, the listing of job 1 stays, and the history
// left passes every checker. Once every job has ended, a prune past them all leaves an empty log
// (the listing with them), and a pruned job's id is accepted again as new.
fn prunes(name: &str, store: &mut dyn Store) {
    for job in 0..6 {
        let _ = store.enqueue(Time(10 + 10 * job), JobId(job)).unwrap();
    }
    let (job, epoch) = granted(store, 100, 0);
    let _ = store.complete(Time(110), job, epoch, OutputId(1)).unwrap();
    let (job, _) = granted(store, 120, 1);
    assert_eq!(job, JobId(1), "{name}");
    let batch = BatchId { reclaimer: ReclaimerId(0), seq: 0 };
    store.set_caller(Caller { from: Some(Owner::Reclaimer(ReclaimerId(0))), batch: Some(batch) });
    let listed = store.expired(Time(1_200), Time(1_200)).unwrap();
    assert_eq!(listed.len(), 1, "{name}: job 1's lease is listed");
    let Fencing::Won { lease, .. } =
        store.fence(Time(1_210), JobId(1), listed[0].epoch, ReclaimerId(0), Time(1_210)).unwrap()
    else {
        panic!("{name}: the reclaimer wins the fence")
    };
    let _ = store.lookup(Time(1_215), OpId::for_job(JobId(1)), lease.epoch).unwrap();
    let _ = store.requeue(Time(1_220), JobId(1), lease.epoch).unwrap();
    let (job, epoch) = granted(store, 1_300, 2);
    let _ = store.complete(Time(1_310), job, epoch, OutputId(3)).unwrap();
    let (job, epoch) = granted(store, 1_400, 3);
    // Looked up, executed, refused for good by its dependency, as the runtime writes each.
    let (op, from) = (OpId::for_job(job), lease_history::Node::Worker(3));
    let _ = store.lookup(Time(1_401), op, epoch).unwrap();
    let lines = [
        (1_402, from, Event::Executing { job, op, epoch }),
        (
            1_405,
            lease_history::Node::Ledger,
            Event::DependencyFailed { from, job, op, epoch, after_effect: false, permanent: true },
        ),
    ];
    for (at, node, event) in lines {
        let mut line = |t_us: Time| Some(Entry { t_us: t_us.0, node, event: event.clone() }.to_json());
        let _ = store.append(Stamp::Now(Time(at)), &node.to_string(), &mut line).unwrap();
    }
    let _ = store.dead_letter(Time(1_410), job, epoch).unwrap();
    let kept = [1, 3, 4, 5].map(JobId);
    let before: Vec<Vec<String>> = kept.iter().map(|job| lines_of(store, *job)).collect();
    let pruning = |store: &mut dyn Store| store.prune(Time(1_350), 1).unwrap();
    assert_eq!(pruning(store), Pruned { jobs: 1, lines: 3 }, "{name}: job 0, arrived, granted, completed");
    assert!(store.job(JobId(0)).unwrap().is_none() && store.job(JobId(2)).unwrap().is_some(), "{name}: one a call");
    assert_eq!(pruning(store).jobs, 1, "{name}: then job 2");
    assert_eq!(pruning(store), Pruned::default(), "{name}: then nothing: job 3 ended at 1,410");
    let after: Vec<Vec<String>> = kept.iter().map(|job| lines_of(store, *job)).collect();
    assert_eq!(after, before, "{name}: every line of every kept job is as it was");
    let listing = store.events().unwrap().iter().filter(|line| line.contains(r#""kind":"listed""#)).count();
    assert_eq!(listing, 1, "{name}: the listing of job 1, which is kept, stays");
    judge(name, store);

    for worker in 4..7 {
        let at = 1_500 + 20 * u64::from(worker);
        let (job, epoch) = granted(store, at, worker);
        let _ = store.complete(Time(at + 10), job, epoch, OutputId(u64::from(worker))).unwrap();
    }
    let all = store.prune(Time(10_000), 100).unwrap();
    assert_eq!(all.jobs, 4, "{name}: every job has ended: {all:?}");
    assert_eq!(store.events().unwrap(), Vec::<String>::new(), "{name}: the listing went with the last of its jobs");
    judge(name, store);
    assert!(matches!(store.enqueue(Time(20_000), JobId(0)).unwrap(), Enqueued::Accepted { .. }), "{name}: new again");
}

#[test]
fn a_prune_removes_what_ended_and_nothing_a_kept_job_needs() {
    let file = TempFile::new("prune");
    prunes("sqlite", &mut SqliteStore::open(file.path(), config()).unwrap());
    let refused = MemoryStore::new(config()).unwrap().prune(Time(1), 1);
    assert!(matches!(refused, Err(StoreError::NotDurable)), "{refused:?}");
    let Some(scratch) = pg::scratch("prune") else { return };
    prunes("postgres", &mut scratch.open(config(), lease_core::Bugs::NONE));
}
