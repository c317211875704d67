//! Proves that arrivals offered in batches (`lease_store::TableStore::enqueue_batch`) are each
//! judged on their own: a batch that crosses the queue's capacity has its first jobs accepted and
//! the rest rejected, each with its line, and nothing accepted is lost, while the table and the
//! workers crash and the network loses batches. How: a small capacity, `batch_max` and the
//! generator's batch of up to 16, a surge that makes jobs fall due while an offer waits for its
//! answer, packet loss, and a crash of the table and of a worker while jobs arrive.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::ARRIVAL_BURSTS;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{rejections_are_visible_and_nothing_accepted_is_lost, scripted, sweep_holds_and_covers};
    use lease_history::{Event, Node};
    use std::collections::BTreeMap;

    // Offers went in batches, one crossed the capacity (accepted and rejected at one instant),
    // every offer was answered with a line, nothing rejected ran, and every accepted job ended.
    #[test]
    fn a_batch_past_capacity_is_judged_job_by_job() {
        let report = scripted(SCENARIO, 2);
        assert!(report.params.enqueue_batch >= 2, "{}", report.params.describe());
        let history = &report.history;
        let mut instants: BTreeMap<u64, Vec<&Event>> = BTreeMap::new();
        for entry in history.iter().filter(|entry| entry.node == Node::Table) {
            if matches!(entry.event, Event::Arrived { .. } | Event::Rejected { .. } | Event::Duplicate { .. }) {
                instants.entry(entry.t_us).or_default().push(&entry.event);
            }
        }
        let largest = instants.values().map(Vec::len).max().unwrap_or(0);
        assert!(largest >= 4, "a batch of at least four jobs answered at one instant (largest {largest})");
        let crossed = instants.values().any(|answers| {
            answers.iter().any(|e| matches!(e, Event::Arrived { .. }))
                && answers.iter().any(|e| matches!(e, Event::Rejected { .. }))
        });
        assert!(crossed, "a batch accepted its first jobs and rejected the rest");
        rejections_are_visible_and_nothing_accepted_is_lost(&report);
    }

    // A run's plan replays it: the same history line for line, and the same plan recorded again,
    // though jobs that fell due while an offer waited were reached after their time (each is
    // recorded at its planned time, not the time it was reached).
    #[test]
    fn a_plan_of_batched_arrivals_replays_its_run() {
        let original = scripted(SCENARIO, 2);
        let text = original.plan.to_json();
        let plan = lease_sim::faults::plan::Plan::parse(&text).expect("a recorded plan reads");
        let replay = lease_sim::world::run(plan.params().expect("a recorded plan is valid"));
        assert_eq!(lease_history::to_jsonl(&replay.history), lease_history::to_jsonl(&original.history));
        assert_eq!(replay.plan.to_json(), text, "the replay records its plan");
    }

    // The sweep holds every invariant and reaches rejections, crashes and reclaims.
    #[test]
    fn swept_seeds_hold_under_bursts() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 77);
    }
}
