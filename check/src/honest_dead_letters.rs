//! `eventually` honest_dead_letters: a job dead-letters only with evidence that each of its
//! attempts was genuine.
//!
//! A dead-letter tells a customer that their document could not be produced. It is honest only
//! if every counted attempt (every worker `granted` of the job) really tried, or really could not:
//!
//! - **the dependency failed it**: a `dependency_failed` from the grant's owner under the
//!   grant's epoch (`after_effect` counts too: the caller heard "failed");
//! - **a fault hit its holder while it held the lease**: a `crashed` (until `restarted`), a
//!   `paused` (until `resumed`; stalls are recorded as pauses) or a `partitioned` (until
//!   `healed`, or the end of the fault phase) whose target is the holder, or whose peer is the
//!   holder, that was in force at some instant between the grant and the end of its lease (its
//!   expiry, renewals included, or the reclaim, requeue or terminal outcome that ended it first).
//!   A fault of the table or the ledger (a crash, a pause, or a partition that cuts it off from
//!   everyone) counts for every holder;
//! - **its lease was lost in the fault phase of a world with network faults**: it was reclaimed
//!   (the reclaim itself may come after the heal: reclaimers scan on their own schedule), and it
//!   expired before `faults_healed`, or it was granted before then and its owner never acted on
//!   it (no lookup or execution of its under that epoch: the grant's answer, and any retried
//!   one, were lost in the fault phase); and the `run` line's `latency_us` reaches above its
//!   `latency_calm_us`, or some partition was in force while the lease was held. Lost and late messages then explain
//!   a worker that never heard of its grant, or whose lookup never arrived.
//!
//! Nothing else counts. In particular a worker abandoning its grant (`self_fenced`) shortly after
//! it was granted, without a fault on it and without reaching the dependency, is the lost work
//! this checker exists for: a job granted to workers that no longer wait for the answer (stale
//! long polls), each grant abandoned within milliseconds, then dead-lettered.
//!
//! This is a liveness property (exit status 2): nothing wrong was accepted, and the job reached
//! one terminal outcome, but the run lost work it should have done. A dead-letter is judged at
//! its `terminal` line, since every piece of evidence precedes it; the first one without
//! evidence is reported by the liveness check.

use super::{Invariant, Violation};
use lease_core::{Epoch, JobId};
use lease_history::{Entry, Event, Node, OutcomeKind};
use std::collections::BTreeMap;

/// Why an attempt counts as genuine, with the line that shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evidence {
    /// A `dependency_failed` for the grant.
    DependencyFailed(usize),
    /// A fault on the holder, or on the table or the ledger, while it held the lease.
    Fault(usize),
    /// A reclaim of a lease that expired in the fault phase of a world with network faults.
    Reclaimed(usize),
}

/// One worker grant of a job: a counted attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Attempt {
    /// The `granted` line.
    line: usize,
    epoch: Epoch,
    owner: Node,
    /// The lease's expiry, renewals included.
    expires_at_us: u64,
    /// Whether the lease still stands (not reclaimed, requeued or ended).
    held: bool,
    /// Whether some partition was in force while the lease was held.
    partitioned: bool,
    /// Whether it was granted before `faults_healed`.
    granted_in_fault_phase: bool,
    /// Whether its owner looked it up or executed it under its epoch.
    acted: bool,
    evidence: Option<Evidence>,
}

/// A fault in force: what it hits, and the line that started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// A crashed or paused node.
    Down(Node),
    /// A partition of `target` from `peer`, or from everyone.
    Cut(Node, Option<Node>),
}

impl Fault {
    /// Whether the fault keeps `holder` from acting on its lease.
    fn hits(self, holder: Node) -> bool {
        let server = |node: Node| matches!(node, Node::Table | Node::Ledger);
        match self {
            Fault::Down(node) => node == holder || server(node),
            Fault::Cut(target, peer) => target == holder || peer == Some(holder) || (peer.is_none() && server(target)),
        }
    }
}

/// The checker's memory: every job's attempts, the faults in force, and the first dishonest
/// dead-letter.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeadLetters {
    /// Whether the `run` line's parameters include loss or extra latency.
    network_faults: bool,
    /// The time of `faults_healed`, once seen.
    healed_at_us: Option<u64>,
    attempts: BTreeMap<JobId, Vec<Attempt>>,
    /// Faults in force, each with the line that started it (a repeated fault counts once).
    faults: BTreeMap<Fault, usize>,
    first: Option<Violation>,
}

