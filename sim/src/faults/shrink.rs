//! Shrinking: from a failing plan to a smaller one that fails the same invariant.
//!
//! A candidate is a plan; it is kept when its replay fails with the same finding (the same
//! invariant, or a crash for a crash). madsim's scheduler seed never changes. The passes, repeated
//! until a whole round shrinks nothing or the budget of runs is spent:
//! 1. **drop everything after the violation**: the faults and arrivals after its time, and, from
//!    the replay itself, every keyed fault that never struck (the replay re-records its plan);
//! 2. **ddmin over the jobs** (the arrival list); a job dropped takes its faults with it;
//! 3. **delta debugging** (Zeller's ddmin) over the faults;
//! 4. **fewer workers and reclaimers**: every one the violation does not name at once, then one
//!    at a time, the others renumbered;
//! 5. **simpler parameters**: no fault of a kind at all (no loss, ideal clocks, ...), a calm
//!    network latency, a fixed dependency latency, quieter idle nodes (a longer idle backoff,
//!    rarer scans), fewer attempts per job;
//! 6. **earlier and shorter fault windows**: each scheduled fault earlier, each outage, stall and
//!    hold halved, while the failure stays.
//!
//! The search is local: it settles where no single step keeps the failure. So it runs twice from
//! the original, with passes 2 and 3 in either order (the first within half the budget), and
//! keeps the smaller plan. Every run
//! counts against the budget; the smallest failing plan so far is always at hand.

use super::decide::{Dealt, Keyed, Site, Visit};
use super::plan::{Plan, Planned};
use super::Fault;
use crate::runner::Finding;
use crate::world::{self, RunReport, Verdict};
use lease_history::{Entry, Event, Node};

/// What the shrinker found.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The smallest failing plan.
    pub plan: Plan,
    /// Its run.
    pub report: RunReport,
    /// The finding it keeps.
    pub finding: Finding,
    /// Runs spent, the original's included.
    pub runs: u64,
    /// The original: faults, jobs and history lines.
    pub before: Size,
    /// The result: faults, jobs and history lines.
    pub after: Size,
    /// Whether the budget ran out before the passes settled.
    pub exhausted: bool,
}

/// How big a failing run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Size {
    /// Faults in the plan, clocks included.
    pub faults: usize,
    /// Jobs offered.
    pub jobs: usize,
    /// History lines.
    pub lines: usize,
    /// Workers and reclaimers.
    pub nodes: u32,
}

impl Size {
    fn of(plan: &Plan, report: &RunReport) -> Size {
        Size {
            faults: plan.faults.len(),
            jobs: plan.arrivals.len(),
            lines: report.history.len(),
            nodes: plan.world.workers + plan.world.reclaimers,
        }
    }
}

/// The finding of a run, if it failed.
pub fn finding(report: &RunReport) -> Option<Finding> {
    match &report.verdict {
        Verdict::Held => None,
        Verdict::Safety(violation) | Verdict::Liveness(violation) => Some(Finding::Violated(violation.invariant)),
        Verdict::Crash(_) => Some(Finding::Crash),
    }
}

/// The shrinker's state: the best plan so far, its run, and the runs left.
struct Search<'a> {
    best: Plan,
    report: RunReport,
    finding: Finding,
    runs: u64,
    budget: u64,
    progress: &'a mut dyn FnMut(u64, &Plan, &RunReport),
}

