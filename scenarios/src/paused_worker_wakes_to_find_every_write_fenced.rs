//! Proves that a worker that stalls past its lease (a GC pause between deciding and acting) and
//! wakes after the lease was reclaimed gets every one of its writes fenced: its late effect is
//! refused by the ledger, its late completion by the table. How: the script stalls the workers of
//! jobs 0 to 2 for two lease lengths after they decided to call the dependency, and those of jobs
//! 3 to 5 after they decided to complete; the sweep adds random stalls and process pauses.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::PAUSED_WORKER;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::{scripted, sweep_holds_and_covers};
    use lease_history::{EffectRejectReason, Event, Node, RefuseReason};

    // For each stalled worker: the epoch it held was reclaimed while it slept, and after it woke
    // nothing under that epoch was accepted, while at least one of its writes was refused.
    #[test]
    fn every_write_of_a_woken_worker_is_fenced() {
        let report = scripted(SCENARIO, 3);
        let history = &report.history;
        let mut checked = 0;
        for (index, entry) in history.iter().enumerate() {
            let Event::Paused { target: worker @ Node::Worker(_), .. } = entry.event else { continue };
            let Some(resumed) = history[index..].iter().position(|e| e.event == Event::Resumed { target: worker })
            else {
                continue;
            };
            let woke = index + resumed;
            // The lease the worker held when it stalled: its latest grant before the stall.
            let Some((job, epoch)) = history[..index].iter().rev().find_map(|e| match &e.event {
                Event::Granted { job, epoch, owner, .. } if *owner == worker => Some((*job, *epoch)),
                _ => None,
            }) else {
                continue;
            };
            let reclaimed_while_asleep = history[index..woke]
                .iter()
                .any(|e| matches!(&e.event, Event::Reclaimed { job: j, epoch: x, .. } if *j == job && *x == epoch));
            if !reclaimed_while_asleep {
                continue;
            }
            for e in &history[woke..] {
                match &e.event {
                    Event::EffectApplied { job: j, epoch: x, .. }
                    | Event::Terminal { job: j, epoch: x, .. }
                    | Event::Renewed { job: j, epoch: x, .. } => {
                        assert!(!(*j == job && *x == epoch), "a woken worker's write was accepted: {e:?}")
                    }
                    _ => {}
                }
            }
            let refused = history[woke..].iter().any(|e| match &e.event {
                Event::EffectRejected { job: j, epoch: x, reason: EffectRejectReason::Fenced, .. }
                | Event::Refused { job: j, epoch: x, reason: RefuseReason::StaleEpoch, .. } => *j == job && *x == epoch,
                _ => false,
            });
            let abandoned = history[woke..]
                .iter()
                .any(|e| matches!(&e.event, Event::Abandoned { job: j, epoch: x, .. } if *j == job && *x == epoch));
            assert!(refused || abandoned, "{worker} woke holding {job} {epoch}: a write refused, or it self-fenced");
            checked += 1;
        }
        assert!(checked >= 3, "the script's stalls outlive their leases: {checked} checked");
    }

    // The sweep holds every invariant and reaches woken workers fenced at the ledger and the table.
    #[test]
    fn swept_seeds_hold_and_reach_fenced_woken_workers() {
        sweep_holds_and_covers(SCENARIO, 200);
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 3);
    }
}
