//! `eventually` liveness: after the faults heal, every accepted job reaches a terminal outcome.
//!
//! Checked once, when the runner decides the healed world had time enough to converge: every
//! `arrived` job must have a `terminal` entry by then, so the backlog has drained.

use super::facts::Facts;
use super::{Invariant, Violation};
use lease_core::JobId;
use std::fmt::Write;

/// How many unfinished jobs a liveness message names.
const NAMED_MAX: usize = 5;

/// Checks that no accepted job is unfinished at `now_us`.
pub(crate) fn check(facts: &Facts, now_us: u64) -> Result<(), Violation> {
    if facts.backlog() == 0 {
        return Ok(());
    }
    let mut unfinished = facts
        .jobs()
        .filter(|(_, job)| job.terminal.is_none())
        .filter_map(|(id, job)| job.arrived_line.map(|line| (*id, line)));
    let named = unfinished.by_ref().take(NAMED_MAX).collect::<Vec<(JobId, usize)>>();
    let count = named.len() + unfinished.count();
    assert_eq!(count, facts.backlog(), "the backlog counts exactly the unfinished accepted jobs");
    let mut message = format!("{count} accepted job(s) had no terminal outcome at t={now_us}us:");
    for (job, line) in &named {
        write!(message, " {job} (arrived at line {line})").expect("writing to a String");
    }
    if count > named.len() {
        write!(message, " and {} more", count - named.len()).expect("writing to a String");
    }
    let mut lines = named.iter().map(|(_, line)| *line).collect::<Vec<_>>();
    lines.sort_unstable();
    let job = named.first().map(|(job, _)| *job);
    Err(Violation { invariant: Invariant::Liveness, job, message, lines })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Checkers, Invariant};
    use lease_core::JobId;

    // A healed history whose every job ended passes.
    #[test]
    fn every_job_ended_passes() {
        let mut story = crash_after_effect_story();
        story.at(5_000).faults_healed();
        assert!(check_history(&story.entries).is_ok());
    }

    // Unfinished jobs are counted, and the first five are named with their arrival lines.
    #[test]
    fn unfinished_jobs_are_reported() {
        let mut history = History::new(2, 10);
        let mut arrivals = Vec::new();
        for job in 1..=7 {
            arrivals.push(history.at(0).arrived(JobId(job)));
        }
        history.at(10).granted(JobId(1), E1, w(1), 1_010);
        history.at(15).executing(w(1), JobId(1), E1);
        history.at(20).applied(JobId(1), E1, O7);
        history.at(30).completed(JobId(1), O7, E1, None);
        let mut checkers = Checkers::new();
        for (index, entry) in history.entries.iter().enumerate() {
            checkers.observe(index + 1, entry).unwrap();
        }
        assert_eq!(checkers.unfinished(), 6);
        let violation = checkers.check_liveness(9_000).unwrap_err();
        assert_eq!(violation.invariant, Invariant::Liveness);
        assert_eq!(violation.job, Some(JobId(2)));
        assert_eq!(violation.lines, arrivals[1..6].to_vec());
        assert!(violation.message.starts_with("6 accepted job(s) had no terminal outcome at t=9000us:"));
        assert!(violation.message.contains("j2 (arrived at line 3)"));
        assert!(violation.message.contains("j6"));
        assert!(!violation.message.contains("j7"));
        assert!(violation.message.ends_with("and 1 more"));
    }

    // check_history checks liveness only once the history says the faults healed.
    #[test]
    fn liveness_waits_for_faults_healed() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        assert!(check_history(&history.entries).is_ok());
        history.at(5_000).faults_healed();
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::Liveness);
        assert_eq!(violation.lines, vec![2]);
    }
}
