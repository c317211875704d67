//! Proves that workers alone can push the labelled world past its capacity: two or three of its
//! three workers crash again and again through the window (down 150 to 300 ms, up 50 to 150 ms),
//! at the calm arrival rate; the backlog drains once they stay up. Its label is workers.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::CRASH_LOOP;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{fault_grows_the_backlog_and_it_drains, sweep_holds_and_covers};

    // At the median over its seeds the backlog's peak in the crash loop is at least twice the lead-in's, and it drains after the heal.
    #[test]
    fn a_crash_loop_grows_the_backlog_and_it_drains_after() {
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