impl DeadLetters {
    /// Folds in the entry at `line`; judges a dead-letter against the evidence before it.
    pub(crate) fn absorb(&mut self, line: usize, entry: &Entry) {
        match &entry.event {
            Event::Run { latency_us, latency_calm_us, .. } => {
                self.network_faults = has_network_faults(*latency_us, *latency_calm_us)
            }
            Event::FaultsHealed {} => {
                self.healed_at_us = Some(entry.t_us);
                // The heal closes every partition and resumes every paused node; crashed nodes
                // stay down until they restart.
                self.faults.retain(|fault, _| matches!(fault, Fault::Down(_)));
            }
            // A node told to stop is struck from the signal on: what it leaves to expire as it
            // drains is lost to the shutdown, as to a crash.
            Event::Crashed { target, .. } | Event::Paused { target, .. } | Event::Stopping { target, .. } => {
                self.fault(line, entry.t_us, Fault::Down(*target))
            }
            Event::Restarted { target } | Event::Resumed { target } => {
                self.faults.remove(&Fault::Down(*target));
            }
            Event::Partitioned { target, peer } => self.fault(line, entry.t_us, Fault::Cut(*target, *peer)),
            Event::Healed { target, peer } => {
                self.faults.remove(&Fault::Cut(*target, *peer));
            }
            // A message to or from the holder held back, doubled or lost: a network fault on it,
            // over in an instant, so evidence for the leases it stands now and forgotten after.
            Event::Delayed { target, peer, .. } | Event::Duplicated { target, peer, .. } => {
                self.strike(line, entry.t_us, Fault::Cut(*target, Some(*peer)));
            }
            // Since history version 4 every lost message is on the history, and the `run` line no
            // longer carries the loss rate: one lost message makes the world's network lossy.
            Event::Lost { target, peer, .. } => {
                self.network_faults = true;
                self.strike(line, entry.t_us, Fault::Cut(*target, Some(*peer)));
            }
            Event::Granted { job, epoch, owner, expires_at_us, .. } => {
                let in_force = self.faults.iter().find(|(fault, _)| fault.hits(*owner)).map(|(_, &line)| line);
                let attempt = Attempt {
                    line,
                    epoch: *epoch,
                    owner: *owner,
                    expires_at_us: *expires_at_us,
                    held: true,
                    partitioned: self.partitioned(),
                    granted_in_fault_phase: self.healed_at_us.is_none(),
                    acted: false,
                    evidence: in_force.map(Evidence::Fault),
                };
                self.attempts.entry(*job).or_default().push(attempt);
            }
            Event::Renewed { job, epoch, expires_at_us, .. } => {
                if let Some(attempt) = self.attempt(*job, *epoch) {
                    attempt.expires_at_us = attempt.expires_at_us.max(*expires_at_us);
                }
            }
            Event::LookedUp { from, job, epoch, .. } => self.acted(*from, *job, *epoch),
            Event::Executing { job, epoch, .. } => self.acted(entry.node, *job, *epoch),
            Event::DependencyFailed { from, job, epoch, .. } => {
                if let Some(attempt) = self.attempt(*job, *epoch).filter(|attempt| attempt.owner == *from) {
                    attempt.evidence.get_or_insert(Evidence::DependencyFailed(line));
                }
            }
            Event::Reclaimed { job, epoch, .. } => {
                let (healed_at_us, network_faults) = (self.healed_at_us, self.network_faults);
                if let Some(attempt) = self.attempt(*job, *epoch) {
                    attempt.held = false;
                    let expired_in_fault_phase = healed_at_us.is_none_or(|healed| attempt.expires_at_us <= healed);
                    let never_heard = attempt.granted_in_fault_phase && !attempt.acted;
                    let lost_in_fault_phase = expired_in_fault_phase || never_heard;
                    if lost_in_fault_phase && (network_faults || attempt.partitioned) {
                        attempt.evidence.get_or_insert(Evidence::Reclaimed(line));
                    }
                }
            }
            Event::Requeued { job, epoch, .. } => self.release(*job, *epoch),
            // A released grant is undone: the table does not count it, and neither does this.
            Event::Released { job, epoch, .. } => {
                if let Some(attempts) = self.attempts.get_mut(job) {
                    attempts.retain(|attempt| attempt.epoch != *epoch);
                }
            }
            Event::Terminal { job, outcome, .. } => {
                if *outcome == OutcomeKind::DeadLettered && self.first.is_none() {
                    self.first = self.judge(line, *job).err();
                }
                // A job ends once (one_terminal): its attempts are judged, and forgotten.
                self.attempts.remove(job);
            }
            _ => {}
        }
    }

