//! `always` fencing: nothing is accepted with a stale epoch.
//!
//! A job's current epoch is the latest `granted.epoch` or `reclaimed.new_epoch`, and it strictly
//! increases on every grant and every reclaim. A violation is:
//!
//! - a `granted` or `reclaimed` whose new epoch does not exceed the current one;
//! - a `renewed` whose epoch is not current, of a lease that is not live, or at a table time at
//!   or after the lease's expiry (renewed after it expired);
//! - an `already_completed` answer (an idempotent success) with an epoch that is not current: a
//!   stale worker's completion must be refused, not acknowledged;
//! - a `requeued`, or a `terminal` of any outcome (completed, dead_lettered, quarantined), under
//!   an epoch that is not current, or of a job that holds no live lease (queued, never leased, or
//!   ended): every request that acts on a job carries an epoch, and the table accepts it only
//!   from the lease's holder;
//! - a `reclaimed` whose `epoch` (the lease it displaced) is not current: the compare-and-set
//!   failed;
//! - an `effect_applied` whose epoch is below the ledger's fence for the operation, the highest
//!   epoch of any `looked_up` or `effect_applied` of it so far.

use super::facts::{Facts, JobFacts};
use super::{outcome_name, Invariant, Violation};
use lease_core::{Epoch, JobId, OpId};
use lease_history::{Entry, Event};

/// Judges one entry; see the module doc.
pub(crate) fn check(facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
    match &entry.event {
        Event::Granted { job, epoch, .. } => new_epoch(facts, line, *job, *epoch),
        Event::Reclaimed { job, epoch, new_epoch: next, .. } => {
            displaced(facts, line, *job, *epoch)?;
            new_epoch(facts, line, *job, *next)
        }
        Event::Renewed { job, epoch, .. } => renewal(facts, line, entry.t_us, *job, *epoch),
        Event::Terminal { job, outcome, epoch, .. } => holder(facts, line, *job, *epoch, outcome_name(*outcome)),
        Event::Requeued { job, epoch, .. } => holder(facts, line, *job, *epoch, "requeued"),
        Event::Released { job, epoch, .. } => holder(facts, line, *job, *epoch, "released"),
        Event::AlreadyCompleted { job, epoch, .. } => completion(facts, line, *job, *epoch),
        Event::EffectApplied { job, op, epoch, .. } => effect(facts, line, *job, *op, *epoch),
        _ => Ok(()),
    }
}

/// The job's current epoch and the line that set it (epoch 0 and none before any grant).
fn current(facts: &Facts, job: JobId) -> (Epoch, Option<usize>) {
    facts.job(job).map_or((Epoch(0), None), |facts| (facts.epoch, facts.epoch_line))
}

fn violation(job: JobId, earlier: Option<usize>, line: usize, message: String) -> Violation {
    Violation::at(Invariant::Fencing, Some(job), &[earlier], line, message)
}

fn new_epoch(facts: &Facts, line: usize, job: JobId, epoch: Epoch) -> Result<(), Violation> {
    let (current, current_line) = current(facts, job);
    if epoch > current {
        return Ok(());
    }
    let message = format!("{job} moved to {epoch}, which does not exceed its current epoch {current}");
    Err(violation(job, current_line, line, message))
}

fn displaced(facts: &Facts, line: usize, job: JobId, epoch: Epoch) -> Result<(), Violation> {
    let (current, current_line) = current(facts, job);
    if epoch == current {
        return Ok(());
    }
    let message = format!("reclaimed {job}'s lease of {epoch}, but its current epoch is {current}");
    Err(violation(job, current_line, line, message))
}

fn renewal(facts: &Facts, line: usize, t_us: u64, job: JobId, epoch: Epoch) -> Result<(), Violation> {
    let (current, current_line) = current(facts, job);
    if epoch != current {
        let message = format!("renewed {job} under stale {epoch}; its current epoch is {current}");
        return Err(violation(job, current_line, line, message));
    }
    let job_facts = facts.job(job);
    let Some(live) = job_facts.and_then(JobFacts::live_term) else {
        let ended = job_facts.and_then(|facts| facts.unleased_line);
        return Err(violation(job, ended, line, format!("renewed {job} under {epoch}, which held no live lease")));
    };
    if t_us < live.expires_at_us {
        return Ok(());
    }
    let message =
        format!("renewed {job} under {epoch} at t={t_us}us, after its lease expired at t={}us", live.expires_at_us);
    Err(violation(job, Some(live.line), line, message))
}

