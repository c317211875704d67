//! Stores with planted bugs (feature `planted-bugs`): the one path by which a planted bug of
//! `lease-core` reaches a store, for the simulator, the live runner and the stores' own tests.
//! No public constructor outside this module takes bug flags, and a build without the feature
//! has no such path: a service cannot plant one by mistake.
//!
//! Each function is the constructor of the same name without `bugs`, with `bugs` planted in the
//! rules every decision of the store asks ([`lease_core::Rules`]).

use crate::{Clock, MemoryStore, Place, PostgresStore, SqliteStore, Store, StoreError};
use lease_core::{Bugs, TableConfig};
use std::path::Path;

/// [`MemoryStore::new`], with `bugs` planted.
pub fn memory(config: TableConfig, bugs: Bugs) -> Result<MemoryStore, StoreError> {
    MemoryStore::planted(config, bugs)
}

/// [`MemoryStore::unlogged`], with `bugs` planted.
pub fn memory_unlogged(config: TableConfig, bugs: Bugs) -> Result<MemoryStore, StoreError> {
    MemoryStore::planted_unlogged(config, bugs)
}

/// [`SqliteStore::open_in_memory`], with `bugs` planted.
pub fn sqlite_in_memory(config: TableConfig, bugs: Bugs) -> Result<SqliteStore, StoreError> {
    SqliteStore::planted_in_memory(config, bugs)
}

/// [`SqliteStore::open_on`], with `bugs` planted.
pub fn sqlite(path: &Path, config: TableConfig, bugs: Bugs, clock: Clock) -> Result<SqliteStore, StoreError> {
    SqliteStore::planted_on(path, config, bugs, clock)
}

/// [`PostgresStore::open`], with `bugs` planted.
pub fn postgres(
    url: &str,
    schema: Option<&str>,
    config: TableConfig,
    bugs: Bugs,
    clock: Clock,
) -> Result<PostgresStore, StoreError> {
    PostgresStore::planted(url, schema, config, bugs, clock)
}

/// [`Place::open`], with `bugs` planted.
pub fn open(place: &Place, config: TableConfig, bugs: Bugs, clock: Clock) -> Result<Box<dyn Store + Send>, StoreError> {
    place.planted(config, bugs, clock)
}
