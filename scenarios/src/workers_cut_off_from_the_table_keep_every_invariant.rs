//! Proves that workers cut off from the table while the ledger stays reachable keep every
//! invariant: a one-sided partition is the case where a worker can still reach one authority
//! after losing the other. How: two to four scheduled cuts of single worker-table links, each for
//! one to four lease lengths, with packet loss and latency around them.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::CUT_FROM_TABLE;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{count, scripted, sweep_holds_and_covers};
    use lease_history::{Event, Node};

    // The scripted seed cuts worker-table links and still ends every accepted job once.
    #[test]
    fn cut_links_to_the_table_keep_every_invariant() {
        let report = scripted(SCENARIO, 7);
        let history = &report.history;
        let cuts = count(history, |e| matches!(e, Event::Partitioned { peer: Some(Node::Table), .. }));
        assert!(cuts >= 2, "links to the table were cut");
        let arrived = count(history, |e| matches!(e, Event::Arrived { .. }));
        assert_eq!(count(history, |e| matches!(e, Event::Terminal { .. })), arrived, "every accepted job ends once");
    }

    // The sweep holds every invariant and reaches reclaims, self-fencing, and outputs adopted from workers that could not acknowledge.
    #[test]
    fn swept_seeds_hold_with_links_to_the_table_cut() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 7);
    }
}
