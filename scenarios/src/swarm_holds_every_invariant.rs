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
    use crate::prove::sweep_holds_and_covers;

    // The swarm sweep holds and reaches every situation of the swarm's list.
    #[test]
    fn swarm_sweep_holds_and_reaches_every_situation() {
        let coverage = sweep_holds_and_covers(SCENARIO, 1000);
        println!("swarm coverage: {coverage:?}");
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 12);
    }
}
