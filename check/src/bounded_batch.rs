//! `always` bounded_batch: a reclaim batch touches at most `batch_max` leases, only leases it
//! listed, and nothing more after a conflict.
//!
//! A batch is opened by its listing: a `listed` line (repeated when a retried copy of the listing
//! reaches the table twice), then, for each listed lease in order, its fence (`reclaimed`, or
//! `lost_race` or `not_expired` when the fence failed), and for a won fence the job's lookup
//! (`looked_up` carrying the batch) and its `requeued` or `terminal` (or their `refused`). Every
//! one of these lines touches a lease, and a lease is counted once however often it is touched.
//! A violation is:
//!
//! - a `listed` line with more than `batch_max` leases;
//! - a line that touches a lease which makes it the `batch_max + 1`-th distinct lease of its
//!   batch;
//! - a fence (`reclaimed`, `lost_race`, `not_expired`) of a lease (job and epoch) that none of the
//!   batch's `listed` lines showed, including a fence of a batch that was never listed;
//! - after the batch met a conflict (a `looked_up` that found a `rival` for the batch under the
//!   job's current epoch, or a `batch_stopped` for it), any touch by the batch, except the
//!   `quarantined` terminal (or its `refused`) of the conflicting job, or of another job whose
//!   lookup in the batch showed a conflict (a wave's lookups are answered together, in any
//!   order, and the reclaimer quarantines the first conflict in listing order);
//! - a `terminal` completed for a job whose lookup showed a conflict, with an output other than
//!   the one the ledger recorded first: that is the overwrite quarantine exists to prevent;
//! - after the batch gave up (`gave_up`: a request of it went unanswered through its retries),
//!   a touch of a lease it had not touched before, other than the jobs it gave up on (a wave's
//!   step gives up every job whose request went unanswered, a line each, written together): the
//!   rest of a batch given up waits for the next scan, which lists it again under a new batch. (A
//!   touch of a lease touched before, or of a job given up on, is a late copy of a request sent
//!   before.)
//!
//! Three refinements keep late duplicates from raising false alarms. A request retried after a
//! timeout may reach the table or the ledger twice, and the second copy's answer is ignored by
//! its sender:
//!
//! - a conflicting lookup under an epoch that is no longer the job's current one comes from a
//!   sender that no longer holds the job and may never have seen the answer; it does not stop
//!   the batch;
//! - after a stop, a touch that changes nothing (`lost_race`, `not_expired`, `looked_up`,
//!   `refused`) of a lease the batch touched before the stop is a late copy of a request sent
//!   before it, not a new touch. A touch that changes something (`reclaimed`, `requeued`,
//!   `terminal`) can only answer the first copy to arrive, which the reclaimer awaits before it
//!   goes on, so it is never late;
//! - a holder whose own effect was recorded and whose duplicate call was refused as a conflict
//!   completes with the recorded output, correctly, even though a late copy of its lookup showed
//!   the conflict; only completing with another output is the overwrite.

use super::facts::Facts;
use super::{outcome_name, Invariant, Violation};
use lease_core::{BatchId, Epoch, JobId, OutputId};
use lease_history::{Entry, Event, OutcomeKind};
use std::collections::{BTreeMap, BTreeSet};

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

/// What one batch has done so far.
#[derive(Debug, Clone, Default)]
struct Batch {
    /// Every lease (job, epoch) its `listed` lines showed.
    listed: BTreeSet<(JobId, Epoch)>,
    /// Its first `listed` line.
    listed_line: Option<usize>,
    /// The leases it touched, each with the first line that touched it.
    touched: BTreeMap<JobId, usize>,
    /// The first sign of a conflict, if it met one.
    stop: Option<Stop>,
    /// Where it first gave up, and on which job's request, if it did.
    gave_up: Option<Stop>,
    /// Every job it gave up on: a wave's step gives up each job whose request went unanswered,
    /// a `gave_up` line each, written together.
    given_up: BTreeSet<JobId>,
    /// Every job whose lookup in it showed a conflict under the job's current epoch: a wave
    /// looks its jobs up together, so more than one may, and it quarantines one of them.
    conflicts: BTreeSet<JobId>,
}

/// How a line touches a lease of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    /// A fence of the listed lease of `epoch`; `changed` when it was won.
    Fence { epoch: Epoch, changed: bool },
    /// A lookup, or a request the table refused: changes nothing in the table.
    Idle,
    /// A requeue or a terminal outcome.
    Change,
}

