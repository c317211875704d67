//! `sometimes` coverage: how often the interesting situations happened.
//!
//! A sweep that never reaches a crash after an accepted effect, a race between reclaimers or a
//! conflict proves nothing about them. So every run counts the situations below, by a stable
//! snake_case name, and a sweep merges the counts. They are never failures: a sweep reports them,
//! and a scenario can require one to be reached.
//!
//! | name | counted on |
//! |---|---|
//! | `adopted_by_worker` | an `adopted` from a worker (`wN`) |
//! | `adopted_by_reclaimer` | an `adopted` from a reclaimer (`rN`) |
//! | `crash_after_effect_adopted` | an `adopted` for job J after a `crashed` at point `after_effect` for J |
//! | `reclaimer_lost_race` | a `lost_race`: another reclaimer, or the holder, moved the job on first |
//! | `fence_not_expired` | a `not_expired`: the fence found its listed lease unexpired. A correct table never answers so (a listed lease had expired, and an expired lease is never renewed); a table bug such as `renew-grace` does |
//! | `stale_effect_fenced` | an `effect_rejected` with reason `fenced` |
//! | `stale_write_refused` | a `refused` with reason `stale_epoch` |
//! | `batch_stopped_on_conflict` | a `batch_stopped` |
//! | `paused_worker_woke_after_expiry` | a `resumed` worker that, when `paused`, held a lease that has expired by now |
//! | `full_batch` | a batch's `reclaimed` count reaching `batch_max`, when `batch_max` is 2 or more (a batch of one is always full, and proves nothing about the bound) |
//! | `dead_lettered` | a `terminal` dead_lettered |
//! | `dead_lettered_for_good` | a `terminal` dead_lettered at its worker's word (`permanent`: the dependency refused the job for good) |
//! | `quarantined` | a `terminal` quarantined |
//! | `rejected_arrival` | a `rejected` |
//! | `lease_renewed` | a `renewed` |
//! | `self_fenced` | an `abandoned` with why `self_fenced` |
//! | `dependency_failed` | a `dependency_failed` |
//! | `reclaimed` | a `reclaimed` |
//! | `worker_crashed` | a `crashed` whose target is a worker |
//! | `reclaimer_crashed` | a `crashed` whose target is a reclaimer |
//! | `grant_released` | a `released`: a worker declined a grant to an acquire it had given up |
//! | `handed_back_at_shutdown` | an `abandoned` with why `shutdown`: a worker told to stop gave a lease it never ran back |
//! | `reclaimer_gave_up` | a `gave_up`: a request of a reclaimer's batch went unanswered through its retries |
//! | `reclaim_storm` | a `refused` quarantine from a reclaimer whose fence of the job another reclaimer took since (`reclaimed` of the first's epoch): the first found the conflict, then stalled past its own lease |
//! | `line_committed_unknown` | a `lost` answer to a `line` message: a worker runtime's write of its `executing` lines committed, and the runtime does not know it (the store's answer lost), so it starts none of those effects and must never release their leases |
//! | `line_stalled_past_lease` | a worker `paused` at `before_line` (its `executing` line on its way to the store) and `resumed` at or after the expiry of the lease it held: the store must refuse the line (`self_fencing` judges that none lands) |
//! | `window_*` | the seven protocol windows: see [`super::windows`] |
//!
//! A worker holds a lease from its latest `granted` until the job is reclaimed, requeued or ends.

use super::facts::Facts;
use super::windows::{self, Windows};
use lease_core::{Epoch, JobId};
use lease_history::{
    AbandonReason, EffectRejectReason, Entry, Event, MessageKind, Node, OutcomeKind, Point, RefuseReason,
    RefusedRequest,
};
use std::collections::{BTreeMap, BTreeSet};

