//! The database a live run shares: where it is, and a store on it, whose log every process
//! appends its own lines to.
//!
//! The history of a live run is the store's event log ([`lease_store::TableStore::events`]), on
//! the database's clock ([`Clock::Database`]): in time order, ties in commit order, each line
//! stamped once its transaction holds every lock its decision needs. The lines no store call
//! writes go into the same log through [`lease_store::TableStore::append`], stamped and ordered
//! as the store's own: a worker's `executing`, `adopted` and `abandoned` and a reclaimer's
//! `batch_stopped` and `gave_up` from the runtime (`lease_runtime::Client::line`, the runtime's
//! client on a handle of [`open`]); the dependency's `dependency_failed` and the fault log here ([`Lines`]).
//! A worker's `executing` is written before the runtime starts its handler, hence stamped before
//! the stub's ledger write for that call.

use lease_core::{Bugs, TableConfig, Time};
use lease_history::{Entry, Event, Node};
use lease_store::{Clock, Place, Stamp, Store, StoreError};

/// A store handle any process of the run can use.
pub type Handle = Box<dyn Store + Send>;

/// Opens a store on the run's database (migrating it if needed), on the database's clock.
pub fn open(place: &Place, config: TableConfig, bugs: Bugs) -> Result<Handle, StoreError> {
    lease_store::planted::open(place, config, bugs, Clock::Database)
}

/// Drops the run's PostgreSQL schema (nothing for SQLite: the file stays in the run's
/// directory).
pub fn drop_schema(place: &Place) -> Result<(), StoreError> {
    if let Place::Postgres { url, schema } = place {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))?;
    }
    Ok(())
}

/// The host's clock in microseconds since the Unix epoch: the table's clock on SQLite, and every
/// process's local clock (PostgreSQL runs on this machine: loopback only).
#[allow(clippy::disallowed_methods, clippy::disallowed_types)] // A live run is wall-clock by definition.
pub fn host_now() -> Time {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("the clock is past 1970");
    Time(since.as_micros() as u64)
}

/// Appending a run's own lines to a store's log, in its order (see the module doc).
pub trait Lines {
    /// The table's clock now: the host's for SQLite, the server's for PostgreSQL.
    fn now(&mut self) -> Result<Time, StoreError>;
    /// Appends `event` of `node`, stamped with the table's clock in its turn; returns the stamp.
    fn line(&mut self, node: Node, event: Event) -> Result<u64, StoreError>;
    /// Appends `event` of `node` stamped `t_us`, a time read earlier on this machine's clock (the
    /// database's too: it is on loopback): the orchestrator's fault lines, stamped when the signal
    /// was sent, written by a thread that may wait for a paused process's lock.
    fn line_at(&mut self, node: Node, event: Event, t_us: u64) -> Result<(), StoreError>;
}

impl Lines for Handle {
    fn now(&mut self) -> Result<Time, StoreError> {
        let mut seen = Time::ZERO;
        self.append(Stamp::Now(host_now()), "world", &mut |stamp| {
            seen = stamp;
            None
        })?;
        Ok(seen)
    }

    fn line(&mut self, node: Node, event: Event) -> Result<u64, StoreError> {
        let mut event = Some(event);
        let mut text = |stamp: Time| event.take().map(|event| Entry { t_us: stamp.0, node, event }.to_json());
        let stamp = self.append(Stamp::Now(host_now()), &node.to_string(), &mut text)?;
        Ok(stamp.expect("an unconditional line is written").0)
    }

    fn line_at(&mut self, node: Node, event: Event, t_us: u64) -> Result<(), StoreError> {
        let mut event = Some(event);
        let name = node.to_string();
        let mut text = |stamp: Time| event.take().map(|event| Entry { t_us: stamp.0, node, event }.to_json());
        self.append(Stamp::At(Time(t_us)), &name, &mut text)?;
        Ok(())
    }
}
