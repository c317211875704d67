//! `eventually` heartbeats_keep_leases: a worker that stays up, unpaused and connected keeps every
//! lease it holds, by its heartbeats, until it gives the job up.
//!
//! A worker's lease is *held* from its `granted` line until the worker is done with it: the job's
//! `terminal` line under that epoch (whoever wrote it), a `requeued` or `released` under it, a
//! `refused` renewal of it, an `abandoned` line of the owner's for a reason that is not a lost
//! lease (a fenced effect, a conflict, a declined grant, a shutdown), or the end of the owner's
//! life (`crashed`, `stopped`). It is *lost* when
//!
//! - the table's clock passes its expiry (renewals included) while it is held: found at the first
//!   history line at or past the expiry, as [`crate::useful_grants`] finds an unused grant; or
//! - its owner gives it up as lost: `abandoned` with `self_fenced` (its own estimate of the
//!   expiry, less the margin, came before a renewal was answered) or `lease_lost` (a renewal was
//!   refused).
//!
//! A worker told to stop (`stopping`, with its `grace_us`) drains, and its exit (`stopped`) keeps
//! two promises. It waits for the handlers it has running: an exit under half its grace (its clock
//! may run fast) while a lease it started its effect under has not ended is a loss, reported at
//! the exit. And it hands back every lease it never started its effect under: such a lease still
//! held at the exit must end (its release is on its way) before its expiry, or it is a loss; a
//! fault on its process or the table after the exit (a release lost) excuses it. A lease whose
//! effect started, left at the grace's end, is not judged: the runtime leaves it to expire by
//! design, for a reclaimer to look its operation up.
//!
//! A loss is excused by a fault that struck the owner or the table while the lease was held:
//! the owner or the table crashed, stopped, paused (stalls at protocol points are written as
//! pauses) or partitioned (`partitioned` naming it as target or peer) at any instant between the
//! grant and the loss, or a message to or from the owner, or to or from the table, lost or held
//! back (`lost`, `delayed`) in that time. Nothing else excuses it: a worker whose heartbeats come
//! a lease too late (a heartbeat interval longer than the lease, a timer armed once and never
//! again, renewals sent for some of the leases a process holds and not the others) loses every
//! long job while every safety invariant holds. pg-boss #238 and #579, and River #682, are this
//! bug in production.
//!
//! Like [`crate::useful_grants`], this checker judges the fault phase too: a fault excuses only
//! the leases it touched, named in the history (`check/src/strikes.rs`), not the whole phase. This is a liveness property
//! (exit status 2): nothing wrong was accepted, but a job's attempt was wasted by the runtime
//! itself. The first unexcused loss is reported by the liveness check.

use super::{Invariant, Violation};
use crate::strikes::Strikes;
use lease_core::{Epoch, JobId};
use lease_history::{AbandonReason, Entry, Event, Node, RefusedRequest};
use std::collections::{BTreeMap, BTreeSet};

/// A lease a worker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    /// The `granted` line.
    line: usize,
    /// When it was granted.
    since_us: u64,
    /// Its owner.
    owner: Node,
    /// Its expiry by the table's clock, renewals included.
    expires_at_us: u64,
    /// The last `renewed` line, if any.
    renewed_line: Option<usize>,
    /// Whether its owner is known to have had it: it renewed it, looked its operation up or
    /// started its effect. A grant whose answer never reached its worker is no heartbeat's to
    /// keep ([`crate::useful_grants`] judges it).
    known: bool,
    /// Whether it was held at some instant of a fault phase whose network was slower than the
    /// calm one: messages then come late beyond what the history names line by line.
    slow: bool,
    /// Whether its owner started its effect under it (`executing`).
    started: bool,
    /// Whether its owner exited cleanly (`stopped`) holding it, never having started its effect
    /// under it, with no fault on it before: a drain hands back (releases) every such lease, so
    /// the lease must still end before its expiry.
    exited: bool,
    /// Whether a fault struck its owner's process or the table after the owner exited holding
    /// it (a release lost or held back, say): the only excuse an exited lease has left.
    struck_after_exit: bool,
}

/// The checker's memory.
#[derive(Debug, Clone, Default)]
pub(crate) struct Heartbeats {
    /// Leases held, by job and epoch.
    held: BTreeMap<(JobId, Epoch), Held>,
    /// The same leases, by expiry.
    by_expiry: BTreeSet<(u64, JobId, Epoch)>,
    /// The faults struck so far, by node.
    strikes: Strikes,
    /// Workers told to stop, each with when and its grace, until they exit.
    draining: BTreeMap<Node, (u64, Option<u64>)>,
    /// The first unexcused loss.
    first: Option<Violation>,
}

