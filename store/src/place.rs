//! Where a store's database is: a SQLite file or a PostgreSQL schema, one definition for the
//! `service` example, the live runner and every caller that opens a store by place.

use crate::{Clock, PostgresStore, SqliteStore, Store, StoreError};
use lease_core::{Bugs, TableConfig};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// Which store: one name per kind, as every command line spells it (`--store memory`,
/// `sqlite`, `postgres`), in plans and in a history's `run` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// `lease-core`'s in-memory table and ledger ([`crate::MemoryStore`]).
    #[default]
    Memory,
    /// SQLite: the embedded default ([`crate::SqliteStore`]).
    Sqlite,
    /// PostgreSQL, for many machines ([`crate::PostgresStore`]).
    Postgres,
}

impl StoreKind {
    /// Every kind, in the order a command's help lists them.
    pub const ALL: [StoreKind; 3] = [StoreKind::Memory, StoreKind::Sqlite, StoreKind::Postgres];

    /// The name every command line and file spells.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres",
        }
    }

    /// Whether `bug` can be planted on this store: the SQL path's own bugs need SQL, and the
    /// in-memory table's batch bugs need the in-memory table.
    pub fn plants(self, bug: lease_core::Bug) -> bool {
        match self {
            StoreKind::Memory => !bug.store_only(),
            StoreKind::Sqlite | StoreKind::Postgres => !bug.batch_only(),
        }
    }

    /// Reads `text` as one of `allowed`, or says which are.
    pub fn parse_among(text: &str, allowed: &[StoreKind]) -> Result<StoreKind, String> {
        let names: Vec<&str> = allowed.iter().map(|kind| kind.name()).collect();
        allowed
            .iter()
            .copied()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| format!("{text:?} is not a store here: {}", names.join(", ")))
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for StoreKind {
    type Err = String;
    fn from_str(text: &str) -> Result<StoreKind, String> {
        StoreKind::parse_among(text, &StoreKind::ALL)
    }
}

/// Where a store's database is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Place {
    /// A SQLite file, created if missing.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// A PostgreSQL schema, created if missing.
    Postgres {
        /// The server, e.g. `postgres://postgres@127.0.0.1:5432/test`.
        url: String,
        /// The schema the tables live in.
        schema: String,
    },
}

impl Place {
    /// The place's kind.
    pub fn kind(&self) -> StoreKind {
        match self {
            Place::Sqlite { .. } => StoreKind::Sqlite,
            Place::Postgres { .. } => StoreKind::Postgres,
        }
    }

    /// `sqlite` or `postgres`, as `--store` spells it.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// A new handle on the place (one connection), the schema migrated if needed, the table's
    /// time read from `clock` ([`Clock`]).
    pub fn open(&self, config: TableConfig, clock: Clock) -> Result<Box<dyn Store + Send>, StoreError> {
        self.planted(config, Bugs::NONE, clock)
    }

    /// [`Place::open`], with `bugs` planted ([`crate::planted`]).
    pub(crate) fn planted(
        &self,
        config: TableConfig,
        bugs: Bugs,
        clock: Clock,
    ) -> Result<Box<dyn Store + Send>, StoreError> {
        Ok(match self {
            Place::Sqlite { path } => Box::new(SqliteStore::planted_on(path, config, bugs, clock)?),
            Place::Postgres { url, schema } => {
                Box::new(PostgresStore::planted(url, Some(schema), config, bugs, clock)?)
            }
        })
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Sqlite { path } => write!(f, "sqlite {}", path.display()),
            Place::Postgres { url, schema } => write!(f, "postgres {} schema {schema}", without_password(url)),
        }
    }
}

/// `url` with any password in it replaced by `***`, for printing.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let Some((user_info, host)) = rest.split_once('@') else { return url.to_string() };
    match user_info.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a place prints without its password, and round-trips through its JSON (the live
    // runner hands it to every process in the plan file).
    #[test]
    fn a_place_prints_without_its_password_and_round_trips() {
        let place = Place::Postgres { url: "postgres://u:secret@127.0.0.1/db".into(), schema: "s".into() };
        assert_eq!(place.to_string(), "postgres postgres://u:***@127.0.0.1/db schema s");
        let json = serde_json::to_string(&place).unwrap();
        assert_eq!(serde_json::from_str::<Place>(&json).unwrap(), place);
        assert_eq!(Place::Sqlite { path: "x".into() }.name(), "sqlite");
    }

    // Proves a kind reads back from its name, and a name outside the allowed ones is refused
    // with the list a command accepts.
    #[test]
    fn a_store_kind_reads_its_name_and_refuses_others_by_listing_the_allowed() {
        for kind in StoreKind::ALL {
            assert_eq!(kind.name().parse::<StoreKind>(), Ok(kind));
        }
        let world = [StoreKind::Memory, StoreKind::Sqlite];
        let refused = StoreKind::parse_among("postgres", &world).unwrap_err();
        assert!(refused.contains("memory, sqlite"), "{refused}");
        assert!("mysql".parse::<StoreKind>().is_err());
    }
}
