//! `lease-sim explore`: a coverage-guided search over fault plans.
//!
//! A swarm draws its faults blind; some situations need a fault at an exact instant (a pause
//! that ends one microsecond past a lease's expiry) or two faults in one story, and no draw ever
//! lands there. The explorer keeps a **corpus** of plans, each kept because its run reached
//! something no earlier run had, and makes new plans from them by **mutations that are data**:
//!
//! - `shift`: move one scheduled fault by up to a lease, either way;
//! - `aim`: move one scheduled fault onto a lease's expiry in the parent's history, at it, one
//!   microsecond before or one after;
//! - `pause-at-expiry` / `crash-at-expiry`: add a pause of the lease owner's process, or a crash
//!   of a reclaimer, at an expiry (±1 µs);
//! - `add`: add a pause or a crash of a random node at a random instant of the fault phase;
//! - `hold`: hold a message the plan already strikes (lost, held back or doubled) for one to two
//!   leases instead: its sender's request has long timed out when it arrives, and the lease it
//!   acts under is gone;
//! - `storm`: aim three faults into one reclaim of the parent's run: the call the lease's holder
//!   made to the dependency writes a rival output too (a conflict), the reclaimer that fenced the
//!   lease stalls right after its fence past its own lease and a scan, and every other
//!   reclaimer's next fence of the job stalls until the first has woken and had a few round
//!   trips (the swarm draws the same storm: `WindowFaults::reclaim_storm_rate`);
//! - `splice`: add the scheduled faults of a second corpus plan;
//! - `drop`: remove one fault.
//!
//! **Coverage** is a set of keys, each a string: a `sometimes` situation or window reached
//! (`sometimes:NAME`), an answer of the table or the ledger by its kind and why (`answer:refused
//! complete stale_epoch`, `answer:looked_up found`), and a pair of consecutive lines in one job's
//! story (`pair:granted>abandoned self_fenced`). A run that adds a key is kept.
//!
//! The search starts from the scenario's seeds (a quarter of the runs, at most 32), draws a fresh
//! seed for a third of the runs after (a mutation keeps its plan's world), and is deterministic
//! from `--seed` for a given number of runs: one thread, one random stream, every collection
//! ordered. A failing run ends the search: its plan is shrunk, as a sweep's failures are, and
//! printed with its reproduce line.
//!
//! Its output compares it with the swarm alone in the same number of runs (the seeds from
//! `--seed` on), and tables each key the explorer reached that the swarm did not, with the run
//! that first reached it and the mutation that made that run.

use crate::faults::decide::{Dealt, Keyed, Site, Visit};
use crate::faults::plan::{Plan, Planned};
use crate::faults::shrink::{self, Shrunk};
use crate::faults::{Fault, WindowFaults};
use crate::runner::Target;
use crate::world::{self, RunReport, Verdict};
use lease_core::{Epoch, JobId};
use lease_history::{Event, Node, OutcomeKind};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::{BTreeMap, BTreeSet};

/// The share of runs after the first seeds that draw a fresh seed rather than mutate a plan.
pub const FRESH: f64 = 1.0 / 3.0;

/// The most runs a failure's shrinking may take.
pub const SHRINK_BUDGET: u64 = 300;

/// One plan kept in the corpus, and what its run reached.
#[derive(Debug, Clone)]
pub struct Kept {
    /// The plan.
    pub plan: Plan,
    /// Lease expiries in its run's fault phase, with each lease's owner: where `aim` points.
    pub expiries: Vec<(u64, Node)>,
    /// Reclaims in its run's fault phase of a lease whose holder called the dependency: where
    /// `storm` aims.
    pub reclaims: Vec<Reclaim>,
    /// The run (0-based, of the explorer's) that made it.
    pub run: u64,
    /// How it was made: `seed N`, or the mutations applied to its parent.
    pub how: String,
}

