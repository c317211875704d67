//! A job's payload: the bytes enqueued with it, kept with its row in the same transaction, read
//! back as they were (any bytes, empty included), kept once for a job enqueued twice (the job id
//! is the caller's idempotency key), never kept for a job refused, and refused past
//! `PAYLOAD_MAX` with a clear error, no job and no history line; many read at once, each job's
//! own in the order named. On memory, SQLite (a file,
//! reopened, and one migrated from schema version 2) and PostgreSQL (a scratch schema).

mod common;

use common::{pg, TempFile};
use lease_core::{Bugs, Enqueued, JobId, Span, TableConfig, Time};
use lease_store::{MemoryStore, SqliteStore, Store, StoreError, TableStore, PAYLOAD_MAX};

fn config() -> TableConfig {
    TableConfig { capacity: 3, lease_ttl: Span(1_000), batch_max: 2, attempts_max: 2 }
}

/// Every bytes value a payload may hold: text, binary with a zero byte, one byte, the most.
fn payloads() -> Vec<Vec<u8>> {
    vec![b"doc-1.md".to_vec(), vec![0, 255, 0, 7], vec![42], vec![9; PAYLOAD_MAX]]
}

fn keeps_payloads(name: &str, store: &mut dyn Store) {
    for (n, payload) in payloads().into_iter().enumerate().take(2) {
        let job = JobId(n as u64);
        let accepted = store.enqueue_with(Time(1), job, &payload).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(matches!(accepted, Enqueued::Accepted { .. }), "{name}: {accepted:?}");
        assert_eq!(store.payload(job).unwrap(), payload, "{name}: {job}'s payload reads back as enqueued");
    }
    // The same job again, another payload: accepted once, the first payload kept.
    let again = store.enqueue_with(Time(2), JobId(0), b"another").unwrap();
    assert_eq!(again, Enqueued::Duplicate, "{name}");
    assert_eq!(store.payload(JobId(0)).unwrap(), b"doc-1.md", "{name}: the first payload is kept");
    // No payload: empty. Unknown: empty.
    assert!(matches!(store.enqueue(Time(3), JobId(2)).unwrap(), Enqueued::Accepted { .. }), "{name}");
    assert_eq!(store.payload(JobId(2)).unwrap(), b"", "{name}");
    assert_eq!(store.payload(JobId(99)).unwrap(), b"", "{name}");
    // Many at once, in the order named: one twice, one without a payload, one unknown.
    let named = [JobId(1), JobId(99), JobId(0), JobId(2), JobId(1)];
    let read = store.payloads(&named).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (first, second) = (b"doc-1.md".to_vec(), payloads()[1].clone());
    assert_eq!(read, [second.clone(), vec![], first, vec![], second], "{name}: each job's own, in the order named");
    assert_eq!(store.payloads(&[]).unwrap(), Vec::<Vec<u8>>::new(), "{name}: none named, none read");
    // At capacity: refused, and its payload not kept.
    let refused = store.enqueue_with(Time(4), JobId(3), b"late").unwrap();
    assert!(matches!(refused, Enqueued::Rejected(_)), "{name}: {refused:?}");
    assert_eq!(store.payload(JobId(3)).unwrap(), b"", "{name}: a refused job keeps no payload");
    // Past the limit: a clear error, nothing written, not even a line.
    let lines = store.events().unwrap().len();
    let error = store.enqueue_with(Time(5), JobId(4), &vec![1; PAYLOAD_MAX + 1]).expect_err("too large");
    assert!(
        matches!(error, StoreError::PayloadTooLarge { job: JobId(4), len, max: PAYLOAD_MAX } if len == PAYLOAD_MAX + 1)
    );
    assert!(error.to_string().contains("not enqueued"), "{name}: {error}");
    assert_eq!(store.job(JobId(4)).unwrap(), None, "{name}: no job");
    assert_eq!(store.events().unwrap().len(), lines, "{name}: no history line");
}

#[test]
fn memory_keeps_each_jobs_payload() {
    keeps_payloads("memory", &mut MemoryStore::new(config()).unwrap());
}

