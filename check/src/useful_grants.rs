//! `eventually` useful_grants: every grant is acted on, unless a fault named in the history lost it.
//!
//! A grant hands a worker a job. The worker acts on it when it asks the ledger about the job (a
//! `looked_up` whose `from` is the grant's owner, under the grant's epoch) or starts the effect
//! (an `executing` on the owner's node under that epoch), in either case before the lease expires
//! by the table's clock, renewals included; or it releases the grant (a `released` from the owner
//! under that epoch), as a worker that declines a grant to an acquire it gave up does. A grant
//! whose lease expires with none of these is lost work: the job waited a whole lease for
//! nothing, and its attempt counts towards the dead-letter all the same. A `regranted` answer re-hands the same grant; it is not a second
//! grant, and it does not move the expiry.
//!
//! A grant is found unused at the first history line whose time is at or past its expiry (a
//! lookup or execution at the expiry instant is already too late, as `self_fencing` says), or,
//! when the history ends first, by the time of the check.
//!
//! This is a liveness property (exit status 2), not safety: nothing wrong was accepted, but the
//! run lost work. The fault phase is judged too, as [`crate::heartbeats`] judges it: faults
//! legitimately waste grants (a worker crashes with its grant in flight, an answer or a decline
//! is lost), but only the fault the history names excuses a grant, never the phase. A grant is
//! excused when its owner's process was down (crashed or stopped, not yet `restarted`; paused,
//! not yet `resumed`: a slot whose acquire was in flight when another slot of its process
//! stalled) when it was granted, or when a fault struck the owner's process, the table or the
//! ledger between the grant and the loss (`check/src/strikes.rs`: a crash, stop, pause or partition
//! in force, or a message to or from the owner lost, or held back until within a round trip of
//! the expiry: one delivered with time to spare keeps nothing from a worker, which declines a
//! grant answering an acquire it gave up). A grant lost with no fault
//! named is a runtime that let an answer fall on the floor: an acquire answered twice, a grant
//! answered after its worker stopped listening and never declined. The figure `wasted_grants`
//! ([`crate::figures::Figures`]) counts every unused grant, excused or not, with the same
//! [`Grants`] tracker.

use super::{Invariant, Violation};
use crate::strikes::Strikes;
use lease_core::{Epoch, JobId};
use lease_history::{Entry, Event, Node};
use std::collections::{BTreeMap, BTreeSet};

/// A worker grant not yet acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The `granted` line.
    pub line: usize,
    /// When it was granted.
    pub since_us: u64,
    /// The job.
    pub job: JobId,
    /// The grant's epoch.
    pub epoch: Epoch,
    /// The worker it was granted to.
    pub owner: Node,
    /// The lease's expiry by the table's clock, renewals included.
    pub expires_at_us: u64,
    /// Whether it was granted after `faults_healed`.
    pub after_heal: bool,
    /// Whether its owner's process was down (crashed or stopped, not yet restarted) or paused
    /// (not yet resumed) when it was granted.
    pub owner_down: bool,
}

/// A grant whose lease expired unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unused {
    /// The grant.
    pub grant: Grant,
    /// The first line at or past its expiry; none when the history ended first.
    pub seen_line: Option<usize>,
    /// Whether a fault named in the history excuses it (see the module documentation).
    pub excused: bool,
}

/// Follows every worker grant until it is acted on or its lease expires: the memory shared by
/// the checker and the `wasted_grants` figure.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    healed: bool,
    /// The faults struck so far: what excuses a grant lost.
    strikes: Strikes,
    /// Grants not yet acted on, by job and epoch.
    open: BTreeMap<(JobId, Epoch), Grant>,
    /// The same grants, by expiry, so that each line finds the expired ones in O(log n).
    by_expiry: BTreeSet<(u64, JobId, Epoch)>,
}

impl Grants {
    /// Grants of nothing yet.
    pub fn new() -> Grants {
        Grants::default()
    }