/// A reclaim in a run's fault phase: a reclaimer's fence of a lease under which the holder
/// called the dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reclaim {
    /// When the table fenced it.
    pub at_us: u64,
    /// The job.
    pub job: JobId,
    /// The epoch of the lease fenced: the holder's, whose call a storm makes a rival.
    pub epoch: Epoch,
    /// The reclaimer.
    pub reclaimer: Node,
    /// Which of this reclaimer's fences of this job it was, counting from 1: its `mid_reclaim`
    /// visit for the job.
    pub occurrence: u32,
}

/// What an exploration found.
#[derive(Debug, Clone)]
pub struct Explored {
    /// Runs made.
    pub runs: u64,
    /// Every key reached, with the run that first reached it and how that run was made.
    pub first: BTreeMap<String, (u64, String)>,
    /// The corpus, in the order kept.
    pub corpus: Vec<Kept>,
    /// A failure, shrunk, and the mutation that led to it.
    pub failure: Option<(Shrunk, String)>,
}

/// The coverage keys of one run.
pub fn keys(report: &RunReport) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for (name, count) in &report.coverage.0 {
        if *count > 0 {
            keys.insert(format!("sometimes:{name}"));
        }
    }
    let mut last: BTreeMap<u64, String> = BTreeMap::new();
    for entry in &report.history {
        let label = label(&entry.event);
        if matches!(entry.node, Node::Table | Node::Ledger) {
            keys.insert(format!("answer:{label}"));
        }
        if let Some(job) = entry.event.job() {
            if let Some(before) = last.insert(job.0, label.clone()) {
                keys.insert(format!("pair:{before}>{label}"));
            }
        }
    }
    keys
}

/// A line's kind, with the why of an answer: its refusal's request and reason, its outcome, what
/// a lookup found, why a lease was abandoned.
fn label(event: &Event) -> String {
    let kind = lease_history::render::kind(event);
    match event {
        Event::Refused { request, reason, .. } => format!("{kind} {request} {reason}"),
        Event::Terminal { outcome, .. } => {
            let outcome = match outcome {
                OutcomeKind::Completed => "completed",
                OutcomeKind::DeadLettered => "dead_lettered",
                OutcomeKind::Quarantined => "quarantined",
            };
            format!("{kind} {outcome}")
        }
        Event::Abandoned { why, .. } => format!("{kind} {why}"),
        Event::LookedUp { found, .. } => format!("{kind} {}", if found.is_some() { "found" } else { "nothing" }),
        _ => kind.to_string(),
    }
}

/// The leases' expiries in `report`'s fault phase, with each lease's owner, in time order.
fn expiries(report: &RunReport) -> Vec<(u64, Node)> {
    let phase = report.params.fault_phase_us;
    let mut found = BTreeSet::new();
    for entry in &report.history {
        let (at, owner) = match &entry.event {
            Event::Granted { expires_at_us, owner, .. } | Event::Regranted { expires_at_us, owner, .. } => {
                (*expires_at_us, *owner)
            }
            Event::Renewed { expires_at_us, from, .. } => (*expires_at_us, *from),
            Event::Reclaimed { new_expires_at_us, reclaimer, .. } => (*new_expires_at_us, *reclaimer),
            _ => continue,
        };
        if at <= phase {
            found.insert((at, owner));
        }
    }
    found.into_iter().collect()
}

/// The reclaims in `report`'s fault phase of leases whose holders called the dependency, in
/// time order.
fn reclaims(report: &RunReport) -> Vec<Reclaim> {
    let phase = report.params.fault_phase_us;
    let mut called = BTreeSet::new();
    let mut fences: BTreeMap<(Node, JobId), u32> = BTreeMap::new();
    let mut found = Vec::new();
    for entry in report.history.iter().take_while(|entry| entry.t_us <= phase) {
        match entry.event {
            Event::Executing { job, epoch, .. } => {
                called.insert((job, epoch));
            }
            Event::Reclaimed { job, epoch, reclaimer, .. } => {
                let occurrence = fences.entry((reclaimer, job)).or_insert(0);
                *occurrence += 1;
                if called.contains(&(job, epoch)) {
                    found.push(Reclaim { at_us: entry.t_us, job, epoch, reclaimer, occurrence: *occurrence });
                }
            }
            _ => {}
        }
    }
    found
}

