//! Proves that the protocol holds every invariant under the swarm, as FoundationDB and
//! TigerBeetle's VOPR test: each seed switches every fault kind on or off at random (crashes at
//! protocol points and at random, partitions of nodes and links, loss and latency, pauses and
//! stalls, clock drift, a slow and failing dependency, rival outputs, arrival surges) and picks
//! its own rates. How: a sweep over the default seeds that must also reach every interesting
//! situation listed for the swarm.

use lease_sim::scenario::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::Swarm;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::sweep_holds_and_reaches;

    // The swarm sweep holds and reaches every situation of the swarm's list; and each of the
    // protocol's seven windows (lease_sim::check::windows) in at least 5% of the seeds, so that a
    // bug living in one is met within a few dozen seeds, not once a night.
    #[test]
    fn swarm_sweep_holds_and_reaches_every_situation_and_window() {
        let reach = sweep_holds_and_reaches(SCENARIO, 1000);
        println!("swarm coverage: {:?}", reach.coverage);
        println!("seeds reaching: {:?}", reach.seeds_reaching);
        if !reach.default_seeds {
            return; // A chosen seed range proves the invariants, not the rates.
        }
        for window in lease_sim::check::windows::WINDOWS {
            assert!(SCENARIO.situations().contains(&window), "the swarm does not require {window}");
            let seeds = reach.seeds_reaching.get(window);
            assert!(
                seeds * 20 >= reach.runs,
                "{window} reached in {seeds} of {} seeds, under 5%: {:?}",
                reach.runs,
                reach.seeds_reaching
            );
        }
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 12);
    }
}
