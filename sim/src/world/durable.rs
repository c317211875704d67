//! The world's durable table and ledger, on the store the run chose (`--store`).
//!
//! - `memory`: `lease-core`'s `LeaseTable` and `EffectLedger` ([`lease_store::MemoryStore`],
//!   unlogged: the world writes its own history).
//! - `sqlite`: [`lease_store::SqliteStore`] on a private in-memory SQLite database, so that every
//!   decision of the table and the ledger is a transaction of the store's SQL, read back, decided
//!   by the same rules and written with its compare-and-set. The store also keeps its own event log:
//!   at the end of a run it must be the table's and the ledger's lines of the world's history,
//!   byte for byte (`Durable::log`).
//!
//! Either lives in the world's state, not in a node, so it survives restarts of the table and
//! ledger nodes as durable state does. Nothing in SQLite reads a clock or draws randomness (see
//! `lease_store`'s crate documentation): a seed gives the same history on either store.

use lease_core::{BatchId, Bugs, JobId, Lease, Owner, ReclaimerId, TableConfig, Time, WorkerId};
use lease_history::{Entry, Event, Node};
use lease_store::{Caller, Store, StoreError};

pub use lease_store::StoreKind;

/// The stores a world runs on: in memory, or lease-store's SQL on an in-memory SQLite database.
pub const WORLD_STORES: [StoreKind; 2] = [StoreKind::Memory, StoreKind::Sqlite];

/// `--store` of a simulated world: `memory` or `sqlite` (PostgreSQL is for live runs).
pub fn parse_world_store(text: &str) -> Result<StoreKind, String> {
    StoreKind::parse_among(text, &WORLD_STORES)
        .map_err(|why| format!("{why} (PostgreSQL is for live runs: lease-live)"))
}

/// Why `bug` cannot be planted on `store`, if it cannot.
pub fn refuses(store: StoreKind, bug: Option<lease_core::Bug>) -> Option<String> {
    let bug = bug.filter(|&bug| !store.plants(bug))?;
    Some(match bug.batch_only() {
        true => format!("planted bug {bug} lives in the in-memory table's batches: run it with --store memory"),
        false => format!("planted bug {bug} lives in lease-store's SQL statements: run it with --store sqlite"),
    })
}

/// The durable table and ledger of one world.
pub(crate) struct Durable {
    store: Box<dyn Store + Send>,
}

impl Durable {
    /// An empty table and ledger on `kind`.
    pub fn open(kind: StoreKind, config: TableConfig, bugs: Bugs) -> Result<Durable, StoreError> {
        let store: Box<dyn Store + Send> = match kind {
            StoreKind::Memory => Box::new(lease_store::planted::memory_unlogged(config, bugs)?),
            StoreKind::Sqlite => Box::new(lease_store::planted::sqlite_in_memory(config, bugs)?),
            // The command line and plan validation refuse it: a world is one process, seeded.
            StoreKind::Postgres => panic!("harness bug: a simulated world on PostgreSQL"),
        };
        Ok(Durable { store })
    }

    /// The store, its next calls made by `from`, in reclaim batch `batch` if any: the requester
    /// the store's own log names.
    pub fn by(&mut self, from: Node, batch: Option<BatchId>) -> &mut dyn Store {
        let from = match from {
            Node::Worker(n) => Some(Owner::Worker(WorkerId(n))),
            Node::Reclaimer(n) => Some(Owner::Reclaimer(ReclaimerId(n))),
            Node::Table | Node::Ledger | Node::Arrivals | Node::World => None,
        };
        self.store.set_caller(Caller { from, batch });
        &mut *self.store
    }

    /// The store, for a call that names its requester itself ([`lease_store::serve_worker`],
    /// [`lease_store::serve_reclaimer`]).
    pub fn store(&mut self) -> &mut dyn Store {
        &mut *self.store
    }

    /// The job's live lease, if leased.
    pub fn lease(&mut self, job: JobId) -> Option<Lease> {
        self.store.job(job).unwrap_or_else(|error| panic!("store: {error}"))?.lease()
    }

    /// The job's worker grants so far, if known.
    pub fn attempts(&mut self, job: JobId) -> Option<u32> {
        Some(self.store.job(job).unwrap_or_else(|error| panic!("store: {error}"))?.attempts)
    }

