//! `always` bounded_batch: no reclaim batch takes more than `batch_max` leases, and after a
//! conflict the batch touches nothing more.
//!
//! A violation is:
//!
//! - a `reclaimed` entry that is the `batch_max + 1`-th of its batch;
//! - after a `looked_up` that found a `rival` (conflicting outputs) for batch B under the job's
//!   current epoch, or a `batch_stopped` for B: any later `reclaimed`, `requeued` or `terminal`
//!   carrying B, except the `quarantined` terminal of the conflicting job;
//! - a `terminal` completed for a job whose lookup showed a conflict, with an output other than
//!   the one the ledger recorded first: that is the overwrite quarantine exists to prevent.
//!
//! Two refinements keep late duplicates from raising false alarms. A request retried after a
//! timeout may reach the ledger twice, and the second copy's answer is ignored by its sender:
//!
//! - a conflicting lookup under an epoch that is no longer the job's current one comes from a
//!   sender that no longer holds the job and may never have seen the answer; it does not stop
//!   the batch;
//! - a holder whose own effect was recorded and whose duplicate call was refused as a conflict
//!   completes with the recorded output, correctly, even though a late copy of its lookup showed
//!   the conflict; only completing with another output is the overwrite.

use super::facts::Facts;
use super::{outcome_name, Invariant, Violation};
use crate::history::{Entry, Event, OutcomeKind};
use lease_core::{BatchId, JobId, OutputId};
use std::collections::BTreeMap;

/// Where a batch met its conflict: the `looked_up` or `batch_stopped` line, and the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stop {
    line: usize,
    job: JobId,
}

/// A job's first conflicting lookup: its line, and the output the ledger recorded first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Conflict {
    line: usize,
    recorded: Option<OutputId>,
}

/// The conflicts seen so far: the memory of this checker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conflicts {
    /// Batches that met a conflict, with the first sign of it.
    stopped: BTreeMap<BatchId, Stop>,
    /// Jobs whose lookup showed a conflict.
    jobs: BTreeMap<JobId, Conflict>,
}

impl Conflicts {
    /// Judges one entry; see the module doc.
    pub(crate) fn check(&self, facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
        match &entry.event {
            Event::Reclaimed { job, batch, .. } => {
                self.after_stop(line, *job, *batch, "reclaimed")?;
                self.size(facts, line, *job, *batch)
            }
            Event::Requeued { job, batch: Some(batch), .. } => self.after_stop(line, *job, *batch, "requeued"),
            Event::Terminal { job, outcome, output, batch, .. } => {
                if let Some(batch) = batch.filter(|batch| !self.is_the_quarantine(*batch, *job, *outcome)) {
                    self.after_stop(line, *job, batch, outcome_name(*outcome))?;
                }
                match outcome {
                    OutcomeKind::Completed => self.overwrite(line, *job, *output),
                    OutcomeKind::DeadLettered | OutcomeKind::Quarantined => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// Remembers conflicts and stopped batches, against the facts before the entry.
    pub(crate) fn absorb(&mut self, facts: &Facts, line: usize, entry: &Entry) {
        match &entry.event {
            Event::LookedUp { job, epoch, found, rival: Some(_), batch, .. } => {
                self.jobs.entry(*job).or_insert(Conflict { line, recorded: *found });
                let current = facts.job(*job).is_some_and(|facts| facts.epoch == *epoch);
                if let Some(batch) = batch.filter(|_| current) {
                    self.stopped.entry(batch).or_insert(Stop { line, job: *job });
                }
            }
            Event::BatchStopped { batch, job, .. } => {
                self.stopped.entry(*batch).or_insert(Stop { line, job: *job });
            }
            _ => {}
        }
    }

    fn is_the_quarantine(&self, batch: BatchId, job: JobId, outcome: OutcomeKind) -> bool {
        outcome == OutcomeKind::Quarantined && self.stopped.get(&batch).is_some_and(|stop| stop.job == job)
    }

    fn after_stop(&self, line: usize, job: JobId, batch: BatchId, what: &str) -> Result<(), Violation> {
        let Some(stop) = self.stopped.get(&batch) else { return Ok(()) };
        let message = format!(
            "batch r{}#{} {what} {job} after it met the conflict on {} at line {}",
            batch.reclaimer.0, batch.seq, stop.job, stop.line
        );
        Err(Violation::at(Invariant::BoundedBatch, Some(job), &[Some(stop.line)], line, message))
    }

    fn size(&self, facts: &Facts, line: usize, job: JobId, batch: BatchId) -> Result<(), Violation> {
        let batch_max = facts.limits().batch_max;
        let Some(so_far) = facts.batch(batch) else { return Ok(()) };
        if so_far.reclaimed < batch_max {
            return Ok(());
        }
        let message = format!(
            "batch r{}#{} reclaimed {job} as lease {} of a batch_max of {batch_max}",
            batch.reclaimer.0,
            batch.seq,
            so_far.reclaimed + 1,
        );
        Err(Violation::at(Invariant::BoundedBatch, Some(job), &[Some(so_far.first_line)], line, message))
    }

    fn overwrite(&self, line: usize, job: JobId, output: Option<OutputId>) -> Result<(), Violation> {
        let Some(conflict) = self.jobs.get(&job) else { return Ok(()) };
        if output.is_some() && output == conflict.recorded {
            return Ok(());
        }
        let output = output.map_or("no output".to_string(), |output| output.to_string());
        let message = format!(
            "{job} completed with {output} although its lookup at line {} showed conflicting outputs",
            conflict.line
        );
        Err(Violation::at(Invariant::BoundedBatch, Some(job), &[Some(conflict.line)], line, message))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};
    use crate::history::EffectRejectReason;

    /// The line of [`conflict_story`]'s lookup that shows the conflict (after the listing of
    /// r1#0 that the fixture writes before its first reclaim).
    const CONFLICT_LOOKUP: usize = 11;

    /// Two jobs expired together; r1's batch r1#0 takes both. j1's operation has two outputs.
    fn conflict_story() -> History {
        let mut history = History::new(2, 3);
        history.at(0).arrived(J1);
        history.at(0).arrived(J2);
        history.at(0).arrived(J3);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(10).granted(J2, E1, w(2), 1_010);
        history.at(20).applied(J1, E1, O7);
        history.at(30).effect_rejected(J1, E1, O8, EffectRejectReason::Conflict);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        let lookup = history.at(1_020).looked_up(J1, E2, Some(O7), Some(O8), Some(batch(1, 0)));
        assert_eq!(lookup, CONFLICT_LOOKUP);
        history.at(1_030).quarantined(J1, E2, [O7, O8], Some(batch(1, 0)));
        history.at(1_030).batch_stopped(batch(1, 0), J1, [O7, O8]);
        history
    }

    // A conflict quarantines its job and stops the batch, with j2 left untouched: passes.
    #[test]
    fn conflict_stops_batch_passes() {
        assert!(check_history(&conflict_story().entries).is_ok());
    }

    // Exactly batch_max reclaims in one batch pass; the next one is reported.
    #[test]
    fn batch_over_batch_max_fails() {
        let mut history = History::new(2, 3);
        for job in [J1, J2, J3] {
            history.at(0).arrived(job);
            history.at(10).granted(job, E1, w(1), 1_010);
        }
        let first = history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_010).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        assert!(check_history(&history.entries).is_ok());
        let third = history.at(1_010).reclaimed(J3, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.job, Some(J3));
        assert_eq!(violation.lines, vec![first, third]);
    }

    // Reclaiming another lease in a batch that met a conflict is reported, naming the lookup.
    #[test]
    fn reclaim_after_conflict_fails() {
        let mut story = conflict_story();
        let reclaimed = story.at(1_040).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.job, Some(J2));
        assert_eq!(violation.lines, vec![CONFLICT_LOOKUP, reclaimed]);
    }

    // Completing the conflicting job (the overwrite) is reported as bounded_batch, before the
    // consistency failure it would also be.
    #[test]
    fn completion_of_conflicting_job_fails() {
        let mut story = conflict_story();
        story.entries.truncate(CONFLICT_LOOKUP);
        let completed = story.at(1_030).completed(J1, O8, E2, Some(batch(1, 0)));
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.lines, vec![CONFLICT_LOOKUP, completed]);
    }

    // A worker whose effect was recorded, and whose duplicate call was refused as a conflict,
    // completes with the recorded output although a late copy of its lookup showed the conflict.
    #[test]
    fn completion_with_recorded_output_after_late_conflict_lookup_passes() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(20).looked_up(J1, E1, None, None, None);
        history.at(30).executing(w(1), J1, E1);
        history.at(40).applied(J1, E1, O7);
        history.at(40).effect_rejected(J1, E1, O8, EffectRejectReason::Conflict);
        history.at(50).looked_up(J1, E1, Some(O7), Some(O8), None);
        history.at(60).completed(J1, O7, E1, None);
        assert!(check_history(&history.entries).is_ok());
    }

