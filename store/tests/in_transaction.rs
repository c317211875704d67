//! Enqueue inside a transaction the caller holds on its own PostgreSQL connection
//! ([`lease_store::enqueue_in`], and many jobs at once with [`lease_store::enqueue_batch_in`]):
//! the job and its history line commit with the caller's own writes, or neither does. Each test works in a scratch schema on `LEASE_PG_URL` (a missing
//! server is said plainly, and fails under `LEASE_PG_REQUIRED=1`), from an async caller on its
//! own runtime, as a service's `#[tokio::main]` is.

mod common;

use common::pg;
use lease_core::{Acquired, Enqueued, JobId, Span, TableConfig, Time, WorkerId};
use lease_store::tokio_postgres::{self, NoTls};
use lease_store::{enqueue_batch_in, enqueue_in, MemoryStore, StoreError, TableStore, PAYLOAD_MAX};

fn config() -> TableConfig {
    TableConfig { capacity: 3, lease_ttl: Span::from_ms(1_000), batch_max: 4, attempts_max: 3 }
}

/// Runs `test` on a runtime of its own, with a connection of the caller's own to the server.
fn as_a_service<T>(test: impl AsyncFnOnce(&mut tokio_postgres::Client) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (mut client, connection) = tokio_postgres::connect(&pg::url(), NoTls).await.expect("connect");
        tokio::spawn(connection);
        test(&mut client).await
    })
}

/// The schema's history lines that name `job`.
fn lines_of(store: &mut dyn TableStore, job: JobId) -> Vec<String> {
    let needle = format!(r#""job":{}"#, job.0);
    store.events().expect("the log reads").into_iter().filter(|line| line.contains(&needle)).collect()
}

// Proves a job is enqueued with the caller's own data or not at all: in one transaction the
// caller writes a document row and enqueues its job (the document id as the idempotency key,
// with a payload); committed, both are there, and the job's `enqueued` line and payload with it.
// In another, the same is rolled back: no document, no job, no history line. A third enqueue of
// the committed key is answered as a duplicate and keeps the first payload; past the capacity a
// job is refused, inside the caller's transaction too. The history passes every checker.
#[test]
fn an_enqueue_in_the_callers_transaction_commits_or_rolls_back_with_it() {
    let Some(scratch) = pg::scratch("in_transaction") else { return };
    let schema = scratch.name.clone();
    let mut store = scratch.open(config(), lease_core::Bugs::NONE); // migrates the schema
    let documents = format!("{schema}.documents");
    as_a_service(async |client| {
        client.batch_execute(&format!("CREATE TABLE {documents} (id BIGINT PRIMARY KEY, body TEXT)")).await.unwrap();
        let tx = client.transaction().await.unwrap();
        tx.execute(&format!("INSERT INTO {documents} VALUES (7, 'kept')"), &[]).await.unwrap();
        let answer = enqueue_in(&tx, &schema, config(), JobId(7), b"render document 7").await.expect("enqueue");
        assert!(matches!(answer, Enqueued::Accepted { .. }), "{answer:?}");
        tx.commit().await.unwrap();

        let tx = client.transaction().await.unwrap();
        tx.execute(&format!("INSERT INTO {documents} VALUES (8, 'rolled back')"), &[]).await.unwrap();
        let answer = enqueue_in(&tx, &schema, config(), JobId(8), b"render document 8").await.expect("enqueue");
        assert!(matches!(answer, Enqueued::Accepted { .. }), "{answer:?}");
        tx.rollback().await.unwrap();

        let tx = client.transaction().await.unwrap();
        let again = enqueue_in(&tx, &schema, config(), JobId(7), b"another payload").await.expect("enqueue again");
        assert_eq!(again, Enqueued::Duplicate, "a known key is accepted once");
        tx.commit().await.unwrap();
        let rows = client.query(&format!("SELECT id FROM {documents}"), &[]).await.unwrap();
        assert_eq!(rows.iter().map(|row| row.get::<_, i64>(0)).collect::<Vec<_>>(), [7], "the caller's own rows");
    });
    assert!(store.job(JobId(7)).unwrap().is_some(), "the committed job is there");
    assert_eq!(store.payload(JobId(7)).unwrap(), b"render document 7", "with its first payload");
    assert!(store.job(JobId(8)).unwrap().is_none(), "the rolled-back job is not");
    assert_eq!(lines_of(&mut store, JobId(8)), Vec::<String>::new(), "nor any line of it");
    let kept = lines_of(&mut store, JobId(7));
    assert_eq!(kept.len(), 2, "job 7's accepted and duplicate enqueues: {kept:?}");
    // A third job's place in the queue comes after the first: the queue's order holds across
    // both ways in.
    let _ = store.enqueue(lease_core::Time(0), JobId(9)).unwrap();
    as_a_service(async |client| {
        let tx = client.transaction().await.unwrap();
        let _ = enqueue_in(&tx, &schema, config(), JobId(10), b"").await.expect("enqueue");
        let full = enqueue_in(&tx, &schema, config(), JobId(11), b"").await.expect("enqueue");
        assert!(matches!(full, Enqueued::Rejected(_)), "at capacity 3: {full:?}");
        tx.commit().await.unwrap();
    });
    let history = store.history().expect("the history reads");
    let entries = lease_history::parse_jsonl(&history).expect("the history parses");
    lease_check::check_history(&entries).unwrap_or_else(|violation| panic!("{violation}\n{history}"));
}

// Proves what cannot work is refused plainly: a transaction at REPEATABLE READ (its snapshot
// would judge the capacity on stale rows), a schema no store has migrated, and a schema name
// that is not a plain identifier. Nothing is enqueued by any of them.
#[test]
fn an_enqueue_in_a_transaction_that_cannot_work_is_refused() {
    let Some(scratch) = pg::scratch("in_transaction_refused") else { return };
    let Some(bare) = pg::scratch("in_transaction_bare") else { return };
    let schema = scratch.name.clone();
    let mut store = scratch.open(config(), lease_core::Bugs::NONE);
    as_a_service(async |client| {
        let tx = client.build_transaction().isolation_level(tokio_postgres::IsolationLevel::RepeatableRead);
        let tx = tx.start().await.unwrap();
        let refused = enqueue_in(&tx, &schema, config(), JobId(1), b"").await;
        assert!(matches!(&refused, Err(StoreError::Isolation(level)) if level == "repeatable read"), "{refused:?}");
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("READ COMMITTED"), "says what works: {message}");
        drop(tx);
        let tx = client.transaction().await.unwrap();
        let path = |row: tokio_postgres::Row| row.get::<_, String>(0);
        let before = path(tx.query_one("SHOW search_path", &[]).await.unwrap());
        let refused = enqueue_in(&tx, &bare.name, config(), JobId(1), b"").await;
        let after = path(tx.query_one("SHOW search_path", &[]).await.unwrap());
        assert_eq!(after, before, "the caller's search path is restored after a refusal");
        assert!(matches!(&refused, Err(StoreError::NotMigrated { found: None, .. })), "{refused:?}");
        assert!(refused.unwrap_err().to_string().contains("open a store there first"), "says what to do");
        drop(tx);
        let tx = client.transaction().await.unwrap();
        let refused = enqueue_in(&tx, "x; DROP TABLE y", config(), JobId(1), b"").await;
        assert!(matches!(refused, Err(StoreError::SchemaName(_))), "{refused:?}");
    });
    assert!(store.job(JobId(1)).unwrap().is_none(), "nothing was enqueued");
}