impl Search<'_> {
    fn spent(&self) -> bool {
        self.runs >= self.budget
    }

    /// Runs `candidate`; keeps it when it fails the same way and is no bigger. True if kept.
    fn try_plan(&mut self, candidate: Plan) -> bool {
        self.attempt(candidate, true)
    }

    /// [`Search::try_plan`]; with `aim`, a candidate that stops failing is run once more with its
    /// pauses and crashes at fixed times re-aimed at the same work ([`reanchored`]). A pause or
    /// crash at a fixed time strikes what its node was doing then; once another fault goes, the
    /// same work may reach another node, or the same node later.
    fn attempt(&mut self, candidate: Plan, aim: bool) -> bool {
        if self.spent() {
            return false;
        }
        // `params` checks the plan first: a candidate that cannot be played is not run.
        let Ok(params) = candidate.params() else { return false };
        self.runs += 1;
        let report = world::run(params);
        let kept =
            finding(&report) == Some(self.finding) && smaller_or_equal(&candidate, &report, &self.best, &self.report);
        (self.progress)(
            self.runs,
            if kept { &candidate } else { &self.best },
            if kept { &report } else { &self.report },
        );
        if kept {
            self.best = candidate;
            self.report = report;
            return true;
        }
        let aimed = if aim { reanchored(&candidate, &self.report.history, &report.history) } else { candidate.clone() };
        aim && aimed != candidate && self.attempt(aimed, false)
    }

    /// Pass 1: cut what comes after the violation, and what never struck.
    fn truncate(&mut self) -> bool {
        let end_us = self.report.history.last().map_or(0, |entry| entry.t_us);
        let mut cut = self.best.clone();
        cut.faults.retain(|fault| fault.time_us() <= end_us);
        cut.arrivals.retain(|arrival| arrival.at_us <= end_us);
        cut.world.jobs = cut.arrivals.len() as u32;
        let mut progress = false;
        if cut != self.best {
            progress |= self.try_plan(cut);
        }
        // The replay's own record: only the keyed faults that struck, with their times.
        let mut recorded = self.report.plan.clone();
        recorded.world.jobs = recorded.arrivals.len() as u32;
        recorded.comment.clone_from(&self.best.comment);
        recorded.expect.clone_from(&self.best.expect);
        if recorded.faults.len() < self.best.faults.len() || recorded.arrivals.len() < self.best.arrivals.len() {
            progress |= self.try_plan(recorded);
        }
        progress
    }

    /// Pass 2: ddmin over the faults.
    fn faults(&mut self) -> bool {
        let items = self.best.faults.clone();
        let base = self.best.clone();
        let kept = ddmin(items, |subset| {
            let mut candidate = base.clone();
            candidate.faults = subset.to_vec();
            self.try_plan(candidate)
        });
        kept.is_some()
    }

    /// Pass 3: ddmin over the jobs.
    fn jobs(&mut self) -> bool {
        let items = self.best.arrivals.clone();
        let base = self.best.clone();
        let kept = ddmin(items, |subset| {
            if subset.is_empty() {
                return false;
            }
            let mut candidate = base.clone();
            candidate.arrivals = subset.to_vec();
            candidate.world.jobs = subset.len() as u32;
            let jobs: std::collections::BTreeSet<u64> = subset.iter().map(|arrival| arrival.job).collect();
            candidate.faults.retain(|fault| fault.job().is_none_or(|job| jobs.contains(&job.0)));
            self.try_plan(candidate)
        });
        kept.is_some()
    }

    /// Pass 4: every worker and reclaimer the violation does not name at once, then one fewer at
    /// a time.
    fn nodes(&mut self) -> bool {
        let mut progress = false;
        if let Verdict::Safety(violation) | Verdict::Liveness(violation) = &self.report.verdict {
            let (_, named) = lease_check::explain::involved(&self.report.history, violation);
            let mut candidate = self.best.clone();
            for worker in (0..self.best.world.workers).rev() {
                if !named.contains(&Node::Worker(worker)) && candidate.world.workers > 1 {
                    candidate = without(&candidate, Node::Worker(worker));
                }
            }
            for reclaimer in (0..self.best.world.reclaimers).rev() {
                if !named.contains(&Node::Reclaimer(reclaimer)) && candidate.world.reclaimers > 1 {
                    candidate = without(&candidate, Node::Reclaimer(reclaimer));
                }
            }
            if candidate != self.best {
                progress |= self.try_plan(candidate);
            }
        }
        for worker in (0..self.best.world.workers).rev() {
            if self.best.world.workers > 1 && worker < self.best.world.workers {
                progress |= self.try_plan(without(&self.best, Node::Worker(worker)));
            }
        }
        for reclaimer in (0..self.best.world.reclaimers).rev() {
            if self.best.world.reclaimers > 1 && reclaimer < self.best.world.reclaimers {
                progress |= self.try_plan(without(&self.best, Node::Reclaimer(reclaimer)));
            }
        }
        progress
    }

    /// Pass 5: simpler parameters: no fault of one kind at all (no loss, ideal clocks, no slow
    /// calls, ...), a calm network latency, a fixed dependency latency, fewer attempts.
    fn parameters(&mut self) -> bool {
        let mut progress = false;
        for verb in VERBS_BY_KIND {
            if self.best.faults.iter().any(|fault| fault.verb() == verb) {
                let mut candidate = self.best.clone();
                candidate.faults.retain(|fault| fault.verb() != verb);
                progress |= self.try_plan(candidate);
            }
        }
        let calm = crate::world::CALM_LATENCY_US;
        if self.best.world.network_latency_us != calm {
            let mut candidate = self.best.clone();
            candidate.world.network_latency_us = calm;
            progress |= self.try_plan(candidate);
        }
        let (min, max) = self.best.world.dependency_latency_us;
        if min != max {
            let mut candidate = self.best.clone();
            candidate.world.dependency_latency_us = (min, min);
            progress |= self.try_plan(candidate);
        }
        // Quieter idle nodes: an idle worker asks again less often, a reclaimer scans less often.
        // Their empty answers are most of a small failing history's lines.
        for quieter in [Quieter::Backoff, Quieter::Scans] {
            for _ in 0..4 {
                let mut candidate = self.best.clone();
                let world = &mut candidate.world;
                match quieter {
                    Quieter::Backoff => {
                        let longest = world.idle_backoff_max_us();
                        world.idle_backoff_us = world.idle_backoff_us.saturating_mul(8).min(longest).max(1)
                    }
                    Quieter::Scans => {
                        world.scan_every_us = world.scan_every_us.saturating_mul(2).min(world.lease_ttl_us)
                    }
                }
                if candidate == self.best || !self.try_plan(candidate) {
                    break;
                }
                progress = true;
            }
        }
        // Fewer attempts, keeping the last ones: the faults of the attempts dropped go, and those
        // of the attempts kept move down to the epochs they now come at. Then fewer attempts
        // alone.
        let attempts = self.best.world.attempts_max;
        for attempts_max in 1..attempts {
            let mut candidate = self.best.clone();
            candidate.world.attempts_max = attempts_max;
            let dropped = u64::from(attempts - attempts_max);
            candidate.faults = candidate.faults.iter().filter_map(|&fault| epochs_down(fault, dropped)).collect();
            if self.try_plan(candidate) {
                progress = true;
                break;
            }
        }
        for attempts_max in 1..self.best.world.attempts_max {
            let mut candidate = self.best.clone();
            candidate.world.attempts_max = attempts_max;
            if self.try_plan(candidate) {
                progress = true;
                break;
            }
        }
        progress
    }

    /// Pass 6: the whole run sooner (every arrival and scheduled fault moved earlier together, so
    /// that no idle time comes first), then each fault earlier and shorter, halving while the
    /// failure stays.
    fn windows(&mut self) -> bool {
        let mut progress = false;
        let mut shift = self.best.arrivals.first().map_or(0, |arrival| arrival.at_us);
        while shift > 1_000 {
            if self.try_plan(sooner(&self.best, shift)) {
                progress = true;
                shift = self.best.arrivals.first().map_or(0, |arrival| arrival.at_us);
            } else {
                shift /= 2;
            }
        }
        for index in 0..self.best.faults.len() {
            for change in [Change::Shorter, Change::Earlier] {
                while let Some(changed) = self.best.faults.get(index).and_then(|&fault| change.apply(fault)) {
                    let mut candidate = self.best.clone();
                    candidate.faults[index] = changed;
                    candidate.faults.sort_by_key(Planned::time_us);
                    if !self.try_plan(candidate) {
                        break;
                    }
                    progress = true;
                }
            }
        }
        progress
    }
}