    // A late copy of a reclaimer's lookup, under an epoch it no longer holds, does not stop its
    // batch: the reclaimer never acted on that answer.
    #[test]
    fn stale_conflict_lookup_does_not_stop_batch() {
        let mut history = History::new(2, 3);
        history.at(0).arrived(J1);
        history.at(0).arrived(J2);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(10).granted(J2, E1, w(2), 1_010);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        history.at(1_030).requeued(J1, E2, 1, Some(batch(1, 0)));
        history.at(1_040).granted(J1, E3, w(3), 2_040);
        history.at(1_050).looked_up(J1, E3, None, None, None);
        history.at(1_060).executing(w(3), J1, E3);
        history.at(1_070).applied(J1, E3, O7);
        history.at(1_070).effect_rejected(J1, E3, O8, EffectRejectReason::Conflict);
        history.at(1_080).looked_up(J1, E2, Some(O7), Some(O8), Some(batch(1, 0)));
        history.at(1_090).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        assert!(check_history(&history.entries).is_ok());
    }

    // A conflicting lookup under the current epoch stops the batch even when no batch_stopped
    // follows (the reclaimer gave up on the job): the next lease it takes is reported.
    #[test]
    fn reclaim_after_unreported_conflict_fails() {
        let mut story = conflict_story();
        story.entries.truncate(CONFLICT_LOOKUP);
        let reclaimed = story.at(1_040).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.lines, vec![CONFLICT_LOOKUP, reclaimed]);
    }

    // Completing with the rival after a worker's conflicting lookup is the overwrite.
    #[test]
    fn worker_completion_with_rival_after_conflict_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(15).executing(w(1), J1, E1);
        history.at(20).applied(J1, E1, O7);
        history.at(30).effect_rejected(J1, E1, O8, EffectRejectReason::Conflict);
        history.at(30).failed_after_effect(J1, E1);
        history.at(40).requeued(J1, E1, 1, None);
        history.at(1_030).granted(J1, E2, w(2), 2_030);
        let lookup = history.at(1_040).looked_up(J1, E2, Some(O7), Some(O8), None);
        let completed = history.at(1_050).completed(J1, O8, E2, None);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.lines, vec![lookup, completed]);
    }
}