/// The process a worker slot runs in (its first slot), in a world of `workers` processes.
fn process(node: Node, workers: u32) -> Node {
    match node {
        Node::Worker(n) => Node::Worker(n % workers.max(1)),
        other => other,
    }
}

/// One mutation of `plan` (see the module doc), drawn from `rng`: `expiries` and `reclaims` are
/// its run's (or its parent's), where `aim` and `storm` point; `other` is a second corpus plan,
/// for `splice`. `None` when the draw fits nothing in the plan.
fn mutate(
    rng: &mut Xoshiro256PlusPlus,
    plan: &Plan,
    expiries: &[(u64, Node)],
    reclaims: &[Reclaim],
    other: &Plan,
) -> Option<(Plan, &'static str)> {
    let mut plan = plan.clone();
    let w = plan.world;
    let ttl = w.lease_ttl_us.max(1);
    let phase = w.fault_phase_us;
    let scheduled: Vec<usize> =
        (0..plan.faults.len()).filter(|&i| matches!(plan.faults[i], Planned::Scheduled { .. })).collect();
    let near = |rng: &mut Xoshiro256PlusPlus, at: u64| (at + rng.gen_range(0..=2) as u64).saturating_sub(1).min(phase);
    let random_node = |rng: &mut Xoshiro256PlusPlus| match rng.gen_bool(0.7) {
        true => Node::Worker(rng.gen_range(0..w.workers.max(1))),
        false => Node::Reclaimer(rng.gen_range(0..w.reclaimers.max(1))),
    };
    let what = match rng.gen_range(0..9u32) {
        0 => {
            let &i = scheduled.choose(rng)?;
            let Planned::Scheduled { at_us, fault } = plan.faults[i] else { unreachable!() };
            let at_us = (at_us as i64 + rng.gen_range(-(ttl as i64)..=ttl as i64)).clamp(0, phase as i64) as u64;
            plan.faults[i] = Planned::Scheduled { at_us, fault };
            "shift"
        }
        1 => {
            let &i = scheduled.choose(rng)?;
            let &(expiry, _) = expiries.choose(rng)?;
            let Planned::Scheduled { fault, .. } = plan.faults[i] else { unreachable!() };
            plan.faults[i] = Planned::Scheduled { at_us: near(rng, expiry), fault };
            "aim"
        }
        2 => {
            let &(expiry, owner) = expiries.choose(rng)?;
            let node = match owner {
                Node::Worker(_) => process(owner, w.workers),
                _ => Node::Worker(rng.gen_range(0..w.workers.max(1))),
            };
            // Ends at the expiry (±1 µs): the process wakes to a lease that is just gone.
            let len_us = rng.gen_range(ttl / 4..=ttl).max(1);
            let at_us = near(rng, expiry).saturating_sub(len_us);
            plan.faults.push(Planned::Scheduled { at_us, fault: Fault::Pause { node, len_us } });
            "pause-at-expiry"
        }
        3 => {
            let &(expiry, _) = expiries.choose(rng)?;
            let node = Node::Reclaimer(rng.gen_range(0..w.reclaimers.max(1)));
            let down_us = rng.gen_range(ttl / 4..=ttl).max(1);
            plan.faults.push(Planned::Scheduled { at_us: near(rng, expiry), fault: Fault::Crash { node, down_us } });
            "crash-at-expiry"
        }
        4 => {
            let node = random_node(rng);
            let at_us = rng.gen_range(0..=phase);
            let len = rng.gen_range(ttl / 8..=ttl * 2).max(1);
            let fault = match rng.gen_bool(0.5) {
                true => Fault::Pause { node, len_us: len },
                false => Fault::Crash { node, down_us: len },
            };
            plan.faults.push(Planned::Scheduled { at_us, fault });
            "add"
        }
        5 => {
            let theirs: Vec<Planned> =
                other.faults.iter().filter(|f| matches!(f, Planned::Scheduled { .. })).copied().collect();
            if theirs.is_empty() {
                return None;
            }
            let take = rng.gen_range(1..=theirs.len());
            plan.faults.extend(theirs.choose_multiple(rng, take).copied());
            "splice"
        }
        6 => {
            // A message the plan already strikes (lost, held back, doubled), held past a lease
            // instead: its visit is one the run makes.
            let messages: Vec<Keyed> = plan
                .faults
                .iter()
                .filter_map(|fault| match fault {
                    Planned::Keyed(keyed) if matches!(keyed.visit.site, Site::Message { .. }) => Some(*keyed),
                    _ => None,
                })
                .collect();
            let &keyed = messages.choose(rng)?;
            let dealt = Dealt::Delay { len_us: WindowFaults::draw_past_lease_us(ttl, rng) };
            plan.faults.retain(|fault| !matches!(fault, Planned::Keyed(k) if k.visit == keyed.visit));
            plan.faults.push(Planned::Keyed(Keyed { dealt, ..keyed }));
            "hold"
        }
        7 => {
            let reclaim = *reclaims.choose(rng)?;
            storm(rng, &mut plan, &reclaim);
            "storm"
        }
        _ => {
            if plan.faults.is_empty() {
                return None;
            }
            let i = rng.gen_range(0..plan.faults.len());
            plan.faults.remove(i);
            "drop"
        }
    };
    plan.faults.sort_by_key(Planned::time_us);
    plan.expect = None;
    plan.validate().ok()?;
    Some((plan, what))
}

