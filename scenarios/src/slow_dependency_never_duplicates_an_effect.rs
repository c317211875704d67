//! Proves that a dependency slower than the lease never duplicates an effect: the slow call's
//! lease expires and is reclaimed, the next holder raises the ledger's fence, and the slow call's
//! late apply is refused as stale (or adopted, if it landed first). How: a tenth to two fifths of
//! calls are slowed ten to sixty times.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::SLOW_DEPENDENCY;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{scripted, sweep_holds_and_covers};
    use lease_history::Event;
    use std::collections::BTreeMap;

    // Slow calls outlived leases, yet every operation has at most one applied output.
    #[test]
    fn slow_calls_outlive_leases_without_a_second_effect() {
        let report = scripted(SCENARIO, 9);
        let history = &report.history;
        let mut applied = BTreeMap::new();
        for entry in history {
            if let Event::EffectApplied { op, .. } = entry.event {
                *applied.entry(op).or_insert(0) += 1;
            }
        }
        assert!(applied.values().all(|&n| n == 1), "one applied output per operation");
        let executions = history.iter().filter(|e| matches!(e.event, Event::Executing { .. })).count();
        assert!(executions > applied.len(), "slow calls were overtaken and executed again under a new epoch");
    }

    // The sweep holds every invariant and reaches stale effects fenced at the ledger.
    #[test]
    fn swept_seeds_hold_with_a_slow_dependency() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 9);
    }
}
