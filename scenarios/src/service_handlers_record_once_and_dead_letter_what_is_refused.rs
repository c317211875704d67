//! Proves that the runtime's own record of its handler's output (the path of a service whose
//! dependency takes no fencing token) keeps every invariant under the swarm's faults, and that a
//! job its dependency refuses for good is dead-lettered after one try, said on the history, while
//! every other job still ends once. How: a sweep of `service-handlers` (the swarm's draw; some or
//! all workers on a recording handler; a share of poison jobs), which must reach crashes after an
//! effect the runtime recorded, fenced stale records and refusals for good; and a look at the
//! first seeds, where every poison job ends dead-lettered for good, no other job does, and the
//! recording workers' outputs reach the ledger through their `record` calls.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::SERVICE_HANDLERS;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::sweep_holds_and_covers;
    use lease_history::{Event, Node, OutcomeKind};

    #[test]
    fn swept_seeds_hold_and_reach_records_and_refusals() {
        sweep_holds_and_covers(SCENARIO, 300);
    }

    // Over the first seeds: a job ends dead-lettered for good exactly when it is poison, after
    // one attempt; a recording worker's applied outputs are its runtime's records (the fenced
    // dependency writes none for it), and the fenced workers' are their dependency's.
    #[test]
    fn poison_jobs_end_for_good_and_recorders_record_their_own_outputs() {
        let (mut refused, mut recorded) = (0, 0);
        for seed in 0..12 {
            let params = SCENARIO.params(seed, None);
            let report = lease_sim::world::run(params.clone());
            for entry in &report.history {
                match &entry.event {
                    Event::Terminal { job, outcome: OutcomeKind::DeadLettered, permanent: true, attempts, .. } => {
                        assert!(params.is_poison(*job), "seed {seed}: {job} refused for good, not poison");
                        assert!(attempts.is_some_and(|attempts| attempts >= 1), "seed {seed}: {job}");
                        refused += 1;
                    }
                    Event::Terminal { job, .. } => {
                        assert!(!params.is_poison(*job), "seed {seed}: poison {job} ended otherwise: {entry:?}")
                    }
                    Event::EffectApplied { from: Node::Worker(n), .. } if params.records_itself(*n) => recorded += 1,
                    _ => {}
                }
            }
        }
        assert!(refused > 0 && recorded > 0, "{refused} refused for good, {recorded} recorded by a runtime");
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 3);
    }
}
