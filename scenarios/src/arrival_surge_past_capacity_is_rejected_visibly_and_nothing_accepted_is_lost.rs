//! Proves that an arrival surge past the queue's capacity is turned away visibly (each rejection
//! recorded with its reason and counted) and that nothing accepted is lost. How: a small capacity
//! and a surge of twenty to fifty times the arrival rate.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::ARRIVAL_SURGE;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{rejections_are_visible_and_nothing_accepted_is_lost, scripted, sweep_holds_and_covers};

    // Rejections are counted, rejected jobs never ran, and every accepted job ended.
    #[test]
    fn a_surge_is_rejected_visibly_and_every_accepted_job_ends() {
        rejections_are_visible_and_nothing_accepted_is_lost(&scripted(SCENARIO, 12));
    }

    // The sweep holds every invariant and reaches rejections.
    #[test]
    fn swept_seeds_hold_under_surges() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 11);
    }
}