/// A way pass 5 makes idle nodes quieter.
#[derive(Debug, Clone, Copy)]
enum Quieter {
    /// An idle worker waits eight times as long before it asks again.
    Backoff,
    /// A reclaimer scans half as often (at most once a lease).
    Scans,
}

/// The kinds of fault pass 5 tries without, one kind at a time: loss, clocks, and the rest.
const VERBS_BY_KIND: [&str; 12] =
    ["lose", "skew", "delay", "duplicate", "slow", "fail", "rival", "stall", "pause", "partition", "shutdown", "crash"];

/// Whether `a` (with its run) is no bigger than `b` (with its run): fewer faults first, then
/// fewer jobs, fewer nodes, and a history no longer. A plan with fewer faults is smaller even if
/// its failure comes later in a longer history.
fn smaller_or_equal(a: &Plan, a_run: &RunReport, b: &Plan, b_run: &RunReport) -> bool {
    let (a, b) = (Size::of(a, a_run), Size::of(b, b_run));
    (a.faults, a.jobs, a.nodes, a.lines) <= (b.faults, b.jobs, b.nodes, b.lines)
}

/// A simplification of one fault.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// Half as long.
    Shorter,
    /// Twice as early (scheduled faults only).
    Earlier,
}

impl Change {
    fn apply(self, planned: Planned) -> Option<Planned> {
        let half = |us: u64| (us > 1).then_some(us / 2);
        match (self, planned) {
            (Change::Shorter, Planned::Scheduled { at_us, fault }) => {
                Some(Planned::Scheduled { at_us, fault: fault.shrunk()? })
            }
            (Change::Earlier, Planned::Scheduled { at_us, fault }) => {
                Some(Planned::Scheduled { at_us: half(at_us)?, fault })
            }
            (Change::Shorter, Planned::Keyed(keyed)) => {
                Some(Planned::Keyed(Keyed { dealt: keyed.dealt.shrunk()?, ..keyed }))
            }
            _ => None,
        }
    }
}

