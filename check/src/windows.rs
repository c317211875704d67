//! The protocol's windows: the narrow interleavings where production queues broke.
//!
//! Each window is a `sometimes` situation (see [`super::coverage`]): counted every time a history
//! shows it, never a failure. A sweep reports how many seeds reached each, and the swarm requires
//! all seven, so a change to the world that stops reaching one fails the coverage gate. Every
//! window is read from the history alone, so it is counted the same on any history.
//!
//! | name | counted on |
//! |---|---|
//! | `window_list_to_fence` | a completion, renewal, requeue or dead-letter of a job (any table answer to one, refusals included) between a reclaimer's `listed` of its lease and that batch's fence answer for it (River #1302) |
//! | `window_fence_to_lookup` | a worker's `effect_applied`, `effect_rejected` or `dependency_failed` under an older epoch between a `reclaimed` and the first `looked_up` at the new epoch or above |
//! | `window_renew_in_flight` | a renewal the table refuses because its lease expired while it travelled (`expired`, or `stale_epoch` for a lease past its expiry), or a renewal's answer held back (`delayed`, or a stall `before_renew_reply`) for at least one drift margin, so that a worker counting its lease from the answer would overrun it (Graphile Worker #222) |
//! | `window_effect_to_ack` | the worker whose effect was applied crashes, pauses, or is cut off from the table (or already was) before the table accepts its completion |
//! | `window_stale_hand_back` | a requeue (or the dead-letter it ends in) or a release under an epoch that is no longer the job's, or for a job that already ended (Oban #532, Solid Queue #589) |
//! | `window_late_duplicate` | a copy of a request that already moved the state on reaches the table or the ledger: a second answer to the same requester's completion, requeue, quarantine, execute, fence or enqueue of one job at one epoch (a `regranted` acquire is not counted: the grant it repeats still stands, so nothing moved on) |
//! | `window_expiry_boundary` | a `reclaimed` within one drift margin after the lease's expiry, or a `renewed` within one drift margin before it |
//! | `window_batch_crash_between_effects` | a worker process crashes when, of the effects its slots started at one turn (`executing` lines of two or more of its slots at one time), one was applied and another not yet |
//! | `window_batch_stale_completion` | a batch of completions (two or more answers at one time to slots of one process, one line after another) carries an epoch that is no longer its job's |
//! | `window_batch_renewal_after_reclaim` | a batch of renewals names a lease that a reclaimer took meanwhile: one of its epochs is below its job's, fenced since |
//!
//! The three batch windows need the `run` line's `worker_processes` (a world whose processes run
//! several slots, and batch): a batch is the table's answers, one line after another at one
//! time, to requests of one kind from slots of one process.
//!
//! The drift margin is the run's `drift_margin_us` parameter, or ttl/8 (the scenarios' margin)
//! for a history whose `run` line does not name one.

use super::facts::Facts;
use lease_core::{BatchId, Epoch, JobId, ReclaimerId};
use lease_history::{Entry, Event, Node, OutcomeKind, Point, RefuseReason, RefusedRequest};
use std::collections::{BTreeMap, BTreeSet};

pub(crate) const LIST_TO_FENCE: &str = "window_list_to_fence";
pub(crate) const FENCE_TO_LOOKUP: &str = "window_fence_to_lookup";
pub(crate) const RENEW_IN_FLIGHT: &str = "window_renew_in_flight";
pub(crate) const EFFECT_TO_ACK: &str = "window_effect_to_ack";
pub(crate) const STALE_HAND_BACK: &str = "window_stale_hand_back";
pub(crate) const LATE_DUPLICATE: &str = "window_late_duplicate";
pub(crate) const EXPIRY_BOUNDARY: &str = "window_expiry_boundary";
pub(crate) const BATCH_CRASH: &str = "window_batch_crash_between_effects";
pub(crate) const BATCH_STALE_COMPLETION: &str = "window_batch_stale_completion";
pub(crate) const BATCH_RENEWAL_AFTER_RECLAIM: &str = "window_batch_renewal_after_reclaim";

/// The seven windows, in the order the issue that named them lists them.
pub const WINDOWS: [&str; 7] =
    [LIST_TO_FENCE, FENCE_TO_LOOKUP, RENEW_IN_FLIGHT, EFFECT_TO_ACK, STALE_HAND_BACK, LATE_DUPLICATE, EXPIRY_BOUNDARY];