impl Heartbeats {
    /// Folds in the entry at `line`: first the leases whose expiry it reaches, then the entry.
    pub(crate) fn absorb(&mut self, line: usize, entry: &Entry) {
        while let Some(&(expires_at_us, job, epoch)) = self.by_expiry.first() {
            if expires_at_us > entry.t_us {
                break;
            }
            let held = self.close(job, epoch).expect("every expiry indexes a held lease");
            self.lost(job, epoch, held, line, entry.t_us, "the table's clock passed its expiry");
        }
        let t_us = entry.t_us;
        // A worker's clean exit strikes nothing, and is judged below before its process is down.
        if !matches!(entry.event, Event::Stopped { target: Node::Worker(_) }) {
            for node in self.strikes.absorb(entry) {
                self.strike_exited(node);
            }
        }
        match &entry.event {
            Event::Granted { job, epoch, owner: owner @ Node::Worker(_), expires_at_us, .. } => {
                let held = Held {
                    line,
                    since_us: t_us,
                    owner: *owner,
                    expires_at_us: *expires_at_us,
                    renewed_line: None,
                    known: false,
                    slow: self.strikes.slow(),
                    started: false,
                    exited: false,
                    struck_after_exit: false,
                };
                self.held.insert((*job, *epoch), held);
                self.by_expiry.insert((*expires_at_us, *job, *epoch));
            }
            Event::Renewed { job, epoch, expires_at_us, .. } => {
                let Some(held) = self.held.get_mut(&(*job, *epoch)) else { return };
                self.by_expiry.remove(&(held.expires_at_us, *job, *epoch));
                held.expires_at_us = held.expires_at_us.max(*expires_at_us);
                held.renewed_line = Some(line);
                held.known = true;
                self.by_expiry.insert((held.expires_at_us, *job, *epoch));
            }
            Event::LookedUp { from, job, epoch, .. } => {
                self.knows(*from, *job, *epoch);
            }
            Event::Executing { job, epoch, .. } => {
                if let Some(held) = self.knows(entry.node, *job, *epoch) {
                    held.started = true;
                }
            }
            Event::Stopping { target: target @ Node::Worker(_), grace_us } => {
                self.draining.insert(*target, (t_us, *grace_us));
            }
            Event::Terminal { job, epoch, .. }
            | Event::Requeued { job, epoch, .. }
            | Event::Released { job, epoch, .. }
            | Event::Refused { job, epoch, request: RefusedRequest::Renew, .. } => {
                self.close(*job, *epoch);
            }
            Event::Abandoned { job, epoch, why } => {
                let owned = self.held.get(&(*job, *epoch)).is_some_and(|held| held.owner == entry.node);
                if !owned {
                    return;
                }
                let held = self.close(*job, *epoch).expect("checked");
                match why {
                    AbandonReason::SelfFenced => self.lost(*job, *epoch, held, line, t_us, "its worker self-fenced"),
                    AbandonReason::LeaseLost => {
                        self.lost(*job, *epoch, held, line, t_us, "its worker found the lease lost")
                    }
                    _ => {}
                }
            }
            // A worker that exits cleanly (`stopped`) drained first: it finished or handed back
            // every lease it held, and a lease it still holds must end before its expiry (the
            // release is on its way), unless a fault struck it already. Its exit strikes nothing:
            // a lease it left behind is its own to answer for.
            Event::Stopped { target: target @ Node::Worker(_) } => {
                // Told to stop at `since_us`, it may leave a handler running only once half its
                // grace has passed (its clock may run fast; half is a bound every drain keeps).
                let early = self.draining.remove(target).and_then(|(since_us, grace_us)| {
                    grace_us.filter(|&grace_us| t_us - since_us < grace_us / 2).map(|grace_us| (since_us, grace_us))
                });
                for (job, epoch) in self.owned_by(*target) {
                    let held = self.held[&(job, epoch)];
                    if !held.known || self.excused(&held) {
                        self.close(job, epoch);
                    } else if held.started {
                        // A lease whose effect started is left to expire at the grace's end, by
                        // design: a reclaimer looks its operation up (lease-runtime's shutdown).
                        self.close(job, epoch);
                        if let (Some((since_us, grace_us)), None) = (early, &self.first) {
                            self.first = Some(left_early(job, epoch, held, line, t_us, since_us, grace_us));
                        }
                    } else if let Some(held) = self.held.get_mut(&(job, epoch)) {
                        held.exited = true;
                    }
                }
            }
            Event::Crashed { target, .. } | Event::Stopped { target } => {
                self.draining.remove(target);
                if matches!(target, Node::Worker(_)) {
                    for (job, epoch) in self.owned_by(*target) {
                        self.close(job, epoch);
                    }
                }
            }
            Event::Restarted { target } => {
                self.draining.remove(target);
            }
            _ => {}
        }
    }

