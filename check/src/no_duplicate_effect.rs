//! `always` no_duplicate_effect: at most one applied output per operation.
//!
//! The ledger records an output once; every later attempt must adopt it or be refused, and the
//! recorded output never changes. The first `effect_applied` of an operation is its output. A
//! violation is any sign that the ledger took a second one:
//!
//! - a second `effect_applied` for the operation, whatever its output or epoch: the duplicate
//!   effect this project exists to prevent;
//! - a `looked_up` that found (`found`) an output other than the first one applied, or found one
//!   when none was applied: the record was overwritten, or invented;
//! - an `effect_rejected` `already_applied` for an output other than the recorded one, or when
//!   none was recorded: a different output accepted as a repeat of the first.

use super::facts::{Applied, Facts};
use super::{Invariant, Violation};
use lease_core::{JobId, OpId, OutputId};
use lease_history::{EffectRejectReason, Entry, Event};

/// Judges one entry; see the module doc.
pub(crate) fn check(facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
    let first = |op: &OpId| facts.op(*op).and_then(|op| op.applied);
    match &entry.event {
        Event::EffectApplied { job, op, epoch, output, .. } => {
            let Some(first) = first(op) else { return Ok(()) };
            let message = format!(
                "the ledger applied {op} a second time, {output} under {epoch}, after {} under {} at line {}",
                first.output, first.epoch, first.line
            );
            Err(violation(*job, Some(first.line), line, message))
        }
        Event::LookedUp { job, op, found: Some(found), .. } => {
            same_output(*job, *op, first(op), *found, line, "a lookup found")
        }
        Event::EffectRejected { job, op, output, reason: EffectRejectReason::AlreadyApplied, .. } => {
            same_output(*job, *op, first(op), *output, line, "the ledger took as a repeat")
        }
        _ => Ok(()),
    }
}

/// The ledger names `output` as the operation's record: it must be the first one applied.
fn same_output(
    job: JobId,
    op: OpId,
    first: Option<Applied>,
    output: OutputId,
    line: usize,
    what: &str,
) -> Result<(), Violation> {
    match first {
        Some(first) if first.output == output => Ok(()),
        Some(first) => {
            let message = format!(
                "{what} {output} for {op}, but the output applied first, at line {}, is {}: a second output \
                 replaced or joined it",
                first.line, first.output
            );
            Err(violation(job, Some(first.line), line, message))
        }
        None => Err(violation(job, None, line, format!("{what} {output} for {op}, which the ledger never applied"))),
    }
}

fn violation(job: JobId, earlier: Option<usize>, line: usize, message: String) -> Violation {
    Violation::at(Invariant::NoDuplicateEffect, Some(job), &[earlier], line, message)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};
    use lease_history::EffectRejectReason;

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

    // A lookup that finds another output than the first applied is an overwrite; one that finds
    // an output never applied is an invented record. Finding the first, with a rival, is fine.
    #[test]
    fn lookup_of_another_output_fails() {
        let mut story = crash_after_effect_story();
        story.entries.truncate(STORY_LOOKED_UP - 1);
        let overwritten = story.at(1_020).looked_up(J1, E2, Some(O8), None, Some(batch(1, 0)));
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::NoDuplicateEffect, "{violation}");
        assert_eq!(violation.lines, vec![STORY_APPLIED, overwritten]);
        let mut fresh = History::new(2, 2);
        fresh.at(0).arrived(J1);
        fresh.at(10).granted(J1, E1, w(1), 1_010);
        let invented = fresh.at(20).looked_up(J1, E1, Some(O7), None, None);
        let violation = check_history(&fresh.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::NoDuplicateEffect, "{violation}");
        assert_eq!(violation.lines, vec![invented]);
        let mut rival = crash_after_effect_story();
        rival.entries.truncate(STORY_LOOKED_UP - 1);
        rival.at(1_015).rival(J1, E1, O8);
        rival.at(1_020).looked_up(J1, E2, Some(O7), Some(O8), Some(batch(1, 0)));
        assert!(check_history(&rival.entries).is_ok());
    }

    // The ledger taking a different output as a repeat of the recorded one is reported.
    #[test]
    fn different_output_accepted_as_repeat_fails() {
        let mut story = crash_after_effect_story();
        let repeat = story.at(1_100).effect_rejected(J1, E2, O8, EffectRejectReason::AlreadyApplied);
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::NoDuplicateEffect, "{violation}");
        assert_eq!(violation.lines, vec![STORY_APPLIED, repeat]);
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