const ADOPTED_BY_WORKER: &str = "adopted_by_worker";
const ADOPTED_BY_RECLAIMER: &str = "adopted_by_reclaimer";
const CRASH_AFTER_EFFECT_ADOPTED: &str = "crash_after_effect_adopted";
const RECLAIMER_LOST_RACE: &str = "reclaimer_lost_race";
const FENCE_NOT_EXPIRED: &str = "fence_not_expired";
const STALE_EFFECT_FENCED: &str = "stale_effect_fenced";
const STALE_WRITE_REFUSED: &str = "stale_write_refused";
const BATCH_STOPPED_ON_CONFLICT: &str = "batch_stopped_on_conflict";
const PAUSED_WORKER_WOKE_AFTER_EXPIRY: &str = "paused_worker_woke_after_expiry";
const FULL_BATCH: &str = "full_batch";
const DEAD_LETTERED: &str = "dead_lettered";
const DEAD_LETTERED_FOR_GOOD: &str = "dead_lettered_for_good";
const QUARANTINED: &str = "quarantined";
const REJECTED_ARRIVAL: &str = "rejected_arrival";
const LEASE_RENEWED: &str = "lease_renewed";
const SELF_FENCED: &str = "self_fenced";
const DEPENDENCY_FAILED: &str = "dependency_failed";
const RECLAIMED: &str = "reclaimed";
const WORKER_CRASHED: &str = "worker_crashed";
const RECLAIMER_CRASHED: &str = "reclaimer_crashed";
const GRANT_RELEASED: &str = "grant_released";
const HANDED_BACK_AT_SHUTDOWN: &str = "handed_back_at_shutdown";
const RECLAIMER_GAVE_UP: &str = "reclaimer_gave_up";
const RECLAIM_STORM: &str = "reclaim_storm";
const LINE_COMMITTED_UNKNOWN: &str = "line_committed_unknown";
const LINE_STALLED_PAST_LEASE: &str = "line_stalled_past_lease";

/// Counts of interesting situations ("sometimes" properties), keyed by a stable snake_case name.
/// The map always holds every name of [`Coverage::SITUATIONS`], zero if not reached.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Coverage(pub BTreeMap<&'static str, u64>);

impl Default for Coverage {
    /// Every situation, at zero.
    fn default() -> Coverage {
        Coverage(Coverage::SITUATIONS.iter().map(|&name| (name, 0)).collect())
    }
}

impl Coverage {
    /// Every situation, in report order; see the module doc for what each counts.
    pub const SITUATIONS: &'static [&'static str] = &[
        ADOPTED_BY_WORKER,
        ADOPTED_BY_RECLAIMER,
        CRASH_AFTER_EFFECT_ADOPTED,
        RECLAIMER_LOST_RACE,
        FENCE_NOT_EXPIRED,
        STALE_EFFECT_FENCED,
        STALE_WRITE_REFUSED,
        BATCH_STOPPED_ON_CONFLICT,
        PAUSED_WORKER_WOKE_AFTER_EXPIRY,
        FULL_BATCH,
        DEAD_LETTERED,
        QUARANTINED,
        REJECTED_ARRIVAL,
        LEASE_RENEWED,
        SELF_FENCED,
        DEPENDENCY_FAILED,
        RECLAIMED,
        WORKER_CRASHED,
        RECLAIMER_CRASHED,
        GRANT_RELEASED,
        DEAD_LETTERED_FOR_GOOD,
        HANDED_BACK_AT_SHUTDOWN,
        RECLAIMER_GAVE_UP,
        RECLAIM_STORM,
        LINE_COMMITTED_UNKNOWN,
        LINE_STALLED_PAST_LEASE,
        windows::LIST_TO_FENCE,
        windows::FENCE_TO_LOOKUP,
        windows::RENEW_IN_FLIGHT,
        windows::EFFECT_TO_ACK,
        windows::STALE_HAND_BACK,
        windows::LATE_DUPLICATE,
        windows::EXPIRY_BOUNDARY,
        windows::BATCH_CRASH,
        windows::BATCH_STALE_COMPLETION,
        windows::BATCH_RENEWAL_AFTER_RECLAIM,
    ];

    /// How often `name` happened; zero for a name never reached or unknown.
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// One for every situation reached at least once, zero for the rest: merged over a sweep's
    /// seeds, how many seeds reached each.
    pub fn reached(&self) -> Coverage {
        Coverage(self.0.iter().map(|(&name, &count)| (name, u64::from(count > 0))).collect())
    }

    /// Adds `other`'s counts to these (a sweep merging its runs).
    pub fn merge(&mut self, other: &Coverage) {
        for (&name, &count) in &other.0 {
            *self.0.entry(name).or_insert(0) += count;
        }
    }

    pub(crate) fn bump(&mut self, name: &'static str) {
        *self.0.entry(name).or_insert(0) += 1;
    }
}

