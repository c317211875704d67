//! `always` no_unexpired_reclaim: a lease is reclaimed only at or after its current expiry.
//!
//! The current expiry of a job's lease comes from `granted.expires_at_us`, then every
//! `renewed.expires_at_us`, and a `reclaimed.new_expires_at_us` becomes the reclaimer's. A
//! `reclaimed` entry is a violation when:
//!
//! - its `t_us` (the table's clock) is before the current expiry: the lease was still live;
//! - its `expires_at_us` is not the current expiry: the table reclaimed a lease other than the
//!   live one (an outdated listing, say, that missed a renewal);
//! - the job holds no live lease at all (never leased, requeued, or ended).

use super::facts::Facts;
use super::{Invariant, Violation};
use lease_history::{Entry, Event};

/// Judges one entry; see the module doc.
pub(crate) fn check(facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
    let Event::Reclaimed { job, expires_at_us, .. } = &entry.event else { return Ok(()) };
    let violation = |earlier: Option<usize>, message: String| {
        Violation::at(Invariant::NoUnexpiredReclaim, Some(*job), &[earlier], line, message)
    };
    let job_facts = facts.job(*job);
    let Some(live) = job_facts.and_then(|facts| facts.live_term()) else {
        let ended = job_facts.and_then(|facts| facts.unleased_line);
        return Err(violation(ended, format!("reclaimed {job}, which held no live lease")));
    };
    if entry.t_us < live.expires_at_us {
        let message =
            format!("reclaimed {job} at t={}us, before its lease expired at t={}us", entry.t_us, live.expires_at_us);
        return Err(violation(Some(live.line), message));
    }
    if *expires_at_us != live.expires_at_us {
        let message = format!(
            "reclaimed {job}'s lease expiring at t={expires_at_us}us, but its live lease expires at t={}us",
            live.expires_at_us
        );
        return Err(violation(Some(live.line), message));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};

    // A reclaim exactly at expires_at is allowed: expiry is the first expired instant.
    #[test]
    fn reclaim_at_expiry_passes() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        assert!(check_history(&history.entries).is_ok());
    }

    // A reclaim one microsecond before expires_at is reported, with the grant that set it.
    #[test]
    fn reclaim_one_microsecond_early_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        let granted = history.at(10).granted(J1, E1, w(1), 1_010);
        let reclaimed = history.at(1_009).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::NoUnexpiredReclaim);
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines, vec![granted, reclaimed]);
    }

    // A renewal moves the expiry: a reclaim at the old expiry is early, and names the renewal.
    #[test]
    fn reclaim_at_expiry_before_renewal_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        let renewed = history.at(500).renewed(J1, E1, 1_500);
        let reclaimed = history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::NoUnexpiredReclaim);
        assert_eq!(violation.lines, vec![renewed, reclaimed]);
    }

    // Reclaiming by an outdated expiry, after the live one passed, still names the wrong lease.
    #[test]
    fn reclaim_of_other_lease_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        let renewed = history.at(500).renewed(J1, E1, 1_500);
        let reclaimed = history.at(1_600).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::NoUnexpiredReclaim);
        assert_eq!(violation.lines, vec![renewed, reclaimed]);
    }

    // A reclaimer's own lease is reclaimed only after its new expiry, not the worker's.
    #[test]
    fn reclaim_of_reclaimer_lease_uses_new_expiry() {
        let mut story = History::new(2, 2);
        story.at(0).arrived(J1);
        story.at(10).granted(J1, E1, w(1), 1_010);
        story.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        let second = story.at(2_010).reclaimed(J1, E2, 2_010, E3, batch(2, 0));
        assert!(check_history(&story.entries).is_ok());
        let third = story.at(3_009).reclaimed(J1, E3, 3_010, E4, batch(2, 1));
        let violation = check_history(&story.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::NoUnexpiredReclaim);
        assert_eq!(violation.lines, vec![second, third]);
    }

    // A job that was requeued holds no lease, so nothing of it can be reclaimed.
    #[test]
    fn reclaim_after_requeue_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(15).executing(w(1), J1, E1);
        history.at(18).dependency_failed(J1, E1);
        let requeued = history.at(20).requeued(J1, E1, 1, None);
        let reclaimed = history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::NoUnexpiredReclaim);
        assert_eq!(violation.lines, vec![requeued, reclaimed]);
    }
}
