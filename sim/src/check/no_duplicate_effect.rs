//! `always` no_duplicate_effect: at most one applied output per operation.
//!
//! The ledger records an output once; every later attempt must adopt it or be refused. A second
//! `effect_applied` for the same operation, whatever its output or epoch, is the duplicate effect
//! this project exists to prevent.

use super::facts::Facts;
use super::{Invariant, Violation};
use crate::history::{Entry, Event};

/// Judges one entry; see the module doc.
pub(crate) fn check(facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
    let Event::EffectApplied { job, op, epoch, output, .. } = &entry.event else { return Ok(()) };
    let Some(first) = facts.op(*op).and_then(|op| op.applied) else { return Ok(()) };
    let message = format!(
        "the ledger applied {op} a second time, {output} under {epoch}, after {} under {} at line {}",
        first.output, first.epoch, first.line
    );
    Err(Violation::at(Invariant::NoDuplicateEffect, Some(*job), &[Some(first.line)], line, message))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};
    use crate::history::EffectRejectReason;

    // One applied output, adopted rather than repeated, passes.
    #[test]
    fn one_effect_passes() {
        assert!(check_history(&crash_after_effect_story().entries).is_ok());
    }

    // The ledger refusing a repeat (already_applied) is not a second effect.
    #[test]
    fn refused_repeat_passes() {
        let mut story = crash_after_effect_story();
        story.at(1_100).effect_rejected(J1, E2, O7, EffectRejectReason::AlreadyApplied);
        story.at(1_100).effect_rejected(J1, E2, O8, EffectRejectReason::Conflict);
        assert!(check_history(&story.entries).is_ok());
    }

    // A second applied effect for the operation is reported, with both lines.
    #[test]
    fn second_effect_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(20).executing(w(1), J1, E1);
        let first = history.at(30).applied(J1, E1, O7);
        history.at(40).executing(w(1), J1, E1);
        let second = history.at(50).applied(J1, E1, O8);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::NoDuplicateEffect);
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines, vec![first, second]);
    }
}
