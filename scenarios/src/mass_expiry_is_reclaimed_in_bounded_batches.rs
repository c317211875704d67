//! Proves that when every worker crashes at once, the mass of expired leases is reclaimed in
//! batches of at most `batch_max`, and the backlog drains once the workers are back. How: a burst
//! of arrivals fills the workers, then all of them crash at one instant and stay down for several
//! lease lengths, with a small `batch_max`.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::MASS_EXPIRY;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{count, scripted, sweep_holds_and_covers};
    use lease_history::Event;
    use std::collections::BTreeMap;

    // No batch exceeds batch_max, some batch is full, and every accepted job ends.
    #[test]
    fn mass_expiry_is_reclaimed_in_bounded_batches_and_drains() {
        let report = scripted(SCENARIO, 6);
        let history = &report.history;
        let batch_max = report.params.table.batch_max;
        let mut sizes = BTreeMap::new();
        for entry in history {
            if let Event::Reclaimed { batch, .. } = entry.event {
                *sizes.entry(batch).or_insert(0usize) += 1;
            }
        }
        assert!(!sizes.is_empty(), "leases were reclaimed");
        assert!(sizes.values().all(|&size| size <= batch_max), "a batch over {batch_max}: {sizes:?}");
        assert!(sizes.values().any(|&size| size == batch_max), "some batch is full: {sizes:?}");
        let arrived = count(history, |e| matches!(e, Event::Arrived { .. }));
        assert_eq!(count(history, |e| matches!(e, Event::Terminal { .. })), arrived, "the backlog drains");
    }

    // The sweep holds every invariant and reaches full batches.
    #[test]
    fn swept_seeds_hold_and_reach_full_batches() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    // Seed 9: every worker crashes at once, and the reclaimer lists the expired leases in full
    // batches of its `batch_max` (2). (Seed 6, the test's, reclaims nothing among its first 12 jobs.)
    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 9);
    }
}
