//! Proves the mixed case of the dependency and workers: every call 5 to 10 times slower and two
//! of three workers cut off from the table, both through the window; the backlog grows and
//! drains. Its label is dependency and workers.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::SLOWDOWN_AND_CUT_OFF;

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
