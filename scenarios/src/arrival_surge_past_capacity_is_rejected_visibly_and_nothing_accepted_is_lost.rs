//! Proves that an arrival surge past the queue's capacity is turned away visibly (each rejection
//! recorded with its reason and counted) and that nothing accepted is lost. How: a small capacity
//! and a surge of twenty to fifty times the arrival rate.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::ARRIVAL_SURGE;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{scripted, sweep_holds_and_covers};
    use lease_check::figures::Figures;
    use lease_history::{Event, RejectReason};
    use std::collections::BTreeSet;

    // Rejections are counted, rejected jobs never ran, and every accepted job ended.
    #[test]
    fn a_surge_is_rejected_visibly_and_every_accepted_job_ends() {
        let report = scripted(SCENARIO, 12);
        let history = &report.history;
        let figures = Figures::of(history);
        assert!(figures.rejected > 0, "the surge overflowed the queue");
        assert_eq!(figures.accepted + figures.rejected, report.params.jobs as u64, "every offer answered");
        assert_eq!(
            figures.completed + figures.dead_lettered + figures.quarantined,
            figures.accepted,
            "nothing accepted is lost"
        );
        let rejected: BTreeSet<_> = history
            .iter()
            .filter_map(|e| match &e.event {
                Event::Rejected { job, reason } => {
                    assert_eq!(*reason, RejectReason::QueueFull);
                    Some(*job)
                }
                _ => None,
            })
            .collect();
        assert!(history.iter().all(|e| !matches!(e.event, Event::Granted { job, .. } if rejected.contains(&job))));
    }

    // The sweep holds every invariant and reaches rejections.
    #[test]
    fn swept_seeds_hold_under_surges() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 11);
    }
}
