//! The store's own planted bugs, run as SQL on each database: each lets through the one stale
//! request its guard exists to refuse, and nothing else changes. (The simulator's hunt catches
//! them in a swarm: `sim/tests/store.rs`.)

mod common;

use common::pg;
use lease_core::{
    Acquired, Bug, Bugs, Completion, Epoch, Fencing, JobId, OutputId, ReclaimerId, Refusal, Renewal, Span, TableConfig,
    Time, WorkerId,
};
use lease_store::Store;

fn config() -> TableConfig {
    TableConfig { capacity: 10, lease_ttl: Span(1_000), batch_max: 2, attempts_max: 3 }
}

/// A job leased to a worker at epoch 1 whose lease expired and was fenced by a reclaimer
/// (epoch 2), then a stale completion from the worker; returns its answer.
fn stale_completion(store: &mut dyn Store) -> Completion {
    assert!(matches!(store.enqueue(Time(0), JobId(1)).expect("enqueue"), lease_core::Enqueued::Accepted { .. }));
    assert!(matches!(store.acquire(Time(10), WorkerId(0)).expect("acquire"), Acquired::Granted(_)));
    let fenced = store.fence(Time(2_000), JobId(1), Epoch(1), ReclaimerId(0), Time(2_000)).expect("fence");
    assert!(matches!(fenced, Fencing::Won { .. }), "{fenced:?}");
    store.complete(Time(2_010), JobId(1), Epoch(1), OutputId(u64::MAX)).expect("complete")
}

/// A job leased at epoch 1 (expiring at 1,010), renewed by its worker at 1,500, after expiry,
/// before any reclaimer came; returns the answer.
fn late_renewal(store: &mut dyn Store) -> Renewal {
    assert!(matches!(store.enqueue(Time(0), JobId(1)).expect("enqueue"), lease_core::Enqueued::Accepted { .. }));
    assert!(matches!(store.acquire(Time(10), WorkerId(0)).expect("acquire"), Acquired::Granted(_)));
    store.renew(Time(1_500), JobId(1), Epoch(1)).expect("renew")
}

/// The answers on `open`'s store with no bug, and with each store bug planted.
fn check(name: &str, open: &dyn Fn(Bugs) -> Box<dyn Store>) {
    let stale = stale_completion(&mut *open(Bugs::NONE));
    assert!(matches!(stale, Completion::Refused(Refusal::StaleEpoch { current: Epoch(2) })), "{name}: {stale:?}");
    let mut store = open(Bugs::plant(Some(Bug::CompleteByStateOnly)));
    let stale = stale_completion(&mut *store);
    assert!(matches!(stale, Completion::Completed(_)), "{name}: River's completion lets the stale worker in");
    assert_eq!(store.backlog().expect("backlog"), 0, "{name}: the job the bug ended left the backlog's count");
    let late = late_renewal(&mut *open(Bugs::NONE));
    assert!(matches!(late, Renewal::Refused(Refusal::Expired { .. })), "{name}: {late:?}");
    let late = late_renewal(&mut *open(Bugs::plant(Some(Bug::RenewByEpochOnly))));
    assert!(
        matches!(late, Renewal::Renewed { expires_at: Time(2_500), .. }),
        "{name}: the heartbeat revives the expired lease: {late:?}"
    );
    // Each bug leaves the other request alone.
    let late = late_renewal(&mut *open(Bugs::plant(Some(Bug::CompleteByStateOnly))));
    assert!(matches!(late, Renewal::Refused(_)), "{name}: {late:?}");
}

// Proves each store bug is a bug of the SQL statement alone: on SQLite and PostgreSQL it lets the
// stale request through, while the in-memory table, which has no such statement, refuses it.
#[test]
fn the_store_bugs_let_a_stale_request_through_on_sql_only() {
    check("sqlite", &|bugs| Box::new(lease_store::planted::sqlite_in_memory(config(), bugs).expect("open")));
    let memory = |bugs| lease_store::planted::memory(config(), bugs).expect("open");
    assert!(matches!(
        stale_completion(&mut memory(Bugs::plant(Some(Bug::CompleteByStateOnly)))),
        Completion::Refused(_)
    ));
    assert!(matches!(late_renewal(&mut memory(Bugs::plant(Some(Bug::RenewByEpochOnly)))), Renewal::Refused(_)));
    if let Some(scratch) = pg::scratch("planted") {
        // Each store starts from an empty schema (the one before is dropped with its statement).
        let scratch = std::cell::RefCell::new(scratch);
        check("postgres", &|bugs| {
            scratch.borrow_mut().reset();
            Box::new(scratch.borrow().open(config(), bugs))
        });
    }
}