    /// The first unexcused loss found so far.
    pub(crate) fn first(&self) -> Option<Violation> {
        self.first.clone()
    }

    /// The leases still held whose expiry is at or before `now_us`, judged as lost there: the
    /// first unexcused one, if the history ends at `now_us`.
    pub(crate) fn check(&self, now_us: u64) -> Result<(), Violation> {
        for &(expires_at_us, job, epoch) in &self.by_expiry {
            if expires_at_us > now_us {
                break;
            }
            let held = self.held[&(job, epoch)];
            if !self.excused(&held) {
                return Err(violation(job, epoch, held, None, now_us, "the table's clock passed its expiry"));
            }
        }
        Ok(())
    }

    /// `node` showed it has the lease of `job` under `epoch`: the lease, when it is `node`'s.
    fn knows(&mut self, node: Node, job: JobId, epoch: Epoch) -> Option<&mut Held> {
        let held = self.held.get_mut(&(job, epoch)).filter(|held| held.owner == node)?;
        held.known = true;
        Some(held)
    }

    /// The leases `owner` holds now.
    fn owned_by(&self, owner: Node) -> Vec<(JobId, Epoch)> {
        self.held.iter().filter(|(_, held)| held.owner == owner).map(|(key, _)| *key).collect()
    }

    /// A fault struck `node` (a worker's process, or the table): the leases left behind by
    /// workers of that process (every exited lease, when it is the table) have an excuse.
    fn strike_exited(&mut self, node: Node) {
        let strikes = &self.strikes;
        let struck = strikes.key(node);
        for held in self.held.values_mut().filter(|held| held.exited) {
            if struck == Node::Table || strikes.key(held.owner) == struck {
                held.struck_after_exit = true;
            }
        }
    }

    fn close(&mut self, job: JobId, epoch: Epoch) -> Option<Held> {
        let held = self.held.remove(&(job, epoch))?;
        self.by_expiry.remove(&(held.expires_at_us, job, epoch));
        Some(held)
    }

    fn lost(&mut self, job: JobId, epoch: Epoch, held: Held, line: usize, t_us: u64, how: &str) {
        if self.first.is_none() && !self.excused(&held) {
            self.first = Some(violation(job, epoch, held, Some(line), t_us, how));
        }
    }

    /// Whether the loss is not the heartbeats' to answer for: a lease its owner never showed it
    /// had, one held in a slow fault phase, or one whose owner's process or the table a fault
    /// struck while it was held.
    fn excused(&self, held: &Held) -> bool {
        // A loss in a slow fault phase is of a lease held in it, so `held.slow` covers it.
        if !held.known || held.slow {
            return true;
        }
        if held.exited {
            // Judged for the faults before the exit when it exited.
            return held.struck_after_exit;
        }
        [held.owner, Node::Table].into_iter().any(|node| self.strikes.struck_since(node, held.since_us))
    }
}

/// A worker that exited `t_us - since_us` after it was told to stop, under half its grace, with
/// its effect under the lease still running (the lease not ended).
fn left_early(job: JobId, epoch: Epoch, held: Held, line: usize, t_us: u64, since_us: u64, grace_us: u64) -> Violation {
    let message = format!(
        "{} exited {}us after it was told to stop, under half its grace of {grace_us}us, while the effect it \
         started under the lease of {job} {epoch} had not ended, with no fault on it or on the table: a drain \
         lets the handlers it has running finish within its grace",
        held.owner,
        t_us - since_us
    );
    Violation::at(Invariant::HeartbeatsKeepLeases, Some(job), &[Some(held.line)], line, message)
}