/// Adds to `plan` a reclaim storm aimed at `reclaim` (see the module doc): a rival output at the
/// holder's first call under the fenced epoch, a stall of the reclaimer right after that fence
/// past its lease and a scan, and a stall of every other reclaimer's next fence of the job until
/// the first has woken and had four round trips (a scan's worth more, for it may fence up to a
/// scan after the first's fence expired). Faults of the plan at those visits make way.
fn storm(rng: &mut Xoshiro256PlusPlus, plan: &mut Plan, reclaim: &Reclaim) {
    let w = plan.world;
    let (ttl, scan) = (w.lease_ttl_us.max(1), w.scan_every_us);
    let first_us = WindowFaults::draw_storm_stall_us(ttl, scan, rng);
    let round_trips_us = 8 * w.network_latency_us.1.max(1);
    let second_us = first_us.saturating_sub(ttl).saturating_add(scan).saturating_add(round_trips_us);
    let second_us = rng.gen_range(second_us..=second_us.saturating_add(ttl / 4));
    let at = reclaim.at_us;
    let point = |node: Node, occurrence: u32| Visit {
        site: Site::Point { node, point: lease_history::Point::MidReclaim, job: Some(reclaim.job) },
        occurrence,
    };
    let mut faults = vec![
        Keyed {
            fired_us: at.saturating_sub(1),
            visit: Visit { site: Site::Call { job: reclaim.job, epoch: reclaim.epoch }, occurrence: 1 },
            dealt: Dealt::Rival,
        },
        Keyed {
            fired_us: at,
            visit: point(reclaim.reclaimer, reclaim.occurrence),
            dealt: Dealt::Stall { len_us: first_us },
        },
    ];
    for n in 0..w.reclaimers {
        let node = Node::Reclaimer(n);
        if node != reclaim.reclaimer {
            let dealt = Dealt::Stall { len_us: second_us };
            let fired_us = at.saturating_add(ttl).min(w.fault_phase_us);
            faults.push(Keyed { fired_us, visit: point(node, 1), dealt });
        }
    }
    plan.faults.retain(|fault| {
        !matches!(fault, Planned::Keyed(k) if faults.iter().any(|f| f.visit == k.visit && f.dealt.question() == k.dealt.question()))
    });
    plan.faults.extend(faults.into_iter().map(Planned::Keyed));
}

