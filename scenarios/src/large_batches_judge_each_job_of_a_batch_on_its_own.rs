//! Proves that a batch is judged job by job: a worker process of 8 to 16 slots, stalled past its
//! leases while its renewals or completions wait to leave, or crashed after one slot's effect
//! while its siblings' are in flight, sends batches that name leases reclaimers took meanwhile;
//! each stale lease in such a batch is refused, the current ones beside it are accepted, and no
//! invariant breaks. How: a sweep of `large-batches`, which must reach the three batch windows
//! (a crash between two effects of one turn, a completion batch carrying a stale epoch, a renewal
//! batch naming a reclaimed lease); and a look at the first seeds' histories, batch by batch.

use lease_sim::scenarios::Scenario;

/// The scenario.
pub const SCENARIO: Scenario = Scenario::LARGE_BATCHES;

#[cfg(test)]
mod tests {
    use super::SCENARIO;
    use crate::prove::sweep_holds_and_covers;
    use lease_core::{Epoch, JobId};
    use lease_history::{Event, Node, OutcomeKind, RefuseReason, RefusedRequest};
    use std::collections::BTreeMap;

    #[test]
    fn swept_seeds_hold_and_reach_every_batch_window() {
        sweep_holds_and_covers(SCENARIO, 300);
    }

    // Proves a process batches every kind of request that batches: over the first seeds, the
    // table (the ledger, for lookups) serves batches of acquires, renewals, lookups and
    // completions, each one message of two or more requests. A runtime that sent one kind alone
    // would hold every invariant and lose the round trips batching saves.
    #[test]
    fn every_kind_of_request_leaves_in_batches() {
        let mut kinds = [0u64; lease_sim::world::BATCH_KINDS];
        for seed in 0..20 {
            let report = crate::prove::scripted(SCENARIO, seed);
            for (total, seen) in kinds.iter_mut().zip(report.events.batches) {
                *total += seen;
            }
        }
        let [acquires, renewals, lookups, completions, _requeues, _records] = kinds;
        assert!(acquires > 0 && renewals > 0 && lookups > 0 && completions > 0, "batches by kind: {kinds:?}");
    }

    /// One answer of the table to a worker's renewal or completion: its process's batch key
    /// (time, process, kind), the job's epoch as named, whether it was accepted.
    fn answer(event: &Event, processes: u32) -> Option<((u32, bool), JobId, Epoch, bool)> {
        let (from, job, epoch, renewal, accepted) = match event {
            Event::Renewed { from, job, epoch, .. } => (from, job, epoch, true, true),
            Event::Terminal { from, job, epoch, outcome: OutcomeKind::Completed, .. } => (from, job, epoch, false, true),
            Event::AlreadyCompleted { from, job, epoch, .. } => (from, job, epoch, false, true),
            Event::Refused { from, job, epoch, request: RefusedRequest::Renew, .. } => (from, job, epoch, true, false),
            Event::Refused { from, job, epoch, request: RefusedRequest::Complete, .. } => {
                (from, job, epoch, false, false)
            }
            _ => return None,
        };
        let Node::Worker(n) = from else { return None };
        Some(((n % processes, renewal), *job, *epoch, accepted))
    }

    // Over the first seeds, every batch of two or more renewals or completions (the table's
    // answers to slots of one process, one line after another at one time) is judged job by
    // job: an answer naming an epoch below its job's latest is never accepted (a completion of a
    // job a reclaimer finished may say `already_completed` only under the epoch that finished
    // it), and some batches hold a stale lease refused beside a current one accepted, so a batch
    // is neither all-or-nothing nor judged by its first job.
    #[test]
    fn each_job_of_a_batch_is_judged_on_its_own() {
        let (mut batches, mut mixed, mut stale_refused) = (0, 0, 0);
        for seed in 0..40 {
            let report = crate::prove::scripted(SCENARIO, seed);
            let processes = report.params.workers;
            let mut latest: BTreeMap<JobId, Epoch> = BTreeMap::new();
            let mut batch: Vec<(bool, bool)> = Vec::new();
            let mut key = None;
            let mut close = |batch: &mut Vec<(bool, bool)>| {
                if batch.len() >= 2 {
                    batches += 1;
                    let stale = batch.iter().any(|&(stale, _)| stale);
                    mixed += usize::from(stale && batch.iter().any(|&(stale, accepted)| !stale && accepted));
                }
                batch.clear();
            };
            for entry in &report.history {
                match (entry.node, answer(&entry.event, processes)) {
                    (Node::Table, Some((process, job, epoch, accepted))) => {
                        let this = Some((entry.t_us, process));
                        if key != this {
                            close(&mut batch);
                            key = this;
                        }
                        let stale = latest.get(&job).is_some_and(|latest| *latest > epoch);
                        assert!(!(stale && accepted), "seed {seed}: a stale lease accepted in a batch: {entry:?}");
                        if stale {
                            let Event::Refused { reason, .. } = &entry.event else { unreachable!() };
                            assert!(
                                matches!(reason, RefuseReason::StaleEpoch | RefuseReason::AlreadyTerminal),
                                "seed {seed}: {entry:?}"
                            );
                            stale_refused += 1;
                        }
                        batch.push((stale, accepted));
                    }
                    _ => {
                        close(&mut batch);
                        key = None;
                    }
                }
                match &entry.event {
                    Event::Granted { job, epoch, .. } => {
                        latest.insert(*job, *epoch);
                    }
                    Event::Reclaimed { job, new_epoch, .. } => {
                        latest.insert(*job, *new_epoch);
                    }
                    _ => {}
                }
            }
            close(&mut batch);
        }
        assert!(batches > 100, "{batches} batches of renewals or completions in 40 seeds");
        assert!(stale_refused > 10, "{stale_refused} stale leases refused in batches");
        assert!(mixed > 0, "no batch held a stale lease beside a current one: {batches} batches");
    }