/// `planned` with the epoch it names `by` lower; `None` when that epoch is gone.
fn epochs_down(planned: Planned, by: u64) -> Option<Planned> {
    let Planned::Keyed(keyed) = planned else { return Some(planned) };
    let site = match keyed.visit.site {
        Site::Call { job, epoch } => {
            Site::Call { job, epoch: lease_core::Epoch(epoch.0.checked_sub(by).filter(|e| *e > 0)?) }
        }
        Site::Message { ends, message, reply, job, epoch: Some(epoch) } => {
            let epoch = lease_core::Epoch(epoch.0.checked_sub(by).filter(|e| *e > 0)?);
            Site::Message { ends, message, reply, job, epoch: Some(epoch) }
        }
        other => other,
    };
    Some(Planned::Keyed(Keyed { visit: Visit { site, ..keyed.visit }, ..keyed }))
}

/// `plan` with every arrival and scheduled fault `shift_us` sooner (none before the start).
fn sooner(plan: &Plan, shift_us: u64) -> Plan {
    let mut moved = plan.clone();
    for arrival in &mut moved.arrivals {
        arrival.at_us = arrival.at_us.saturating_sub(shift_us);
    }
    for fault in &mut moved.faults {
        if let Planned::Scheduled { at_us, .. } = fault {
            *at_us = at_us.saturating_sub(shift_us);
        }
    }
    moved.faults.sort_by_key(Planned::time_us);
    moved
}

/// Who did what a history line records: a grant's owner, else the line's node.
fn actor(entry: &Entry) -> Node {
    match &entry.event {
        Event::Granted { owner, .. } | Event::Regranted { owner, .. } => *owner,
        _ => entry.node,
    }
}

/// `candidate` with each pause and crash at a fixed time on a worker or reclaimer moved to the
/// same moment of the same work in `now` (the candidate's own history) as in `was` (the best
/// plan's): its anchor is the last line about a job that the node did at or before the fault, and
/// the fault moves, at the same offset, to the first line of that kind about that job in `now`,
/// and to the node that did it there.
fn reanchored(candidate: &Plan, was: &[Entry], now: &[Entry]) -> Plan {
    let mut aimed = candidate.clone();
    for planned in &mut aimed.faults {
        let Planned::Scheduled { at_us, fault } = planned else { continue };
        let node = match fault {
            Fault::Pause { node, .. } | Fault::Crash { node, .. } | Fault::Shutdown { node, .. } => *node,
            _ => continue,
        };
        if !matches!(node, Node::Worker(_) | Node::Reclaimer(_)) {
            continue;
        }
        let anchor =
            was.iter().rev().find(|entry| entry.t_us <= *at_us && actor(entry) == node && entry.job().is_some());
        let Some(anchor) = anchor else { continue };
        let offset = *at_us - anchor.t_us;
        let same = now.iter().find(|entry| {
            entry.job() == anchor.job() && std::mem::discriminant(&entry.event) == std::mem::discriminant(&anchor.event)
        });
        let Some(same) = same else { continue };
        let moved = actor(same);
        if std::mem::discriminant(&moved) != std::mem::discriminant(&node) {
            continue;
        }
        *at_us = same.t_us + offset;
        match fault {
            Fault::Pause { node, .. } | Fault::Crash { node, .. } | Fault::Shutdown { node, .. } => *node = moved,
            _ => {}
        }
    }
    aimed.faults.sort_by_key(Planned::time_us);
    aimed
}

