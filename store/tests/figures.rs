//! The table's figures ([`lease_store::TableStore::figures`]), the gauges a dashboard shows: its
//! jobs by state, and when the longest-waiting queued job entered the queue. The same calls on
//! memory, SQLite (a file) and PostgreSQL (a scratch schema) give the same figures.

mod common;

use common::{pg, TempFile};
use lease_core::{Acquired, Epoch, JobId, OutputId, Span, TableConfig, Time, WorkerId};
use lease_store::{Figures, MemoryStore, SqliteStore, Store};

fn config() -> TableConfig {
    TableConfig { capacity: 8, lease_ttl: Span::from_ms(1_000), batch_max: 4, attempts_max: 3 }
}

fn granted(store: &mut dyn Store, at: u64) -> (JobId, Epoch) {
    match store.acquire(Time(at), WorkerId(0)).expect("acquire") {
        Acquired::Granted(grant) => (grant.lease.job, grant.lease.epoch),
        other => panic!("a grant at {at}: {other:?}"),
    }
}

fn figures(queued: u64, leased: u64, completed: u64, dead_lettered: u64, oldest: Option<u64>) -> Figures {
    Figures { queued, leased, completed, dead_lettered, quarantined: 0, oldest_queued_at: oldest.map(Time) }
}

// Proves the figures follow the jobs: four jobs enqueued at 10, 20, 30, 40 µs. Job 0 is granted
// and completed; job 1 granted and requeued at 65 (to the back: its wait starts again); job 2
// granted at 70 and released at 75 (to the head, its grant undone: its wait goes on from 30);
// granted again and dead-lettered; job 3 granted last. At each step the counts by state and the
// oldest entry into the queue are what those rules say. Fails if a requeue keeps the old time, a
// release resets it, or a state is counted under another.
fn follow(name: &str, store: &mut dyn Store) {
    for (job, at) in [(0, 10), (1, 20), (2, 30), (3, 40)] {
        let _ = store.enqueue(Time(at), JobId(job)).unwrap();
    }
    assert_eq!(store.figures().unwrap(), figures(4, 0, 0, 0, Some(10)), "{name}: four queued");
    let (job, epoch) = granted(store, 50);
    assert_eq!(store.figures().unwrap(), figures(3, 1, 0, 0, Some(20)), "{name}: one leased");
    let _ = store.complete(Time(55), job, epoch, OutputId(7)).unwrap();
    let (job, epoch) = granted(store, 60);
    let _ = store.requeue(Time(65), job, epoch).unwrap();
    assert_eq!(store.figures().unwrap(), figures(3, 0, 1, 0, Some(30)), "{name}: requeued to the back at 65");
    let (job, epoch) = granted(store, 70);
    assert_eq!(job, JobId(2), "{name}");
    let _ = store.release(Time(75), job, epoch).unwrap();
    assert_eq!(store.figures().unwrap(), figures(3, 0, 1, 0, Some(30)), "{name}: released, still waiting from 30");
    let (job, epoch) = granted(store, 80);
    assert_eq!(job, JobId(2), "{name}: back at the head");
    let _ = store.dead_letter(Time(85), job, epoch).unwrap();
    assert_eq!(store.figures().unwrap(), figures(2, 0, 1, 1, Some(40)), "{name}: one dead-lettered");
    let (job, _) = granted(store, 90);
    assert_eq!(job, JobId(3), "{name}");
    assert_eq!(store.figures().unwrap(), figures(1, 1, 1, 1, Some(65)), "{name}: only the requeued job waits");
}

#[test]
fn the_figures_follow_the_jobs_on_every_store() {
    follow("memory", &mut MemoryStore::new(config()).unwrap());
    let file = TempFile::new("figures");
    follow("sqlite", &mut SqliteStore::open(file.path(), config()).unwrap());
    let Some(scratch) = pg::scratch("figures") else { return };
    follow("postgres", &mut scratch.open(config(), lease_core::Bugs::NONE));
}
