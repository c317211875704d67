//! `always` bounded_queue: the queue never holds more than its capacity.
//!
//! The backlog is the number of accepted jobs (`arrived`) without a `terminal` entry yet. After
//! each `arrived` it must not exceed the run line's `capacity`, and the entry's own `backlog`
//! field must equal it: the table and the history agree on what the queue holds. A history pruned
//! of ended jobs (its run line's `pruned_before_us`) no longer holds the pruned jobs, which were
//! unfinished once: there the backlog an arrival reports must be at least the history's count
//! and at most the capacity.

use super::facts::Facts;
use super::{Invariant, Violation};
use lease_history::{Entry, Event};

/// Judges one entry; see the module doc.
pub(crate) fn check(facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
    let Event::Arrived { job, backlog } = &entry.event else { return Ok(()) };
    let counted = facts.backlog_after_arrival(*job);
    let limits = facts.limits();
    if counted > limits.capacity {
        let message =
            format!("accepting {job} made {counted} unfinished jobs, over the capacity of {}", limits.capacity);
        return Err(Violation::at(Invariant::BoundedQueue, Some(*job), &[limits.run_line], line, message));
    }
    if limits.pruned && (counted..=limits.capacity).contains(backlog) {
        return Ok(()); // Jobs pruned since may have been unfinished then.
    }
    if *backlog != counted {
        let message = format!("accepting {job} reported a backlog of {backlog}, but the history counts {counted}");
        return Err(Violation::at(Invariant::BoundedQueue, Some(*job), &[], line, message));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};

    // A full queue rejects; once a job ends there is room again: passes.
    #[test]
    fn queue_at_capacity_passes() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(0).arrived(J2);
        history.at(0).rejected(J3);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(20).applied(J1, E1, O7);
        history.at(30).completed(J1, O7, E1, None);
        assert_eq!(history.at(40).arrived(J3), 8);
        assert!(check_history(&history.entries).is_ok());
    }

    // A third accepted job in a queue of capacity 2 is reported, with the run line's limit.
    #[test]
    fn arrival_over_capacity_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(0).arrived(J2);
        let third = history.at(0).arrived(J3);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedQueue);
        assert_eq!(violation.job, Some(J3));
        assert_eq!(violation.lines, vec![1, third]);
    }

    // A pruned history no longer holds jobs that were unfinished when a kept one arrived: a
    // reported backlog above the history's count passes there, up to the capacity; one below
    // the count, or above the capacity, is still reported (the same stories fail unpruned).
    #[test]
    fn a_pruned_history_bounds_the_backlog() {
        for (reported, holds) in [(3, true), (4, true), (1, false), (5, false)] {
            for pruned in [true, false] {
                let mut history = History::new(2, 4);
                if pruned {
                    history.pruned(1_000);
                }
                history.at(0).arrived(J1);
                let second = history.at(0).arrived_with_backlog(J2, reported);
                let judged = check_history(&history.entries);
                if holds && pruned {
                    assert!(judged.is_ok(), "backlog {reported}, pruned: {judged:?}");
                    continue;
                }
                let violation = judged.expect_err("reported");
                assert_eq!((violation.invariant, violation.lines.last()), (Invariant::BoundedQueue, Some(&second)));
            }
        }
    }

    // An arrival whose backlog field disagrees with the history's count is reported.
    #[test]
    fn wrong_backlog_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        let second = history.at(0).arrived_with_backlog(J2, 1);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedQueue);
        assert_eq!(violation.lines, vec![second]);
    }
}