/// The coverage counters and the little they must remember between entries.
#[derive(Debug, Clone, Default)]
pub(crate) struct Situations {
    coverage: Coverage,
    /// The lease each worker holds: its latest grant, until reclaimed, requeued or ended.
    holding: BTreeMap<u32, (JobId, Epoch)>,
    /// The worker holding each leased job, the inverse of `holding`.
    holder: BTreeMap<JobId, u32>,
    /// The lease each paused worker held when it paused.
    paused: BTreeMap<u32, (JobId, Epoch)>,
    /// The lease of each worker paused with its `executing` line on its way (`before_line`).
    line_stalled: BTreeMap<u32, (JobId, Epoch)>,
    /// Jobs whose node crashed right after their effect was accepted, not yet adopted.
    crashed_after_effect: BTreeSet<JobId>,
    /// The reclaimer of each fence (a job's lease at an epoch a `reclaimed` gave).
    fenced_by: BTreeMap<(JobId, Epoch), Node>,
    /// Fences another reclaimer took from their reclaimer, with that first reclaimer.
    fence_taken: BTreeMap<(JobId, Epoch), Node>,
    /// The protocol windows' detectors.
    windows: Windows,
}

impl Situations {
    /// The counts so far.
    pub(crate) fn coverage(&self) -> &Coverage {
        &self.coverage
    }

    /// Counts what `entry` shows, against the facts before it.
    pub(crate) fn observe(&mut self, facts: &Facts, entry: &Entry) {
        let coverage = &mut self.coverage;
        self.windows.observe(facts, entry, &mut |window| coverage.bump(window));
        match &entry.event {
            Event::Adopted { job, .. } => self.adopted(entry.node, *job),
            Event::LostRace { .. } => self.coverage.bump(RECLAIMER_LOST_RACE),
            Event::NotExpired { .. } => self.coverage.bump(FENCE_NOT_EXPIRED),
            Event::EffectRejected { reason: EffectRejectReason::Fenced, .. } => self.coverage.bump(STALE_EFFECT_FENCED),
            Event::Refused { from, job, epoch, request, reason, .. } => {
                if *reason == RefuseReason::StaleEpoch {
                    self.coverage.bump(STALE_WRITE_REFUSED);
                }
                if *request == RefusedRequest::Quarantine && self.fence_taken.get(&(*job, *epoch)) == Some(from) {
                    self.coverage.bump(RECLAIM_STORM);
                }
            }
            Event::BatchStopped { .. } => self.coverage.bump(BATCH_STOPPED_ON_CONFLICT),
            Event::Lost { message: MessageKind::Line, reply: true, .. } => self.coverage.bump(LINE_COMMITTED_UNKNOWN),
            Event::GaveUp { .. } => self.coverage.bump(RECLAIMER_GAVE_UP),
            Event::Granted { job, epoch, owner: Node::Worker(worker), .. } => self.hold(*worker, *job, *epoch),
            Event::Paused { target: Node::Worker(worker), point, job } => {
                if let Some(&lease) = self.holding.get(worker) {
                    self.paused.insert(*worker, lease);
                    if *point == Some(Point::BeforeLine) && *job == Some(lease.0) {
                        self.line_stalled.insert(*worker, lease);
                    }
                }
            }
            Event::Resumed { target: Node::Worker(worker) } => self.resumed(facts, *worker, entry.t_us),
            Event::Reclaimed { job, batch, epoch, new_epoch, reclaimer, .. } => {
                self.coverage.bump(RECLAIMED);
                if let Some(&first) = self.fenced_by.get(&(*job, *epoch)).filter(|&first| first != reclaimer) {
                    self.fence_taken.insert((*job, *epoch), first);
                }
                self.fenced_by.insert((*job, *new_epoch), *reclaimer);
                let so_far = facts.batch(*batch).map_or(0, |batch| batch.reclaimed);
                let batch_max = facts.limits().batch_max;
                if batch_max >= 2 && so_far + 1 == batch_max {
                    self.coverage.bump(FULL_BATCH);
                }
                self.release(*job);
            }
            Event::Requeued { job, .. } => self.release(*job),
            Event::Released { job, .. } => {
                self.coverage.bump(GRANT_RELEASED);
                self.release(*job);
            }
            Event::Terminal { job, outcome, permanent, .. } => {
                match outcome {
                    OutcomeKind::DeadLettered if *permanent => {
                        self.coverage.bump(DEAD_LETTERED);
                        self.coverage.bump(DEAD_LETTERED_FOR_GOOD);
                    }
                    OutcomeKind::DeadLettered => self.coverage.bump(DEAD_LETTERED),
                    OutcomeKind::Quarantined => self.coverage.bump(QUARANTINED),
                    OutcomeKind::Completed => {}
                }
                self.release(*job);
            }
            Event::Rejected { .. } => self.coverage.bump(REJECTED_ARRIVAL),
            Event::Renewed { .. } => self.coverage.bump(LEASE_RENEWED),
            Event::Abandoned { why: AbandonReason::SelfFenced, .. } => self.coverage.bump(SELF_FENCED),
            Event::Abandoned { why: AbandonReason::Shutdown, .. } => self.coverage.bump(HANDED_BACK_AT_SHUTDOWN),
            Event::DependencyFailed { .. } => self.coverage.bump(DEPENDENCY_FAILED),
            Event::Crashed { target, point, job } => self.crashed(*target, *point, *job),
            _ => {}
        }
    }

