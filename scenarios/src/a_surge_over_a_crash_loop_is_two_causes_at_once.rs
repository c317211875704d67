//! Proves the mixed case of arrivals and workers: a surge of 3 to 5 times the arrival rate and
//! two of three workers in a crash loop, both through the window; the backlog grows and
//! drains. Its label is arrivals and workers.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::SURGE_AND_CRASH_LOOP;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{fault_grows_the_backlog_and_it_drains, sweep_holds_and_covers};

    // At the median over its seeds the backlog's peak is at least twice the lead-in's, and it drains after the heal.
    #[test]
    fn two_causes_grow_the_backlog_and_it_drains_after() {
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