fn violation(job: JobId, epoch: Epoch, held: Held, line: Option<usize>, t_us: u64, how: &str) -> Violation {
    if held.exited {
        let message = format!(
            "{} exited holding the lease of {job} under {epoch} (held from t={}us) and never handed it back: the \
             lease expired at t={}us, seen at t={t_us}us, with no fault on it or on the table; a drain releases \
             every lease it does not finish",
            held.owner, held.since_us, held.expires_at_us
        );
        let last = line.unwrap_or_else(|| held.renewed_line.unwrap_or(held.line));
        return Violation::at(Invariant::HeartbeatsKeepLeases, Some(job), &[Some(held.line)], last, message);
    }
    let message = format!(
        "{} held the lease of {job} under {epoch} from t={}us, renewed to expire at t={}us, and lost it at \
         t={t_us}us ({how}) with no fault on it or on the table: its heartbeats did not keep it",
        held.owner, held.since_us, held.expires_at_us
    );
    let last = line.unwrap_or_else(|| held.renewed_line.unwrap_or(held.line));
    Violation::at(Invariant::HeartbeatsKeepLeases, Some(job), &[Some(held.line), held.renewed_line], last, message)
}

#[cfg(test)]
mod tests {
    use super::Heartbeats;
    use crate::fixtures::*;
    use crate::{check_history, Invariant, Violation};
    use lease_history::{AbandonReason, Event, MessageKind, Node};

    /// w1 holds j1 from 10 (expiring at 1 010) and renews it at 260 and 510 (to 1 510); then the
    /// story goes on to `end_us` with the faults healed, unless the caller ends it otherwise.
    fn held_and_renewed_twice() -> History {
        let mut story = History::new(4, 10);
        story.at(0).arrived(J1);
        story.at(10).granted(J1, E1, w(1), 1_010);
        story.at(20).executing(w(1), J1, E1);
        story.at(260).renewed(J1, E1, 1_260);
        story.at(510).renewed(J1, E1, 1_510);
        story
    }

    /// The checker's verdict on the story, ended at `end_us` with the faults healed: the first
    /// unexcused loss, found as it went or at the end.
    fn verdict(story: &mut History, end_us: u64) -> Result<(), Violation> {
        story.at(end_us).faults_healed();
        let mut checker = Heartbeats::default();
        for (index, entry) in story.entries.iter().enumerate() {
            checker.absorb(index + 1, entry);
        }
        checker.first().map_or_else(|| checker.check(end_us), Err)
    }

    // Proves the rule with its broken variant: a worker whose renewals stop (a heartbeat timer
    // armed once, then never again) while nothing struck it loses the lease at the table's
    // expiry, and the checker names it; a worker that renews on until it completes keeps it.
    #[test]
    fn a_lease_left_to_expire_under_a_live_worker_is_caught() {
        let mut story = held_and_renewed_twice();
        story.at(1_600).arrived(J2);
        let violation = verdict(&mut story, 1_700).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HeartbeatsKeepLeases, "{violation}");
        assert_eq!(violation.job, Some(J1));
        assert!(violation.message.contains("expire at t=1510us"), "{}", violation.message);

        // The liveness check reports it, as the first work lost.
        let reported = check_history(&story.entries).map(|_| ()).unwrap_err();
        assert_eq!(reported.invariant, Invariant::HeartbeatsKeepLeases, "{reported}");

