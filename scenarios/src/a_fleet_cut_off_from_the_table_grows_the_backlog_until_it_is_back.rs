//! Proves that workers alone can push the labelled world past its capacity without crashing: two
//! or three of its three workers are cut off from the table through the window, at the calm
//! arrival rate; the backlog drains once the links are back. Its label is workers.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::FLEET_CUT_OFF;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{fault_grows_the_backlog_and_it_drains, sweep_holds_and_covers};

    // At the median over its seeds the backlog's peak while the fleet is cut off is at least twice the lead-in's, and it drains after the heal.
    #[test]
    fn a_cut_off_fleet_grows_the_backlog_and_it_drains_after() {
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