    /// Folds in the entry at `line`, after handing `unused` every open grant whose lease expired
    /// at or before the entry's time.
    pub fn observe(&mut self, line: usize, entry: &Entry, mut unused: impl FnMut(Unused)) {
        while let Some(&(expires_at_us, job, epoch)) = self.by_expiry.first() {
            if expires_at_us > entry.t_us {
                break;
            }
            self.by_expiry.pop_first();
            let grant = self.open.remove(&(job, epoch)).expect("every expiry indexes an open grant");
            unused(Unused { grant, seen_line: Some(line), excused: self.excused(&grant) });
        }
        self.strikes.absorb(entry);
        match &entry.event {
            Event::FaultsHealed {} => self.healed = true,
            Event::Granted { job, epoch, owner, expires_at_us, .. } => {
                let grant = Grant {
                    line,
                    since_us: entry.t_us,
                    job: *job,
                    epoch: *epoch,
                    owner: *owner,
                    expires_at_us: *expires_at_us,
                    after_heal: self.healed,
                    owner_down: self.strikes.down(*owner),
                };
                self.open.insert((*job, *epoch), grant);
                self.by_expiry.insert((*expires_at_us, *job, *epoch));
            }
            Event::Renewed { job, epoch, expires_at_us, .. } => {
                let Some(grant) = self.open.get_mut(&(*job, *epoch)) else { return };
                self.by_expiry.remove(&(grant.expires_at_us, *job, *epoch));
                grant.expires_at_us = grant.expires_at_us.max(*expires_at_us);
                self.by_expiry.insert((grant.expires_at_us, *job, *epoch));
            }
            Event::LookedUp { from, job, epoch, .. } => self.acted(*from, *job, *epoch),
            // The owner released a grant it declined (it answered an acquire the worker had given
            // up): nothing waits under a lease nobody uses.
            Event::Released { from, job, epoch, .. } => self.acted(*from, *job, *epoch),
            Event::Executing { job, epoch, .. } => self.acted(entry.node, *job, *epoch),
            _ => {}
        }
    }

    /// Whether a fault named so far excuses `grant`, lost now: its owner's process was down when
    /// it was granted, or a fault could have kept the process, the table or the ledger from
    /// acting on it before its expiry (`Strikes::kept_from`).
    pub fn excused(&self, grant: &Grant) -> bool {
        grant.owner_down
            || [grant.owner, Node::Table, Node::Ledger]
                .into_iter()
                .any(|node| self.strikes.kept_from(node, grant.since_us, grant.expires_at_us))
    }

    /// The open grants whose lease expired by `now_us`: unused, if the history ends here.
    pub fn expired_by(&self, now_us: u64) -> impl Iterator<Item = &Grant> {
        self.by_expiry
            .iter()
            .take_while(move |(expires_at_us, _, _)| *expires_at_us <= now_us)
            .map(|(_, job, epoch)| &self.open[&(*job, *epoch)])
    }

    fn acted(&mut self, by: Node, job: JobId, epoch: Epoch) {
        let Some(grant) = self.open.get(&(job, epoch)).filter(|grant| grant.owner == by) else { return };
        self.by_expiry.remove(&(grant.expires_at_us, job, epoch));
        self.open.remove(&(job, epoch));
    }
}

/// How many grants of `history` expired unused: over the whole run, and among those granted
/// after `faults_healed`. A grant still open at the last line counts if its lease had expired
/// by then. A run's checkers count the same as they go ([`super::Checkers::wasted_grants`]).
pub fn wasted(history: &[Entry]) -> (u64, u64) {
    let mut tracker = UsefulGrants::default();
    for (index, entry) in history.iter().enumerate() {
        tracker.absorb(index + 1, entry);
    }
    tracker.wasted_by(history.last().map_or(0, |entry| entry.t_us))
}

/// The checker: the tracker, the first unused grant no named fault excuses, and the count of
/// unused grants (the `wasted_grants` figures).
#[derive(Debug, Clone, Default)]
pub(crate) struct UsefulGrants {
    grants: Grants,
    first: Option<Violation>,
    /// Grants found unused so far: all of them, and those granted after the heal.
    wasted: (u64, u64),
}

impl UsefulGrants {
    /// Folds in the entry at `line`, remembering the first grant found unused and not excused.
    pub(crate) fn absorb(&mut self, line: usize, entry: &Entry) {
        let (first, wasted) = (&mut self.first, &mut self.wasted);
        self.grants.observe(line, entry, |unused| {
            count(wasted, &unused.grant);
            if !unused.excused && first.is_none() {
                *first = Some(violation(unused));
            }
        });
    }

    /// The grants found unused, with those still open whose lease expired by `end_us`: over the
    /// whole run, and among those granted after the heal.
    pub(crate) fn wasted_by(&self, end_us: u64) -> (u64, u64) {
        let mut wasted = self.wasted;
        self.grants.expired_by(end_us).for_each(|grant| count(&mut wasted, grant));
        wasted
    }