impl Touch {
    fn changes(self) -> bool {
        match self {
            Touch::Fence { changed, .. } => changed,
            Touch::Idle => false,
            Touch::Change => true,
        }
    }
}

/// Every batch and every conflict seen so far: the memory of this checker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Batches {
    batches: BTreeMap<BatchId, Batch>,
    /// Jobs whose lookup showed a conflict.
    jobs: BTreeMap<JobId, Conflict>,
}

/// The batch, job and kind of touch of an entry, if it touches a lease of a batch.
fn touch(event: &Event) -> Option<(BatchId, JobId, Touch)> {
    match event {
        Event::Reclaimed { job, epoch, batch, .. } => {
            Some((*batch, *job, Touch::Fence { epoch: *epoch, changed: true }))
        }
        Event::LostRace { job, expected, batch, .. } | Event::NotExpired { job, expected, batch, .. } => {
            Some((*batch, *job, Touch::Fence { epoch: *expected, changed: false }))
        }
        Event::LookedUp { job, batch: Some(batch), .. } | Event::Refused { job, batch: Some(batch), .. } => {
            Some((*batch, *job, Touch::Idle))
        }
        Event::Requeued { job, batch: Some(batch), .. } | Event::Terminal { job, batch: Some(batch), .. } => {
            Some((*batch, *job, Touch::Change))
        }
        _ => None,
    }
}

/// Spells a batch as the history's readers know it: `r1#0`.
fn name(batch: BatchId) -> String {
    format!("r{}#{}", batch.reclaimer.0, batch.seq)
}

impl Batches {
    /// Judges one entry; see the module doc.
    pub(crate) fn check(&self, facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
        if let Event::Listed { batch, leases, .. } = &entry.event {
            return self.listing(facts, line, *batch, leases.len());
        }
        if let Some((batch, job, touch)) = touch(&entry.event) {
            if !self.is_the_quarantine(batch, job, &entry.event) {
                self.after_stop(line, job, batch, touch, &entry.event)?;
            }
            self.after_give_up(line, job, batch)?;
            if let Touch::Fence { epoch, .. } = touch {
                self.listed(line, job, epoch, batch)?;
            }
            self.size(facts, line, job, batch)?;
        }
        match &entry.event {
            Event::Terminal { job, outcome: OutcomeKind::Completed, output, .. } => self.overwrite(line, *job, *output),
            _ => Ok(()),
        }
    }

    /// Remembers listings, touches, conflicts and stopped batches, against the facts before the
    /// entry.
    pub(crate) fn absorb(&mut self, facts: &Facts, line: usize, entry: &Entry) {
        if let Some((batch, job, _)) = touch(&entry.event) {
            self.batches.entry(batch).or_default().touched.entry(job).or_insert(line);
        }
        match &entry.event {
            Event::Listed { batch, leases, .. } => {
                let batch = self.batches.entry(*batch).or_default();
                batch.listed.extend(leases.iter().map(|lease| (lease.job, lease.epoch)));
                batch.listed_line.get_or_insert(line);
            }
            Event::LookedUp { job, epoch, found, rival: Some(_), batch, .. } => {
                self.jobs.entry(*job).or_insert(Conflict { line, recorded: *found });
                let current = facts.job(*job).is_some_and(|facts| facts.epoch == *epoch);
                if let Some(batch) = batch.filter(|_| current) {
                    let batch = self.batches.entry(batch).or_default();
                    batch.stop.get_or_insert(Stop { line, job: *job });
                    batch.conflicts.insert(*job);
                }
            }
            Event::BatchStopped { batch, job, .. } => {
                self.batches.entry(*batch).or_default().stop.get_or_insert(Stop { line, job: *job });
            }
            Event::GaveUp { batch, job } => {
                let batch = self.batches.entry(*batch).or_default();
                batch.gave_up.get_or_insert(Stop { line, job: *job });
                batch.given_up.insert(*job);
            }
            _ => {}
        }
    }

    fn stop(&self, batch: BatchId) -> Option<Stop> {
        self.batches.get(&batch).and_then(|batch| batch.stop)
    }

