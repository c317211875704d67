//! Proves that arrivals alone can push the labelled world past its capacity, and that a healthy
//! fleet drains the backlog once they calm down: the labelled world (a calm lead-in, the
//! window, a calm tail) with a surge of 3 to 6 times the arrival rate through the window. Its
//! label is arrivals.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::SURGE;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{fault_grows_the_backlog_and_it_drains, sweep_holds_and_covers};

    // At the median over its seeds the backlog's peak in the surge is at least twice the lead-in's, and it is back near the lead-in's by the end of the arrivals.
    #[test]
    fn a_surge_grows_the_backlog_and_a_healthy_fleet_drains_it() {
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
