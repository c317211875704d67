//! A store's log is a history that lease-check reads as it is: `TableStore::history` puts the
//! table's limits in a `run` line before the log, so the verdict needs no simulator, no run line
//! written by hand and no flag. On a SQLite file with the host's clock (times in microseconds
//! since 1970), after the `service` example's run (lease-runtime's) with crashes after the effect and a lost answer.

// The store tests' scratch files and schemas, shared rather than copied.
#[path = "../../store/tests/common/mod.rs"]
mod common;

use common::TempFile;
use lease_check::report::Report;
use lease_core::Span;
use lease_history::{parse_jsonl, Event};
use lease_runtime::service::{self, Options};
use lease_store::Place;
use std::time::Duration;

fn options() -> Options {
    Options {
        jobs: 30,
        workers: 3,
        reclaimers: 1,
        lease_ttl: Span::from_ms(300),
        effect_latency: Span::from_ms(2),
        crash_after_effect: 2,
        // A lost answer makes the worker requeue: the service writes the dependency's
        // `dependency_failed` line for it, without which lease-check calls the requeue unexplained.
        lost_reply: 1,
        batch_max: 4,
        attempts_max: 3,
        time_limit: Duration::from_secs(20),
    }
}

// Proves the exported log passes every invariant, and the report lays its windows out from the
// first line, in bounded memory, though every time is about 1.7e15 us (the host's clock): the
// report's own times start at 0 and its windows number a few dozen, not billions. How: run the
// service on a SQLite file, export `history()`, check it and report on it.
#[test]
fn a_store_log_is_a_history_lease_check_judges_as_it_is() {
    let file = TempFile::new("history");
    let backend = Place::Sqlite { path: file.path().to_path_buf() };
    let tokio = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let summary = tokio.block_on(service::run(&backend, &options())).expect("the service runs");
    assert!(summary.safety.is_empty() && summary.liveness.is_empty(), "{summary}");
    let mut store = lease_store::open(&backend, options().table()).expect("reopen the store");
    let text = store.history().expect("the log reads");
    let entries = parse_jsonl(&text).unwrap_or_else(|error| panic!("the store's history does not parse: {error}"));
    let Event::Run { capacity, batch_max, lease_ttl_us, attempts_max, .. } = &entries[0].event else {
        panic!("line 1 is not a run line: {:?}", entries[0]);
    };
    let table = options().table();
    assert_eq!((*capacity, *batch_max, *lease_ttl_us, *attempts_max), (table.capacity, 4, 300_000, 3));
    assert!(entries[0].t_us > 1_000_000_000_000_000, "the host clock's microseconds since 1970: {}", entries[0].t_us);
    assert_eq!(entries[0].t_us, entries[1].t_us, "the run line is stamped with the first line's time");
    let coverage = lease_check::check_history(&entries).unwrap_or_else(|violation| panic!("{violation}"));
    // Each injected crash is on the history, and its output was adopted: the checker sees the
    // story a reader does, crash included.
    assert_eq!(coverage.get("worker_crashed"), 2, "{coverage:?}");
    assert_eq!(coverage.get("crash_after_effect_adopted"), 2, "{coverage:?}");
    let ended = entries.iter().filter(|entry| matches!(entry.event, Event::Terminal { .. })).count();
    assert_eq!(ended, 30, "every job ends once on the log");
    let report = Report::of(&entries, None).expect("the report reads the store's history");
    assert_eq!(report.origin_us, entries[0].t_us);
    assert!(report.end_us < 60_000_000, "times count from the first line: end {}us", report.end_us);
    assert!(!report.windows.is_empty() && report.windows.len() < 1_000, "{} windows", report.windows.len());
    assert_eq!(report.windows[0].from_us, 0);
}