    /// The first dead-letter without evidence, if any.
    pub(crate) fn check(&self) -> Result<(), Violation> {
        self.first.clone().map_or(Ok(()), Err)
    }

    fn attempt(&mut self, job: JobId, epoch: Epoch) -> Option<&mut Attempt> {
        self.attempts.get_mut(&job)?.iter_mut().rev().find(|attempt| attempt.epoch == epoch)
    }

    /// `node` looked `job` up or executed it under `epoch`: if that is its attempt, it heard of it.
    fn acted(&mut self, node: Node, job: JobId, epoch: Epoch) {
        if let Some(attempt) = self.attempt(job, epoch).filter(|attempt| attempt.owner == node) {
            attempt.acted = true;
        }
    }

    fn release(&mut self, job: JobId, epoch: Epoch) {
        if let Some(attempt) = self.attempt(job, epoch) {
            attempt.held = false;
        }
    }

    fn partitioned(&self) -> bool {
        self.faults.keys().any(|fault| matches!(fault, Fault::Cut(..)))
    }

    /// A fault starts: it is evidence for every lease it hits that still stands, and a partition
    /// marks every lease that stands.
    fn fault(&mut self, line: usize, t_us: u64, fault: Fault) {
        self.faults.entry(fault).or_insert(line);
        if let Fault::Cut(..) = fault {
            for attempt in self.standing(t_us) {
                attempt.partitioned = true;
            }
        }
        self.strike(line, t_us, fault);
    }

    /// A fault at `line` is evidence for every lease it hits that still stands.
    fn strike(&mut self, line: usize, t_us: u64, fault: Fault) {
        for attempt in self.standing(t_us).filter(|attempt| fault.hits(attempt.owner)) {
            attempt.evidence.get_or_insert(Evidence::Fault(line));
        }
    }

    /// The attempts whose lease still stands at `t_us`: held, and not expired.
    fn standing(&mut self, t_us: u64) -> impl Iterator<Item = &mut Attempt> {
        self.attempts.values_mut().flatten().filter(move |attempt| attempt.held && t_us < attempt.expires_at_us)
    }

    fn judge(&self, line: usize, job: JobId) -> Result<(), Violation> {
        let attempts = self.attempts.get(&job).map_or(&[][..], Vec::as_slice);
        let Some(idle) = attempts.iter().find(|attempt| attempt.evidence.is_none()) else { return Ok(()) };
        let message = format!(
            "{job} dead-lettered after {} attempt(s), but {}'s attempt under {} (granted at line {}) shows no \
             evidence: no dependency failure, no fault on its holder while it held the lease, and no lease lost \
             in the fault phase of a world with network faults",
            attempts.len(),
            idle.owner,
            idle.epoch,
            idle.line,
        );
        Err(Violation::at(Invariant::HonestDeadLetters, Some(job), &[Some(idle.line)], line, message))
    }
}