    /// The earliest live expiry.
    pub fn poll_timeout(&mut self) -> Option<Time> {
        self.store.poll_timeout().unwrap_or_else(|error| panic!("store: {error}"))
    }

    /// The store's own event log, in commit order (empty on `memory`, which keeps none).
    pub fn log(&mut self) -> Vec<String> {
        self.store.events().unwrap_or_else(|error| panic!("store: {error}"))
    }
}

/// Where a store's event log departs from the world's history, if it does. The log must hold
/// exactly the history's table and ledger lines (the dependency's failures aside), in order and
/// byte for byte: every such line is the answer to one store call, and the store writes it in the
/// call's own transaction. A history that stopped at a finding (`whole` false) stops recording
/// while the world winds down, so there the log need only begin with those lines.
pub(crate) fn differs(history: &[Entry], log: &[String], whole: bool) -> Option<String> {
    let ours: Vec<&Entry> = history.iter().filter(|entry| answered_by_store(entry)).collect();
    for (n, (entry, line)) in ours.iter().zip(log).enumerate() {
        let expected = entry.to_json();
        if &expected != line {
            return Some(format!("its line {} is {line}, where the history has {expected}", n + 1));
        }
    }
    let short = log.len() < ours.len();
    (short || (whole && log.len() != ours.len()))
        .then(|| format!("it holds {} lines, the history {} table and ledger lines", log.len(), ours.len()))
}

/// Whether the line is a store's answer that the store writes down: the table's and the ledger's
/// lines, but for the dependency's failures, which the ledger node writes without asking the
/// store, and for an empty poll or scan, which no store writes ([`answers::is_written`]).
fn answered_by_store(entry: &Entry) -> bool {
    matches!(entry.node, Node::Table | Node::Ledger)
        && !matches!(entry.event, Event::DependencyFailed { .. })
        && lease_history::answers::is_written(&entry.event)
}

/// A store's answer, or a harness crash: the world's calls are well-formed, so an error is a
/// store's fault (or a planted bug's), reported with the seed like any panic in a world.
pub(crate) fn answered<A>(result: Result<A, StoreError>) -> A {
    result.unwrap_or_else(|error| panic!("the table's clock only moves forward, and jobs are known: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::JobId;

    fn arrived(t_us: u64, job: u64) -> Entry {
        Entry { t_us, node: Node::Table, event: Event::Arrived { job: JobId(job), backlog: 1 } }
    }

    // Proves the check of a store's log has teeth: a changed line, a lost line and an extra line
    // are each reported; a world's own lines (a crash, a dependency failure) are not expected in
    // the log; and a history that stopped at a finding needs only to be the log's beginning.
    #[test]
    fn a_store_log_that_is_not_the_history_is_reported() {
        let crash = Entry { t_us: 5, node: Node::World, event: Event::DependencyRestored {} };
        let failed = Entry {
            t_us: 6,
            node: Node::Ledger,
            event: Event::DependencyFailed {
                from: Node::Worker(0),
                job: JobId(1),
                op: lease_core::OpId { job: JobId(1), step: 0 },
                epoch: lease_core::Epoch(1),
                after_effect: false,
                permanent: false,
            },
        };
        let history = vec![arrived(1, 1), crash, failed, arrived(7, 2)];
        let log: Vec<String> = [arrived(1, 1), arrived(7, 2)].iter().map(Entry::to_json).collect();
        assert_eq!(differs(&history, &log, true), None);
        let mut changed = log.clone();
        changed[1] = arrived(7, 3).to_json();
        assert!(differs(&history, &changed, true).is_some_and(|why| why.contains("its line 2")));
        assert!(differs(&history, &log[..1], true).is_some_and(|why| why.contains("holds 1 lines")));
        assert!(differs(&history, &log[..1], false).is_some(), "a lost line is lost whatever the verdict");
        let mut extra = log.clone();
        extra.push(arrived(9, 4).to_json());
        assert!(differs(&history, &extra, true).is_some());
        assert_eq!(differs(&history, &extra, false), None, "the world winds down after a finding");
    }
}