/// `plan` without `gone` (a worker or a reclaimer): the faults naming it dropped, the nodes after
/// it renumbered down.
fn without(plan: &Plan, gone: Node) -> Plan {
    let mut shrunk = plan.clone();
    match gone {
        Node::Worker(_) => shrunk.world.workers -= 1,
        Node::Reclaimer(_) => shrunk.world.reclaimers -= 1,
        _ => unreachable!("only workers and reclaimers are dropped"),
    }
    let renumber = |node: Node| -> Option<Node> {
        match (node, gone) {
            _ if node == gone => None,
            (Node::Worker(n), Node::Worker(g)) if n > g => Some(Node::Worker(n - 1)),
            (Node::Reclaimer(n), Node::Reclaimer(g)) if n > g => Some(Node::Reclaimer(n - 1)),
            _ => Some(node),
        }
    };
    shrunk.faults = plan.faults.iter().filter_map(|&planned| renumbered(planned, &renumber)).collect();
    shrunk
}

fn renumbered(planned: Planned, renumber: &impl Fn(Node) -> Option<Node>) -> Option<Planned> {
    Some(match planned {
        Planned::Scheduled { at_us, fault } => Planned::Scheduled { at_us, fault: fault.renumbered(renumber)? },
        Planned::Skew { node, clock } => Planned::Skew { node: renumber(node)?, clock },
        Planned::Keyed(keyed) => {
            let site = match keyed.visit.site {
                Site::Point { node, point, job } => Site::Point { node: renumber(node)?, point, job },
                Site::Call { job, epoch } => Site::Call { job, epoch },
                Site::Message { ends, message, reply, job, epoch } => {
                    let ends = match ends {
                        Some((from, to)) => Some((renumber(from)?, renumber(to)?)),
                        None => None,
                    };
                    Site::Message { ends, message, reply, job, epoch }
                }
            };
            Planned::Keyed(Keyed { visit: Visit { site, ..keyed.visit }, ..keyed })
        }
    })
}

/// Zeller's ddmin: a 1-minimal subset of `items` for which `fails` holds, given that it holds
/// for all of them. `fails` keeps its own record of what it accepted; this returns the subset
/// if any smaller one was found.
fn ddmin<T: Clone>(items: Vec<T>, mut fails: impl FnMut(&[T]) -> bool) -> Option<Vec<T>> {
    let mut current = items;
    let mut granularity = 2usize;
    let mut shrunk = false;
    while current.len() >= 2 {
        let chunk = current.len().div_ceil(granularity);
        let chunks: Vec<Vec<T>> = current.chunks(chunk).map(<[T]>::to_vec).collect();
        let mut reduced = false;
        // Try each chunk alone, then each complement.
        for part in &chunks {
            if part.len() < current.len() && fails(part) {
                current = part.clone();
                granularity = 2;
                reduced = true;
                break;
            }
        }
        if !reduced {
            for skip in 0..chunks.len() {
                let complement: Vec<T> =
                    chunks.iter().enumerate().filter(|(i, _)| *i != skip).flat_map(|(_, part)| part.clone()).collect();
                if complement.len() < current.len() && fails(&complement) {
                    current = complement;
                    granularity = (granularity - 1).max(2);
                    reduced = true;
                    break;
                }
            }
        }
        if reduced {
            shrunk = true;
            continue;
        }
        if granularity >= current.len() {
            break;
        }
        granularity = (granularity * 2).min(current.len());
    }
    if current.len() == 1 && fails(&[]) {
        current.clear();
        shrunk = true;
    }
    shrunk.then_some(current)
}

