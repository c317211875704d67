//! `always` consistency: a completed job's output is the output the ledger holds for it.
//!
//! The ledger's view comes from `effect_applied` entries. A violation is:
//!
//! - a `terminal` completed with output X for job J, while no operation of J has X applied: the
//!   ledger holds another output, or none at all (a completion nobody produced);
//! - an `effect_applied` of an operation of J, with an output other than X, after J completed with
//!   X.
//!
//! A job's operations are those whose `OpId.job` is J; the protocol uses one (`OpId::for_job`).

use super::facts::{Applied, Facts};
use super::{Invariant, Violation};
use lease_core::{JobId, OpId, OutputId};
use lease_history::{Entry, Event, OutcomeKind};

/// Judges one entry; see the module doc.
pub(crate) fn check(facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
    match &entry.event {
        Event::Terminal { job, outcome: OutcomeKind::Completed, output, .. } => completion(facts, line, *job, *output),
        Event::EffectApplied { job, op, output, .. } => effect(facts, line, *job, *op, *output),
        _ => Ok(()),
    }
}

fn completion(facts: &Facts, line: usize, job: JobId, output: Option<OutputId>) -> Result<(), Violation> {
    let violation = |earlier: Option<usize>, message: String| {
        Violation::at(Invariant::Consistency, Some(job), &[earlier], line, message)
    };
    let Some(output) = output else {
        return Err(violation(None, format!("{job} completed without an output")));
    };
    let mut other: Option<(&OpId, &Applied)> = None;
    for (op, applied) in facts.applied_for(job) {
        if applied.output == output {
            return Ok(());
        }
        other.get_or_insert((op, applied));
    }
    let Some((op, applied)) = other else {
        return Err(violation(None, format!("{job} completed with {output}, but the ledger holds no output for it")));
    };
    let message = format!("{job} completed with {output}, but the ledger holds {} for {op}", applied.output);
    Err(violation(Some(applied.line), message))
}

fn effect(facts: &Facts, line: usize, job: JobId, op: OpId, output: OutputId) -> Result<(), Violation> {
    let Some(ended) = facts.job(op.job).and_then(|job| job.terminal) else { return Ok(()) };
    let Some(completed) = ended.output.filter(|_| ended.outcome == OutcomeKind::Completed) else { return Ok(()) };
    if completed == output {
        return Ok(());
    }
    let message = format!("the ledger applied {output} for {op} after {} completed with {completed}", op.job);
    Err(Violation::at(Invariant::Consistency, Some(job), &[Some(ended.line)], line, message))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};
    use lease_core::OpId;

    // A completion with the adopted output, which the ledger holds, passes.
    #[test]
    fn completion_with_ledger_output_passes() {
        assert!(check_history(&crash_after_effect_story().entries).is_ok());
    }

    // Completing with an output other than the ledger's is reported, naming the applied line.
    #[test]
    fn completion_with_other_output_fails() {
        let mut story = crash_after_effect_story();
        story.entries.truncate(STORY_LOOKED_UP);
        let completed = story.at(1_030).completed(J1, O8, E2, Some(batch(1, 0)));
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::Consistency);
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines, vec![STORY_APPLIED, completed]);
    }

    // Completing when the ledger never applied anything for the job is reported.
    #[test]
    fn completion_without_effect_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        let completed = history.at(20).completed(J1, O7, E1, None);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::Consistency);
        assert_eq!(violation.lines, vec![completed]);
    }

    // An output applied for another operation of a job that completed differently is reported.
    #[test]
    fn effect_after_completion_with_other_output_fails() {
        let mut story = crash_after_effect_story();
        let second_step = OpId { job: J1, step: 1 };
        let applied = story.at(1_100).applied_to(second_step, E2, O9);
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::Consistency);
        assert_eq!(violation.lines, vec![STORY_TERMINAL, applied]);
    }
}
