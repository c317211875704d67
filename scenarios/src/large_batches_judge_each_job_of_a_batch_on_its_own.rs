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

    // Over the first seeds (until each kind is seen, at most 200; worker requeues are rare, and
    // none came batched in the first 40 once the reclaimers took waves), each kind of request a
    // process batches reaches its node as a batch:
    // two or more answers at one time, one line after another, to slots of one process, for
    // grants, renewals, completions and requeues at the table and lookups at the ledger. A runtime that
    // sent one kind alone would still hold every invariant (a mutant that drops the lookups from
    // the batched kinds does), so it is asserted here.
    #[test]
    fn every_batched_kind_of_request_leaves_as_a_batch() {
        const KINDS: [&str; 5] = ["grant", "renewal", "completion", "lookup", "requeue"];
        let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
        let mut seeds = 0;
        for seed in 0..200 {
            if KINDS.iter().all(|kind| seen.contains_key(kind)) {
                break;
            }
            seeds += 1;
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
        for kind in KINDS {
            assert!(seen.get(kind).is_some_and(|&n| n > 0), "no batch of {kind}s in {seeds} seeds: {seen:?}");
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

/// When a process's batches leave, shown on small worlds of the quiet scenario's timing: one
/// process of 8 slots batching 8, with a linger of 30 ms (near the most its request timeout
/// allows, half of 67 ms), no fault but a scripted one, a network of 1 to 2 ms each way, a
/// dependency of 2 to 10 ms, and idle slots that poll every 200 ms and are not held at the
/// table. A batch that waits a linger it did not need, or leaves before what could join it, holds
/// every invariant: only these timings show it.
#[cfg(test)]
mod lingering {
    use lease_core::{Epoch, JobId, Span};
    use lease_history::{Event, Node, OutcomeKind, Point};
    use lease_sim::faults::{Scripted, Strike};
    use lease_sim::world::{self, Arrival, Params, RunReport, Verdict};
    use std::collections::BTreeMap;

    /// The linger: far above a round trip (2 to 4 ms) and a handler (2 to 10 ms).
    const LINGER_US: u64 = 30_000;
    /// The most a step may take once nothing more can join its batch: a round trip and change.
    const PROMPT_US: u64 = 6_000;

    /// The world, its jobs arriving at the times given.
    fn world(arrivals: &[(u64, u64)]) -> Params {
        let mut params = Params::quiet("large-batches".into(), 1, None);
        params.workers = 1;
        params.worker_clocks.truncate(1);
        params.slots = 8;
        params.batch = 8;
        params.linger = Span(LINGER_US);
        params.worker.acquire_wait = Span::ZERO;
        params.worker.idle_backoff = Span::from_ms(200);
        params.latency_us = (1_000, 2_000);
        params.dependency.latency_min_us = 2_000;
        params.dependency.latency_max_us = 10_000;
        params.jobs = arrivals.len() as u32;
        params.arrivals = Some(arrivals.iter().map(|&(job, at_us)| Arrival { job, at_us }).collect());
        params
    }

    /// When each step of a job's last lease reached its node: the grant at the table, the
    /// worker's lookup at the ledger (a later attempt), its `executing` line, its effect's
    /// record at the ledger, its completion at the table.
    #[derive(Debug, Default, Clone, Copy)]
    struct Course {
        epoch: Epoch,
        granted: u64,
        looked_up: Option<u64>,
        executing: u64,
        applied: u64,
        completed: u64,
    }

    fn courses(report: &RunReport) -> BTreeMap<JobId, Course> {
        assert_eq!(report.verdict, Verdict::Held, "the world broke an invariant");
        let mut courses: BTreeMap<JobId, Course> = BTreeMap::new();
        for entry in &report.history {
            let t = entry.t_us;
            match entry.event {
                Event::Granted { job, epoch, .. } => {
                    courses.insert(job, Course { epoch, granted: t, ..Course::default() });
                }
                _ => {
                    let Some(course) = entry.event.job().and_then(|job| courses.get_mut(&job)) else { continue };
                    match (entry.node, &entry.event) {
                        (Node::Ledger, Event::LookedUp { from: Node::Worker(_), epoch, .. }) if *epoch == course.epoch => {
                            course.looked_up = Some(t);
                        }
                        (Node::Worker(_), Event::Executing { epoch, .. }) if *epoch == course.epoch => course.executing = t,
                        (Node::Ledger, Event::EffectApplied { epoch, .. }) if *epoch == course.epoch => course.applied = t,
                        (Node::Table, Event::Terminal { outcome: OutcomeKind::Completed, epoch, .. })
                            if *epoch == course.epoch =>
                        {
                            course.completed = t
                        }
                        _ => {}
                    }
                }
            }
        }
        for (job, course) in &courses {
            assert!(course.completed > 0, "{job:?} never completed: {course:?}");
        }
        courses
    }

    /// The one time every course gives for a step: its lines left in one batch.
    fn together(courses: &BTreeMap<JobId, Course>, step: &str, at: fn(&Course) -> u64) -> u64 {
        let times: Vec<u64> = courses.values().map(at).collect();
        assert!(times.windows(2).all(|pair| pair[0] == pair[1]), "{step} lines in more than one batch: {courses:?}");
        times[0]
    }

    /// No later than a round trip after `since`.
    fn prompt(step: &str, since: u64, at: u64, courses: &BTreeMap<JobId, Course>) {
        assert!(
            at <= since + PROMPT_US,
            "{step} at {at} us, {} us after what it waited for: it lingered ({LINGER_US} us) though nothing \
             could join it: {courses:?}",
            at - since
        );
    }

    // Three jobs granted in one batch, their handlers ending 2 to 10 ms apart: their `executing`
    // lines leave at once (the other slots polled empty and sleep), their completions wait for
    // the last handler and leave together at once, with no linger at either step. With a
    // recording handler (the runtime records the outputs), the records do the same.
    #[test]
    fn a_batch_that_nothing_more_can_join_leaves_at_once() {
        for recorders in [0, 1] {
            let mut params = world(&[(0, 20_000), (1, 20_000), (2, 20_000)]);
            params.recorders = recorders;
            let courses = courses(&world::run(params));
            let granted = together(&courses, "grant", |c| c.granted);
            let executing = together(&courses, "executing", |c| c.executing);
            prompt("the executing lines", granted, executing, &courses);
            let applied = courses.values().map(|c| c.applied).max().expect("three jobs");
            if recorders > 0 {
                together(&courses, "record", |c| c.applied);
                prompt("the records", executing + 10_000, applied, &courses);
            }
            let completed = together(&courses, "completion", |c| c.completed);
            prompt("the completions", applied, completed, &courses);
        }
    }

    // A second attempt granted beside two first ones: its lookup leaves at once (no acquire is
    // out that could bring another), and the first attempts' effects wait for it, so the three
    // `executing` lines leave in one batch as soon as it answers. Job 0's first lease is lost
    // to a crash before its effect; a reclaimer requeues it, and it is granted again with jobs
    // 1 and 2, which arrive meanwhile.
    #[test]
    fn a_lookup_leaves_at_once_and_the_effects_beside_it_wait_for_it() {
        let mut params = world(&[(0, 20_000), (1, 760_000), (2, 760_000)]);
        params.script.push(Scripted { job: JobId(0), point: Point::BeforeEffect, strike: Strike::Crash });
        let courses = courses(&world::run(params));
        let granted = together(&courses, "grant", |c| c.granted);
        let looked_up = courses[&JobId(0)].looked_up.expect("job 0's second attempt looked its operation up");
        prompt("the lookup", granted, looked_up, &courses);
        let executing = together(&courses, "executing", |c| c.executing);
        prompt("the executing lines", looked_up, executing, &courses);
    }

    // Held at the table (long polling), the idle slots' acquires are out when job 0 is granted:
    // its effect waits, and job 1's, granted 10 ms later to another slot, joins it; then nothing
    // more can come and the two leave at once.
    #[test]
    fn an_effect_waits_for_a_grant_an_acquire_out_can_bring() {
        let mut params = world(&[(0, 20_000), (1, 30_000)]);
        params.worker.acquire_wait = Span::from_ms(100);
        let courses = courses(&world::run(params));
        let last_grant = courses.values().map(|c| c.granted).max().expect("two jobs");
        assert!(courses[&JobId(0)].granted + 5_000 < last_grant, "granted apart: {courses:?}");
        let executing = together(&courses, "executing", |c| c.executing);
        prompt("the executing lines", last_grant, executing, &courses);
        let applied = courses.values().map(|c| c.applied).max().expect("two jobs");
        let completed = together(&courses, "completion", |c| c.completed);
        prompt("the completions", applied, completed, &courses);
    }
}
