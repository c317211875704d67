//! Grants go to workers that can use them: none to a worker that is down, none left unused after
//! the heal, and the seeds whose snapshots once showed a job granted six times and dead-lettered
//! unrun now run every job before they dead-letter it.
//!
//! These read histories with small helpers of their own; the invariant checkers are elsewhere.
//! `LEASE_SEEDS=N` sweeps N seeds instead of the default; `LEASE_SEED=S` runs exactly seed S.

use lease_history::{Entry, Event, Node, OutcomeKind};
use lease_sim::runner::{self, SeedResult, Target};
use lease_sim::scenarios::Scenario;
use lease_sim::shard::{SeedPlan, Shard};
use lease_sim::world::{self, RunReport};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

/// The seeds a test sweeps: `LEASE_SEED` alone, or `LEASE_SEEDS` of them (default `default`).
fn seeds(default: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("LEASE_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let count = std::env::var("LEASE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    (0..count).collect()
}

/// Runs `scenario` over `seeds` on two threads and returns, per seed, what `pick` finds in its
/// history, for the seeds where it finds something.
fn sweep_finding(scenario: Scenario, seeds: &[u64], pick: fn(&[Entry]) -> Vec<String>) -> Vec<(u64, Vec<String>)> {
    let (first, last) = (seeds[0], *seeds.last().expect("a seed"));
    let plan = SeedPlan { base: first, end: Some(last + 1), shard: Shard { index: 0, count: 1 } };
    let found = Mutex::new(Vec::new());
    let on_report = |report: &RunReport, result: &SeedResult| {
        let lines = pick(&report.history);
        if !lines.is_empty() {
            found.lock().unwrap().push((result.seed, lines));
        }
    };
    let _ = runner::sweep_plan(Target::new(scenario), &plan, 2, &AtomicBool::new(false), &on_report);
    let mut found = found.into_inner().unwrap();
    found.sort();
    found
}

/// Grants made after the heal, to a worker not paused, that their holder never acted on before
/// the lease's expiry: no lookup from it under the grant's epoch, no `executing` by it under that
/// epoch, no release of it.
fn unused_grants_after_the_heal(history: &[Entry]) -> Vec<String> {
    let healed = history.iter().position(|entry| matches!(entry.event, Event::FaultsHealed {}));
    let Some(healed) = healed else { return Vec::new() };
    let mut unused = Vec::new();
    // A worker whose process is paused by a fault of the fault phase (a slot whose acquire was in
    // flight when another slot of its process stalled) cannot take a grant before the pause ends.
    let mut paused = std::collections::BTreeSet::new();
    for (line, entry) in history.iter().enumerate() {
        match entry.event {
            Event::Paused { target, .. } => {
                paused.insert(target);
            }
            Event::Resumed { target } => {
                paused.remove(&target);
            }
            _ => {}
        }
        if line < healed {
            continue;
        }
        let Event::Granted { job, epoch, owner, expires_at_us, .. } = entry.event else { continue };
        if paused.contains(&owner) {
            continue;
        }
        // Acted on: looked up or executed by its holder, or handed back (a grant it declined).
        let acted =
            history[line + 1..].iter().take_while(|later| later.t_us < expires_at_us).any(|later| match later.event {
                Event::LookedUp { from, job: j, epoch: e, .. } => (from, j, e) == (owner, job, epoch),
                Event::Executing { job: j, epoch: e, .. } => (later.node, j, e) == (owner, job, epoch),
                Event::Released { from, job: j, epoch: e, .. } => (from, j, e) == (owner, job, epoch),
                _ => false,
            });
        if !acted {
            unused.push(format!("line {}: {} {} to {} at {}us", line + 1, job, epoch, owner, entry.t_us));
        }
    }
    unused
}

/// Grants and regrants made to a worker while it was down: after it crashed, before it restarted.
fn grants_to_workers_that_are_down(history: &[Entry]) -> Vec<String> {
    let mut down = std::collections::BTreeSet::new();
    let mut found = Vec::new();
    for (line, entry) in history.iter().enumerate() {
        match entry.event {
            Event::Crashed { target: target @ Node::Worker(_), .. } => {
                down.insert(target);
            }
            Event::Restarted { target } => {
                down.remove(&target);
            }
            Event::Granted { job, owner, .. } | Event::Regranted { job, owner, .. } if down.contains(&owner) => {
                found.push(format!("line {}: {job} to {owner}, which is down, at {}us", line + 1, entry.t_us));
            }
            _ => {}
        }
    }
    found
}

/// Jobs dead-lettered without any worker ever calling the dependency for them, where some grant
/// of theirs was not ended by its holder crashing on it (a crash before the effect is an attempt
/// that really failed; a grant abandoned unused is the lost work).
fn dead_lettered_unrun(history: &[Entry]) -> Vec<String> {
    let ran: std::collections::BTreeSet<_> = history
        .iter()
        .filter_map(|entry| match entry.event {
            Event::Executing { job, .. } => Some(job),
            _ => None,
        })
        .collect();
    let crashed_on = |job, owner, from: usize| {
        history[from..].iter().any(
            |later| matches!(later.event, Event::Crashed { target, job: Some(j), .. } if target == owner && j == job),
        )
    };
    let every_grant_crashed = |job| {
        history.iter().enumerate().all(|(line, entry)| match entry.event {
            Event::Granted { job: j, owner, .. } if j == job => crashed_on(job, owner, line),
            _ => true,
        })
    };
    history
        .iter()
        .filter_map(|entry| match entry.event {
            Event::Terminal { job, outcome: OutcomeKind::DeadLettered, .. }
                if !ran.contains(&job) && !every_grant_crashed(job) =>
            {
                Some(format!("{job} dead-lettered at {}us, never run", entry.t_us))
            }
            _ => None,
        })
        .collect()
}

// Proves a crashed worker's acquire is never granted: the table drops an acquire from a worker
// life that is down or over (its connection was reset), when it arrives and when it was held.
// How: over swarm seeds, where every worker crashes at once in many of them while the table holds
// their acquires, no grant or regrant names a worker between its crash and its restart.
#[test]
fn no_grant_goes_to_a_worker_that_is_down() {
    let found = sweep_finding(Scenario::SWARM, &seeds(300), grants_to_workers_that_are_down);
    assert!(found.is_empty(), "grants to crashed workers: {found:#?}");
}

// Proves stale long polls are gone: with acquires held at most acquire_wait (ttl/8) and sent
// again under their id only while a grant could still be used, once the faults heal every grant
// is acted on (looked up or executed by its holder under its epoch) before its lease expires.
#[test]
fn after_the_heal_every_grant_is_acted_on() {
    let found = sweep_finding(Scenario::SWARM, &seeds(300), unused_grants_after_the_heal);
    assert!(found.is_empty(), "grants never acted on after the heal: {found:#?}");
}

// Proves the pinned traces that showed the defect now run their jobs: in the snapshot worlds of
// clock-drift, cut-from-table and reclaimer-race (12 jobs each), no job is dead-lettered without
// ever reaching the dependency, and no grant after the heal goes unused.
#[test]
fn the_snapshot_seeds_run_every_job_they_dead_letter() {
    for (scenario, seed) in [(Scenario::CLOCK_DRIFT, 4), (Scenario::CUT_FROM_TABLE, 7), (Scenario::RECLAIMER_RACE, 2)] {
        let mut params = scenario.params(seed, None);
        params.jobs = 12;
        let report = world::run(params);
        let reproduce = Target::new(scenario).reproduce(seed);
        assert_eq!(dead_lettered_unrun(&report.history), Vec::<String>::new(), "{reproduce}");
        assert_eq!(unused_grants_after_the_heal(&report.history), Vec::<String>::new(), "{reproduce}");
    }
}
