//! Where a store's database is: a SQLite file or a PostgreSQL schema, one definition for the
//! `service` example, the live runner and every caller that opens a store by place.

use crate::{Clock, PostgresStore, SqliteStore, Store, StoreError};
use lease_core::{Bugs, TableConfig};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

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
    /// `sqlite` or `postgres`, as `--store` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Place::Sqlite { .. } => "sqlite",
            Place::Postgres { .. } => "postgres",
        }
    }

    /// A new handle on the place (one connection), the schema migrated if needed, the table's
    /// time read from `clock` ([`Clock`]).
    pub fn open(&self, config: TableConfig, bugs: Bugs, clock: Clock) -> Result<Box<dyn Store + Send>, StoreError> {
        Ok(match self {
            Place::Sqlite { path } => Box::new(SqliteStore::open_on(path, config, bugs, clock)?),
            Place::Postgres { url, schema } => Box::new(PostgresStore::open(url, Some(schema), config, bugs, clock)?),
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
}