        let mut kept = held_and_renewed_twice();
        kept.at(760).renewed(J1, E1, 1_760);
        kept.at(900).applied(J1, E1, O7);
        kept.at(950).completed(J1, O7, E1, None);
        kept.at(1_600).arrived(J2);
        assert_eq!(verdict(&mut kept, 1_700), Ok(()));
    }

    // A worker that self-fences with no fault on it lost the lease to its own heartbeats, even
    // before the table's expiry; the same self-fence after a pause of its process is excused.
    #[test]
    fn a_self_fence_with_no_fault_is_caught_and_one_after_a_pause_is_not() {
        let mut story = held_and_renewed_twice();
        story.at(1_400).abandoned(w(1), J1, E1, AbandonReason::SelfFenced);
        let violation = verdict(&mut story, 1_450).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HeartbeatsKeepLeases, "{violation}");
        assert!(violation.message.contains("self-fenced"), "{}", violation.message);

        let mut paused = held_and_renewed_twice();
        paused.at(600).paused(w(1));
        paused.at(1_390).resumed(w(1));
        paused.at(1_400).abandoned(w(1), J1, E1, AbandonReason::SelfFenced);
        assert_eq!(verdict(&mut paused, 1_450), Ok(()));
    }

    // Only a fault on the lease's owner or on the table excuses a loss: a renewal of w1's lost on
    // its way excuses it; a message of another worker's lost, or a pause of another worker,
    // does not; a partition of the table from everyone does.
    #[test]
    fn only_a_fault_on_the_owner_or_the_table_excuses_a_loss() {
        let lost = |target: Node| Event::Lost {
            target,
            peer: Node::Table,
            message: MessageKind::Renew,
            reply: false,
            job: Some(J1),
        };
        let mut own = held_and_renewed_twice();
        own.at(700).push(Node::World, lost(w(1)));
        own.at(1_600).arrived(J2);
        assert_eq!(verdict(&mut own, 1_700), Ok(()));

        let mut other = held_and_renewed_twice();
        other.at(700).push(Node::World, lost(w(2)));
        other.at(720).paused(w(2));
        other.at(1_600).arrived(J2);
        assert_eq!(verdict(&mut other, 1_700).unwrap_err().invariant, Invariant::HeartbeatsKeepLeases);

        let mut table = held_and_renewed_twice();
        table.at(700).partitioned(Node::Table, None);
        table.at(1_600).arrived(J2);
        assert_eq!(verdict(&mut table, 1_700), Ok(()));
    }

    // A fault on a process strikes all its slots: with 2 worker processes, w3 runs in process 1,
    // so a lost batch named by its first slot, w1, excuses w3's lease; w2 (process 0) is not.
    #[test]
    fn a_fault_named_by_one_slot_strikes_its_whole_process() {
        let story = |holder: Node| {
            let mut story = History::new(4, 10);
            if let Event::Run { worker_processes, .. } = &mut story.entries[0].event {
                *worker_processes = Some(2);
            }
            story.at(0).arrived(J1);
            story.at(10).granted(J1, E1, holder, 1_010);
            story.at(20).executing(holder, J1, E1);
            let lost =
                Event::Lost { target: w(1), peer: Node::Table, message: MessageKind::Renew, reply: false, job: None };
            story.at(500).push(Node::World, lost);
            story.at(1_100).arrived(J2);
            story
        };
        assert_eq!(verdict(&mut story(w(3)), 1_200), Ok(()));
        assert_eq!(verdict(&mut story(w(2)), 1_200).unwrap_err().invariant, Invariant::HeartbeatsKeepLeases);
    }

    // Proves the drain's two promises with their broken variants. Told to stop with a grace of
    // 1 000, w1 exits 50 later while the effect it started under j1 still runs: reported at the
    // exit (a drain that does not wait for its handlers). Exiting after half its grace, it may
    // leave that lease to expire (a reclaimer looks its operation up). A lease it never started
    // its effect under must be handed back: left to expire, it is reported at the expiry, and a
    // release after the exit (the answer on its way) passes.
    #[test]
    fn a_drain_waits_for_its_handlers_and_hands_back_what_it_never_started() {
        let stopping = Event::Stopping { target: w(1), grace_us: Some(1_000) };
        let started = |exit_us: u64| {
            let mut story = held_and_renewed_twice();
            story.at(600).push(Node::World, stopping.clone());
            let exit = story.at(exit_us).push(Node::World, Event::Stopped { target: w(1) });
            story.at(1_600).arrived(J2);
            (story, exit)
        };
        let (mut early, exit) = started(650);
        let violation = verdict(&mut early, 1_700).unwrap_err();
        assert_eq!(violation.invariant, Invariant::HeartbeatsKeepLeases);
        assert_eq!(violation.lines, vec![3, exit]);
        assert!(violation.message.contains("w1 exited 50us after it was told to stop"), "{}", violation.message);
        assert_eq!(verdict(&mut started(1_150).0, 1_700), Ok(()));

        let unstarted = |released: bool| {
            let mut story = History::new(4, 10);
            story.at(0).arrived(J1);
            story.at(10).granted(J1, E1, w(1), 1_010);
            story.at(20).looked_up(J1, E1, None, None, None);
            story.at(600).push(Node::World, stopping.clone());
            story.at(650).push(Node::World, Event::Stopped { target: w(1) });
            if released {
                story.at(660).released(J1, E1);
            }
            story.at(1_100).arrived(J2);
            story
        };
        let violation = verdict(&mut unstarted(false), 1_200).unwrap_err();
        assert!(violation.message.contains("w1 exited holding the lease of j1 under e1"), "{}", violation.message);
        assert_eq!(verdict(&mut unstarted(true), 1_200), Ok(()));
    }
}
