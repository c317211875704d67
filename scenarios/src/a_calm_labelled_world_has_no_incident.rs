//! Proves the labelled world's calm case is calm: the lead-in's load goes on through the window
//! and the tail, with no fault of any kind, and the backlog shows no sustained growth. Its label
//! is empty: a report must find no incident in it. (`calm` is also every scenario's baseline.)

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::CALM;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{median_backlog, sweep_holds_and_covers};
    use lease_history::render::is_fault;

    // At the median over its seeds the backlog's peak in the window is within 3 jobs of the
    // lead-in's, and no seed's history has a fault line but the heal.
    #[test]
    fn the_calm_world_s_backlog_stays_level() {
        let b = median_backlog(SCENARIO, 50);
        assert!(b.window <= b.lead + 3 && b.tail <= b.lead + 3, "{b:?}");
        for seed in 0..20 {
            let report = lease_sim::world::run(SCENARIO.params(seed, None));
            let faults = report.history.iter().filter(|entry| is_fault(&entry.event)).count();
            assert_eq!(faults, 1, "seed {seed}: only faults_healed");
        }
    }

    // The sweep holds every invariant.
    #[test]
    fn swept_seeds_hold_every_invariant() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 1);
    }
}
