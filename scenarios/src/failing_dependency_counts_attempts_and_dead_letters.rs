//! Proves that a failing dependency has its attempts counted and its jobs dead-lettered after
//! `attempts_max`, without ever duplicating an effect, even when the dependency answers "failed"
//! after the effect happened (the next attempt adopts it). How: a fifth to three fifths of calls
//! fail, some after applying, with `attempts_max` of one to three.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::FAILING_DEPENDENCY;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{scripted, sweep_holds_and_covers};
    use lease_history::{Event, OutcomeKind};

    // Every dead-lettered job spent exactly attempts_max grants; requeues count attempts upwards.
    #[test]
    fn failing_calls_dead_letter_after_attempts_max() {
        let report = scripted(SCENARIO, 10);
        let history = &report.history;
        let attempts_max = report.params.table.attempts_max;
        let mut dead = 0;
        for entry in history {
            if let Event::Terminal { job, outcome: OutcomeKind::DeadLettered, attempts, .. } = entry.event {
                dead += 1;
                assert_eq!(attempts, Some(attempts_max), "{job} dead-lettered after attempts_max");
                let grants =
                    history.iter().filter(|e| matches!(e.event, Event::Granted { job: j, .. } if j == job)).count();
                assert_eq!(grants as u32, attempts_max, "{job}: one grant per attempt");
            }
        }
        assert!(dead > 0, "some job ran out of attempts");
    }

    // The sweep holds every invariant and reaches failures, dead letters and adoption by a worker.
    #[test]
    fn swept_seeds_hold_with_a_failing_dependency() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 10);
    }
}