/// Explores `target` for `runs` runs from `seed` (see the module doc). `progress` hears after
/// every run the runs made and the keys reached so far, and stops the search by answering false.
pub fn explore(target: Target, seed: u64, runs: u64, progress: &mut dyn FnMut(u64, usize) -> bool) -> Explored {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x6578_706c_6f72_6521);
    let mut first: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut corpus: Vec<Kept> = Vec::new();
    let warm = (runs / 4).clamp(1, 32);
    let (mut run, mut seeds) = (0, 0);
    while run < runs {
        // After the first seeds, a third of the runs are fresh seeds still: a plan's mutations
        // keep its world (its fleet, its timing), and only a new draw brings another.
        let fresh = run < warm || corpus.is_empty() || rng.gen_bool(FRESH);
        let (report, how) = if fresh {
            let seed = seed.wrapping_add(seeds);
            seeds += 1;
            (target.run(seed), format!("seed {seed}"))
        } else {
            let parent = &corpus[rng.gen_range(0..corpus.len())];
            let other = &corpus[rng.gen_range(0..corpus.len())];
            let (mut plan, mut how) = (parent.plan.clone(), Vec::new());
            for _ in 0..rng.gen_range(1..=3) {
                if let Some((next, what)) = mutate(&mut rng, &plan, &parent.expiries, &parent.reclaims, &other.plan) {
                    plan = next;
                    how.push(what);
                }
            }
            if how.is_empty() {
                run += 1;
                continue;
            }
            let how = how.join("+");
            let Ok(params) = plan.params() else {
                run += 1;
                continue;
            };
            (world::run(params), format!("run {} {how}", parent.run))
        };
        let reached = keys(&report);
        let new = reached.iter().filter(|key| !first.contains_key(*key)).count();
        for key in reached {
            first.entry(key).or_insert_with(|| (run, how.clone()));
        }
        if !matches!(report.verdict, Verdict::Held) {
            let plan = report.plan.clone();
            let shrunk = shrink::shrink(plan, report, SHRINK_BUDGET, &mut |_, _, _| {});
            let failure = shrunk.ok().map(|shrunk| (shrunk, how));
            return Explored { runs: run + 1, first, corpus, failure };
        }
        if new > 0 {
            let (expiries, reclaims) = (expiries(&report), reclaims(&report));
            corpus.push(Kept { plan: report.plan, expiries, reclaims, run, how });
        }
        run += 1;
        if !progress(run, first.len()) {
            break;
        }
    }
    Explored { runs: run, first, corpus, failure: None }
}

/// The keys the scenario's own draws alone reach in `runs` seeds from `seed`, with the first seed reaching
/// each.
pub fn swarm_alone(target: Target, seed: u64, runs: u64) -> BTreeMap<String, u64> {
    let mut first = BTreeMap::new();
    for k in 0..runs {
        let seed = seed.wrapping_add(k);
        for key in keys(&target.run(seed)) {
            first.entry(key).or_insert(seed);
        }
    }
    first
}

