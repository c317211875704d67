//! Proves that a ledger crash loses no call and duplicates no effect: the calls in flight die
//! with the ledger, their workers keep their leases (the table is reachable, so renewals go on)
//! and retry the same call until the restarted ledger answers it; the ledger's records are
//! durable, so a retry of a call it already applied is answered `already_applied`, never applied
//! again. How: calls of 20 to 120 ms, and two to four ledger crashes, the first within the first
//! 100 ms, each down for a quarter of a lease to two leases.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::LEDGER_RESTART;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{count, scripted, sweep_holds_and_covers};
    use lease_history::{Entry, Event, Node, OutcomeKind};
    use lease_core::{Epoch, JobId};
    use std::collections::BTreeMap;

    /// Whether `event` is the ledger's answer to a call for `job` under `epoch`.
    fn answers(event: &Event, job: JobId, epoch: Epoch) -> bool {
        match *event {
            Event::EffectApplied { job: j, epoch: e, .. }
            | Event::EffectRejected { job: j, epoch: e, .. }
            | Event::DependencyFailed { job: j, epoch: e, .. } => (j, e) == (job, epoch),
            _ => false,
        }
    }

    /// The calls in flight when the ledger crashed at `t_us`: each job and epoch whose last call
    /// before the crash the ledger had not answered.
    fn in_flight(history: &[Entry], t_us: u64) -> Vec<(JobId, Epoch)> {
        let mut calls = BTreeMap::new();
        for entry in history.iter().take_while(|entry| entry.t_us <= t_us) {
            match entry.event {
                Event::Executing { job, epoch, .. } => {
                    calls.insert((job, epoch), true);
                }
                ref event => calls.retain(|&(job, epoch), _| !answers(event, job, epoch)),
            }
        }
        calls.into_keys().collect()
    }

    // The scripted seed's first crash finds calls in flight; the ledger restarts, and every one
    // of them is answered after the restart under the same epoch (a retry, not a reclaim), and
    // its job completes with that output. No operation is applied twice, and every accepted job
    // ends once.
    #[test]
    fn calls_in_flight_at_a_ledger_crash_are_retried_and_answered_once() {
        let report = scripted(SCENARIO, 1);
        let history = &report.history;
        let crash = history
            .iter()
            .find(|e| matches!(e.event, Event::Crashed { target: Node::Ledger, .. }))
            .expect("the ledger crashed");
        let restart = history
            .iter()
            .find(|e| e.t_us > crash.t_us && matches!(e.event, Event::Restarted { target: Node::Ledger }))
            .expect("the ledger restarted");
        let calls = in_flight(history, crash.t_us);
        assert!(!calls.is_empty(), "calls were in flight at the crash, {} us", crash.t_us);
        for (job, epoch) in calls {
            let answered = history.iter().find(|e| answers(&e.event, job, epoch)).expect("the call is answered");
            assert!(answered.t_us > restart.t_us, "{job} {epoch:?}: answered only after the restart");
            let Event::EffectApplied { output, .. } = answered.event else {
                panic!("{job}: the retried call applied its effect, got {:?}", answered.event)
            };
            let terminal = history.iter().find_map(|e| match e.event {
                Event::Terminal { job: j, outcome, output, epoch, .. } if j == job => Some((outcome, output, epoch)),
                _ => None,
            });
            assert_eq!(terminal, Some((OutcomeKind::Completed, Some(output), epoch)), "{job}: completed with it");
        }
        let mut applied = BTreeMap::new();
        for entry in history {
            if let Event::EffectApplied { op, .. } = entry.event {
                *applied.entry(op).or_insert(0) += 1;
            }
        }
        assert!(applied.values().all(|&n| n == 1), "one applied output per operation: {applied:?}");
        let arrived = count(history, |e| matches!(e, Event::Arrived { .. }));
        assert_eq!(count(history, |e| matches!(e, Event::Terminal { .. })), arrived, "every accepted job ends once");
    }

    // The sweep holds every invariant, and reaches leases renewed across the outage and retried
    // calls answered a second time without a second effect.
    #[test]
    fn swept_seeds_hold_across_ledger_restarts() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 1);
    }
}
