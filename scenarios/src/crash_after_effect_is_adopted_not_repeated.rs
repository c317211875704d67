//! Proves that a worker crashing after its effect was accepted, before it acknowledged, causes
//! neither a second effect nor a second terminal outcome: the lease expires, a reclaimer fences it,
//! finds the output in the ledger, and completes the job with it. How: the script crashes the
//! worker of jobs 0 to 3 right after the ledger accepted their effects; the sweep adds random
//! after-effect crashes, packet loss and latency.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::CRASH_AFTER_EFFECT;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{count, scripted, sweep_holds_and_covers};
    use lease_history::{Point, Event, OutcomeKind};

    // The scripted crashes: each crashed job has one applied output, is adopted, and completes
    // once with exactly that output.
    #[test]
    fn scripted_crashes_are_adopted_and_never_repeated() {
        let report = scripted(SCENARIO, 1);
        let history = &report.history;
        let crashed: Vec<_> = history
            .iter()
            .filter_map(|e| match &e.event {
                Event::Crashed { point: Point::AfterEffect, job: Some(job), .. } => Some(*job),
                _ => None,
            })
            .collect();
        assert!(crashed.len() >= 4, "the script crashes jobs 0..4 after their effects: {crashed:?}");
        for job in crashed {
            let applied: Vec<_> = history
                .iter()
                .filter_map(|e| match &e.event {
                    Event::EffectApplied { job: j, output, .. } if *j == job => Some(*output),
                    _ => None,
                })
                .collect();
            assert_eq!(applied.len(), 1, "{job}: one effect, never repeated");
            assert!(count(history, |e| matches!(e, Event::Adopted { job: j, .. } if *j == job)) >= 1, "{job} adopted");
            let terminals: Vec<_> = history
                .iter()
                .filter_map(|e| match &e.event {
                    Event::Terminal { job: j, outcome, output, .. } if *j == job => Some((*outcome, *output)),
                    _ => None,
                })
                .collect();
            assert_eq!(
                terminals,
                vec![(OutcomeKind::Completed, Some(applied[0]))],
                "{job}: one terminal, the adopted output"
            );
        }
    }

    // The sweep holds every invariant and reaches a crash after an accepted effect, adopted by a reclaim.
    #[test]
    fn swept_seeds_hold_and_reach_adoption_after_a_crash() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 1);
    }
}
