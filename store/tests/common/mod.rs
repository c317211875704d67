//! What the store tests share: scratch files for SQLite, and scratch schemas on PostgreSQL.
#![allow(dead_code)] // Each test file uses its own part.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(0);

fn unique(stem: &str) -> String {
    format!("{stem}_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A database file of its own in the temporary directory, removed (with its WAL files) on drop.
pub struct TempFile(PathBuf);

impl TempFile {
    /// A fresh path; nothing is created yet.
    pub fn new(stem: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("{}.sqlite", unique(stem))))
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", lease_store::TURN_SUFFIX] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Says something on the terminal even when the test harness captures output: a test that did
/// not run must say so plainly.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

pub mod pg {
    use super::{say, unique};
    use lease_core::{Bugs, TableConfig};
    use lease_store::{Clock, PostgresStore};
    use postgres::{Client, NoTls};

    /// The server the tests use: `LEASE_PG_URL`, or the local one.
    pub fn url() -> String {
        std::env::var("LEASE_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
    }

    /// Whether a missing server fails the test (`LEASE_PG_REQUIRED=1`, as CI sets it).
    pub fn required() -> bool {
        std::env::var("LEASE_PG_REQUIRED").is_ok_and(|value| value == "1")
    }

    /// A schema of one test's own, dropped (with everything in it) when this is dropped.
    pub struct Scratch {
        /// The schema's name.
        pub name: String,
        admin: Client,
    }

    /// A scratch schema for `test`, or `None` after saying plainly that the test did not run
    /// because no server answers (a failure under `LEASE_PG_REQUIRED=1`).
    pub fn scratch(test: &str) -> Option<Scratch> {
        let url = url();
        let mut admin = match Client::connect(&url, NoTls) {
            Ok(client) => client,
            Err(error) if !required() => {
                say(&format!("{test} on PostgreSQL: NOT RUN: no server answers at {url} ({error}); set LEASE_PG_URL"));
                return None;
            }
            Err(error) => panic!("{test}: no PostgreSQL server answers at {url} ({error}), and LEASE_PG_REQUIRED=1"),
        };
        let name = unique(&format!("lease_test_{test}"));
        admin.batch_execute(&format!("CREATE SCHEMA {name}")).expect("create the scratch schema");
        Some(Scratch { name, admin })
    }

    impl Scratch {
        /// A store handle in this schema (migrated on first open). Its commits do not wait for
        /// the disk (`synchronous_commit=off`): these tests are about atomicity and isolation,
        /// which that setting leaves as they are, not about surviving a power cut.
        pub fn open(&self, config: TableConfig, bugs: Bugs) -> PostgresStore {
            open_in(&self.name, config, bugs)
        }

        /// Empties the schema, as new: the next open migrates it again.
        pub fn reset(&mut self) {
            let name = &self.name;
            self.admin
                .batch_execute(&format!("DROP SCHEMA {name} CASCADE; CREATE SCHEMA {name}"))
                .expect("reset the scratch schema");
        }

        /// The first column of the one row `sql` answers, as text, asked as the administrator.
        pub fn query_one(&mut self, sql: &str) -> String {
            self.admin.query_one(sql, &[]).expect("admin query").get(0)
        }

        /// Runs SQL as the administrator (for tests that corrupt or inspect a schema).
        pub fn execute(&mut self, sql: &str) {
            self.admin.batch_execute(sql).expect("admin SQL");
        }
    }

    /// A store handle in schema `name` (see [`Scratch::open`]).
    pub fn open_in(name: &str, config: TableConfig, bugs: Bugs) -> PostgresStore {
        open_on(name, config, bugs, Clock::Caller)
    }

    /// [`open_in`], on `clock`.
    pub fn open_on(name: &str, config: TableConfig, bugs: Bugs, clock: Clock) -> PostgresStore {
        let url = url();
        let separator = if url.contains('?') { '&' } else { '?' };
        let url = format!("{url}{separator}options=-csynchronous_commit%3Doff");
        lease_store::planted::postgres(&url, Some(name), config, bugs, clock).expect("open the store")
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = self.admin.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name));
        }
    }
}