#[cfg(test)]
mod tests {
    use super::{expiries, mutate, reclaims, Kept};
    use crate::faults::decide::{Dealt, Keyed, Site, Visit};
    use crate::faults::plan::Planned;
    use crate::runner::Target;
    use crate::scenarios::Scenario;
    use lease_history::{Node, Point};
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    // Proves each mutation does what it says, as data: over 400 draws on a swarm seed's plan, an
    // `aim` puts a fault within a microsecond of a lease's expiry in the parent's run, an
    // `add` or an `*-at-expiry` adds one fault, a `drop` removes one, a `hold` makes one message
    // fault a hold of one to two leases, a `storm` adds a rival and a stall at every reclaimer's
    // fence, the first past a lease and a scan, every plan made is valid, and every kind of
    // mutation is drawn (the seed's plan strikes messages, for `hold` to pick, and its world has
    // two reclaimers or more and a reclaim to aim at, for `storm`).
    #[test]
    fn each_mutation_edits_the_plan_as_it_says() {
        // The first swarm seed whose plan strikes a message (for `hold`) and whose run reclaims
        // a lease its holder called under, in a world of two reclaimers or more (for `storm`).
        let parent = (0..100)
            .map(|seed| (seed, Target::new(Scenario::SWARM).run(seed)))
            .map(|(seed, report)| {
                let (expiries, reclaims) = (expiries(&report), reclaims(&report));
                Kept { expiries, reclaims, plan: report.plan, run: 0, how: format!("seed {seed}") }
            })
            .find(|kept| {
                let messages = kept.plan.faults.iter().any(|f| {
                    matches!(f, Planned::Keyed(Keyed { visit: Visit { site: Site::Message { .. }, .. }, .. }))
                });
                messages && !kept.reclaims.is_empty() && kept.plan.world.reclaimers >= 2
            })
            .expect("a swarm seed below 100 that strikes a message and reclaims with two reclaimers");
        assert!(!parent.expiries.is_empty());
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..400 {
            let Some((plan, what)) = mutate(&mut rng, &parent.plan, &parent.expiries, &parent.reclaims, &parent.plan)
            else {
                continue;
            };
            plan.validate().expect("a mutated plan is valid");
            seen.insert(what);
            let (before, after) = (parent.plan.faults.len(), plan.faults.len());
            match what {
                "add" | "pause-at-expiry" | "crash-at-expiry" => assert_eq!(after, before + 1, "{what}"),
                "drop" => assert_eq!(after + 1, before),
                "shift" | "aim" => assert_eq!(after, before, "{what}"),
                // The message's other faults at that visit make way for the hold.
                "hold" => assert!(after <= before, "{what}"),
                "splice" => assert!(after > before),
                // A rival, a stall of the first reclaimer, and one of each other reclaimer, less
                // any fault the plan had at those visits.
                "storm" => assert!(after <= before + 1 + parent.plan.world.reclaimers as usize, "{what}"),
                other => panic!("unknown mutation {other}"),
            }
            if what == "hold" {
                let ttl = parent.plan.world.lease_ttl_us;
                let held: Vec<u64> = plan
                    .faults
                    .iter()
                    .filter(|f| !parent.plan.faults.contains(f))
                    .filter_map(|f| match f {
                        Planned::Keyed(Keyed { dealt: Dealt::Delay { len_us }, .. }) => Some(*len_us),
                        _ => None,
                    })
                    .collect();
                assert!(matches!(held[..], [len] if len > ttl && len <= 2 * ttl), "held {held:?}, ttl {ttl}");
            }
            if what == "storm" {
                let w = parent.plan.world;
                let added: Vec<&Planned> = plan.faults.iter().filter(|f| !parent.plan.faults.contains(f)).collect();
                let rivals =
                    added.iter().filter(|f| matches!(f, Planned::Keyed(Keyed { dealt: Dealt::Rival, .. }))).count();
                let stalls: Vec<(Node, u64)> = added
                    .iter()
                    .filter_map(|f| match f {
                        Planned::Keyed(Keyed {
                            visit: Visit { site: Site::Point { node, point: Point::MidReclaim, .. }, .. },
                            dealt: Dealt::Stall { len_us },
                            ..
                        }) => Some((*node, *len_us)),
                        _ => None,
                    })
                    .collect();
                assert_eq!(rivals, 1, "{added:?}");
                assert_eq!(stalls.len(), w.reclaimers as usize, "{added:?}");
                // The first stall outlasts the reclaimer's own fence and a scan.
                let longest = stalls.iter().map(|&(_, len)| len).max().unwrap();
                assert!(longest > w.lease_ttl_us + w.scan_every_us, "{stalls:?}");
            }
            if what == "aim" {
                let moved: Vec<u64> =
                    plan.faults.iter().filter(|f| !parent.plan.faults.contains(f)).map(Planned::time_us).collect();
                assert!(
                    moved.iter().all(|&at| parent.expiries.iter().any(|&(expiry, _)| at.abs_diff(expiry) <= 1)),
                    "aimed at {moved:?}, not within 1us of an expiry"
                );
            }
        }
        assert_eq!(seen.len(), 9, "mutations drawn: {seen:?}");
    }
}