/// The windows of batches, reached only by worlds whose processes batch.
pub const BATCH_WINDOWS: [&str; 3] = [BATCH_CRASH, BATCH_STALE_COMPLETION, BATCH_RENEWAL_AFTER_RECLAIM];

/// The table's answers to one kind of worker request, one line after another at one time, to
/// slots of one process: a batch, once it holds two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answered {
    Completion,
    Renewal,
}

/// The batch being read: its time, kind and process, how many answers it holds, and whether one
/// named an epoch that is no longer its job's.
#[derive(Debug, Clone, Copy)]
struct BatchRead {
    t_us: u64,
    kind: Answered,
    process: u32,
    answers: u32,
    stale: bool,
}

/// A request whose copies [`Windows`] recognises: one per requester, job and epoch (or batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Asked {
    Complete(Node, JobId, Epoch),
    Requeue(Node, JobId, Epoch),
    Release(Node, JobId, Epoch),
    Quarantine(Node, JobId, Epoch),
    Execute(Node, JobId, Epoch),
    Fence(BatchId, JobId),
    Enqueue(JobId),
}

/// What the window detectors remember between entries.
#[derive(Debug, Clone, Default)]
pub(crate) struct Windows {
    /// The drift margin, from the `run` line.
    margin_us: u64,
    /// Per job, the batches that listed its lease and have not fenced it yet.
    listed: BTreeMap<JobId, BTreeSet<BatchId>>,
    /// Per reclaimer, its latest batch and the jobs it listed: a new listing closes the old one.
    batches: BTreeMap<ReclaimerId, (BatchId, Vec<JobId>)>,
    /// Per job, the epoch a reclaimer fenced it to, until a lookup at that epoch or above.
    fenced: BTreeMap<JobId, Epoch>,
    /// Per worker, the job and epoch whose effect it applied, until its completion is accepted.
    applied: BTreeMap<u32, (JobId, Epoch)>,
    /// Per node, how many cuts from the table (its own, or a partition from everyone) are in force.
    cut: BTreeMap<Node, u32>,
    /// Per worker, when its stall before a renewal's answer began.
    renew_stall: BTreeMap<u32, u64>,
    /// Requests whose first answer moved the state on.
    answered: BTreeSet<Asked>,
    /// The run's worker processes, when each runs several slots.
    processes: Option<u32>,
    /// The batch of answers being read, if the last line was one of them.
    batch: Option<BatchRead>,
    /// Per process, the effects its slots started at its latest turn: when, and per slot the
    /// job and epoch and whether the ledger applied it.
    turns: BTreeMap<u32, (u64, BTreeMap<u32, (JobId, Epoch, bool)>)>,
}