// Proves a batch enqueued in the caller's transaction is judged job by job, as the same batch on
// any store, and commits or rolls back with the caller's rows. Rolled back, a batch of two leaves
// no job and no line. Committed with four documents, the batch [1, 2, 1 again, 3] is answered
// exactly as the in-memory store answers it (accepted, accepted, duplicate, accepted: the first
// payload kept), and a second batch in the same transaction meets the capacity of 3 (job 4
// refused, with its line). The accepted jobs are served in the batch's order, and the history
// passes every checker.
#[test]
fn a_batch_enqueued_in_the_callers_transaction_is_judged_job_by_job_and_commits_with_it() {
    let Some(scratch) = pg::scratch("in_transaction_batch") else { return };
    let schema = scratch.name.clone();
    let mut store = scratch.open(config(), lease_core::Bugs::NONE);
    let documents = format!("{schema}.documents");
    let batch: [(JobId, &[u8]); 4] =
        [(JobId(1), b"document 1"), (JobId(2), b"document 2"), (JobId(1), b"document 1 again"), (JobId(3), b"")];
    let mut memory = MemoryStore::new(config()).unwrap();
    let owned: Vec<(JobId, Vec<u8>)> = batch.iter().map(|&(job, payload)| (job, payload.to_vec())).collect();
    let expected = memory.enqueue_batch(Time(1), &owned).unwrap();
    assert!(matches!(expected[2], Enqueued::Duplicate), "the same rules: {expected:?}");
    as_a_service(async |client| {
        client.batch_execute(&format!("CREATE TABLE {documents} (id BIGINT PRIMARY KEY)")).await.unwrap();
        let tx = client.transaction().await.unwrap();
        tx.execute(&format!("INSERT INTO {documents} VALUES (8), (9)"), &[]).await.unwrap();
        let answers = enqueue_batch_in(&tx, &schema, config(), &[(JobId(8), b"x"), (JobId(9), b"y")]).await.unwrap();
        assert!(answers.iter().all(|answer| matches!(answer, Enqueued::Accepted { .. })), "{answers:?}");
        tx.rollback().await.unwrap();

        let tx = client.transaction().await.unwrap();
        tx.execute(&format!("INSERT INTO {documents} VALUES (1), (2), (3), (4)"), &[]).await.unwrap();
        let answers = enqueue_batch_in(&tx, &schema, config(), &batch).await.expect("enqueue the batch");
        assert_eq!(answers, expected, "judged as the same batch on the in-memory store");
        let full = enqueue_batch_in(&tx, &schema, config(), &[(JobId(4), b"document 4")]).await.unwrap();
        assert!(matches!(full[..], [Enqueued::Rejected(_)]), "at capacity 3: {full:?}");
        tx.commit().await.unwrap();
    });
    for job in [8, 9, 4] {
        assert!(store.job(JobId(job)).unwrap().is_none(), "job {job} is not there");
    }
    assert_eq!(lines_of(&mut store, JobId(8)), Vec::<String>::new(), "nor any line of the rolled-back batch");
    assert_eq!(lines_of(&mut store, JobId(4)).len(), 1, "the refused job's line");
    assert_eq!(lines_of(&mut store, JobId(1)).len(), 2, "job 1's acceptance and its duplicate");
    assert_eq!(store.payload(JobId(1)).unwrap(), b"document 1", "the first payload kept");
    let served: Vec<u64> = (0..3)
        .map(|n| match store.acquire(Time(10 + n), WorkerId(1)).unwrap() {
            Acquired::Granted(grant) => grant.lease.job.0,
            other => panic!("a queued job: {other:?}"),
        })
        .collect();
    assert_eq!(served, [1, 2, 3], "served in the batch's order");
    let history = store.history().expect("the history reads");
    let entries = lease_history::parse_jsonl(&history).expect("the history parses");
    lease_check::check_history(&entries).unwrap_or_else(|violation| panic!("{violation}\n{history}"));
}