    /// Whether the entry is a conflicting job's quarantine, or the table's refusal of it: the job
    /// the batch stopped on, or another whose lookup in the same wave showed a conflict too.
    fn is_the_quarantine(&self, batch: BatchId, job: JobId, event: &Event) -> bool {
        let quarantine = matches!(
            event,
            Event::Terminal { outcome: OutcomeKind::Quarantined, .. }
                | Event::Refused { request: lease_history::RefusedRequest::Quarantine, .. }
        );
        let known = self.batches.get(&batch);
        let conflicting = known.is_some_and(|known| known.conflicts.contains(&job));
        quarantine && (conflicting || self.stop(batch).is_some_and(|stop| stop.job == job))
    }

    fn listing(&self, facts: &Facts, line: usize, batch: BatchId, leases: usize) -> Result<(), Violation> {
        let limits = facts.limits();
        if leases <= limits.batch_max {
            return Ok(());
        }
        let message =
            format!("batch {} was listed {leases} leases, over a batch_max of {}", name(batch), limits.batch_max);
        Err(Violation::at(Invariant::BoundedBatch, None, &[limits.run_line], line, message))
    }

    fn after_stop(
        &self,
        line: usize,
        job: JobId,
        batch: BatchId,
        touch: Touch,
        event: &Event,
    ) -> Result<(), Violation> {
        let Some(stop) = self.stop(batch) else { return Ok(()) };
        let touched_before = self.batches[&batch].touched.get(&job).is_some_and(|&first| first <= stop.line);
        if !touch.changes() && touched_before {
            return Ok(()); // A late copy of a request sent before the stop.
        }
        let what = match event {
            Event::Terminal { outcome, .. } => outcome_name(*outcome),
            Event::Reclaimed { .. } => "reclaimed",
            Event::LostRace { .. } | Event::NotExpired { .. } => "fenced",
            Event::LookedUp { .. } => "looked up",
            Event::Requeued { .. } => "requeued",
            _ => "asked the table about",
        };
        let message = format!(
            "batch {} {what} {job} after it met the conflict on {} at line {}",
            name(batch),
            stop.job,
            stop.line
        );
        Err(Violation::at(Invariant::BoundedBatch, Some(job), &[Some(stop.line)], line, message))
    }

    fn after_give_up(&self, line: usize, job: JobId, batch: BatchId) -> Result<(), Violation> {
        let Some(known) = self.batches.get(&batch) else { return Ok(()) };
        let Some(gave_up) = known.gave_up else { return Ok(()) };
        if known.given_up.contains(&job) || known.touched.get(&job).is_some_and(|&first| first < gave_up.line) {
            return Ok(()); // A late copy of a request sent before it gave up.
        }
        let message = format!(
            "batch {} touched {job} after it gave up on {} at line {}: the rest of a batch given up waits for \
             the next scan",
            name(batch),
            gave_up.job,
            gave_up.line
        );
        Err(Violation::at(Invariant::BoundedBatch, Some(job), &[Some(gave_up.line)], line, message))
    }

    fn listed(&self, line: usize, job: JobId, epoch: Epoch, batch: BatchId) -> Result<(), Violation> {
        let known = self.batches.get(&batch);
        if known.is_some_and(|known| known.listed.contains(&(job, epoch))) {
            return Ok(());
        }
        let listed_line = known.and_then(|known| known.listed_line);
        let message = match listed_line {
            Some(listed) => format!(
                "batch {} fenced {job}'s lease of {epoch}, which its listing at line {listed} did not show",
                name(batch)
            ),
            None => format!("batch {} fenced {job}'s lease of {epoch} without a listing", name(batch)),
        };
        Err(Violation::at(Invariant::BoundedBatch, Some(job), &[listed_line], line, message))
    }