/// Shrinks `plan`, whose run `report` failed with `finding`, within `budget` runs (the original's
/// included). `progress` hears after every run: runs so far, the best plan and its run.
pub fn shrink(
    plan: Plan,
    report: RunReport,
    budget: u64,
    progress: &mut dyn FnMut(u64, &Plan, &RunReport),
) -> Result<Shrunk, String> {
    let Some(finding) = finding(&report) else { return Err("the run holds: there is no failure to shrink".into()) };
    let before = Size::of(&plan, &report);
    // Two orders of the passes, each from the original: jobs first (a job dropped takes its
    // faults with it), then faults first (a fault the failure does not need goes before it can
    // pin a job). The search is local, so the two often settle on different plans; the smaller
    // wins. The second spends what the first left of the budget.
    let mut runs = 1;
    let mut best: Option<(Plan, RunReport)> = None;
    let mut exhausted = false;
    // The first order may spend half the budget, so that the second always gets its turn.
    for (order, share) in [(Order::JobsFirst, budget.max(2) / 2), (Order::FaultsFirst, budget.max(1))] {
        let mut search = Search {
            best: plan.clone(),
            report: report.clone(),
            finding,
            runs,
            budget: share,
            progress: &mut *progress,
        };
        search.settle(order);
        runs = search.runs;
        exhausted = search.spent();
        let better = match &best {
            None => true,
            Some((plan, run)) => {
                smaller_or_equal(&search.best, &search.report, plan, run)
                    && Size::of(&search.best, &search.report) != Size::of(plan, run)
            }
        };
        if better {
            best = Some((search.best, search.report));
        }
    }
    let (plan, report) = best.expect("one order ran");
    let mut plan = with_struck_times(plan, &report.plan);
    let after = Size::of(&plan, &report);
    plan.expect = Some(finding.name().to_string());
    Ok(Shrunk { plan, report, finding, runs, before, after, exhausted })
}

/// `plan` with each keyed fault's `fired_us` set to when it struck in its own replay (`struck`,
/// that replay's record), and the keyed faults that never struck left out: a keyed fault strikes
/// at its visit, so neither change alters the run.
fn with_struck_times(mut plan: Plan, struck: &Plan) -> Plan {
    let fired: std::collections::BTreeMap<(Visit, Dealt), u64> = struck
        .faults
        .iter()
        .filter_map(|fault| match fault {
            Planned::Keyed(keyed) => Some(((keyed.visit, keyed.dealt), keyed.fired_us)),
            _ => None,
        })
        .collect();
    plan.faults = plan
        .faults
        .into_iter()
        .filter_map(|fault| match fault {
            Planned::Keyed(keyed) => {
                let fired_us = *fired.get(&(keyed.visit, keyed.dealt))?;
                Some(Planned::Keyed(Keyed { fired_us, ..keyed }))
            }
            other => Some(other),
        })
        .collect();
    plan.faults.sort_by_key(Planned::time_us);
    plan
}

/// The order of the first two passes.
#[derive(Debug, Clone, Copy)]
enum Order {
    JobsFirst,
    FaultsFirst,
}

impl Search<'_> {
    /// Runs the passes in `order` until a whole round shrinks nothing or the budget is spent.
    fn settle(&mut self, order: Order) {
        loop {
            let mut progress = self.truncate();
            match order {
                Order::JobsFirst => {
                    progress |= self.jobs();
                    progress |= self.faults();
                }
                Order::FaultsFirst => {
                    progress |= self.faults();
                    progress |= self.jobs();
                }
            }
            progress |= self.nodes();
            progress |= self.parameters();
            progress |= self.windows();
            if !progress || self.spent() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ddmin;

    // Proves ddmin finds a 1-minimal failing subset: the failure needs items 3 and 7 together, so
    // from 0..16 it ends with exactly [3, 7]; a failure needing nothing ends empty.
    #[test]
    fn ddmin_finds_the_two_items_a_failure_needs() {
        let mut accepted = Vec::new();
        let found = ddmin((0..16).collect(), |subset: &[u32]| {
            let fails = subset.contains(&3) && subset.contains(&7);
            if fails {
                accepted.push(subset.to_vec());
            }
            fails
        });
        assert_eq!(found, Some(vec![3, 7]));
        assert!(accepted.iter().all(|subset| subset.contains(&3) && subset.contains(&7)));
        assert_eq!(ddmin((0..5).collect(), |_: &[u32]| true), Some(vec![]));
        assert_eq!(ddmin(vec![1], |subset: &[u32]| subset == [1]), None);
    }
}
