//! Proves that when reclaimers race for one expired lease, exactly one wins it and the job reaches
//! exactly one terminal outcome; the losers record a lost race and touch nothing. How: three to five
//! reclaimers scan at the same short cadence; the script crashes the workers of jobs 0 to 5 before
//! their effects, so their leases expire and every reclaimer lists them at once.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::RECLAIMER_RACE;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{count, scripted, sweep_holds_and_covers};
    use lease_history::Event;
    use std::collections::BTreeSet;

    // Every job a reclaimer lost a race for was reclaimed once per epoch, and ended exactly once.
    #[test]
    fn a_race_has_one_winner_and_one_terminal_outcome() {
        let report = scripted(SCENARIO, 2);
        let history = &report.history;
        let raced: BTreeSet<_> = history
            .iter()
            .filter_map(|e| match &e.event {
                Event::LostRace { job, .. } => Some(*job),
                _ => None,
            })
            .collect();
        assert!(!raced.is_empty(), "reclaimers raced");
        for job in raced {
            let terminals = count(history, |e| matches!(e, Event::Terminal { job: j, .. } if *j == job));
            assert_eq!(terminals, 1, "{job}: exactly one terminal outcome");
            let mut epochs = BTreeSet::new();
            for e in history {
                if let Event::Reclaimed { job: j, epoch, .. } = &e.event {
                    assert!(*j != job || epochs.insert(*epoch), "{job}: {epoch} reclaimed twice");
                }
            }
        }
    }

    // The sweep holds every invariant and reaches lost races.
    #[test]
    fn swept_seeds_hold_and_reach_lost_races() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 2);
    }
}