    fn size(&self, facts: &Facts, line: usize, job: JobId, batch: BatchId) -> Result<(), Violation> {
        let batch_max = facts.limits().batch_max;
        let Some(known) = self.batches.get(&batch) else { return Ok(()) };
        if known.touched.contains_key(&job) || known.touched.len() < batch_max {
            return Ok(());
        }
        let first = known.touched.values().min().copied();
        let message = format!(
            "batch {} touched {job} as lease {} of a batch_max of {batch_max}",
            name(batch),
            known.touched.len() + 1,
        );
        Err(Violation::at(Invariant::BoundedBatch, Some(job), &[first], line, message))
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
    use lease_history::EffectRejectReason;

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
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
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

    /// A wave of two: r1's batch fences j1 and j2 together (they will be looked up together).
    /// Each job of `conflicting` has two outputs claiming its operation.
    fn a_wave_fenced(conflicting: &[lease_core::JobId]) -> History {
        let mut history = History::new(2, 3);
        for job in [J1, J2] {
            history.at(0).arrived(job);
            history.at(10).granted(job, E1, w(1), 1_010);
        }
        for &job in conflicting {
            history.at(20).applied(job, E1, O7);
            history.at(30).effect_rejected(job, E1, O8, EffectRejectReason::Conflict);
        }
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_010).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        history
    }

    // A wave's lookups are answered in any order: both show a conflict, j2's first, and the batch
    // stops on it. Quarantining j1, the first conflict in listing order, passes; so does leaving
    // j2 fenced to expire.
    #[test]
    fn a_wave_quarantines_any_job_whose_lookup_showed_a_conflict() {
        let mut history = a_wave_fenced(&[J1, J2]);
        history.at(1_020).looked_up(J2, E2, Some(O7), Some(O8), Some(batch(1, 0)));
        history.at(1_020).looked_up(J1, E2, Some(O7), Some(O8), Some(batch(1, 0)));
        history.at(1_030).quarantined(J1, E2, [O7, O8], Some(batch(1, 0)));
        history.at(1_030).batch_stopped(batch(1, 0), J1, [O7, O8]);
        assert!(check_history(&history.entries).is_ok());
    }

