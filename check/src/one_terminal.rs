//! `always` one_terminal: no job reaches a terminal outcome twice.
//!
//! Each job ends exactly once: a second `terminal` entry for a job, whatever its outcome, is a
//! violation. (An idempotent repeat of a completion records no entry, so it never shows here.)

use super::facts::Facts;
use super::{outcome_name, Invariant, Violation};
use lease_history::{Entry, Event};

/// Judges one entry; see the module doc.
pub(crate) fn check(facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
    let Event::Terminal { job, outcome, .. } = &entry.event else { return Ok(()) };
    let Some(first) = facts.job(*job).and_then(|job| job.terminal) else { return Ok(()) };
    let message = format!(
        "{job} reached a second terminal outcome, {}, after {} at line {}",
        outcome_name(*outcome),
        outcome_name(first.outcome),
        first.line,
    );
    Err(Violation::at(Invariant::OneTerminal, Some(*job), &[Some(first.line)], line, message))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};

    // A job that completes once passes.
    #[test]
    fn one_completion_passes() {
        assert!(check_history(&crash_after_effect_story().entries).is_ok());
    }

    // A second terminal outcome for a completed job is reported, with both terminal lines.
    #[test]
    fn second_terminal_fails() {
        let mut story = crash_after_effect_story();
        let second = story.at(1_100).dead_lettered(J1, E2, 1, None);
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::OneTerminal);
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines, vec![STORY_TERMINAL, second]);
    }

    // Completing twice with the same output and epoch is still a second terminal outcome.
    #[test]
    fn same_completion_twice_fails() {
        let mut story = crash_after_effect_story();
        let second = story.at(1_100).completed(J1, O7, E2, None);
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::OneTerminal);
        assert_eq!(violation.lines, vec![STORY_TERMINAL, second]);
    }
}
