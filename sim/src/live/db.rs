//! The database a live run shares: where it is, a store on it, and the log every process appends
//! its own lines to.
//!
//! The history of a live run is the store's event log read in commit order
//! ([`lease_store::TableStore::events`]). The lines no store call writes (a worker's `executing`,
//! `adopted` and `abandoned`, a reclaimer's `batch_stopped`, the dependency's `dependency_failed`,
//! and the fault log) are appended to the same log, each in a transaction of its own that takes the
//! log's next sequence number as the store's own transactions do. So one commit order places
//! every line: a worker's `executing` commits before it calls the dependency, hence before the
//! ledger's answer to that call, and no merge by timestamps can misplace two lines whose clocks
//! were read before they waited on the same lock.

use crate::history::{Entry, Event, Node};
use lease_core::{Bugs, TableConfig, Time};
use lease_store::{schema, Clock, PostgresStore, SqliteStore, Store, StoreError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the run's database is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Db {
    /// A SQLite file: the table's clock is the host's (every process is on this machine).
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// A PostgreSQL schema of the run's own: the table's clock is the server's
    /// (`Clock::Database`, `clock_timestamp()`).
    Postgres {
        /// The server, e.g. `postgres://postgres@127.0.0.1:5432/test`.
        url: String,
        /// The run's schema (created, and dropped at the end unless kept).
        schema: String,
    },
}

/// How long a log append waits for another writer of the SQLite file (as the store does).
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A store handle any process of the run can use.
pub type Handle = Box<dyn Store + Send>;

impl Db {
    /// The store's name, as `--store` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Db::Sqlite { .. } => "sqlite",
            Db::Postgres { .. } => "postgres",
        }
    }

    /// Opens a store on the database (migrating it if needed).
    pub fn open(&self, config: TableConfig, bugs: Bugs) -> Result<Handle, StoreError> {
        Ok(match self {
            Db::Sqlite { path } => Box::new(SqliteStore::open(path, config, bugs)?),
            Db::Postgres { url, schema } => {
                Box::new(PostgresStore::open(url, Some(schema), config, bugs, Clock::Database)?)
            }
        })
    }

    /// Opens the log, for lines no store call writes. Open a store first: it creates the tables.
    pub fn log(&self) -> Result<Log, StoreError> {
        Ok(match self {
            Db::Sqlite { path } => {
                let conn = rusqlite::Connection::open(path)?;
                conn.busy_timeout(BUSY_TIMEOUT)?;
                Log::Sqlite(conn)
            }
            Db::Postgres { url, schema } => {
                let mut client = postgres::Client::connect(url, postgres::NoTls)?;
                client.batch_execute(&format!("SET search_path TO {schema}"))?;
                Log::Postgres(client)
            }
        })
    }

    /// Drops the run's PostgreSQL schema (nothing for SQLite: the file stays in the run's
    /// directory).
    pub fn drop_schema(&self) -> Result<(), StoreError> {
        if let Db::Postgres { url, schema } = self {
            let mut client = postgres::Client::connect(url, postgres::NoTls)?;
            client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))?;
        }
        Ok(())
    }
}

/// The host's clock in microseconds since the Unix epoch: the table's clock on SQLite, and every
/// process's local clock (PostgreSQL runs on this machine: loopback only).
#[allow(clippy::disallowed_methods, clippy::disallowed_types)] // A live run is wall-clock by definition.
pub fn host_now() -> Time {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("the clock is past 1970");
    Time(since.as_micros() as u64)
}

/// A connection for appending lines to the run's log.
pub enum Log {
    /// On the SQLite file.
    Sqlite(rusqlite::Connection),
    /// On the PostgreSQL schema.
    Postgres(postgres::Client),
}

impl Log {
    /// The table's clock now: the host's for SQLite, the server's for PostgreSQL.
    pub fn now(&mut self) -> Result<Time, StoreError> {
        match self {
            Log::Sqlite(_) => Ok(host_now()),
            Log::Postgres(client) => Ok(Time(client.query_one(schema::SELECT_CLOCK, &[])?.get::<_, i64>(0) as u64)),
        }
    }

    /// Appends `event` of `node`, stamped with the table's clock as it commits; returns the stamp.
    pub fn append(&mut self, node: Node, event: Event) -> Result<u64, StoreError> {
        Ok(self.append_if(node, |_| Some(event))?.expect("an unconditional line is written"))
    }

    /// Appends `event` of `node` stamped `t_us`, a time read earlier on this machine's clock (the
    /// database's too: it is on loopback): the orchestrator's fault lines, stamped when the signal
    /// was sent, written by a thread that may wait for a paused process's lock.
    pub fn append_at(&mut self, node: Node, event: Event, t_us: u64) -> Result<(), StoreError> {
        let text = Entry { t_us, node, event }.to_json();
        match self {
            Log::Sqlite(conn) => {
                let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let seq: i64 = tx.query_row(schema::NEXT_SEQ, [], |row| row.get(0))?;
                let insert = schema::for_sqlite(schema::INSERT_EVENT);
                tx.execute(&insert, rusqlite::params![seq, t_us as i64, node.to_string(), text])?;
                tx.commit()?;
            }
            Log::Postgres(client) => {
                let mut tx = client.transaction()?;
                let seq: i64 = tx.query_one(schema::NEXT_SEQ, &[])?.get(0);
                tx.execute(schema::INSERT_EVENT, &[&seq, &(t_us as i64), &node.to_string(), &text])?;
                tx.commit()?;
            }
        }
        Ok(())
    }

    /// Appends the line `line` makes of the stamp, inside the log's lock, or nothing (the
    /// transaction rolled back) when it makes none: a worker that finds its lease estimate run out
    /// by the time it may write `executing` self-fences instead of starting the effect.
    pub fn append_if(
        &mut self,
        node: Node,
        line: impl FnOnce(u64) -> Option<Event>,
    ) -> Result<Option<u64>, StoreError> {
        match self {
            Log::Sqlite(conn) => {
                let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let t_us = host_now().0;
                let Some(event) = line(t_us) else { return Ok(None) };
                let seq: i64 = tx.query_row(schema::NEXT_SEQ, [], |row| row.get(0))?;
                let text = Entry { t_us, node, event }.to_json();
                let insert = schema::for_sqlite(schema::INSERT_EVENT);
                tx.execute(&insert, rusqlite::params![seq, t_us as i64, node.to_string(), text])?;
                tx.commit()?;
                Ok(Some(t_us))
            }
            Log::Postgres(client) => {
                let mut tx = client.transaction()?;
                // The head first: the stamp is read once this transaction is next in the log.
                let seq: i64 = tx.query_one(schema::NEXT_SEQ, &[])?.get(0);
                let t_us = tx.query_one(schema::SELECT_CLOCK, &[])?.get::<_, i64>(0) as u64;
                let Some(event) = line(t_us) else { return Ok(None) };
                let text = Entry { t_us, node, event }.to_json();
                tx.execute(schema::INSERT_EVENT, &[&seq, &(t_us as i64), &node.to_string(), &text])?;
                tx.commit()?;
                Ok(Some(t_us))
            }
        }
    }
}