    // A wave mate whose lookup was empty is still not finished after the conflict: its requeue
    // is reported, against the conflicting lookup.
    #[test]
    fn a_wave_that_finishes_a_mate_after_a_conflict_fails() {
        let mut history = a_wave_fenced(&[J1]);
        let conflict = history.at(1_020).looked_up(J1, E2, Some(O7), Some(O8), Some(batch(1, 0)));
        history.at(1_020).looked_up(J2, E2, None, None, Some(batch(1, 0)));
        assert!(check_history(&history.entries).is_ok());
        let requeue = history.at(1_030).requeued(J2, E2, 1, Some(batch(1, 0)));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.lines, vec![conflict, requeue]);
        assert!(violation.message.contains("requeued j2 after it met the conflict on j1"), "{}", violation.message);
    }

    /// Three jobs granted together and expired at 1_010, in a run with a batch_max of 2.
    fn three_expired() -> History {
        let mut history = History::new(2, 3);
        for job in [J1, J2, J3] {
            history.at(0).arrived(job);
            history.at(10).granted(job, E1, w(1), 1_010);
        }
        history
    }

    // A batch gives up on j1's lookup: late copies about j1 pass, a fence of j2, which it had
    // not touched, is reported at the fence.
    #[test]
    fn a_touch_after_a_give_up_fails() {
        let mut history = three_expired();
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        let gave_up = history.at(1_200).gave_up(batch(1, 0), J1);
        history.at(1_210).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        assert!(check_history(&history.entries).is_ok());
        let fence = history.at(1_220).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.lines, vec![gave_up, fence]);
        assert!(violation.message.contains("after it gave up on j1"), "{}", violation.message);
    }

    // A wave's step gives up both jobs whose fences went unanswered, a line each: late copies of
    // either fence pass. Given up on j1 alone, a late fence of j2 is a touch of a lease it never
    // touched before, and is reported.
    #[test]
    fn a_wave_gives_up_every_job_it_sent() {
        let mut history = three_expired();
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        let gave_up = history.at(1_200).gave_up(batch(1, 0), J1);
        history.at(1_200).gave_up(batch(1, 0), J2);
        history.at(1_210).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        history.at(1_215).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        assert!(check_history(&history.entries).is_ok());
        let mut one = three_expired();
        one.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        let alone = one.at(1_200).gave_up(batch(1, 0), J1);
        let fence = one.at(1_210).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&one.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.lines, vec![alone, fence]);
        assert_eq!(gave_up, alone);
    }

    // A listing of batch_max leases passes; one of more is reported at the listing.
    #[test]
    fn listing_over_batch_max_fails() {
        let mut history = three_expired();
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        assert!(check_history(&history.entries).is_ok());
        let listed = history.at(1_010).listed(batch(1, 1), &[(J1, E1, 1_010), (J2, E1, 1_010), (J3, E1, 1_010)]);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.lines, vec![1, listed]);
    }

    // Every fence counts, won or lost, and a lease counts once however often it is touched: a
    // won fence, its lookup and requeue, and a lost race (r2 reclaimed j2 first) make two leases;
    // a third is reported, even when a repeated listing showed it.
    #[test]
    fn batch_touching_over_batch_max_fails() {
        let mut history = three_expired();
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        let first = history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        history.at(1_030).requeued(J1, E2, 1, Some(batch(1, 0)));
        history.at(1_035).reclaimed(J2, E1, 1_010, E2, batch(2, 0));
        history.at(1_040).lost_race(J2, E1, E2, batch(1, 0));
        history.at(1_050).listed(batch(1, 0), &[(J3, E1, 1_010)]);
        assert!(check_history(&history.entries).is_ok());
        let third = history.at(1_060).reclaimed(J3, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.job, Some(J3));
        assert_eq!(violation.lines, vec![first, third]);
    }

    // A fence of a lease the batch did not list is reported: another job, another epoch of a
    // listed job, or a batch never listed at all.
    #[test]
    fn fence_of_unlisted_lease_fails() {
        let fenced = |fence: &dyn Fn(&mut History) -> usize| {
            let mut history = three_expired();
            let listed = history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
            let fence = fence(&mut history);
            let violation = check_history(&history.entries).unwrap_err();
            assert_eq!(violation.invariant, Invariant::BoundedBatch, "{violation}");
            (violation.lines, listed, fence)
        };
        let (lines, listed, fence) = fenced(&|history| history.at(1_010).reclaimed(J3, E1, 1_010, E2, batch(1, 0)));
        assert_eq!(lines, vec![listed, fence]);
        let (lines, listed, fence) = fenced(&|history| history.at(1_010).lost_race(J1, E2, E1, batch(1, 0)));
        assert_eq!(lines, vec![listed, fence]);
        let unlisted = |history: &mut History| {
            let event = lease_history::Event::Reclaimed {
                job: J3,
                epoch: E1,
                expires_at_us: 1_010,
                new_epoch: E2,
                new_expires_at_us: 1_010 + TTL_US,
                reclaimer: r(2),
                batch: batch(2, 0),
            };
            history.push(lease_history::Node::Table, event)
        };
        let (lines, _, fence) = fenced(&unlisted);
        assert_eq!(lines, vec![fence]);
    }

    // After a stop, a late copy of a request sent before it (a lost race, a lookup of a lease
    // touched before) passes; a lookup of a lease not touched before, or a requeue of one that
    // was (a reclaimer that left j1 unfinished to look at j2), is reported.
    #[test]
    fn touches_after_a_stop() {
        let mut history = three_expired();
        history.at(20).applied(J2, E1, O7);
        history.at(30).effect_rejected(J2, E1, O8, EffectRejectReason::Conflict);
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        history.at(1_040).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        let stop = history.at(1_050).looked_up(J2, E2, Some(O7), Some(O8), Some(batch(1, 0)));
        history.at(1_060).quarantined(J2, E2, [O7, O8], Some(batch(1, 0)));
        history.at(1_060).batch_stopped(batch(1, 0), J2, [O7, O8]);
        history.at(1_070).lost_race(J1, E1, E2, batch(1, 0));
        history.at(1_070).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        history.at(1_070).looked_up(J2, E2, Some(O7), Some(O8), Some(batch(1, 0)));
        check_history(&history.entries).unwrap_or_else(|violation| panic!("{violation}"));
        let mut later = history.entries.clone();
        let requeue = history.at(1_080).requeued(J1, E2, 1, Some(batch(1, 0)));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.lines, vec![stop, requeue]);
        let op = lease_core::OpId::for_job(J3);
        let event = lease_history::Event::LookedUp {
            from: r(1),
            job: J3,
            op,
            epoch: E1,
            found: None,
            rival: None,
            batch: Some(batch(1, 0)),
        };
        later.push(lease_history::Entry { t_us: 1_080, node: lease_history::Node::Ledger, event });
        let violation = check_history(&later).unwrap_err();
        assert_eq!(violation.invariant, Invariant::BoundedBatch);
        assert_eq!(violation.lines, vec![stop, later.len()]);
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
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
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