    // Over the first seeds, each kind of request a process batches reaches its node as a batch:
    // two or more answers at one time, one line after another, to slots of one process, for
    // grants, renewals, completions and requeues at the table and lookups at the ledger. A runtime that
    // sent one kind alone would still hold every invariant (a mutant that drops the lookups from
    // the batched kinds does), so it is asserted here.
    #[test]
    fn every_batched_kind_of_request_leaves_as_a_batch() {
        let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
        for seed in 0..40 {
            let report = crate::prove::scripted(SCENARIO, seed);
            let processes = report.params.workers;
            let mut previous = None;
            for entry in &report.history {
                let kind = match (&entry.node, &entry.event) {
                    (Node::Table, Event::Granted { owner, .. }) => Some(("grant", *owner)),
                    (Node::Table, Event::Renewed { from, .. }) => Some(("renewal", *from)),
                    (Node::Table, Event::Terminal { from, outcome: OutcomeKind::Completed, .. }) => {
                        Some(("completion", *from))
                    }
                    (Node::Ledger, Event::LookedUp { from, .. }) => Some(("lookup", *from)),
                    (Node::Table, Event::Requeued { from, .. }) => Some(("requeue", *from)),
                    _ => None,
                };
                let key = match kind {
                    Some((kind, Node::Worker(n))) => Some((entry.t_us, n % processes, kind)),
                    _ => None,
                };
                if let Some(key) = key.filter(|key| previous == Some(*key)) {
                    *seen.entry(key.2).or_default() += 1;
                }
                previous = key;
            }
        }
        for kind in ["grant", "renewal", "completion", "lookup", "requeue"] {
            assert!(seen.get(kind).is_some_and(|&n| n > 0), "no batch of {kind}s in 40 seeds: {seen:?}");
        }
    }

    /// The share of a seed's completions at the table that came in a batch: two or more at one
    /// time, one line after another, for slots of one process.
    fn batched_share(report: &lease_sim::world::RunReport) -> f64 {
        let processes = report.params.workers;
        let (mut all, mut batched, mut run, mut previous) = (0u32, 0u32, 0u32, None);
        for entry in &report.history {
            let key = match (&entry.node, &entry.event) {
                (Node::Table, Event::Terminal { from: Node::Worker(n), outcome: OutcomeKind::Completed, .. }) => {
                    Some((entry.t_us, n % processes))
                }
                _ => None,
            };
            let Some(key) = key else { continue };
            all += 1;
            if previous == Some(key) {
                // The second of a run counts its first too.
                batched += if run == 1 { 2 } else { 1 };
                run += 1;
            } else {
                run = 1;
            }
            previous = Some(key);
        }
        f64::from(batched) / f64::from(all.max(1))
    }

    // Proves the linger (`WorkerOptions::linger`, drawn for half the seeds) gathers what a turn
    // alone would not: over the first 40 seeds, the share of completions that reach the table in
    // a batch is higher where a linger was drawn than where none was. A runtime whose linger
    // never holds anything would hold every invariant (its batches leave at the end of each turn,
    // as without one), so it is asserted here.
    #[test]
    fn a_linger_gathers_completions_into_batches() {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for seed in 0..40 {
            let report = crate::prove::scripted(SCENARIO, seed);
            let share = batched_share(&report);
            if report.params.linger > lease_core::Span::ZERO {
                with.push(share);
            } else {
                without.push(share);
            }
        }
        let mean = |shares: &[f64]| shares.iter().sum::<f64>() / shares.len().max(1) as f64;
        let (with, without) = (mean(&with), mean(&without));
        eprintln!("batched share of completions: with a linger {with:.3}, without {without:.3}");
        assert!(with >= without + 0.15, "with a linger {with:.3}, without {without:.3}");
    }

    #[test]
    fn trace_snapshot() {
        crate::assert_trace_snapshot!(SCENARIO, 3);
    }
}
