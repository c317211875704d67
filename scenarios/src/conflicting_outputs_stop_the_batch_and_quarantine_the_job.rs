//! Proves that when a reclaim finds two different outputs claiming one operation, the reclaimer
//! stops the batch, quarantines exactly that job with both identities, raises the alert, and
//! touches nothing else in that batch. How: the script makes the dependency write a second output
//! for jobs 0 to 2 and crashes the workers of jobs 0 to 7 after their effects, so reclaims meet
//! the conflicts, often in batches with other expired leases; the sweep adds random rivals.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::CONFLICTING_OUTPUTS;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{scripted, sweep_holds_and_covers};
    use lease_history::{Event, OutcomeKind};

    // Each stopped batch quarantined its job with both identities, and nothing in that batch
    // happened after the stop.
    #[test]
    fn a_conflict_stops_the_batch_and_quarantines_only_that_job() {
        let report = scripted(SCENARIO, 5);
        let history = &report.history;
        let mut stops = 0;
        for (index, entry) in history.iter().enumerate() {
            let Event::BatchStopped { batch, job, identities, .. } = &entry.event else { continue };
            stops += 1;
            let quarantined = history[..index].iter().any(|e| {
                matches!(&e.event, Event::Terminal { job: j, outcome: OutcomeKind::Quarantined, identities: Some(ids), .. }
                    if j == job && ids == identities)
            });
            assert!(quarantined, "{job} quarantined with both identities before the alert");
            for later in &history[index + 1..] {
                let touched = match &later.event {
                    Event::Reclaimed { batch: b, .. } => b == batch,
                    Event::Requeued { batch: Some(b), .. } | Event::Terminal { batch: Some(b), .. } => b == batch,
                    Event::LookedUp { batch: Some(b), .. } => b == batch,
                    _ => false,
                };
                assert!(!touched, "batch touched after it stopped: {later:?}");
            }
        }
        assert!(stops >= 1, "the scripted conflicts stop a batch");
    }

    // The sweep holds every invariant and reaches stopped batches and quarantines.
    #[test]
    fn swept_seeds_hold_and_reach_quarantine() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 5);
    }
}