    /// The first grant found unused and not excused at a history line, if any.
    pub(crate) fn first(&self) -> Option<Violation> {
        self.first.clone()
    }

    /// The first grant not excused that expired unused, by `now_us` at the latest.
    pub(crate) fn check(&self, now_us: u64) -> Result<(), Violation> {
        if let Some(violation) = &self.first {
            return Err(violation.clone());
        }
        let grants = &self.grants;
        let late = grants.expired_by(now_us).filter(|grant| !grants.excused(grant)).min_by_key(|grant| grant.line);
        match late {
            Some(grant) => Err(violation(Unused { grant: *grant, seen_line: None, excused: false })),
            None => Ok(()),
        }
    }
}

fn count(wasted: &mut (u64, u64), grant: &Grant) {
    wasted.0 += 1;
    wasted.1 += u64::from(grant.after_heal);
}

fn violation(unused: Unused) -> Violation {
    let Grant { line, job, epoch, owner, expires_at_us, .. } = unused.grant;
    let message = format!(
        "{owner}'s grant of {job} under {epoch} (line {line}) expired at t={expires_at_us}us unused: \
         {owner} neither looked {job} up nor executed it"
    );
    let seen = unused.seen_line.unwrap_or(line);
    Violation::at(Invariant::UsefulGrants, Some(job), &[Some(line)], seen, message)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};
    use super::{wasted, UsefulGrants};
    use lease_history::{AbandonReason, MessageKind};

    /// A healed history in which w1 is granted j1 after the heal, and nothing more yet.
    fn granted_after_heal() -> (History, usize) {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(5).faults_healed();
        let granted = history.at(10).granted(J1, E1, w(1), 1_010);
        (history, granted)
    }

    // A grant its worker declines (it had given up the acquire it answers) and releases is not
    // lost work: the job waits in the queue, not under a lease nobody uses, and is run by the
    // next holder as a first attempt. The same release without the decline is a decision nothing
    // called for: conformance reports it.
    #[test]
    fn a_declined_grant_handed_back_is_not_lost_work() {
        let declined = |with_decline: bool| {
            let (mut history, _) = granted_after_heal();
            if with_decline {
                history.at(15).abandoned(w(1), J1, E1, AbandonReason::Declined);
            }
            let release = history.at(20).released(J1, E1);
            history.at(30).granted(J1, E2, w(2), 1_030);
            history.at(50).executing(w(2), J1, E2);
            history.at(60).applied(J1, E2, O7);
            history.at(70).completed(J1, O7, E2, None);
            history.at(1_100).acquire_empty(w(1)); // past the declined grant's expiry
            (history, release)
        };
        let (history, _) = declined(true);
        let coverage = check_history(&history.entries).expect("a released grant is no lost work");
        assert_eq!(coverage.get("grant_released"), 1);
        assert_eq!(wasted(&history.entries), (0, 0));
        let (history, release) = declined(false);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::Conformance, "{violation}");
        assert!(violation.message.contains("worker_releases_only_what_it_declined"), "{violation}");
        assert_eq!(violation.lines.last(), Some(&release), "{violation}");
    }

    // A grant acted on by a lookup, or by an execution, before its expiry passes.
    #[test]
    fn grants_acted_on_pass() {
        let (mut history, _) = granted_after_heal();
        history.at(1_009).looked_up(J1, E1, None, None, None);
        history.at(1_009).executing(w(1), J1, E1);
        history.at(1_009).applied(J1, E1, O7);
        history.at(1_009).completed(J1, O7, E1, None);
        history.at(5_000).paused(w(3));
        assert!(check_history(&history.entries).is_ok());
        let (mut history, _) = granted_after_heal();
        history.at(20).executing(w(1), J1, E1);
        history.at(30).applied(J1, E1, O7);
        history.at(40).completed(J1, O7, E1, None);
        history.at(5_000).paused(w(3));
        assert!(check_history(&history.entries).is_ok());
        assert_eq!(wasted(&history.entries), (0, 0));
    }

    // The known lost-work case: a grant to a worker that no longer waits for it is abandoned at
    // once, never looked up; the next line past its expiry reports it, naming the grant.
    #[test]
    fn grant_abandoned_unused_fails() {
        let (mut history, granted) = granted_after_heal();
        history.at(20).abandoned(w(1), J1, E1, AbandonReason::SelfFenced);
        let listed = history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010)]);
        history.reclaim_j1_and_grant_it_to_w2();
        history.at(1_050).looked_up(J1, E3, None, None, None);
        history.at(1_060).executing(w(2), J1, E3);
        history.at(1_070).applied(J1, E3, O7);
        history.at(1_080).completed(J1, O7, E3, None);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::UsefulGrants, "{violation}");
        assert!(!violation.invariant.is_safety());
        assert_eq!(violation.job, Some(J1));
        assert_eq!(violation.lines, vec![granted, listed]);
        assert_eq!(wasted(&history.entries), (1, 1));
        let mut figures = crate::figures::Figures::of(&history.entries);
        assert_eq!((figures.wasted_grants, figures.wasted_grants_after_heal), (1, 1));
        figures.add_counts(&figures.clone());
        assert_eq!((figures.wasted_grants, figures.wasted_grants_after_heal), (2, 2));
    }

    // Acting at the expiry instant is too late; an execution by another node under the same
    // epoch is not the owner acting. No correct world shows the latter (conformance reports the
    // ungranted worker first), so the checker is fed that history alone.
    #[test]
    fn lookup_at_expiry_or_by_another_node_fails() {
        let (mut history, granted) = granted_after_heal();
        let late = history.at(1_010).looked_up(J1, E1, None, None, None);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::UsefulGrants);
        assert_eq!(violation.lines, vec![granted, late]);
        let (mut history, granted) = granted_after_heal();
        history.at(20).executing(w(2), J1, E1);
        let seen = history.at(2_000).paused(w(3));
        let mut checker = UsefulGrants::default();
        for (index, entry) in history.entries.iter().enumerate() {
            checker.absorb(index + 1, entry);
        }
        let violation = checker.first().expect("w1's grant was found unused");
        assert_eq!(violation.invariant, Invariant::UsefulGrants);
        assert_eq!(violation.lines, vec![granted, seen]);
    }

    // A renewal extends the window; a grant still open when the history ends is reported only
    // once its lease expired by the time of the check.
    #[test]
    fn renewals_and_the_end_of_the_history() {
        let (mut history, _) = granted_after_heal();
        history.at(900).renewed(J1, E1, 1_900);
        history.at(1_500).looked_up(J1, E1, None, None, None);
        history.at(1_510).executing(w(1), J1, E1);
        history.at(1_520).applied(J1, E1, O7);
        history.at(1_530).completed(J1, O7, E1, None);
        assert!(check_history(&history.entries).is_ok());
        let (history, granted) = granted_after_heal();
        let mut checker = UsefulGrants::default();
        for (index, entry) in history.entries.iter().enumerate() {
            checker.absorb(index + 1, entry);
        }
        assert_eq!(checker.check(1_009), Ok(()));
        let violation = checker.check(1_010).unwrap_err();
        assert_eq!(violation.invariant, Invariant::UsefulGrants);
        assert_eq!(violation.lines, vec![granted]);
        assert!(violation.message.contains("w1's grant of j1 under e1"), "{}", violation.message);
    }

    /// A grant after the heal to w1, struck by a fault of the fault phase (`strike`) and let go
    /// (`recover`) at `recover_at_us`, while w2 runs the job after a reclaim.
    fn struck_story(strike: fn(&mut History), recover: fn(&mut History), recover_at_us: u64) -> (History, usize) {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        strike(history.at(2));
        if recover_at_us < 5 {
            recover(history.at(recover_at_us));
        }
        history.at(5).faults_healed();
        let granted = history.at(10).granted(J1, E1, w(1), 1_010);
        history.reclaim_j1_and_grant_it_to_w2();
        history.at(1_050).looked_up(J1, E3, None, None, None);
        history.at(1_060).executing(w(2), J1, E3);
        history.at(1_070).applied(J1, E3, O7);
        history.at(1_080).completed(J1, O7, E3, None);
        if recover_at_us >= 5 {
            recover(history.at(recover_at_us));
        }
        (history, granted)
    }

    /// The grant of [`struck_story`] is exempt (and counted as wasted after the heal) while w1 is
    /// still struck; recovered before the grant, w1 is judged.
    fn exempt_while_struck(strike: fn(&mut History), recover: fn(&mut History)) {
        let (history, _) = struck_story(strike, recover, 1_100);
        assert!(check_history(&history.entries).is_ok());
        assert_eq!(wasted(&history.entries), (1, 1));
        let (history, granted) = struck_story(strike, recover, 3);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::UsefulGrants);
        assert_eq!(violation.lines.first(), Some(&granted));
    }

    // A grant after the heal to a worker still down from a crash of the fault phase is exempt,
    // and counted as wasted after the heal; once the worker restarted, its grants are judged.
    #[test]
    fn grants_to_a_worker_down_from_the_fault_phase_are_exempt() {
        exempt_while_struck(
            |history| {
                history.crashed(w(1), lease_history::Point::AtRandom, None);
            },
            |history| {
                history.restarted(w(1));
            },
        );
    }

    // A grant after the heal to a worker whose process is still paused by the fault phase (a
    // slot whose acquire was in flight when another slot of its process stalled) is exempt, and
    // counted as wasted after the heal; resumed before the grant, the worker is judged.
    #[test]
    fn grants_to_a_worker_still_paused_from_the_fault_phase_are_exempt() {
        exempt_while_struck(
            |history| {
                history.paused(w(1));
            },
            |history| {
                history.resumed(w(1));
            },
        );
    }

    // Pauses nest: a stall at a protocol point that overlaps a scheduled pause of the same
    // process holds it after the other ends, so a grant then is still exempt; once both ended,
    // the worker is judged.
    #[test]
    fn overlapping_pauses_exempt_a_grant_until_the_last_ends() {
        let twice = |history: &mut History| {
            history.paused(w(1));
            history.paused(w(1));
        };
        let (history, _) = struck_story(
            twice,
            |history| {
                history.resumed(w(1));
            },
            3,
        );
        assert!(check_history(&history.entries).is_ok(), "one of two pauses still holds w1");
        let both = |history: &mut History| {
            history.resumed(w(1));
            history.resumed(w(1));
        };
        let (history, granted) = struck_story(twice, both, 3);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!((violation.invariant, violation.lines.first()), (Invariant::UsefulGrants, Some(&granted)));
    }

    /// w2, granted j1 under e3, looks it up, runs it and completes it.
    fn w2_runs_j1(history: &mut History) {
        history.at(1_055).looked_up(J1, E3, None, None, None);
        history.at(1_060).executing(w(2), J1, E3);
        history.at(1_070).applied(J1, E3, O7);
        history.at(1_080).completed(J1, O7, E3, None);
    }

    // An answer held back but delivered with time to spare excuses nothing: its worker, which
    // gave the acquire up, declines the grant (a release) before the lease expires. One held back
    // to within a round trip of the expiry does: the worker could not act on it in time.
    #[test]
    fn a_grant_held_back_is_excused_only_when_it_comes_too_late() {
        let story = |len_us: u64| {
            let (mut history, granted) = History::j1_granted_to_w1(2);
            history.at(10).delayed_reply(w(1), MessageKind::Acquire, None, len_us);
            history.at(1_010).faults_healed();
            history.reclaim_j1_and_grant_it_to_w2();
            w2_runs_j1(&mut history);
            (history, granted)
        };
        let (history, granted) = story(300);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!((violation.invariant, violation.lines.first()), (Invariant::UsefulGrants, Some(&granted)));
        let (history, _) = story(1_000);
        check_history(&history.entries).unwrap_or_else(|violation| panic!("{violation}"));
    }

    // A grant made before the heal is judged too, and counted as wasted: unused with no fault
    // named, it is lost work; the answer lost on its way to w1 excuses it. A regrant is the same
    // grant, not a second one.
    #[test]
    fn grants_before_the_heal_are_excused_only_by_a_fault_named() {
        let story = |lost: bool| {
            let (mut history, granted) = History::j1_granted_to_w1(2);
            history.at(20).regranted(J1, E1, w(1), 1_010);
            if lost {
                history.at(25).lost_reply(w(1), MessageKind::Acquire, None);
            }
            history.at(1_010).faults_healed();
            history.reclaim_j1_and_grant_it_to_w2();
            history.at(1_050).regranted(J1, E3, w(2), 2_040);
            w2_runs_j1(&mut history);
            (history, granted)
        };
        let (history, granted) = story(false);
        let violation = check_history(&history.entries).unwrap_err();
        assert_eq!((violation.invariant, violation.lines.first()), (Invariant::UsefulGrants, Some(&granted)));
        assert_eq!(wasted(&history.entries), (1, 0));
        let (history, _) = story(true);
        assert!(check_history(&history.entries).is_ok());
        assert_eq!(wasted(&history.entries), (1, 0));
    }
}