/// Whether a `run` line's network is slower in the fault phase than when calm: its messages are
/// then late by more than the history names line by line (each lost, held or doubled message has a
/// line of its own). A history that states no latency has no such faults.
fn has_network_faults(latency_us: Option<[u64; 2]>, latency_calm_us: Option<[u64; 2]>) -> bool {
    match (latency_us, latency_calm_us) {
        (Some([_, top]), Some([_, calm_top])) => top > calm_top,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};
    use super::{has_network_faults, DeadLetters};
    use crate::Violation;
    use lease_history::Entry;

    /// This checker alone over `entries`.
    fn alone(entries: &[Entry]) -> Result<(), Violation> {
        let mut checker = DeadLetters::default();
        for (index, entry) in entries.iter().enumerate() {
            checker.absorb(index + 1, entry);
        }
        checker.check()
    }
    use lease_core::Epoch;
    use lease_history::{AbandonReason, Point};

    /// The known lost-work case: j1 granted `attempts` times, each grant abandoned `self_fenced`
    /// 10 us later without reaching the dependency (after a lookup, so that the grant itself was
    /// acted on), reclaimed and requeued, then dead-lettered (`attempts` is the run's
    /// attempts_max). The faults heal at `heal_at_us`; the network reaches `latency_max_us`.
    fn wasted_attempts(latency_max_us: u64, heal_at_us: u64, attempts: u64) -> (History, Vec<usize>) {
        wasted_attempts_held_back(latency_max_us, heal_at_us, attempts, None)
    }

    /// As [`wasted_attempts`], and during each lease the network holds back one message from
    /// `sender` to the table, when there is one.
    fn wasted_attempts_held_back(
        latency_max_us: u64,
        heal_at_us: u64,
        attempts: u64,
        sender: Option<lease_history::Node>,
    ) -> (History, Vec<usize>) {
        let mut history = History::with_settings(2, 2, attempts as u32, Some(latency_max_us));
        history.at(0).arrived(J1);
        let mut grants = Vec::new();
        for attempt in 0..attempts {
            let start = attempt * 2_000 + 10;
            if start > heal_at_us && !history.healed() {
                history.at(heal_at_us).faults_healed();
            }
            let epoch = Epoch(attempt * 2 + 1);
            grants.push(history.at(start).granted(J1, epoch, w(1), start + TTL_US));
            history.at(start + 5).looked_up(J1, epoch, None, None, None);
            if let Some(target) = sender {
                let (peer, message) = (lease_history::Node::Table, lease_history::MessageKind::Renew);
                let delayed =
                    lease_history::Event::Delayed { target, peer, message, reply: false, job: None, len_us: 9 };
                history.at(start + 7).push(lease_history::Node::World, delayed);
            }
            history.at(start + 10).abandoned(w(1), J1, epoch, AbandonReason::SelfFenced);
            let reclaimer = batch(1, attempt);
            history.at(start + TTL_US).reclaimed(J1, epoch, start + TTL_US, Epoch(epoch.0 + 1), reclaimer);
            history.at(start + TTL_US + 10).looked_up(J1, Epoch(epoch.0 + 1), None, None, Some(reclaimer));
            let last = attempt + 1 == attempts;
            let after = start + TTL_US + 20;
            if last {
                history.at(after).dead_lettered(J1, Epoch(epoch.0 + 1), attempts as u32, Some(reclaimer));
            } else {
                history.at(after).requeued(J1, Epoch(epoch.0 + 1), attempt as u32 + 1, Some(reclaimer));
            }
        }
        if !history.healed() {
            history.at(heal_at_us.max(attempts * 2_000)).faults_healed();
        }
        (history, grants)
    }

    // A grant made in the fault phase of a slow network whose owner never acted on it (its answer,
    // and the retried one, were lost) is lost to the network even when its lease expires after the
    // heal; once the owner looked it up, it heard of it, and the loss no longer explains it. (The
    // grant itself, lost with no fault named, is `useful_grants`' to report.)
    #[test]
    fn a_grant_never_heard_of_in_a_slow_fault_phase_is_evidence() {
        let story = |acted: bool| {
            let mut history = History::with_settings(2, 2, 1, Some(30_000));
            history.at(0).arrived(J1);
            let grant = history.at(900).granted(J1, E1, w(1), 1_900);
            history.at(950).regranted(J1, E1, w(1), 1_900);
            if acted {
                history.at(960).looked_up(J1, E1, None, None, None);
            }
            history.at(1_000).faults_healed();
            history.at(1_900).reclaimed(J1, E1, 1_900, E2, batch(1, 0));
            history.at(1_910).looked_up(J1, E2, None, None, Some(batch(1, 0)));
            history.at(1_920).dead_lettered(J1, E2, 1, Some(batch(1, 0)));
            (history, grant)
        };
        let (history, grant) = story(false);
        assert_eq!(alone(&history.entries), Ok(()));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!((violation.invariant, violation.lines.first()), (Invariant::UsefulGrants, Some(&grant)));
        let (history, grant) = story(true);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HonestDeadLetters, "{violation}");
        assert_eq!(violation.lines.first(), Some(&grant));
    }

    // A message of the holder's held back by the network while it held each lease is a fault on
    // it: the same six wasted attempts are excused. A message of another worker's is not.
    #[test]
    fn a_held_back_message_of_the_holder_is_evidence() {
        let calm = LATENCY_CALM_US[1];
        let (history, _) = wasted_attempts_held_back(calm, 100_000, 6, Some(w(1)));
        assert_eq!(check_history(&history.entries).map(|_| ()), Ok(()));
        let (history, grants) = wasted_attempts_held_back(calm, 100_000, 6, Some(w(2)));
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HonestDeadLetters, "{violation}");
        assert_eq!(violation.lines.first(), Some(&grants[0]));
    }

    // Six grants abandoned within 10 us, no fault, no dependency call: the dead-letter is
    // reported, naming the first idle grant and the dead-letter, even in the fault phase.
    #[test]
    fn dead_letter_of_wasted_attempts_fails() {
        let (history, grants) = wasted_attempts(LATENCY_CALM_US[1], 100_000, 6);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HonestDeadLetters, "{violation}");
        assert!(!violation.invariant.is_safety());
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines.first(), Some(&grants[0]));
    }

    // Since history version 4 a `lost` line, not the run line's `loss=`, makes the network
    // lossy: the wasted attempts of a world without loss fail, and the same history with one
    // message lost early in the fault phase (another worker's) passes, its leases lost in it.
    #[test]
    fn a_lost_line_makes_the_network_lossy() {
        let (history, _) = wasted_attempts(LATENCY_CALM_US[1], 100_000, 6);
        assert_eq!(check_history(&history.entries).map(|_| ()).unwrap_err().invariant, Invariant::HonestDeadLetters);
        let mut entries = history.entries.clone();
        let (target, peer, message) = (w(2), lease_history::Node::Table, lease_history::MessageKind::Acquire);
        let lost = lease_history::Event::Lost { target, peer, message, reply: false, job: None };
        entries.insert(1, lease_history::Entry { t_us: 0, node: lease_history::Node::World, event: lost });
        // The dead-letter is excused; each lease w1 looked up and then self-fenced with no fault
        // on it is not (the other worker's loss is no fault of w1's): heartbeats_keep_leases.
        let violation = check_history(&entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HeartbeatsKeepLeases, "{violation}");
    }

    // The same after the heal fails even in a world with loss: only reclaims in the fault phase
    // are excused by the network.
    #[test]
    fn wasted_attempts_after_the_heal_fail_in_a_lossy_world() {
        let (history, grants) = wasted_attempts(20_000, 5, 3);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HonestDeadLetters, "{violation}");
        assert_eq!(violation.lines.first(), Some(&grants[0]));
        // Healed between the attempts: only the later ones lack evidence.
        let (history, grants) = wasted_attempts(20_000, 3_500, 3);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HonestDeadLetters, "{violation}");
        assert_eq!(violation.lines.first(), Some(&grants[2]));
    }

    // In the fault phase of a lossy or slow network, reclaimed leases are evidence enough.
    #[test]
    fn reclaims_in_the_fault_phase_of_a_faulty_network_pass() {
        for latency_max_us in [10_001, 25_000] {
            let (history, _) = wasted_attempts(latency_max_us, 100_000, 3);
            check_history(&history.entries).unwrap_or_else(|violation| panic!("{latency_max_us}: {violation}"));
        }
    }

    // Dependency failures, and faults on the holder while it holds the lease, are evidence.
    #[test]
    fn failures_and_faults_on_the_holder_pass() {
        let mut history = History::with_latency(2, 2, LATENCY_CALM_US[1]);
        history.at(0).arrived(J1);
        // Attempt 1: the dependency fails; the worker requeues.
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(20).executing(w(1), J1, E1);
        history.at(30).dependency_failed(J1, E1);
        history.at(40).requeued(J1, E1, 1, None);
        // Attempt 2: w2 crashes holding it.
        history.at(50).granted(J1, E2, w(2), 1_050);
        history.at(60).crashed(w(2), Point::AtRandom, None);
        history.at(1_050).reclaimed(J1, E2, 1_050, E3, batch(1, 0));
        history.at(1_060).looked_up(J1, E3, None, None, Some(batch(1, 0)));
        history.at(1_070).requeued(J1, E3, 2, Some(batch(1, 0)));
        // Attempt 3: w3 was already cut from the table when it was granted.
        history.at(1_080).partitioned(w(3), Some(lease_history::Node::Table));
        history.at(1_090).granted(J1, E4, w(3), 2_090);
        history.at(2_090).reclaimed(J1, E4, 2_090, Epoch(5), batch(1, 1));
        history.at(2_100).looked_up(J1, Epoch(5), None, None, Some(batch(1, 1)));
        history.at(2_110).dead_lettered(J1, Epoch(5), 3, Some(batch(1, 1)));
        history.at(2_200).faults_healed();
        check_history(&history.entries).unwrap_or_else(|violation| panic!("{violation}"));
    }

    // A fault on another worker, or one that starts after the holder's lease expired, is no
    // evidence for it.
    #[test]
    fn faults_elsewhere_or_later_fail() {
        let mut history = History::with_settings(2, 2, 1, Some(LATENCY_CALM_US[1]));
        history.at(0).arrived(J1);
        let granted = history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(15).executing(w(1), J1, E1);
        history.at(20).paused(w(2));
        history.at(20).crashed(r(2), Point::AtRandom, None);
        history.at(1_010).crashed(w(1), Point::AtRandom, None);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        let dead = history.at(1_030).dead_lettered(J1, E2, 1, Some(batch(1, 0)));
        history.at(2_000).faults_healed();
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HonestDeadLetters, "{violation}");
        assert_eq!(violation.lines, vec![granted, dead]);
    }

    // A partition anywhere while the lease was held makes the network faulty: a lease that
    // expired in the fault phase and was reclaimed, even after the heal, is evidence. A lease
    // that expired after the heal, and whose owner had heard of it, is not.
    #[test]
    fn a_partition_while_held_excuses_a_lease_lost_in_the_fault_phase() {
        let lost = |heal_at_us: u64| {
            let mut history = History::with_settings(2, 2, 1, Some(LATENCY_CALM_US[1]));
            history.at(0).arrived(J1);
            let granted = history.at(10).granted(J1, E1, w(1), 1_010);
            // w1 heard of its grant: only the expiry can excuse the lease.
            history.at(15).looked_up(J1, E1, None, None, None);
            history.at(20).partitioned(w(2), Some(lease_history::Node::Table));
            history.at(500).healed_link(w(2), Some(lease_history::Node::Table));
            history.at(heal_at_us).faults_healed();
            history.at(1_100).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
            history.at(1_120).looked_up(J1, E2, None, None, Some(batch(1, 0)));
            history.at(1_130).dead_lettered(J1, E2, 1, Some(batch(1, 0)));
            (check_history(&history.entries), granted)
        };
        // The dead-letter is excused; the lease w1 had heard of and lost with no fault on it (the
        // partition was w2's) is not: heartbeats_keep_leases.
        let (verdict, _) = lost(1_050);
        assert_eq!(verdict.unwrap_err().invariant, Invariant::HeartbeatsKeepLeases);
        let (verdict, granted) = lost(1_000);
        let violation = verdict.unwrap_err();
        assert_eq!(violation.invariant, Invariant::HonestDeadLetters, "{violation}");
        assert_eq!(violation.lines.first(), Some(&granted));
    }

    // A partition of the table from everyone counts for every holder.
    #[test]
    fn table_partition_counts_for_every_holder() {
        let mut history = History::with_settings(2, 2, 1, Some(LATENCY_CALM_US[1]));
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(500).partitioned(lease_history::Node::Table, None);
        history.at(900).healed_link(lease_history::Node::Table, None);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        history.at(1_030).dead_lettered(J1, E2, 1, Some(batch(1, 0)));
        history.at(2_000).faults_healed();
        check_history(&history.entries).unwrap_or_else(|violation| panic!("{violation}"));
    }

    // A fault-phase latency above the calm one is a faulty network; a history that states no
    // latency, or states only one of the two, has none.
    #[test]
    fn network_faults_are_read_from_the_typed_latencies() {
        assert!(has_network_faults(Some([1_000, 10_001]), Some([1_000, 10_000])));
        assert!(!has_network_faults(Some([1_000, 10_000]), Some([1_000, 10_000])));
        assert!(!has_network_faults(Some([5_000, 9_000]), Some([1_000, 10_000])));
        assert!(!has_network_faults(None, Some([1_000, 10_000])));
        assert!(!has_network_faults(Some([1_000, 90_000]), None));
        assert!(!has_network_faults(None, None));
    }
}
