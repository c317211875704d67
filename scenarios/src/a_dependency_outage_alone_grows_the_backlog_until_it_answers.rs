//! Proves that the dependency alone can push the labelled world past its capacity by failing: 60
//! to 80% of calls fail through the window, each failure an attempt wasted, at the calm arrival
//! rate; the backlog drains once calls succeed again. Its label is dependency.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::DEPENDENCY_OUTAGE;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{fault_grows_the_backlog_and_it_drains, sweep_holds_and_covers};

    // At the median over its seeds the backlog's peak in the outage is at least twice the lead-in's, and it drains after the heal.
    #[test]
    fn an_outage_grows_the_backlog_and_it_drains_after() {
        fault_grows_the_backlog_and_it_drains(SCENARIO);
    }

    // The sweep holds every invariant and reaches the scenario's situations.
    #[test]
    fn swept_seeds_hold_every_invariant() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 1);
    }
}