/// A requeue or terminal outcome: accepted only from the live lease's holder, under its epoch.
fn holder(facts: &Facts, line: usize, job: JobId, epoch: Epoch, what: &str) -> Result<(), Violation> {
    let (current, current_line) = current(facts, job);
    if epoch != current {
        let message = format!("{what} {job} under stale {epoch}; its current epoch is {current}");
        return Err(violation(job, current_line, line, message));
    }
    let job_facts = facts.job(job);
    if job_facts.and_then(JobFacts::live_term).is_some() {
        return Ok(());
    }
    let ended = job_facts.and_then(|facts| facts.unleased_line);
    Err(violation(job, ended, line, format!("{what} {job} under {epoch}, which held no live lease")))
}

fn completion(facts: &Facts, line: usize, job: JobId, epoch: Epoch) -> Result<(), Violation> {
    let (current, current_line) = current(facts, job);
    if epoch == current {
        return Ok(());
    }
    let message = format!("completed {job} under stale {epoch}; its current epoch is {current}");
    Err(violation(job, current_line, line, message))
}

fn effect(facts: &Facts, line: usize, job: JobId, op: OpId, epoch: Epoch) -> Result<(), Violation> {
    let Some(op_facts) = facts.op(op) else { return Ok(()) };
    if epoch >= op_facts.fence {
        return Ok(());
    }
    let message = format!("the ledger applied {op} under {epoch}, below its fence {}", op_facts.fence);
    Err(violation(job, op_facts.fence_line, line, message))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};
    use lease_history::EffectRejectReason;

    fn assert_fencing(history: &History, lines: Vec<usize>) {
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::Fencing, "{violation}");
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines, lines);
    }

    // Grants, a renewal before expiry, a reclaim and a current-epoch completion pass.
    #[test]
    fn current_epochs_pass() {
        let mut story = crash_after_effect_story();
        story.entries.truncate(STORY_EXECUTING);
        story.at(500).renewed(J1, E1, 1_500);
        story.at(600).applied(J1, E1, O7);
        story.at(700).completed(J1, O7, E1, None);
        assert!(check_history(&story.entries).is_ok());
    }

    // A renewal after a reclaim, with the old epoch, is reported, naming the reclaim.
    #[test]
    fn renew_after_reclaim_with_old_epoch_fails() {
        let mut story = crash_after_effect_story();
        story.entries.truncate(STORY_RECLAIMED);
        let renewed = story.at(1_015).renewed(J1, E1, 2_015);
        assert_fencing(&story, vec![STORY_RECLAIMED, renewed]);
    }

    // A renewal arriving at the expiry instant is too late.
    #[test]
    fn renew_at_expiry_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        let granted = history.at(10).granted(J1, E1, w(1), 1_010);
        let renewed = history.at(1_010).renewed(J1, E1, 2_010);
        assert_fencing(&history, vec![granted, renewed]);
    }

    // A completion under the worker's epoch after a reclaimer took over is reported.
    #[test]
    fn completion_with_stale_epoch_fails() {
        let mut story = crash_after_effect_story();
        story.entries.truncate(STORY_LOOKED_UP);
        let completed = story.at(1_025).completed(J1, O7, E1, None);
        assert_fencing(&story, vec![STORY_RECLAIMED, completed]);
    }

    // A completion acknowledged as idempotent under a stale epoch is a stale ack accepted.
    #[test]
    fn idempotent_completion_with_stale_epoch_fails() {
        let mut story = crash_after_effect_story();
        let again = story.entries.len() + 1;
        story.entries.push(already_completed(2_000, J1, E1, O7));
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::Fencing, "{violation}");
        assert_eq!(violation.lines.last(), Some(&again));
    }

    // The same idempotent answer under the current epoch (a retried ack) passes.
    #[test]
    fn idempotent_completion_with_current_epoch_passes() {
        let mut story = crash_after_effect_story();
        let current = story.entries.iter().rev().find_map(|e| match e.event {
            lease_history::Event::Terminal { epoch, .. } => Some(epoch),
            _ => None,
        });
        story.at(2_000).already_completed(J1, current.unwrap(), O7, None);
        assert!(check_history(&story.entries).is_ok());
    }

    fn already_completed(
        t_us: u64,
        job: lease_core::JobId,
        epoch: lease_core::Epoch,
        output: lease_core::OutputId,
    ) -> lease_history::Entry {
        let from = lease_history::Node::Worker(1);
        let event = lease_history::Event::AlreadyCompleted { from, job, epoch, output };
        lease_history::Entry { t_us, node: lease_history::Node::Table, event }
    }

    // A reclaim that displaces an epoch other than the current one lost its compare-and-set.
    #[test]
    fn reclaim_of_stale_epoch_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        let first = history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        // The live lease (e2) expired at 2_010; this reclaim names its expiry but the old epoch.
        let second = history.at(2_010).reclaimed(J1, E1, 2_010, E3, batch(2, 0));
        assert_fencing(&history, vec![first, second]);
    }

    // An effect applied below the ledger's fence (raised by the reclaimer's lookup) is reported.
    #[test]
    fn effect_below_fence_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(20).executing(w(1), J1, E1);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        let lookup = history.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        let applied = history.at(1_030).applied(J1, E1, O7);
        assert_fencing(&history, vec![lookup, applied]);
    }

    // A fenced effect that the ledger refused is the protocol working, not a violation.
    #[test]
    fn refused_stale_effect_passes() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(20).executing(w(1), J1, E1);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        history.at(1_030).effect_rejected(J1, E1, O7, EffectRejectReason::Fenced);
        history.at(1_040).requeued(J1, E2, 1, Some(batch(1, 0)));
        assert!(check_history(&history.entries).is_ok());
    }

    // A requeue, dead-letter or quarantine under the current epoch of a live lease passes; under
    // a stale epoch, or once the lease was requeued, each is reported.
    #[test]
    fn requeue_dead_letter_and_quarantine_need_the_live_lease() {
        // w1 holds j1 under e1: its effect o7 was applied, then its dependency answered "failed".
        let worker = |attempts_max: u32| {
            let mut history = History::with_attempts_max(2, 2, attempts_max);
            history.at(0).arrived(J1);
            history.at(10).granted(J1, E1, w(1), 1_010);
            history.at(15).executing(w(1), J1, E1);
            history.at(20).applied(J1, E1, O7);
            history.at(25).failed_after_effect(J1, E1);
            history
        };
        // Each act of w1, and the attempts_max under which the table answers it so: a requeue
        // of the last attempt is a dead-letter.
        type Act = fn(&mut History, lease_core::Epoch) -> usize;
        let acts: [(Act, u32); 3] = [
            (|history, epoch| history.requeued(J1, epoch, 1, None), 3),
            (|history, epoch| history.dead_lettered(J1, epoch, 1, None), 1),
            (|history, epoch| history.completed(J1, O7, epoch, None), 3),
        ];
        for (act, attempts_max) in acts {
            let mut history = worker(attempts_max);
            act(history.at(30), E1);
            check_history(&history.entries).unwrap_or_else(|violation| panic!("{violation}"));
            let mut history = worker(attempts_max);
            let reclaimed = history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
            let stale = act(history.at(1_020), E1);
            assert_fencing(&history, vec![reclaimed, stale]);
            let mut history = worker(3);
            let requeued = history.at(30).requeued(J1, E1, 1, None);
            let unleased = act(history.at(40), E1);
            assert_fencing(&history, vec![requeued, unleased]);
        }
        // Only a reclaimer quarantines: r1 reclaims j1 under e2, and its lookup shows w1's o7
        // with the dependency's rival o8.
        let reclaimer = || {
            let mut history = worker(3);
            history.at(26).rival(J1, E1, O8);
            history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
            history.at(1_020).looked_up(J1, E2, Some(O7), Some(O8), Some(batch(1, 0)));
            history
        };
        let quarantine = |history: &mut History, epoch| history.quarantined(J1, epoch, [O7, O8], Some(batch(1, 0)));
        let mut history = reclaimer();
        quarantine(history.at(1_030), E2);
        check_history(&history.entries).unwrap_or_else(|violation| panic!("{violation}"));
        let mut history = reclaimer();
        let reclaimed = history.at(2_010).reclaimed(J1, E2, 2_010, E3, batch(2, 0));
        let stale = quarantine(history.at(2_020), E2);
        assert_fencing(&history, vec![reclaimed, stale]);
        // Only its holder ends a lease, and a reclaimer that saw a conflict never requeues: the
        // requeued lease's quarantine comes from w1 (which conformance would report next).
        let mut history = worker(3);
        let requeued = history.at(30).requeued(J1, E1, 1, None);
        let unleased = history.at(40).quarantined(J1, E1, [O7, O8], None);
        assert_fencing(&history, vec![requeued, unleased]);
    }

    // A grant that does not raise the epoch is reported.
    #[test]
    fn grant_without_new_epoch_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        let first = history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(15).executing(w(1), J1, E1);
        history.at(18).dependency_failed(J1, E1);
        history.at(20).requeued(J1, E1, 1, None);
        let second = history.at(30).granted(J1, E1, w(2), 1_030);
        assert_fencing(&history, vec![first, second]);
    }
}