// Proves a batch that cannot be taken whole is refused before anything is read or written, and
// the caller's transaction goes on: an empty batch, one past batch_max (4), and a payload past
// PAYLOAD_MAX after a good job. The caller's own row then commits; no job and no line does.
#[test]
fn a_batch_in_the_callers_transaction_that_cannot_be_taken_is_refused_whole() {
    let Some(scratch) = pg::scratch("in_transaction_batch_refused") else { return };
    let schema = scratch.name.clone();
    let mut store = scratch.open(config(), lease_core::Bugs::NONE);
    let documents = format!("{schema}.documents");
    as_a_service(async |client| {
        client.batch_execute(&format!("CREATE TABLE {documents} (id BIGINT PRIMARY KEY)")).await.unwrap();
        let tx = client.transaction().await.unwrap();
        let none: [(JobId, &[u8]); 0] = [];
        let refused = enqueue_batch_in(&tx, &schema, config(), &none).await;
        assert!(
            matches!(refused, Err(StoreError::Table(lease_core::TableError::BatchSize { asked: 0, max: 4 }))),
            "{refused:?}"
        );
        let five: Vec<(JobId, Vec<u8>)> = (1..=5).map(|job| (JobId(job), Vec::new())).collect();
        let refused = enqueue_batch_in(&tx, &schema, config(), &five).await;
        assert!(
            matches!(refused, Err(StoreError::Table(lease_core::TableError::BatchSize { asked: 5, max: 4 }))),
            "{refused:?}"
        );
        let large = vec![0u8; PAYLOAD_MAX + 1];
        let refused = enqueue_batch_in(&tx, &schema, config(), &[(JobId(1), Vec::new()), (JobId(2), large)]).await;
        assert!(matches!(refused, Err(StoreError::PayloadTooLarge { job: JobId(2), .. })), "{refused:?}");
        tx.execute(&format!("INSERT INTO {documents} VALUES (1)"), &[]).await.expect("the transaction goes on");
        tx.commit().await.unwrap();
        let rows = client.query(&format!("SELECT id FROM {documents}"), &[]).await.unwrap();
        assert_eq!(rows.len(), 1, "the caller's own row committed");
    });
    for job in 1..=5 {
        assert!(store.job(JobId(job)).unwrap().is_none(), "job {job} was not enqueued");
        assert_eq!(lines_of(&mut store, JobId(job)), Vec::<String>::new(), "nor logged");
    }
}
