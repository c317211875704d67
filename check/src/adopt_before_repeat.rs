//! `always` adopt_before_repeat: no effect is executed for an operation whose output the ledger
//! already held when the executor looked it up, or should have looked it up.
//!
//! An `executing` entry for (job, op, epoch) is a violation when:
//!
//! - a `looked_up` of the op at the same epoch had returned an output (`found`): the executor
//!   should have adopted it;
//! - or no `looked_up` of the op at that epoch happened, and the ledger already held an output
//!   applied under a *different* epoch: the executor skipped the lookup (a job rescued "as new").
//!
//! A retry at the epoch that applied the output is the same execution, asking again after a lost
//! reply, and is fine, in both cases. An epoch has one holder, so an output applied under the
//! executing epoch is that holder's own; a lookup that found it was a late duplicate of the
//! holder's earlier lookup (a retried request whose first copy was answered first), whose answer
//! the holder never acted on.

use super::facts::Facts;
use super::{Invariant, Violation};
use lease_core::{Epoch, OpId, OutputId};
use lease_history::{Entry, Event};
use std::collections::BTreeMap;

/// What the lookups of one operation at one epoch returned: the first output found, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lookup {
    found: Option<(OutputId, usize)>,
}

/// Every lookup so far, by operation and epoch: the memory of this checker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lookups {
    by_op_epoch: BTreeMap<(OpId, Epoch), Lookup>,
}

impl Lookups {
    /// Judges one entry; see the module doc.
    pub(crate) fn check(&self, facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
        let Event::Executing { job, op, epoch } = &entry.event else { return Ok(()) };
        let violation = |earlier: usize, message: String| {
            Violation::at(Invariant::AdoptBeforeRepeat, Some(*job), &[Some(earlier)], line, message)
        };
        let applied = facts.op(*op).and_then(|op| op.applied);
        if applied.is_some_and(|applied| applied.epoch == *epoch) {
            return Ok(()); // A retry of this epoch's own execution.
        }
        match self.by_op_epoch.get(&(*op, *epoch)) {
            Some(Lookup { found: Some((output, found_line)) }) => {
                let message =
                    format!("{node} executed {op} under {epoch} although its lookup found {output}", node = entry.node);
                Err(violation(*found_line, message))
            }
            Some(Lookup { found: None }) => Ok(()),
            None => {
                let Some(applied) = applied else { return Ok(()) };
                let message = format!(
                    "{node} executed {op} under {epoch} without a lookup, while the ledger held {} applied under {}",
                    applied.output,
                    applied.epoch,
                    node = entry.node,
                );
                Err(violation(applied.line, message))
            }
        }
    }

    /// Remembers what a lookup returned.
    pub(crate) fn absorb(&mut self, line: usize, entry: &Entry) {
        let Event::LookedUp { op, epoch, found, .. } = &entry.event else { return };
        let lookup = self.by_op_epoch.entry((*op, *epoch)).or_insert(Lookup { found: None });
        if lookup.found.is_none() {
            lookup.found = found.map(|output| (output, line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};
    use lease_history::EffectRejectReason;

    // An output found by the reclaimer's lookup is adopted, not executed again: passes.
    #[test]
    fn adoption_passes() {
        assert!(check_history(&crash_after_effect_story().entries).is_ok());
    }

    // A worker retrying its execution at the same epoch (a lost reply) is not a repeat.
    #[test]
    fn idempotent_retry_at_same_epoch_passes() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(20).executing(w(1), J1, E1);
        history.at(30).applied(J1, E1, O7);
        history.at(300).executing(w(1), J1, E1);
        history.at(310).effect_rejected(J1, E1, O7, EffectRejectReason::AlreadyApplied);
        history.at(320).completed(J1, O7, E1, None);
        assert!(check_history(&history.entries).is_ok());
    }

    // A retried lookup whose late copy finds the epoch's own output, followed by a retried
    // execution under that epoch, is one execution asking again: passes.
    #[test]
    fn late_duplicate_lookup_of_own_output_passes() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.reclaim_j1_and_grant_it_to_w2();
        history.at(1_050).looked_up(J1, E3, None, None, None);
        history.at(1_060).executing(w(2), J1, E3);
        history.at(1_070).applied(J1, E3, O8);
        history.at(1_075).looked_up(J1, E3, Some(O8), None, None);
        history.at(1_080).executing(w(2), J1, E3);
        history.at(1_090).effect_rejected(J1, E3, O8, EffectRejectReason::AlreadyApplied);
        history.at(1_100).completed(J1, O8, E3, None);
        assert!(check_history(&history.entries).is_ok());
    }

    // A later worker that looks up, finds nothing and executes, passes.
    #[test]
    fn execution_after_empty_lookup_passes() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.reclaim_j1_and_grant_it_to_w2();
        history.at(1_050).looked_up(J1, E3, None, None, None);
        history.at(1_060).executing(w(2), J1, E3);
        history.at(1_070).applied(J1, E3, O8);
        history.at(1_080).completed(J1, O8, E3, None);
        assert!(check_history(&history.entries).is_ok());
    }

    /// w1 applies o7 but hears "failed" and requeues j1; w2 gets it under e2 on attempt 2.
    fn failed_after_effect_story() -> History {
        let mut story = History::new(2, 2);
        story.at(0).arrived(J1);
        story.at(10).granted(J1, E1, w(1), 1_010);
        story.at(20).executing(w(1), J1, E1);
        story.at(30).applied(J1, E1, O7);
        story.at(30).failed_after_effect(J1, E1);
        story.at(40).requeued(J1, E1, 1, None);
        story.at(50).granted(J1, E2, w(2), 1_050);
        story
    }

    // Executing after the same epoch's lookup found the output is reported, naming the lookup.
    #[test]
    fn execution_after_found_lookup_fails() {
        let mut story = failed_after_effect_story();
        let found = story.at(60).looked_up(J1, E2, Some(O7), None, None);
        let executing = story.at(70).executing(w(2), J1, E2);
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::AdoptBeforeRepeat);
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines, vec![found, executing]);
    }

    // A later worker that skips the lookup repeats the effect under a new epoch; reported,
    // naming the applied output.
    #[test]
    fn execution_without_lookup_over_applied_output_fails() {
        let mut story = failed_after_effect_story();
        let executing = story.at(60).executing(w(2), J1, E2);
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::AdoptBeforeRepeat);
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines, vec![5, executing]);
    }
}
