//! What a service needs to open a store on the host: a handle whose table clock is the one a
//! service uses ([`open`]), and the host's clock in microseconds, made monotonic ([`HostClock`]).
//! Nothing in a simulated world calls either: they read the host's clocks.

use crate::{Clock, Place, Store, StoreError};
use lease_core::{TableConfig, Time};
use std::time::{Instant, SystemTime};

/// A new handle on `place` for a service (one connection), the schema migrated if needed. On
/// SQLite the table's clock is the host's, which the service passes in ([`HostClock`]); on
/// PostgreSQL it is the server's ([`Clock::Database`]), so services on many machines share one.
pub fn open(place: &Place, config: TableConfig) -> Result<Box<dyn Store + Send>, StoreError> {
    let clock = match place {
        Place::Sqlite { .. } => Clock::Caller,
        Place::Postgres { .. } => Clock::Database,
    };
    place.open(config, clock)
}

/// The host's clock in microseconds since the Unix epoch, made monotonic: the system clock is
/// read once, at the start, and a monotonic clock counts from there. A system clock stepped back
/// by the operating system therefore never makes a store refuse a `now` as earlier than the last.
#[derive(Debug, Clone, Copy)]
pub struct HostClock {
    start: Instant,
    start_unix_us: u64,
}

impl HostClock {
    /// Starts the clock now.
    pub fn start() -> HostClock {
        let since_epoch = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let start_unix_us = u64::try_from(since_epoch.as_micros()).expect("the year is before 294,000");
        HostClock { start: Instant::now(), start_unix_us }
    }

    /// The time now.
    pub fn now(&self) -> Time {
        let elapsed_us = u64::try_from(self.start.elapsed().as_micros()).expect("a run lasts less than 584,000 years");
        Time(self.start_unix_us + elapsed_us)
    }
}
