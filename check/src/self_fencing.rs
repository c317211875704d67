//! `always` self_fencing: no worker starts an effect after its lease expired by the table's clock.
//!
//! A worker's own clock may drift, so it must stop acting before its local estimate of expiry
//! minus a safety margin. The history keeps the expiry of every epoch's lease (renewals extend
//! it). An `executing` entry at `t_us` for (job, epoch) is a violation when that epoch's lease
//! had expired by then, `expires_at_us <= t_us`: whether the epoch is still the job's current one
//! (nobody reclaimed it yet) or an older one that a reclaimer has since displaced.

use super::facts::Facts;
use super::{Invariant, Violation};
use lease_history::{Entry, Event};

/// Judges one entry; see the module doc.
pub(crate) fn check(facts: &Facts, line: usize, entry: &Entry) -> Result<(), Violation> {
    let Event::Executing { job, op, epoch } = &entry.event else { return Ok(()) };
    let Some(job_facts) = facts.job(*job) else { return Ok(()) };
    let Some(term) = job_facts.terms.get(epoch) else { return Ok(()) };
    if entry.t_us < term.expires_at_us {
        return Ok(());
    }
    let whose = if *epoch == job_facts.epoch { "its lease" } else { "its displaced lease" };
    let message = format!(
        "{node} started {op} under {epoch} at t={}us, after {whose} expired at t={}us",
        entry.t_us,
        term.expires_at_us,
        node = entry.node,
    );
    Err(Violation::at(Invariant::SelfFencing, Some(*job), &[Some(term.line)], line, message))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};

    // A worker that starts its effect one microsecond before expiry passes.
    #[test]
    fn execution_before_expiry_passes() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(1_009).executing(w(1), J1, E1);
        assert!(check_history(&history.entries).is_ok());
    }

    // A renewal extends the lease, so a later execution still passes.
    #[test]
    fn execution_within_renewed_lease_passes() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(900).renewed(J1, E1, 1_900);
        history.at(1_500).executing(w(1), J1, E1);
        assert!(check_history(&history.entries).is_ok());
    }

    // Starting the effect at the expiry instant of the current lease is reported.
    #[test]
    fn execution_at_expiry_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        let granted = history.at(10).granted(J1, E1, w(1), 1_010);
        let executing = history.at(1_010).executing(w(1), J1, E1);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::SelfFencing);
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines, vec![granted, executing]);
    }

    // A paused worker that wakes after a reclaim and executes under its old epoch is reported,
    // naming the renewal that last set that lease's expiry.
    #[test]
    fn execution_under_displaced_expired_lease_fails() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        let renewed = history.at(500).renewed(J1, E1, 1_500);
        history.at(510).paused(w(1));
        history.at(1_500).reclaimed(J1, E1, 1_500, E2, batch(1, 0));
        history.at(1_510).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        history.at(1_520).requeued(J1, E2, 1, Some(batch(1, 0)));
        history.at(1_600).resumed(w(1));
        let executing = history.at(1_600).executing(w(1), J1, E1);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::SelfFencing);
        assert_eq!(violation.lines, vec![renewed, executing]);
    }
}
