//! Proves that the runtime's own record of its handler's output (the path of a service whose
//! dependency takes no fencing token) keeps every invariant under the swarm's faults, and that a
//! job its dependency refuses for good is dead-lettered after one try, said on the history, while
//! every other job still ends once. How: a sweep of `service-handlers` (the swarm's draw; some or
//! all workers on a recording handler; a share of poison jobs), which must reach crashes after an
//! effect the runtime recorded, fenced stale records and refusals for good; and a look at the
//! first seeds, where every poison job ends dead-lettered for good, no other job does, and the
//! recording workers' outputs reach the ledger through their `record` calls. The same sweep
//! deploys: workers told to stop drain, hand back what they never ran, exit and come back, and
//! handlers run past their timeout; a world whose every handler times out shows the timeout is a
//! retryable failure, said on the history, attempt after attempt.

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

    // Over the first seeds: a process that batches and records its handlers' outputs itself
    // sends them to the ledger in batches (one message, one transaction, for the outputs of one
    // turn), and a process that does not batch never does. A runtime that sent each record alone
    // would hold every invariant and spend a round trip a record.
    #[test]
    fn batching_recorders_send_their_outputs_in_batches() {
        let (mut batched_worlds, mut record_batches) = (0, 0);
        for seed in 0..60 {
            let params = SCENARIO.params(seed, None);
            let batching = params.batch > 1 && params.recorders > 0;
            let report = lease_sim::world::run(params);
            let batches = report.events.batches[lease_sim::world::Events::RECORDS];
            assert!(batching || batches == 0, "seed {seed}: {batches} record batches, but no recorder batches");
            batched_worlds += u64::from(batching);
            record_batches += batches;
        }
        assert!(batched_worlds >= 5 && record_batches >= 10, "{record_batches} record batches in {batched_worlds} worlds");
    }

    // Over the first seeds: every node told to stop exits (or crashes first) and comes back, and
    // some hand a lease they never ran back to the queue; each run holds. A node the run ended on
    // while it was stalled (told to stop during a stall that outlasted every job) is not asked to
    // have exited: nothing runs in a stalled process, its drain included.
    #[test]
    fn deploys_drain_exit_and_come_back() {
        let (mut told, mut handed_back) = (0, 0);
        for seed in 0..16 {
            let report = crate::prove::scripted(SCENARIO, seed);
            let mut stopping = std::collections::BTreeSet::new();
            let mut down = std::collections::BTreeSet::new();
            let mut stalled = std::collections::BTreeSet::new();
            for entry in &report.history {
                match &entry.event {
                    Event::Paused { target, .. } => {
                        stalled.insert(*target);
                    }
                    Event::Resumed { target } => {
                        stalled.remove(target);
                    }
                    Event::Stopping { target, .. } => {
                        assert!(stopping.insert(*target), "seed {seed}: {target} told twice: {entry:?}");
                        told += 1;
                    }
                    Event::Stopped { target } => {
                        assert!(stopping.remove(target), "seed {seed}: {target} exited untold");
                        down.insert(*target);
                    }
                    Event::Crashed { target, .. } => {
                        stopping.remove(target);
                        stalled.remove(target);
                        down.insert(*target);
                    }
                    Event::Restarted { target } => {
                        down.remove(target);
                    }
                    Event::Abandoned { why: lease_history::AbandonReason::Shutdown, .. } => handed_back += 1,
                    _ => {}
                }
            }
            let never_exited: Vec<_> = stopping.difference(&stalled).collect();
            assert!(never_exited.is_empty() && down.is_empty(), "seed {seed}: {never_exited:?} never exited, {down:?} never back");
        }
        assert!(told >= 8 && handed_back > 0, "{told} told to stop, {handed_back} leases handed back");
    }

    // Every handler runs past a timeout shorter than any call: each attempt is a retryable
    // failure the runtime says on the history (the dependency never answers in time, so it never
    // does), and every job is dead-lettered once its attempts are spent, none self-fenced.
    #[test]
    fn a_handler_past_its_timeout_fails_each_attempt_and_says_so() {
        let mut params = lease_sim::world::Params::quiet(SCENARIO.name().to_string(), 3, None);
        params.jobs = 20;
        params.recorders = params.workers;
        params.handler_timeout_us = Some(500);
        let report = lease_sim::world::run(params.clone());
        assert!(matches!(report.verdict, lease_sim::world::Verdict::Held), "{:?}", report.verdict);
        let mut failed = std::collections::BTreeMap::new();
        let mut dead = 0;
        for entry in &report.history {
            match &entry.event {
                Event::DependencyFailed { job, permanent: false, after_effect: false, .. } => {
                    *failed.entry(*job).or_insert(0) += 1
                }
                Event::Terminal { outcome, attempts, .. } => {
                    assert_eq!(*outcome, OutcomeKind::DeadLettered, "{entry:?}");
                    assert_eq!(*attempts, Some(params.table.attempts_max), "{entry:?}");
                    dead += 1;
                }
                Event::Abandoned { .. } => panic!("a lease given up, not failed: {entry:?}"),
                Event::EffectApplied { .. } => panic!("an effect after every call timed out: {entry:?}"),
                _ => {}
            }
        }
        assert_eq!(dead, params.jobs, "every job dead-lettered");
        assert!(failed.values().all(|&n| n == params.table.attempts_max), "{failed:?}");
        assert_eq!(failed.len(), params.jobs as usize);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 3);
    }
}