impl Windows {
    /// Tells `seen` each window `entry` shows, against the facts before it.
    pub(crate) fn observe(&mut self, facts: &Facts, entry: &Entry, seen: &mut impl FnMut(&'static str)) {
        let t = entry.t_us;
        if self.processes.is_some() {
            self.batches(facts, entry, seen);
        }
        match &entry.event {
            Event::Run { lease_ttl_us, drift_margin_us, worker_processes, .. } => {
                self.margin_us = drift_margin_us.unwrap_or(lease_ttl_us / 8);
                self.processes = worker_processes.filter(|&n| n > 0);
            }
            Event::Listed { reclaimer: Node::Reclaimer(n), batch, leases } => {
                if let Some((old, jobs)) = self.batches.remove(&ReclaimerId(*n)) {
                    for job in jobs {
                        self.close_listing(job, old);
                    }
                }
                let jobs: Vec<JobId> = leases.iter().map(|lease| lease.job).collect();
                for &job in &jobs {
                    self.listed.entry(job).or_default().insert(*batch);
                }
                self.batches.insert(ReclaimerId(*n), (*batch, jobs));
            }
            Event::Reclaimed { job, batch, new_epoch, expires_at_us, .. } => {
                self.close_listing(*job, *batch);
                self.fenced.insert(*job, *new_epoch);
                self.copy_of(Asked::Fence(*batch, *job), seen);
                if t.saturating_sub(*expires_at_us) <= self.margin_us {
                    seen(EXPIRY_BOUNDARY);
                }
            }
            Event::LostRace { job, batch, .. } | Event::NotExpired { job, batch, .. } => {
                self.close_listing(*job, *batch);
                self.repeat(Asked::Fence(*batch, *job), seen);
            }
            Event::Renewed { job, epoch, .. } => {
                self.hand_in(*job, seen);
                let before = facts.job(*job).and_then(|facts| facts.terms.get(epoch));
                if before.is_some_and(|term| term.expires_at_us >= t && term.expires_at_us - t <= self.margin_us) {
                    seen(EXPIRY_BOUNDARY);
                }
            }
            Event::Refused { from, job, epoch, request, reason, .. } => {
                let hand_in = [
                    RefusedRequest::Renew,
                    RefusedRequest::Complete,
                    RefusedRequest::Requeue,
                    RefusedRequest::Release,
                    RefusedRequest::DeadLetter,
                ];
                if hand_in.contains(request) {
                    self.hand_in(*job, seen);
                }
                match request {
                    RefusedRequest::Renew => {
                        let term = facts.job(*job).and_then(|facts| facts.terms.get(epoch));
                        let lapsed = term.is_some_and(|term| term.expires_at_us <= t);
                        if *reason == RefuseReason::Expired || (*reason == RefuseReason::StaleEpoch && lapsed) {
                            seen(RENEW_IN_FLIGHT);
                        }
                    }
                    RefusedRequest::Complete => self.repeat(Asked::Complete(*from, *job, *epoch), seen),
                    // A dead-letter is a hand-back too, judged as a requeue is.
                    RefusedRequest::Requeue | RefusedRequest::DeadLetter => {
                        self.hand_back(facts, *job, *epoch, seen);
                        self.repeat(Asked::Requeue(*from, *job, *epoch), seen);
                    }
                    RefusedRequest::Quarantine => self.repeat(Asked::Quarantine(*from, *job, *epoch), seen),
                    RefusedRequest::Release => {
                        self.hand_back(facts, *job, *epoch, seen);
                        self.repeat(Asked::Release(*from, *job, *epoch), seen);
                    }
                }
            }
            Event::Terminal { from, job, outcome, epoch, .. } => {
                self.hand_in(*job, seen);
                let asked = match outcome {
                    OutcomeKind::Completed => Asked::Complete(*from, *job, *epoch),
                    OutcomeKind::DeadLettered => {
                        self.hand_back(facts, *job, *epoch, seen);
                        Asked::Requeue(*from, *job, *epoch)
                    }
                    OutcomeKind::Quarantined => Asked::Quarantine(*from, *job, *epoch),
                };
                self.copy_of(asked, seen);
                if let Node::Worker(worker) = from {
                    self.completed(*worker, *job);
                }
                self.applied.retain(|_, (applied, _)| applied != job);
            }
            Event::AlreadyCompleted { from, job, epoch, .. } => {
                self.hand_in(*job, seen);
                self.repeat(Asked::Complete(*from, *job, *epoch), seen);
                if let Node::Worker(worker) = from {
                    self.completed(*worker, *job);
                }
            }
            Event::Requeued { from, job, epoch, .. } => {
                self.hand_in(*job, seen);
                self.hand_back(facts, *job, *epoch, seen);
                self.copy_of(Asked::Requeue(*from, *job, *epoch), seen);
            }
            Event::Released { from, job, epoch, .. } => {
                self.hand_in(*job, seen);
                self.hand_back(facts, *job, *epoch, seen);
                self.copy_of(Asked::Release(*from, *job, *epoch), seen);
            }
            Event::LookedUp { job, epoch, .. } if self.fenced.get(job).is_some_and(|fenced| epoch >= fenced) => {
                self.fenced.remove(job);
            }
            Event::EffectApplied { from: from @ Node::Worker(worker), job, epoch, .. } => {
                self.stale_call(*job, *epoch, seen);
                self.copy_of(Asked::Execute(*from, *job, *epoch), seen);
                self.applied.insert(*worker, (*job, *epoch));
                if self.cut.get(from).is_some_and(|&cuts| cuts > 0) {
                    seen(EFFECT_TO_ACK);
                }
            }
            Event::EffectRejected { from: from @ Node::Worker(_), job, epoch, .. }
            | Event::DependencyFailed { from: from @ Node::Worker(_), job, epoch, after_effect: false, .. } => {
                self.stale_call(*job, *epoch, seen);
                self.repeat(Asked::Execute(*from, *job, *epoch), seen);
            }
            // The failed answer of a call whose effect was applied (the line before): the same
            // call, not a copy.
            Event::DependencyFailed { from: Node::Worker(_), job, epoch, after_effect: true, .. } => {
                self.stale_call(*job, *epoch, seen);
            }
            Event::Granted { owner: Node::Worker(worker), .. } => {
                self.applied.remove(worker);
            }
            Event::Arrived { job, .. } => {
                self.answered.insert(Asked::Enqueue(*job));
            }
            Event::Duplicate { job } => self.repeat(Asked::Enqueue(*job), seen),
            Event::Crashed { target, .. } | Event::Stopped { target } => self.struck(*target, seen),
            Event::Paused { target, point, .. } => {
                self.struck(*target, seen);
                if let (Node::Worker(worker), Some(Point::BeforeRenewReply)) = (target, point) {
                    self.renew_stall.insert(*worker, t);
                }
            }
            Event::Resumed { target: Node::Worker(worker) } => {
                let stalled = self.renew_stall.remove(worker);
                if stalled.is_some_and(|since| t - since >= self.margin_us) {
                    seen(RENEW_IN_FLIGHT);
                }
            }
            Event::Partitioned { target, peer } => {
                if matches!(peer, None | Some(Node::Table)) {
                    *self.cut.entry(*target).or_insert(0) += 1;
                    self.struck(*target, seen);
                }
            }
            Event::Healed { target, peer } => {
                if matches!(peer, None | Some(Node::Table)) {
                    if let Some(cuts) = self.cut.get_mut(target) {
                        *cuts = cuts.saturating_sub(1);
                    }
                }
            }
            Event::Delayed { message: lease_history::MessageKind::Renew, reply: true, len_us, .. }
                if *len_us >= self.margin_us =>
            {
                seen(RENEW_IN_FLIGHT);
            }
            Event::FaultsHealed {} => self.cut.clear(),
            _ => {}
        }
    }

    /// The batch windows: `entry` against the batch being read and each process's turn.
    fn batches(&mut self, facts: &Facts, entry: &Entry, seen: &mut impl FnMut(&'static str)) {
        let processes = self.processes.expect("checked");
        let process = |node: &Node| match node {
            Node::Worker(w) => Some(w % processes),
            _ => None,
        };
        let stale = |job: &JobId, epoch: &Epoch| facts.job(*job).is_some_and(|facts| facts.epoch > *epoch);
        let answer = match &entry.event {
            Event::Terminal { from, job, epoch, outcome: OutcomeKind::Completed, .. }
            | Event::AlreadyCompleted { from, job, epoch, .. } => {
                Some((Answered::Completion, process(from), stale(job, epoch)))
            }
            Event::Refused { from, job, epoch, request: RefusedRequest::Complete, .. } => {
                Some((Answered::Completion, process(from), stale(job, epoch)))
            }
            Event::Renewed { from, job, epoch, .. }
            | Event::Refused { from, job, epoch, request: RefusedRequest::Renew, .. } => {
                Some((Answered::Renewal, process(from), stale(job, epoch)))
            }
            _ => None,
        };
        match answer {
            Some((kind, Some(process), stale)) if entry.node == Node::Table => {
                let read = self.batch.filter(|b| b.t_us == entry.t_us && b.kind == kind && b.process == process);
                let mut read = read.unwrap_or(BatchRead { t_us: entry.t_us, kind, process, answers: 0, stale: false });
                read.answers += 1;
                read.stale |= stale;
                if read.answers >= 2 && read.stale {
                    seen(match kind {
                        Answered::Completion => BATCH_STALE_COMPLETION,
                        Answered::Renewal => BATCH_RENEWAL_AFTER_RECLAIM,
                    });
                }
                self.batch = Some(read);
            }
            _ => self.batch = None,
        }
        match &entry.event {
            Event::Executing { job, epoch, .. } => {
                let Some(process) = process(&entry.node) else { return };
                let Node::Worker(slot) = entry.node else { return };
                let turn = self.turns.entry(process).or_insert((entry.t_us, BTreeMap::new()));
                if turn.0 != entry.t_us {
                    *turn = (entry.t_us, BTreeMap::new());
                }
                turn.1.entry(slot).or_insert((*job, *epoch, false));
            }
            Event::EffectApplied { from: from @ Node::Worker(slot), job, epoch, .. } => {
                let Some(process) = process(from) else { return };
                if let Some(started) = self.turns.get_mut(&process).and_then(|turn| turn.1.get_mut(slot)) {
                    if started.0 == *job && started.1 == *epoch {
                        started.2 = true;
                    }
                }
            }
            Event::Crashed { target, .. } => {
                let Some(process) = process(target) else { return };
                if let Some((_, started)) = self.turns.remove(&process) {
                    let applied = started.values().filter(|(_, _, applied)| *applied).count();
                    if started.len() >= 2 && applied >= 1 && applied < started.len() {
                        seen(BATCH_CRASH);
                    }
                }
            }
            _ => {}
        }
    }

    fn close_listing(&mut self, job: JobId, batch: BatchId) {
        if let Some(batches) = self.listed.get_mut(&job) {
            batches.remove(&batch);
            if batches.is_empty() {
                self.listed.remove(&job);
            }
        }
    }

    /// A completion, renewal, requeue or dead-letter of `job` reached the table.
    fn hand_in(&mut self, job: JobId, seen: &mut impl FnMut(&'static str)) {
        if self.listed.contains_key(&job) {
            seen(LIST_TO_FENCE);
        }
    }

    /// A requeue of `job` under `epoch` reached the table.
    fn hand_back(&mut self, facts: &Facts, job: JobId, epoch: Epoch, seen: &mut impl FnMut(&'static str)) {
        let Some(facts) = facts.job(job) else { return };
        if facts.epoch > epoch || facts.terminal.is_some() {
            seen(STALE_HAND_BACK);
        }
    }

    /// A worker's call under `epoch` reached the ledger.
    fn stale_call(&mut self, job: JobId, epoch: Epoch, seen: &mut impl FnMut(&'static str)) {
        if self.fenced.get(&job).is_some_and(|&fenced| epoch < fenced) {
            seen(FENCE_TO_LOOKUP);
        }
    }

    /// An answer that moved the state on: a later answer to the same request is to a copy.
    fn copy_of(&mut self, asked: Asked, seen: &mut impl FnMut(&'static str)) {
        if !self.answered.insert(asked) {
            seen(LATE_DUPLICATE);
        }
    }

    /// An answer that changed nothing: to a copy, if the same request was answered before.
    fn repeat(&mut self, asked: Asked, seen: &mut impl FnMut(&'static str)) {
        if self.answered.contains(&asked) {
            seen(LATE_DUPLICATE);
        }
    }

    /// Worker `worker`'s completion of `job` was accepted: its effect is acknowledged.
    fn completed(&mut self, worker: u32, job: JobId) {
        if self.applied.get(&worker).is_some_and(|(applied, _)| *applied == job) {
            self.applied.remove(&worker);
        }
    }

    /// `target` crashed, paused or was cut off.
    fn struck(&mut self, target: Node, seen: &mut impl FnMut(&'static str)) {
        if let Node::Worker(worker) = target {
            if self.applied.remove(&worker).is_some() {
                seen(EFFECT_TO_ACK);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::check_history;
    use super::super::fixtures::*;
    use lease_history::{RefuseReason, RefusedRequest};

    /// j1, j2 and j3 accepted; j1 and j2 leased to w1 and w2 until 1 010, both calling the
    /// dependency, and w1's effect applied.
    fn two_leases() -> History {
        let mut history = History::new(2, 8);
        for job in [J1, J2, J3] {
            history.at(0).arrived(job);
        }
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(10).granted(J2, E1, w(2), 1_010);
        history.at(20).executing(w(2), J2, E1);
        history.at(20).executing(w(1), J1, E1);
        history.at(30).applied(J1, E1, O7);
        history
    }

    /// The windows `history` reaches, by name, in [`super::WINDOWS`] order.
    fn reached(history: &History) -> Vec<u64> {
        let coverage = check_history(&history.entries).expect("a correct history");
        super::WINDOWS.iter().map(|name| coverage.get(name)).collect()
    }

    // Proves the three windows the coverage fixture never opens are counted exactly there:
    // j1's completion lands between r1's listing and its fence (list→fence); w2's stale effect
    // reaches the ledger between r1's fence and its lookup (fence→lookup); w3's failure report
    // is copied, and the copy comes after j3 was granted again (a stale hand-back, and a late
    // duplicate of a request that already moved the state on).
    #[test]
    fn each_window_is_counted_inside_it() {
        let mut history = two_leases();
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        history.at(1_012).completed(J1, O7, E1, None);
        history.at(1_015).lost_race(J1, E1, E1, batch(1, 0));
        history.at(1_020).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        history.at(1_022).applied(J2, E1, O8);
        history.at(1_030).looked_up(J2, E2, Some(O8), None, Some(batch(1, 0)));
        history.at(1_040).adopted(r(1), J2, O8, E2);
        history.at(1_050).completed(J2, O8, E2, Some(batch(1, 0)));
        history.at(1_100).granted(J3, E1, w(3), 2_100);
        history.at(1_105).executing(w(3), J3, E1);
        history.at(1_110).dependency_failed(J3, E1);
        history.at(1_120).requeued(J3, E1, 1, None);
        history.at(1_130).granted(J3, E2, w(4), 2_130);
        history.at(1_140).refused(J3, E1, RefusedRequest::Requeue, RefuseReason::StaleEpoch);
        // list→fence, fence→lookup, renew, effect→ack, stale hand-back, late duplicate, boundary:
        // j2's reclaim lands 10 µs after its expiry, within one margin (ttl/8).
        assert_eq!(reached(&history), [1, 1, 0, 0, 1, 1, 1]);
    }

    // Proves the windows stay shut just outside them: the completion comes after the fence's
    // answer, the stale effect after the lookup, the requeue's copy before anyone else holds
    // the job (so it is still a copy, but not stale), and the reclaim lands two margins late.
    #[test]
    fn no_window_is_counted_just_outside_it() {
        let mut history = two_leases();
        history.at(1_260).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        history.at(1_260).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_262).refused(J1, E1, RefusedRequest::Complete, RefuseReason::StaleEpoch);
        history.at(1_270).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        history.at(1_280).looked_up(J2, E2, None, None, Some(batch(1, 0)));
        history.at(1_285).effect_rejected(J2, E1, O8, lease_history::EffectRejectReason::Fenced);
        history.at(1_300).looked_up(J1, E2, Some(O7), None, Some(batch(1, 0)));
        history.at(1_305).adopted(r(1), J1, O7, E2);
        history.at(1_310).completed(J1, O7, E2, Some(batch(1, 0)));
        history.at(1_320).requeued(J2, E2, 1, Some(batch(1, 0)));
        history.at(1_400).granted(J3, E1, w(3), 2_400);
        history.at(1_405).executing(w(3), J3, E1);
        history.at(1_410).dependency_failed(J3, E1);
        history.at(1_420).requeued(J3, E1, 1, None);
        history.at(1_430).refused(J3, E1, RefusedRequest::Requeue, RefuseReason::NotLeased);
        assert_eq!(reached(&history), [0, 0, 0, 0, 0, 1, 0]);
    }

    /// A reclaim of j2 `late_us` after its lease's expiry, in a history whose `run` line names
    /// the drift margin `margin_us` (or none: ttl/8).
    fn reclaim_late(late_us: u64, margin_us: Option<u64>) -> u64 {
        let mut history = two_leases();
        let lease_history::Event::Run { drift_margin_us, .. } = &mut history.entries[0].event else {
            panic!("line 1 is the run")
        };
        *drift_margin_us = margin_us;
        history.at(1_010 + late_us).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        history.at(1_010 + late_us).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        let boundary = super::WINDOWS.iter().position(|&name| name == super::EXPIRY_BOUNDARY).unwrap();
        reached(&history)[boundary]
    }

    // Proves the expiry boundary is one drift margin wide, the margin the `run` line names: a
    // reclaim 30 µs late is inside a margin of 40 µs and 50 µs late is outside it; with no margin
    // named, the width is ttl/8 (125 µs of 1 000), so 50 µs late is inside and 130 µs late is not.
    // A checker that ignored the typed field (or read it in the wrong unit) fails one of these.
    #[test]
    fn the_expiry_boundary_is_the_drift_margin_the_run_line_names() {
        assert_eq!(reclaim_late(30, Some(40)), 1);
        assert_eq!(reclaim_late(50, Some(40)), 0);
        assert_eq!(reclaim_late(50, None), 1);
        assert_eq!(reclaim_late(130, None), 0);
        assert_eq!(reclaim_late(130, Some(200)), 1);
    }

    /// A history whose processes are `processes` (the `run` line's `worker_processes`, or none):
    /// w1 and w3 are slots of process 1 when there are two. j1 is leased to w1 until 2 000 with
    /// its effect applied (granted at 1 000), j2 to w3 until 1 010, applied too, and reclaimed by r1 at its expiry (now e2).
    fn one_process_two_leases(processes: Option<u32>) -> History {
        let mut history = History::new(2, 8);
        let lease_history::Event::Run { worker_processes, .. } = &mut history.entries[0].event else {
            panic!("line 1 is the run")
        };
        *worker_processes = processes;
        history.at(0).arrived(J2);
        history.at(5).arrived(J1);
        history.at(10).granted(J2, E1, w(3), 1_010);
        history.at(12).executing(w(3), J2, E1);
        history.at(15).applied(J2, E1, O8);
        history.at(1_000).granted(J1, E1, w(1), 2_000);
        history.at(1_002).executing(w(1), J1, E1);
        history.at(1_005).applied(J1, E1, O7);
        history.at(1_010).listed(batch(1, 0), &[(J2, E1, 1_010)]);
        history.at(1_010).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        history
    }

    /// The batch windows `history` reaches, in [`super::BATCH_WINDOWS`] order.
    fn batch_reached(history: &History) -> [u64; 3] {
        let coverage = check_history(&history.entries).expect("a correct history");
        super::BATCH_WINDOWS.map(|name| coverage.get(name))
    }

    // Proves a batch of completions or renewals is one that carries a stale epoch only when its
    // answers come at one time, one line after another, to slots of one process: w1's current
    // completion (or renewal) beside w3's stale one at 1 020 opens the window; the same answers
    // a microsecond apart, or in a world that names no processes, do not.
    #[test]
    fn a_stale_epoch_in_a_batch_of_completions_or_renewals_is_counted() {
        let stale = |processes: Option<u32>, apart_us: u64, renewal: bool| {
            let mut history = one_process_two_leases(processes);
            let request = if renewal {
                history.at(1_020).renewed(J1, E1, 2_020);
                RefusedRequest::Renew
            } else {
                history.at(1_020).completed(J1, O7, E1, None);
                RefusedRequest::Complete
            };
            history.at(1_020 + apart_us).refused(J2, E1, request, RefuseReason::StaleEpoch);
            batch_reached(&history)
        };
        assert_eq!(stale(Some(2), 0, false), [0, 1, 0]);
        assert_eq!(stale(Some(2), 0, true), [0, 0, 1]);
        assert_eq!(stale(Some(2), 1, false), [0, 0, 0], "two answers, not one batch");
        assert_eq!(stale(Some(2), 1, true), [0, 0, 0], "two answers, not one batch");
        assert_eq!(stale(None, 0, false), [0, 0, 0], "a world that names no processes");
        // Three processes: w1 and w3 are slots of different ones, so their answers are two batches.
        assert_eq!(stale(Some(3), 0, false), [0, 0, 0], "slots of two processes");
    }

    // Proves a crash between two effects of one turn is counted when the process crashes with
    // one of its slots' effects applied and another not: w1 and w3 start at one time and only
    // w1's effect lands before the crash. Both applied, or started at different turns, it is not.
    #[test]
    fn a_crash_between_two_effects_of_one_turn_is_counted() {
        let crash = |second_at_us: u64, both_applied: bool| {
            let mut history = History::new(2, 8);
            let lease_history::Event::Run { worker_processes, .. } = &mut history.entries[0].event else {
                panic!("line 1 is the run")
            };
            *worker_processes = Some(2);
            history.at(0).arrived(J1);
            history.at(0).arrived(J2);
            history.at(10).granted(J1, E1, w(1), 1_010);
            history.at(10).granted(J2, E1, w(3), 1_010);
            history.at(20).executing(w(1), J1, E1);
            history.at(second_at_us).executing(w(3), J2, E1);
            history.at(30).applied(J1, E1, O7);
            if both_applied {
                history.at(31).applied(J2, E1, O8);
            }
            history.at(40).crashed(w(1), lease_history::Point::AfterEffect, Some(J1));
            history.at(40).crashed(w(3), lease_history::Point::AfterEffect, Some(J1));
            batch_reached(&history)
        };
        assert_eq!(crash(20, false), [1, 0, 0]);
        assert_eq!(crash(20, true), [0, 0, 0], "every effect of the turn landed");
        assert_eq!(crash(21, false), [0, 0, 0], "two turns, one effect each");
    }
}
