//! A SQLite file store's writers take turns through the lock of a file beside the database
//! (`lease_store::TURN_SUFFIX`): a writer waits while another holds the turn, goes on as soon as
//! it is given back, and gives it back however its transaction ends.

mod common;

use common::TempFile;
use lease_core::{Enqueued, JobId, Span, TableConfig, Time};
use lease_store::{SqliteStore, TableStore, TURN_SUFFIX};
use std::sync::mpsc;
use std::time::Duration;

fn config() -> TableConfig {
    TableConfig { capacity: 10, lease_ttl: Span::from_ms(1_000), batch_max: 4, attempts_max: 3 }
}

/// The turn file of `file`, opened as another writer would.
fn turn_of(file: &TempFile) -> std::fs::File {
    let mut path = file.path().as_os_str().to_owned();
    path.push(TURN_SUFFIX);
    std::fs::OpenOptions::new().write(true).open(path).expect("the store made its turn file")
}

// While the turn is held elsewhere, an enqueue waits for it (still waiting after 200 ms); given
// back, the enqueue goes on and is accepted.
#[test]
fn a_writer_waits_for_the_turn_and_goes_on_once_it_is_given_back() {
    let file = TempFile::new("turn_wait");
    let store = SqliteStore::open(file.path(), config()).expect("opens");
    let held = turn_of(&file);
    held.lock().expect("takes the turn");
    let (done, answered) = mpsc::channel();
    let writer = std::thread::spawn(move || {
        let mut store = store;
        done.send(store.enqueue(Time(1), JobId(0))).expect("the test waits");
    });
    assert!(answered.recv_timeout(Duration::from_millis(200)).is_err(), "the enqueue waited for the turn");
    held.unlock().expect("gives the turn back");
    let answer = answered.recv_timeout(Duration::from_secs(30)).expect("the enqueue went on");
    assert!(matches!(answer, Ok(Enqueued::Accepted { backlog: 1 })), "{answer:?}");
    writer.join().expect("the writer ends");
}

// An operation that fails (a completion of an unknown job, rolled back) gives its turn back: a
// second handle on the file writes at once after it, and so does the first.
#[test]
fn a_failed_operation_gives_its_turn_back() {
    let file = TempFile::new("turn_error");
    let mut first = SqliteStore::open(file.path(), config()).expect("opens");
    let mut second = SqliteStore::open(file.path(), config()).expect("opens");
    let failed = first.complete(Time(1), JobId(7), lease_core::Epoch(1), lease_core::OutputId(1));
    assert!(failed.is_err(), "an unknown job's completion fails: {failed:?}");
    let turn = turn_of(&file);
    assert!(turn.try_lock().is_ok(), "the turn is free after the failure");
    turn.unlock().expect("gives it back");
    assert!(matches!(second.enqueue(Time(2), JobId(0)), Ok(Enqueued::Accepted { backlog: 1 })));
    assert!(matches!(first.enqueue(Time(3), JobId(1)), Ok(Enqueued::Accepted { backlog: 2 })));
}