    fn adopted(&mut self, node: Node, job: JobId) {
        match node {
            Node::Worker(_) => self.coverage.bump(ADOPTED_BY_WORKER),
            Node::Reclaimer(_) => self.coverage.bump(ADOPTED_BY_RECLAIMER),
            _ => {}
        }
        if self.crashed_after_effect.remove(&job) {
            self.coverage.bump(CRASH_AFTER_EFFECT_ADOPTED);
        }
    }

    fn crashed(&mut self, target: Node, point: Point, job: Option<JobId>) {
        match target {
            Node::Worker(_) => self.coverage.bump(WORKER_CRASHED),
            Node::Reclaimer(_) => self.coverage.bump(RECLAIMER_CRASHED),
            _ => {}
        }
        if let Some(job) = job.filter(|_| point == Point::AfterEffect) {
            self.crashed_after_effect.insert(job);
        }
    }

    fn hold(&mut self, worker: u32, job: JobId, epoch: Epoch) {
        self.release(job);
        if let Some((previous, _)) = self.holding.insert(worker, (job, epoch)) {
            self.holder.remove(&previous);
        }
        self.holder.insert(job, worker);
    }

    fn release(&mut self, job: JobId) {
        if let Some(worker) = self.holder.remove(&job) {
            self.holding.remove(&worker);
        }
    }

