//! Proves that workers and reclaimers with fast and slow clocks (±5% drift, offsets of seconds)
//! never cause an unexpired lease to be reclaimed or a stale effect to be applied: expiry is the
//! table's to decide, and workers self-fence before their local estimate of expiry minus a margin
//! wider than the drift. How: every worker and reclaimer gets its own clock; pauses, crashes and
//! losses are added around them.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::CLOCK_DRIFT;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{count, scripted, sweep_holds_and_covers};
    use lease_sim::clock::LocalClock;
    use lease_history::Event;

    // With drifting clocks, every reclaim happens at or after the expiry the table set.
    #[test]
    fn drifting_clocks_reclaim_only_expired_leases() {
        let report = scripted(SCENARIO, 5);
        let drifting = report.params.worker_clocks.iter().chain(&report.params.reclaimer_clocks);
        assert!(drifting.filter(|clock| **clock != LocalClock::EXACT).count() >= 2, "clocks drift");
        let history = &report.history;
        assert!(count(history, |e| matches!(e, Event::Reclaimed { .. })) > 0, "something was reclaimed");
        for entry in history {
            if let Event::Reclaimed { expires_at_us, .. } = entry.event {
                assert!(entry.t_us >= expires_at_us, "reclaimed before expiry: {entry:?}");
            }
        }
    }

    // The sweep holds every invariant and reaches reclaims, renewals and self-fencing.
    #[test]
    fn swept_seeds_hold_with_drifting_clocks() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    // Seed 20: a paused worker with a drifting clock wakes after two reclaimers raced for its
    // expired lease, and self-fences; the table refuses renewals of jobs already ended.
    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 20);
    }
}