#[test]
fn sqlite_keeps_each_jobs_payload_across_a_reopen() {
    let file = TempFile::new("payload");
    let mut store = SqliteStore::open(file.path(), config()).unwrap();
    keeps_payloads("sqlite", &mut store);
    drop(store);
    let mut store = SqliteStore::open(file.path(), config()).unwrap();
    assert_eq!(store.payload(JobId(1)).unwrap(), payloads()[1], "the payload outlives the handle");
    let big = TempFile::new("payload_max");
    let mut store = SqliteStore::open(big.path(), config()).unwrap();
    let most = payloads().pop().unwrap();
    assert!(matches!(store.enqueue_with(Time(1), JobId(5), &most).unwrap(), Enqueued::Accepted { .. }));
    assert_eq!(store.payload(JobId(5)).unwrap(), most, "PAYLOAD_MAX bytes are carried");
}

#[test]
fn a_sqlite_file_at_schema_version_2_migrates_and_keeps_its_jobs() {
    let file = TempFile::new("payload_v2");
    let mut store = SqliteStore::open(file.path(), config()).unwrap();
    assert!(matches!(store.enqueue(Time(1), JobId(7)).unwrap(), Enqueued::Accepted { .. }));
    drop(store);
    // As a build of version 2 left it: no payload table, no queue-entry times, no backlog count.
    let conn = rusqlite::Connection::open(file.path()).unwrap();
    conn.execute_batch(
        "DROP TABLE lease_backlog; CREATE INDEX lease_jobs_live ON lease_jobs (job) WHERE state <> 'terminal';
         DROP TABLE lease_payloads; DROP INDEX lease_events_job; DROP INDEX lease_jobs_ended;
         ALTER TABLE lease_jobs DROP COLUMN queued_at_us; ALTER TABLE lease_jobs DROP COLUMN ended_at_us;
         ALTER TABLE lease_events DROP COLUMN job; ALTER TABLE lease_schema DROP COLUMN pruned_before_us;
         UPDATE lease_schema SET version = 2",
    )
    .unwrap();
    drop(conn);
    let mut store = SqliteStore::open(file.path(), config()).expect("version 2 migrates");
    assert!(store.job(JobId(7)).unwrap().is_some(), "the old job is kept");
    assert_eq!(store.payload(JobId(7)).unwrap(), b"", "an old job has no payload");
    let figures = store.figures().unwrap();
    assert_eq!((figures.queued, figures.oldest_queued_at), (1, None), "nor a time it entered the queue");
    assert_eq!(store.backlog().unwrap(), 1, "version 5's count starts at the old job");
    assert!(matches!(store.enqueue_with(Time(2), JobId(8), b"new").unwrap(), Enqueued::Accepted { backlog: 2 }));
    assert_eq!(store.payload(JobId(8)).unwrap(), b"new");
    let figures = store.figures().unwrap();
    assert_eq!((figures.queued, figures.oldest_queued_at), (2, Some(Time(2))), "a new job has one");
    drop(store);
    // Version 4 gave the old job's line its job, as it migrated: a prune can find it.
    let conn = rusqlite::Connection::open(file.path()).unwrap();
    let named: i64 = conn.query_row("SELECT COUNT(*) FROM lease_events WHERE job = 7", [], |row| row.get(0)).unwrap();
    assert_eq!(named, 1, "the old job's arrival line is named");
}

#[test]
fn postgres_keeps_each_jobs_payload() {
    let Some(scratch) = pg::scratch("payload") else { return };
    keeps_payloads("postgres", &mut scratch.open(config(), Bugs::NONE));
    let mut store = scratch.open(config(), Bugs::NONE);
    assert_eq!(store.payload(JobId(1)).unwrap(), payloads()[1], "another handle reads it");
    let most = payloads().pop().unwrap();
    let mut roomy = scratch.open(TableConfig { capacity: 10, ..config() }, Bugs::NONE);
    assert!(matches!(roomy.enqueue_with(Time(9), JobId(5), &most).unwrap(), Enqueued::Accepted { .. }));
    assert_eq!(store.payload(JobId(5)).unwrap(), most, "PAYLOAD_MAX bytes are carried");
}