    fn resumed(&mut self, facts: &Facts, worker: u32, t_us: u64) {
        let line_stalled = self.line_stalled.remove(&worker);
        let Some((job, epoch)) = self.paused.remove(&worker) else { return };
        let term = facts.job(job).and_then(|job| job.terms.get(&epoch));
        if term.is_some_and(|term| term.expires_at_us <= t_us) {
            self.coverage.bump(PAUSED_WORKER_WOKE_AFTER_EXPIRY);
            if line_stalled == Some((job, epoch)) {
                self.coverage.bump(LINE_STALLED_PAST_LEASE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Checkers, Invariant};
    use super::Coverage;
    use lease_core::JobId;
    use lease_history::{
        AbandonReason, EffectRejectReason, Event, MessageKind, Node, Point, RefuseReason, RefusedRequest,
    };

    // The default coverage names every situation, at zero, in SITUATIONS order.
    #[test]
    fn default_names_every_situation() {
        let coverage = Coverage::default();
        assert_eq!(coverage.0.len(), Coverage::SITUATIONS.len());
        assert!(Coverage::SITUATIONS.iter().all(|name| coverage.0.get(name) == Some(&0)));
        assert_eq!(Coverage::SITUATIONS.len(), 36);
        assert_eq!(Coverage::SITUATIONS[0], "adopted_by_worker");
        assert_eq!(Coverage::SITUATIONS[19], "grant_released");
        assert_eq!(Coverage::SITUATIONS[20], "dead_lettered_for_good");
        assert_eq!(Coverage::SITUATIONS[21], "handed_back_at_shutdown");
        assert_eq!(Coverage::SITUATIONS[22], "reclaimer_gave_up");
        assert_eq!(Coverage::SITUATIONS[23], "reclaim_storm");
        assert_eq!(Coverage::SITUATIONS[24], "line_committed_unknown");
        assert_eq!(Coverage::SITUATIONS[25], "line_stalled_past_lease");
        assert_eq!(Coverage::SITUATIONS[26..33], super::windows::WINDOWS);
        assert_eq!(Coverage::SITUATIONS[33..], super::windows::BATCH_WINDOWS);
    }

    // Merging adds counts name by name.
    #[test]
    fn merge_adds_counts() {
        let mut total = Coverage::default();
        let mut one = Coverage::default();
        one.bump("reclaimed");
        one.bump("reclaimed");
        total.merge(&one);
        total.merge(&one);
        assert_eq!(total.get("reclaimed"), 4);
        assert_eq!(total.get("quarantined"), 0);
        assert_eq!(total.get("no_such_situation"), 0);
    }

    /// A correct history that reaches every situation at least once (batch_max 2, capacity 2,
    /// 2 attempts per job).
    fn every_situation() -> History {
        let mut history = History::with_attempts_max(2, 2, 2);
        // j1: w1 crashes after its effect; r1 reclaims in a full batch and adopts.
        history.at(0).arrived(J1);
        history.at(0).arrived(J2);
        history.at(0).rejected(lease_core::JobId(4));
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(10).granted(J2, E1, w(2), 1_010);
        history.at(20).executing(w(1), J1, E1);
        history.at(30).applied(J1, E1, O7);
        history.at(40).crashed(w(1), Point::AfterEffect, Some(J1));
        // w2 renews, then pauses past its lease and wakes up to find it gone; r1 takes both
        // leases, and r2, listing after r1 took j1, loses the race for j2.
        history.at(500).renewed(J2, E1, 1_500);
        history.at(600).paused(w(2));
        history.at(1_500).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_500)]);
        history.at(1_500).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_500).listed(batch(2, 0), &[(J2, E1, 1_500)]);
        history.at(1_500).reclaimed(J2, E1, 1_500, E2, batch(1, 0));
        history.at(1_500).lost_race(J2, E1, E2, batch(2, 0));
        history.at(1_510).looked_up(J1, E2, Some(O7), None, Some(batch(1, 0)));
        history.at(1_510).adopted(r(1), J1, O7, E2);
        history.at(1_520).completed(J1, O7, E2, Some(batch(1, 0)));
        history.at(1_530).looked_up(J2, E2, None, None, Some(batch(1, 0)));
        history.at(1_540).requeued(J2, E2, 1, Some(batch(1, 0)));
        // The requeue's answer never reached r1 through its retries (the table had requeued it).
        history.at(1_545).gave_up(batch(1, 0), J2);
        history.at(1_600).resumed(w(2));
        history.at(1_600).abandoned(w(2), J2, E1, AbandonReason::SelfFenced);
        history.at(1_610).refused(J2, E1, RefusedRequest::Renew, RefuseReason::StaleEpoch);
        // j2 again: w3 finds nothing, its dependency fails, and j2 is dead-lettered.
        history.at(1_700).granted(J2, E3, w(3), 2_700);
        history.at(1_710).looked_up(J2, E3, None, None, None);
        history.at(1_720).executing(w(3), J2, E3);
        history.at(1_730).dependency_failed(J2, E3);
        history.at(1_740).dead_lettered(J2, E3, 2, None);
        // j3: w4 applies o8, a stale retry is fenced; a conflict appears and r2 quarantines.
        history.at(1_750).arrived(J3);
        history.at(1_800).granted(J3, E1, w(4), 2_800);
        history.at(1_810).executing(w(4), J3, E1);
        history.at(1_820).applied(J3, E1, O8);
        history.at(1_830).effect_rejected(J3, E1, O9, EffectRejectReason::Conflict);
        history.at(1_840).crashed(w(4), Point::BeforeEffect, None);
        history.at(1_850).crashed(r(1), Point::MidReclaim, None);
        history.at(2_800).reclaimed(J3, E1, 2_800, E2, batch(2, 1));
        history.at(2_810).looked_up(J3, E2, Some(O8), Some(O9), Some(batch(2, 1)));
        history.at(2_820).quarantined(J3, E2, [O8, O9], Some(batch(2, 1)));
        history.at(2_820).batch_stopped(batch(2, 1), J3, [O8, O9]);
        history.at(2_830).effect_rejected(J3, E1, O8, EffectRejectReason::Fenced);
        // j5: a worker adopts an output a crashed predecessor left behind.
        let j5 = lease_core::JobId(5);
        history.at(3_000).arrived(j5);
        history.at(3_010).granted(j5, E1, w(5), 4_010);
        history.at(3_020).executing(w(5), j5, E1);
        history.at(3_030).applied(j5, E1, O7);
        history.at(3_030).failed_after_effect(j5, E1);
        history.at(3_040).requeued(j5, E1, 1, None);
        history.at(3_050).granted(j5, E2, w(6), 4_050);
        history.at(3_060).looked_up(j5, E2, Some(O7), None, None);
        history.at(3_070).adopted(w(6), j5, O7, E2);
        history.at(3_080).completed(j5, O7, E2, None);
        history.at(4_000).faults_healed();
        history
    }

    // A history holding each situation counts each one, exactly as often as it happened; the
    // one a correct world never shows (fence_not_expired) is counted in the next test.
    #[test]
    fn every_situation_is_counted() {
        let coverage = check_history(&every_situation().entries).expect("a correct history");
        let expected = [
            ("adopted_by_worker", 1),
            ("adopted_by_reclaimer", 1),
            ("crash_after_effect_adopted", 1),
            ("reclaimer_lost_race", 1),
            ("fence_not_expired", 0),
            ("stale_effect_fenced", 1),
            ("stale_write_refused", 1),
            ("batch_stopped_on_conflict", 1),
            ("paused_worker_woke_after_expiry", 1),
            ("full_batch", 1),
            ("dead_lettered", 1),
            ("quarantined", 1),
            ("rejected_arrival", 1),
            ("lease_renewed", 1),
            ("self_fenced", 1),
            ("dependency_failed", 2),
            ("reclaimed", 3),
            ("worker_crashed", 2),
            ("reclaimer_crashed", 1),
            ("grant_released", 0),
            ("dead_lettered_for_good", 0),
            ("handed_back_at_shutdown", 0),
            ("reclaimer_gave_up", 1),
            ("reclaim_storm", 0),
            ("line_committed_unknown", 0),
            ("line_stalled_past_lease", 0),
            ("window_list_to_fence", 0),
            ("window_fence_to_lookup", 0),
            ("window_renew_in_flight", 1),
            ("window_effect_to_ack", 2),
            ("window_stale_hand_back", 0),
            ("window_late_duplicate", 2),
            ("window_expiry_boundary", 2),
            ("window_batch_crash_between_effects", 0),
            ("window_batch_stale_completion", 0),
            ("window_batch_renewal_after_reclaim", 0),
        ];
        assert_eq!(expected.len(), Coverage::SITUATIONS.len());
        for (name, count) in expected {
            assert_eq!(coverage.get(name), count, "{name}");
        }
        assert_eq!(coverage.0.len(), Coverage::SITUATIONS.len());
    }

    // A reclaim storm is counted on a quarantine refused to a reclaimer whose fence another
    // reclaimer took: r1 fences j1 at e2 and stalls past that lease; r2 takes e2 (to e3), and
    // r1, awake, finds the conflict and asks to quarantine under e2: refused as stale, while r2
    // holds e3 or once r2 quarantined first. The same refusal when r1 itself
    // fenced its own expired fence again (no second reclaimer) is not a storm.
    #[test]
    fn a_reclaim_storm_is_a_stale_quarantine_after_another_reclaimer_took_the_fence() {
        let storm = |second: u32, second_first: bool| {
            let (mut history, _) = History::j1_granted_to_w1(3);
            history.at(20).executing(w(1), J1, E1);
            history.at(30).applied(J1, E1, O7);
            history.at(30).effect_rejected(J1, E1, O8, EffectRejectReason::Conflict);
            history.at(30).crashed(w(1), Point::AfterEffect, Some(J1));
            history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
            history.at(1_010).paused(r(1));
            let expired = 1_010 + TTL_US;
            history.at(expired).reclaimed(J1, E2, expired, E3, batch(second, 1));
            let r2_quarantines = |history: &mut History, at: u64| {
                history.at(at).looked_up(J1, E3, Some(O7), Some(O8), Some(batch(second, 1)));
                history.at(at + 10).quarantined(J1, E3, [O7, O8], Some(batch(second, 1)));
                history.at(at + 10).batch_stopped(batch(second, 1), J1, [O7, O8]);
            };
            if second_first {
                r2_quarantines(&mut history, expired + 5);
            }
            history.at(expired + 20).resumed(r(1));
            history.at(expired + 30).looked_up(J1, E2, Some(O7), Some(O8), Some(batch(1, 0)));
            let stale = RefuseReason::StaleEpoch;
            history.at(expired + 40).refused_in(J1, E2, RefusedRequest::Quarantine, stale, Some(batch(1, 0)));
            if !second_first {
                r2_quarantines(&mut history, expired + 50);
            }
            history.at(expired + 70).faults_healed();
            check_history(&history.entries).expect("a correct history").get("reclaim_storm")
        };
        assert_eq!(storm(2, false), 1);
        assert_eq!(storm(2, true), 1);
        assert_eq!(storm(1, false), 0);
    }

    // A write of a runtime's `executing` line whose answer was lost committed unknown to the
    // runtime: counted. One lost on its way (never committed: no line follows) is not, nor is a
    // lost answer to any other request. Either way the runtime writes the line again when its
    // machine sends the execute again: a line twice under one epoch is a correct history.
    #[test]
    fn a_line_committed_unknown_is_a_lost_answer_to_a_line_write() {
        let counted = |reply: bool, message: MessageKind| {
            let (mut history, _) = History::j1_granted_to_w1(3);
            if reply {
                history.at(20).executing(w(1), J1, E1);
                history.at(20).lost_reply(w(1), message, Some(J1));
            } else {
                let lost = Event::Lost { target: w(1), peer: Node::Table, message, reply: false, job: Some(J1) };
                history.at(20).push(Node::World, lost);
            }
            // Its machine sends the execute again, and the line is written (again).
            history.at(60).executing(w(1), J1, E1);
            history.at(70).applied(J1, E1, O7);
            history.at(80).completed(J1, O7, E1, None);
            history.at(90).faults_healed();
            check_history(&history.entries).expect("a correct history").get("line_committed_unknown")
        };
        assert_eq!(counted(true, MessageKind::Line), 1);
        assert_eq!(counted(false, MessageKind::Line), 0);
        assert_eq!(counted(true, MessageKind::Renew), 0);
    }

    // A batch of one is always full: it is not counted, while a batch_max of 2 filled is; a lost
    // race and a lease found unexpired are different situations. A correct table never finds a
    // listed lease unexpired (it was listed as expired, and an expired lease is never renewed),
    // so that one is counted from a table that answers it, which conformance reports.
    #[test]
    fn full_batches_count_from_two_and_fence_answers_apart() {
        let coverage = |batch_max: usize| {
            assert!(batch_max <= 2);
            let mut history = History::new(batch_max, 3);
            for job in [J1, J2] {
                history.at(0).arrived(job);
                history.at(10).granted(job, E1, w(1), 1_010);
            }
            let expired = &[(J1, E1, 1_010), (J2, E1, 1_010)][..batch_max];
            history.at(1_010).listed(batch(1, 0), expired);
            history.at(1_010).listed(batch(2, 0), expired);
            history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
            history.at(1_010).lost_race(J1, E1, E2, batch(2, 0));
            check_history(&history.entries).unwrap()
        };
        assert_eq!(coverage(1).get("full_batch"), 0);
        assert_eq!(coverage(1).get("reclaimer_lost_race"), 1);
        assert_eq!(coverage(1).get("fence_not_expired"), 0);
        let mut history = History::new(2, 3);
        for job in [J1, J2] {
            history.at(0).arrived(job);
            history.at(10).granted(job, E1, w(1), 1_010);
        }
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_010).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
        let coverage = check_history(&history.entries).unwrap();
        assert_eq!(coverage.get("full_batch"), 1);
        let mut history = History::new(2, 3);
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010)]);
        let unexpired = history.at(1_010).not_expired(J1, E1, 2_010, batch(1, 0));
        let mut checkers = Checkers::new();
        for (index, entry) in history.entries.iter().enumerate() {
            match checkers.observe(index + 1, entry) {
                Err(violation) if index + 1 == unexpired => {
                    assert_eq!(violation.invariant, Invariant::Conformance, "{violation}");
                }
                verdict => assert_eq!(verdict, Ok(()), "line {}", index + 1),
            }
        }
        assert_eq!(checkers.coverage().get("fence_not_expired"), 1);
        assert_eq!(checkers.coverage().get("reclaimer_lost_race"), 0);
    }

    // A worker stalled with its `executing` line on its way (`before_line`) and woken at or past
    // its lease's expiry is counted (the store must refuse that line); woken in time, or stalled
    // at another point, or naming another job, it is not.
    #[test]
    fn a_line_stalled_past_its_lease_is_counted() {
        let counted = |point: Point, job: JobId, woken_us: u64| {
            let (mut history, _) = History::j1_granted_to_w1(2);
            history.at(20).push(Node::World, Event::Paused { target: w(1), point: Some(point), job: Some(job) });
            history.at(woken_us).resumed(w(1));
            let coverage = check_history(&history.entries).expect("a correct history");
            (coverage.get("line_stalled_past_lease"), coverage.get("paused_worker_woke_after_expiry"))
        };
        assert_eq!(counted(Point::BeforeLine, J1, 1_010), (1, 1));
        assert_eq!(counted(Point::BeforeLine, J1, 1_500), (1, 1));
        assert_eq!(counted(Point::BeforeLine, J1, 1_009), (0, 0));
        assert_eq!(counted(Point::BeforeEffect, J1, 1_010), (0, 1));
        assert_eq!(counted(Point::BeforeLine, J2, 1_010), (0, 1));
    }

    // A worker that wakes before its lease expired, or that held nothing, is not counted.
    #[test]
    fn paused_worker_waking_in_time_is_not_counted() {
        let mut history = History::new(2, 2);
        history.at(0).arrived(J1);
        history.at(0).paused(w(2));
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(20).paused(w(1));
        history.at(1_009).resumed(w(1));
        history.at(2_000).resumed(w(2));
        let coverage = check_history(&history.entries).unwrap();
        assert_eq!(coverage.get("paused_worker_woke_after_expiry"), 0);
    }
}
