//! Tests of the conformance checker: correct stories pass, and each rule catches a story broken
//! in exactly one way, at the broken line.

use super::super::fixtures::*;
use super::super::{check_history, Invariant, Violation};
use super::{Conformance, Rule};
use lease_core::{Epoch, JobId, OpId};
use lease_history::{
    AbandonReason, EffectRejectReason, Entry, Event, Listing, Node, Point, RefuseReason, RefusedRequest,
};
use std::collections::BTreeSet;

/// Conformance alone over a whole history: the first violation, if any.
fn conformance(entries: &[Entry]) -> Result<(), Violation> {
    let mut checker = Conformance::default();
    for (index, entry) in entries.iter().enumerate() {
        checker.check(index + 1, entry)?;
        checker.absorb(index + 1, entry);
    }
    Ok(())
}

/// Replaces line `line` of the story with `event`, at the same time and node.
fn replace(story: &mut History, line: usize, event: Event) {
    story.entries[line - 1].event = event;
}

/// Replaces line `line` with a line that says nothing about the protocol: the event it held
/// never happened.
fn erase(story: &mut History, line: usize) {
    let entry = &mut story.entries[line - 1];
    *entry = Entry {
        t_us: entry.t_us,
        node: Node::World,
        event: Event::Paused { target: Node::Worker(99), point: None, job: None },
    };
}

/// Asserts every safety check reports `rule` of conformance, first, at `line`.
fn assert_rule(story: &History, rule: Rule, line: usize) {
    let Err(violation) = check_history(&story.entries) else {
        panic!("{rule}: the story broken at line {line} passed")
    };
    assert_eq!(violation.invariant, Invariant::Conformance, "{violation}");
    assert_rule_alone(story, rule, line);
}

/// Asserts conformance alone reports `rule`, first, at `line`.
fn assert_rule_alone(story: &History, rule: Rule, line: usize) {
    let Err(violation) = conformance(&story.entries) else { panic!("{rule}: the story broken at line {line} passed") };
    assert_eq!(Rule::of(&violation), Some(rule), "{violation}");
    assert_eq!(violation.lines.last(), Some(&line), "{violation}");
    assert!(violation.message.starts_with(&format!("{}: ", rule.name())), "{violation}");
}

/// Rules whose every break another invariant names first, judged before conformance: a fence of
/// a lease its batch's listing did not show is `bounded_batch`'s.
const SHADOWED: [(Rule, Invariant); 1] = [(Rule::ReclaimerFencesWhatWasListed, Invariant::BoundedBatch)];

/// The line of `story` whose event matches, from 1.
fn find(story: &History, matches: impl Fn(&Event) -> bool) -> usize {
    story.entries.iter().position(|entry| matches(&entry.event)).expect("a line of the story") + 1
}

/// Line numbers of [`requeue_story`].
const B_REJECTED: usize = 4;
const B_DUPLICATE: usize = 5;
const B_REGRANTED: usize = 7;
const B_DEPENDENCY_FAILED: usize = 9;
const B_REQUEUED: usize = 10;
const B_GRANTED_J2: usize = 12;
const B_GRANTED_AGAIN: usize = 13;
const B_RENEWED: usize = 15;
const B_LOOKED_UP: usize = 16;
const B_EXECUTING_AGAIN: usize = 17;
const B_COMPLETED: usize = 19;
const B_ALREADY_COMPLETED: usize = 20;

/// A correct story of the table's everyday answers (batch_max 2, capacity 2, 3 attempts): an
/// arrival past capacity, a duplicate, a retried acquire, a failed dependency and a requeue (and
/// its retried copy), a second attempt that looks up first, a renewal, a completion and its
/// retried copy.
///
/// ```text
///  2-3 arrived j1, j2; 4 rejected j3; 5 duplicate j1
///  6 granted j1 e1 to w1; 7 regranted; 8 w1 executing; 9 dependency_failed; 10 requeued
/// 11 refused requeue not_leased (the retried copy); 12 granted j2 e1 to w2
/// 13 granted j1 e2 to w3 (attempt 2); 14 acquire_empty for w4; 15 renewed j1 e2
/// 16 looked_up j1 e2 nothing; 17 w3 executing; 18 applied o7; 19 completed; 20 already_completed
/// 21 w2 executing j2; 22 applied o8; 23 completed j2
/// ```
/// A grant declined and released, then run by another worker as a first attempt.
///
/// ```text
/// 2 arrived j1; 3 granted j1 e1 to w1; 4 w1 abandoned declined; 5 released (0 attempts)
/// 6 granted j1 e2 to w2 (attempt 1); 7 w2 executing; 8 applied o7; 9 completed
/// ```
fn release_story() -> History {
    let mut story = History::new(2, 2);
    story.at(0).arrived(J1);
    story.at(10).granted(J1, E1, w(1), 1_010);
    assert_eq!(story.at(12).abandoned(w(1), J1, E1, AbandonReason::Declined), R_DECLINED);
    assert_eq!(story.at(14).released(J1, E1), R_RELEASED);
    story.at(40).granted(J1, E2, w(2), 1_040);
    story.at(50).executing(w(2), J1, E2);
    story.at(60).applied(J1, E2, O7);
    story.at(70).completed(J1, O7, E2, None);
    story
}
const R_DECLINED: usize = 4;
const R_RELEASED: usize = 5;

fn requeue_story() -> History {
    let mut story = History::new(2, 2);
    story.at(0).arrived(J1);
    story.at(0).arrived(J2);
    assert_eq!(story.at(0).rejected(J3), B_REJECTED);
    assert_eq!(story.at(0).duplicate(J1), B_DUPLICATE);
    story.at(10).granted(J1, E1, w(1), 1_010);
    assert_eq!(story.at(12).regranted(J1, E1, w(1), 1_010), B_REGRANTED);
    story.at(20).executing(w(1), J1, E1);
    assert_eq!(story.at(30).dependency_failed(J1, E1), B_DEPENDENCY_FAILED);
    assert_eq!(story.at(40).requeued(J1, E1, 1, None), B_REQUEUED);
    story.at(45).refused(J1, E1, RefusedRequest::Requeue, RefuseReason::NotLeased);
    assert_eq!(story.at(50).granted(J2, E1, w(2), 1_050), B_GRANTED_J2);
    assert_eq!(story.at(60).granted(J1, E2, w(3), 1_060), B_GRANTED_AGAIN);
    story.at(61).acquire_empty(w(4));
    assert_eq!(story.at(100).renewed(J1, E2, 1_100), B_RENEWED);
    assert_eq!(story.at(110).looked_up(J1, E2, None, None, None), B_LOOKED_UP);
    assert_eq!(story.at(120).executing(w(3), J1, E2), B_EXECUTING_AGAIN);
    story.at(130).applied(J1, E2, O7);
    assert_eq!(story.at(140).completed(J1, O7, E2, None), B_COMPLETED);
    assert_eq!(story.at(150).already_completed(J1, E2, O7, None), B_ALREADY_COMPLETED);
    story.at(160).executing(w(2), J2, E1);
    story.at(170).applied(J2, E1, O8);
    story.at(180).completed(J2, O8, E1, None);
    story
}

/// Line numbers of [`conflict_story`].
const C_RIVAL: usize = 8;
const C_GRANTED_AGAIN: usize = 11;
const C_LOOKED_UP: usize = 12;
const C_ABANDONED: usize = 13;
const C_LISTED: usize = 15;
const C_RECLAIMED: usize = 17;
const C_LOST_RACE: usize = 18;
const C_CONFLICT_LOOKUP: usize = 19;
const C_QUARANTINED: usize = 20;

/// A correct story of a conflict (batch_max 2, capacity 3): w1's dependency writes o7 and a rival
/// o8, and answers "failed"; w1 requeues j1; w3 looks up, sees the rival and abandons; r1 and r2
/// list the expired lease, r1 fences it first and quarantines j1, r2 loses the race; j2 finishes.
///
/// ```text
///  4-5 granted j1, j2; 6 w1 executing j1; 7 applied o7; 8 rival o8; 9 failed after effect
/// 10 requeued j1; 11 granted j1 e2 to w3; 12 looked_up o7 and rival o8; 13 w3 abandoned
/// 14 renewed j2; 15-16 listed r1#0, r2#0; 17 reclaimed j1 e2 by r1; 18 lost_race r2
/// 19 looked_up j1 e3 in r1#0; 20 quarantined; 21 batch_stopped; 22-24 j2 completes
/// ```
fn conflict_story() -> History {
    let mut story = History::new(2, 3);
    story.at(0).arrived(J1);
    story.at(0).arrived(J2);
    story.at(10).granted(J1, E1, w(1), 1_010);
    story.at(10).granted(J2, E1, w(2), 1_010);
    story.at(20).executing(w(1), J1, E1);
    story.at(30).applied(J1, E1, O7);
    assert_eq!(story.at(30).rival(J1, E1, O8), C_RIVAL);
    story.at(30).failed_after_effect(J1, E1);
    story.at(40).requeued(J1, E1, 1, None);
    assert_eq!(story.at(50).granted(J1, E2, w(3), 1_050), C_GRANTED_AGAIN);
    assert_eq!(story.at(60).looked_up(J1, E2, Some(O7), Some(O8), None), C_LOOKED_UP);
    assert_eq!(story.at(60).abandoned(w(3), J1, E2, AbandonReason::Conflict), C_ABANDONED);
    story.at(500).renewed(J2, E1, 1_500);
    assert_eq!(story.at(1_050).listed(batch(1, 0), &[(J1, E2, 1_050)]), C_LISTED);
    story.at(1_050).listed(batch(2, 0), &[(J1, E2, 1_050)]);
    assert_eq!(story.at(1_050).reclaimed(J1, E2, 1_050, E3, batch(1, 0)), C_RECLAIMED);
    assert_eq!(story.at(1_050).lost_race(J1, E2, E3, batch(2, 0)), C_LOST_RACE);
    assert_eq!(story.at(1_060).looked_up(J1, E3, Some(O7), Some(O8), Some(batch(1, 0))), C_CONFLICT_LOOKUP);
    assert_eq!(story.at(1_070).quarantined(J1, E3, [O7, O8], Some(batch(1, 0))), C_QUARANTINED);
    story.at(1_070).batch_stopped(batch(1, 0), J1, [O7, O8]);
    story.at(1_100).executing(w(2), J2, E1);
    story.at(1_110).applied(J2, E1, O9);
    story.at(1_120).completed(J2, O9, E1, None);
    story
}

/// Line numbers of [`abandon_story`].
const D_EXECUTING: usize = 8;
const D_SELF_FENCED: usize = 9;
const D_RENEW_REFUSED: usize = 10;
const D_LISTED: usize = 12;
const D_FENCED_APPLY: usize = 22;

/// A correct story of workers that stop (batch_max 2, capacity 3): w1 self-fences, w2's renewal
/// is refused as expired, w3's effect is fenced after r1 reclaimed its lease. r1 takes j1 and j2
/// in one full batch and j3 in the next, finds nothing and requeues all three.
///
/// ```text
///  5-7 granted j1, j2, j3; 8 w3 executing j3; 9 w1 abandoned self_fenced
/// 10 renew of j2 refused expired; 11 w2 abandoned lease_lost; 12 listed r1#0 j1, j2
/// 13-18 r1 reclaims, looks up and requeues j1 and j2; 19 listed r1#1 j3; 20 reclaimed j3
/// 21 looked_up j3 e2; 22 w3's apply fenced; 23 w3 abandoned effect_fenced; 24 requeued j3
/// ```
fn abandon_story() -> History {
    let mut story = History::new(2, 3);
    for job in [J1, J2, J3] {
        story.at(0).arrived(job);
    }
    for (job, worker) in [(J1, 1), (J2, 2), (J3, 3)] {
        story.at(10).granted(job, E1, w(worker), 1_010);
    }
    assert_eq!(story.at(20).executing(w(3), J3, E1), D_EXECUTING);
    assert_eq!(story.at(1_000).abandoned(w(1), J1, E1, AbandonReason::SelfFenced), D_SELF_FENCED);
    assert_eq!(story.at(1_010).refused(J2, E1, RefusedRequest::Renew, RefuseReason::Expired), D_RENEW_REFUSED);
    story.at(1_010).abandoned(w(2), J2, E1, AbandonReason::LeaseLost);
    assert_eq!(story.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_010)]), D_LISTED);
    story.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
    story.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
    story.at(1_030).requeued(J1, E2, 1, Some(batch(1, 0)));
    story.at(1_030).reclaimed(J2, E1, 1_010, E2, batch(1, 0));
    story.at(1_040).looked_up(J2, E2, None, None, Some(batch(1, 0)));
    story.at(1_050).requeued(J2, E2, 1, Some(batch(1, 0)));
    story.at(1_060).listed(batch(1, 1), &[(J3, E1, 1_010)]);
    story.at(1_060).reclaimed(J3, E1, 1_010, E2, batch(1, 1));
    story.at(1_070).looked_up(J3, E2, None, None, Some(batch(1, 1)));
    assert_eq!(story.at(1_080).effect_rejected(J3, E1, O7, EffectRejectReason::Fenced), D_FENCED_APPLY);
    story.at(1_080).abandoned(w(3), J3, E1, AbandonReason::EffectFenced);
    story.at(1_090).requeued(J3, E2, 1, Some(batch(1, 1)));
    story
}

/// A correct story of a dead letter (batch_max 1, capacity 1, 1 attempt): w1 crashes before its
/// effect, r1 finds nothing and the requeue dead-letters j1.
fn dead_letter_story() -> History {
    let mut story = History::with_attempts_max(1, 1, 1);
    story.at(0).arrived(J1);
    story.at(10).granted(J1, E1, w(1), 1_010);
    story.at(20).crashed(w(1), Point::BeforeEffect, Some(J1));
    story.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
    story.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
    story.at(1_030).dead_lettered(J1, E2, 1, Some(batch(1, 0)));
    story
}

/// A correct story of a job its dependency refuses for good (3 attempts): w1 runs it, the
/// dependency refuses it, and w1 dead-letters it at once, after its one attempt; its stale copy
/// of the dead-letter is refused.
///
/// ```text
/// 2 arrived j1; 3 granted j1 e1 to w1; 4 w1 executing; 5 dependency_failed for good
/// 6 terminal dead_lettered (1 attempt, permanent); 7 refused dead_letter already_terminal
/// ```
fn refused_story() -> History {
    let mut story = History::with_attempts_max(1, 1, 3);
    story.at(0).arrived(J1);
    story.at(10).granted(J1, E1, w(1), 1_010);
    story.at(20).executing(w(1), J1, E1);
    assert_eq!(story.at(30).refused_for_good(J1, E1), P_REFUSED);
    assert_eq!(story.at(40).dead_lettered_for_good(J1, E1, 1), P_DEAD_LETTERED);
    let (request, reason) = (RefusedRequest::DeadLetter, RefuseReason::AlreadyTerminal);
    story.at(50).push(w(1), Event::Refused { from: w(1), job: J1, epoch: E1, request, reason, batch: None });
    story
}
const P_REFUSED: usize = 5;
const P_DEAD_LETTERED: usize = 6;

fn correct_stories() -> [(&'static str, History); 6] {
    [
        ("refused", refused_story()),
        ("crash_after_effect", crash_after_effect_story()),
        ("requeue", requeue_story()),
        ("conflict", conflict_story()),
        ("abandon", abandon_story()),
        ("dead_letter", dead_letter_story()),
    ]
}

// Proves the correct stories, which between them hold every kind of table and ledger answer and
// every decision of a worker and a reclaimer, pass conformance and every other safety check.
#[test]
fn correct_stories_pass() {
    for (name, story) in correct_stories() {
        assert_eq!(conformance(&story.entries), Ok(()), "{name}");
        assert!(check_history(&story.entries).is_ok(), "{name}: {:?}", check_history(&story.entries));
    }
}

/// Every story broken in one way: the rule it breaks, the story, and the broken line.
fn broken_stories() -> Vec<(Rule, History, usize)> {
    let mut cases = Vec::new();
    let mut case = |rule: Rule, base: fn() -> History, break_it: &dyn Fn(&mut History) -> usize| {
        let mut story = base();
        let line = break_it(&mut story);
        cases.push((rule, story, line));
    };
    // The table's answers.
    case(Rule::ArrivalAnswer, requeue_story, &|story| {
        // A second arrival of a known job must be a duplicate; the backlog it names is unchanged.
        replace(story, B_DUPLICATE, Event::Arrived { job: J1, backlog: 2 });
        B_DUPLICATE
    });
    case(Rule::ArrivalAnswer, requeue_story, &|story| {
        replace(story, B_REJECTED, Event::Duplicate { job: J3 });
        B_REJECTED
    });
    case(Rule::GrantOldestQueued, requeue_story, &|story| {
        // j2 waited longer than the requeued j1.
        replace(
            story,
            B_GRANTED_J2,
            Event::Granted { job: J1, epoch: E2, owner: w(2), expires_at_us: 1_050, attempt: 2 },
        );
        B_GRANTED_J2
    });
    case(Rule::GrantOldestQueued, requeue_story, &|story| {
        replace(story, B_GRANTED_J2, Event::AcquireEmpty { owner: w(2) });
        B_GRANTED_J2
    });
    case(Rule::GrantOldestQueued, requeue_story, &|story| {
        // The attempt counts worker grants: this is j1's second.
        replace(
            story,
            B_GRANTED_AGAIN,
            Event::Granted { job: J1, epoch: E2, owner: w(3), expires_at_us: 1_060, attempt: 1 },
        );
        B_GRANTED_AGAIN
    });
    case(Rule::RegrantAnswer, requeue_story, &|story| {
        replace(
            story,
            B_REGRANTED,
            Event::Regranted { job: J1, epoch: E1, owner: w(1), expires_at_us: 1_012, attempt: 1 },
        );
        B_REGRANTED
    });
    case(Rule::RenewAnswer, requeue_story, &|story| {
        let (from, job, epoch) = (w(3), J1, E2);
        let (request, reason) = (RefusedRequest::Renew, RefuseReason::Expired);
        replace(story, B_RENEWED, Event::Refused { from, job, epoch, request, reason, batch: None });
        B_RENEWED
    });
    case(Rule::CompleteAnswer, requeue_story, &|story| {
        let (from, job, epoch) = (w(3), J1, E2);
        let (request, reason) = (RefusedRequest::Complete, RefuseReason::StaleEpoch);
        replace(story, B_COMPLETED, Event::Refused { from, job, epoch, request, reason, batch: None });
        B_COMPLETED
    });
    case(Rule::CompleteAnswer, requeue_story, &|story| {
        // A completed job is not queued: a refusal of a completion is a conflict of outputs (the
        // line does not carry the output, so that is all the rules can say of it).
        let (from, job, epoch) = (w(3), J1, E2);
        let (request, reason) = (RefusedRequest::Complete, RefuseReason::NotLeased);
        replace(story, B_ALREADY_COMPLETED, Event::Refused { from, job, epoch, request, reason, batch: None });
        B_ALREADY_COMPLETED
    });
    case(Rule::RequeueAnswer, requeue_story, &|story| {
        replace(story, B_REQUEUED, Event::Requeued { from: w(1), job: J1, epoch: E1, attempts: 0, batch: None });
        B_REQUEUED
    });
    case(Rule::RequeueAnswer, dead_letter_story, &|story| {
        // Out of attempts, a requeue dead-letters the job.
        let line = story.entries.len();
        replace(story, line, Event::Requeued { from: r(1), job: J1, epoch: E2, attempts: 1, batch: Some(batch(1, 0)) });
        line
    });
    case(Rule::ReleaseAnswer, release_story, &|story| {
        // A release undoes the grant: the attempt is not counted.
        replace(story, R_RELEASED, Event::Released { from: w(1), job: J1, epoch: E1, attempts: 1 });
        R_RELEASED
    });
    case(Rule::GrantOldestQueued, release_story, &|story| {
        // The released job went back to the head of the queue, before j2, which arrived later.
        story.entries.truncate(R_RELEASED);
        story.at(20).arrived_with_backlog(J2, 2);
        story.at(30).granted(J2, E1, w(2), 1_030)
    });
    case(Rule::DeadLetterAnswer, refused_story, &|story| {
        // At the worker's word the job ends with the attempts it spent, not attempts_max.
        let mut event = story.entries[P_DEAD_LETTERED - 1].event.clone();
        if let Event::Terminal { attempts, .. } = &mut event {
            *attempts = Some(3);
        }
        replace(story, P_DEAD_LETTERED, event);
        P_DEAD_LETTERED
    });
    case(Rule::WorkerDeadLettersOnlyAfterPermanentFailure, refused_story, &|story| {
        // A failure that may pass is a requeue's reason, not a dead-letter's.
        let mut event = story.entries[P_REFUSED - 1].event.clone();
        if let Event::DependencyFailed { permanent, .. } = &mut event {
            *permanent = false;
        }
        replace(story, P_REFUSED, event);
        P_DEAD_LETTERED
    });
    case(Rule::WorkerReleasesOnlyWhatItDeclined, release_story, &|story| {
        erase(story, R_DECLINED);
        R_RELEASED
    });
    case(Rule::QuarantineAnswer, conflict_story, &|story| {
        let (from, job, epoch, batch) = (r(1), J1, E3, Some(batch(1, 0)));
        let (request, reason) = (RefusedRequest::Quarantine, RefuseReason::AlreadyTerminal);
        replace(story, C_QUARANTINED, Event::Refused { from, job, epoch, request, reason, batch });
        C_QUARANTINED
    });
    case(Rule::ListingAnswer, conflict_story, &|story| {
        replace(story, C_LISTED, Event::Listed { reclaimer: r(1), batch: batch(1, 0), leases: vec![] });
        C_LISTED
    });
    case(Rule::ListingAnswer, abandon_story, &|story| {
        // batch_max 2: of three expired leases, a listing shows the first two, not one alone.
        let leases = [J1].map(|job| Listing { job, epoch: E1, expires_at_us: 1_010 }).to_vec();
        replace(story, D_LISTED, Event::Listed { reclaimer: r(1), batch: batch(1, 0), leases });
        D_LISTED
    });
    case(Rule::FenceAnswer, conflict_story, &|story| {
        replace(story, C_LOST_RACE, Event::LostRace { job: J1, expected: E2, current: E2, batch: batch(2, 0) });
        C_LOST_RACE
    });
    case(Rule::FenceAnswer, conflict_story, &|story| {
        // Listed as expired, and a lease that expired cannot be renewed: it is still expired.
        story.entries.truncate(C_RECLAIMED - 1);
        story.at(1_050).not_expired(J1, E2, 1_050, batch(1, 0))
    });
    case(Rule::FenceAnswer, conflict_story, &|story| {
        // A reclaim whose new lease does not run a whole ttl from the fence.
        let event = Event::Reclaimed {
            job: J1,
            epoch: E2,
            expires_at_us: 1_050,
            new_epoch: E3,
            new_expires_at_us: 1_060,
            reclaimer: r(1),
            batch: batch(1, 0),
        };
        replace(story, C_RECLAIMED, event);
        C_RECLAIMED
    });
    // The ledger's answers.
    case(Rule::LedgerLookupAnswer, conflict_story, &|story| {
        let (op, batch) = (OpId::for_job(J1), None);
        let event = Event::LookedUp { from: w(3), job: J1, op, epoch: E2, found: Some(O7), rival: None, batch };
        replace(story, C_LOOKED_UP, event);
        C_LOOKED_UP
    });
    case(Rule::LedgerApplyAnswer, conflict_story, &|story| {
        // A different output at the fence is a conflict; only a write below the fence is fenced.
        let (op, reason) = (OpId::for_job(J1), EffectRejectReason::Fenced);
        let event = Event::EffectRejected { from: Node::Ledger, job: J1, op, epoch: E1, output: O8, reason };
        replace(story, C_RIVAL, event);
        C_RIVAL
    });
    case(Rule::DependencyAnswersAnExecute, requeue_story, &|story| {
        story.entries.truncate(B_GRANTED_J2);
        story.at(55).dependency_failed(J2, E1)
    });
    // The decisions of workers.
    case(Rule::WorkerActsOnItsGrant, requeue_story, &|story| {
        story.entries.truncate(B_GRANTED_J2);
        story.at(55).executing(w(4), J2, E1)
    });
    case(Rule::WorkerActsOnItsGrant, requeue_story, &|story| {
        story.entries.truncate(B_GRANTED_J2);
        let event = Event::Renewed { from: w(1), job: J2, epoch: E1, expires_at_us: 1_055 };
        story.at(55).push(Node::Table, event)
    });
    case(Rule::WorkerExecutesFreshOrAfterEmptyLookup, requeue_story, &|story| {
        erase(story, B_LOOKED_UP);
        B_EXECUTING_AGAIN
    });
    case(Rule::WorkerAdoptsWhatItFound, conflict_story, &|story| {
        story.entries.truncate(C_LOOKED_UP);
        story.at(60).adopted(w(3), J1, O7, E2)
    });
    case(Rule::WorkerCompletesWithItsOutput, conflict_story, &|story| {
        // o7 is the ledger's, but w3 neither produced it nor adopted it.
        story.entries.truncate(C_LOOKED_UP);
        story.at(60).completed(J1, O7, E2, None)
    });
    case(Rule::WorkerRequeuesOnlyAfterDependencyFailed, requeue_story, &|story| {
        story.entries.truncate(B_GRANTED_AGAIN);
        story.at(65).requeued(J1, E2, 2, None)
    });
    case(Rule::WorkerAbandonsForItsReason, abandon_story, &|story| {
        erase(story, D_FENCED_APPLY);
        D_FENCED_APPLY + 1
    });
    case(Rule::WorkerAbandonsForItsReason, abandon_story, &|story| {
        erase(story, D_RENEW_REFUSED);
        D_RENEW_REFUSED + 1
    });
    case(Rule::WorkerAbandonsForItsReason, conflict_story, &|story| {
        erase(story, C_LOOKED_UP);
        C_ABANDONED
    });
    case(Rule::WorkerAbandonsForItsReason, abandon_story, &|story| {
        story.entries.truncate(D_SELF_FENCED);
        story.at(1_000).abandoned(w(2), J1, E1, AbandonReason::SelfFenced)
    });
    case(Rule::WorkerStaysAwayAfterAbandon, abandon_story, &|story| {
        // The lease is still live by the table's clock: only the abandon forbids it.
        story.entries.truncate(D_SELF_FENCED);
        story.at(1_005).executing(w(1), J1, E1)
    });
    // The decisions of reclaimers.
    case(Rule::ReclaimerFencesWhatWasListed, abandon_story, &|story| {
        story.entries.truncate(D_LISTED);
        story.at(1_010).reclaimed(J3, E1, 1_010, E2, batch(1, 0))
    });
    case(Rule::ReclaimerLooksUpWhatItReclaimed, crash_after_effect_story, &|story| {
        story.entries.truncate(STORY_RECLAIMED);
        story.at(1_020).looked_up(J1, E2, Some(O7), None, Some(batch(1, 1)))
    });
    case(Rule::ReclaimerRequeuesOnlyOnEmptyLookup, crash_after_effect_story, &|story| {
        story.entries.truncate(STORY_LOOKED_UP);
        story.at(1_030).requeued(J1, E2, 1, Some(batch(1, 0)))
    });
    case(Rule::ReclaimerCompletesWithWhatItFound, crash_after_effect_story, &|story| {
        replace(story, STORY_ADOPTED, Event::Adopted { job: J1, op: OpId::for_job(J1), output: O8, epoch: E2 });
        STORY_ADOPTED
    });
    case(Rule::ReclaimerQuarantinesWhatItFound, conflict_story, &|story| {
        story.entries.truncate(C_CONFLICT_LOOKUP);
        story.at(1_070).quarantined(J1, E3, [O8, O7], Some(batch(1, 0)))
    });
    case(Rule::ReclaimerStopsAfterQuarantine, conflict_story, &|story| {
        story.entries.truncate(C_CONFLICT_LOOKUP);
        story.at(1_070).batch_stopped(batch(1, 0), J1, [O7, O8])
    });
    cases
}

// Proves every rule catches a deliberately broken story: each story, correct but for one line,
// is reported as conformance, by the rule it breaks, at that line, before any other invariant
// sees anything (or, for a rule another invariant shadows, by that invariant at that line, and
// by the rule when conformance judges alone). And every rule has such a story.
#[test]
fn each_rule_catches_its_broken_story() {
    let mut caught = BTreeSet::new();
    for (rule, story, line) in broken_stories() {
        match SHADOWED.iter().find(|(shadowed, _)| *shadowed == rule) {
            Some(&(_, first)) => {
                let violation = check_history(&story.entries).expect_err("a broken story");
                assert_eq!(violation.invariant, first, "{rule}: {violation}");
                assert_eq!(violation.lines.last(), Some(&line), "{rule}: {violation}");
                assert_rule_alone(&story, rule, line);
            }
            None => assert_rule(&story, rule, line),
        }
        caught.insert(rule);
    }
    let missing = Rule::ALL.into_iter().filter(|rule| !caught.contains(rule)).collect::<Vec<_>>();
    assert!(missing.is_empty(), "rules without a broken story: {missing:?}");
}

// Proves a retried copy of a request, answered by the table a second time, is no alarm: a
// listing answered twice with different leases (the reclaimer may act on either), and a
// reclaimer's completion answered again as idempotent.
#[test]
fn retried_copies_pass() {
    let mut story = History::new(2, 2);
    story.at(0).arrived(J1);
    story.at(0).arrived(J2);
    story.at(10).granted(J1, E1, w(1), 1_010);
    story.at(500).granted(J2, E1, w(2), 1_500);
    story.at(20).executing(w(1), J1, E1);
    story.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010)]);
    story.at(1_500).listed(batch(1, 0), &[(J1, E1, 1_010), (J2, E1, 1_500)]);
    story.at(1_500).reclaimed(J2, E1, 1_500, E2, batch(1, 0));
    story.at(1_510).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
    story.at(1_520).looked_up(J1, E2, None, None, Some(batch(1, 0)));
    story.at(1_520).looked_up(J1, E2, None, None, Some(batch(1, 0)));
    story.at(1_530).requeued(J1, E2, 1, Some(batch(1, 0)));
    story.at(1_540).refused_in(J1, E2, RefusedRequest::Requeue, RefuseReason::NotLeased, Some(batch(1, 0)));
    assert_eq!(conformance(&story.entries), Ok(()));
    assert!(check_history(&story.entries).is_ok(), "{:?}", check_history(&story.entries));
}

// Proves a request is granted a job once: a copy of w1's acquire, answered after w1 completed
// the job it got, gets nothing (`acquire_spent`) though j2 waits, and after the lease expired
// unused, too. Broken variants, each caught by `regrant_answer` at the copy's line: nothing while
// the grant still stands (the rules regrant it), and nothing naming a grant that was not w1's last.
#[test]
fn a_copy_of_an_acquire_whose_grant_is_spent_gets_nothing() {
    let story = |spent_at: u64, named: (JobId, Epoch)| {
        let mut story = History::new(2, 2);
        story.at(0).arrived(J1);
        story.at(0).arrived(J2);
        story.at(10).granted(J1, E1, w(1), 1_010);
        story.at(12).granted(J2, E1, w(2), 1_012);
        if spent_at < 40 {
            let line = story.at(spent_at).acquire_spent(w(1), named.0, named.1);
            return (story, line);
        }
        story.at(20).executing(w(1), J1, E1);
        story.at(30).applied(J1, E1, O7);
        story.at(40).completed(J1, O7, E1, None);
        let line = story.at(spent_at).acquire_spent(w(1), named.0, named.1);
        (story, line)
    };
    let (done, _) = story(50, (J1, E1));
    assert_eq!(conformance(&done.entries), Ok(()));
    // Expired unused, at its expiry: spent too (w2's lease of j2 is the only other).
    let mut expired = History::new(2, 2);
    expired.at(0).arrived(J1);
    expired.at(10).granted(J1, E1, w(1), 1_010);
    expired.at(1_010).acquire_spent(w(1), J1, E1);
    assert_eq!(conformance(&expired.entries), Ok(()));
    let (standing, line) = story(15, (J1, E1));
    assert_rule_alone(&standing, Rule::RegrantAnswer, line);
    let (not_last, line) = story(50, (J2, E1));
    assert_rule_alone(&not_last, Rule::RegrantAnswer, line);
}

// Proves a completion is fenced by the epoch only: a worker whose lease expired, and was not
// reclaimed, still completes; a renewal at that time is refused as expired.
#[test]
fn an_expired_lease_still_completes() {
    let mut story = History::new(2, 2);
    story.at(0).arrived(J1);
    story.at(10).granted(J1, E1, w(1), 1_010);
    story.at(20).executing(w(1), J1, E1);
    story.at(30).applied(J1, E1, O7);
    story.at(1_500).refused(J1, E1, RefusedRequest::Renew, RefuseReason::Expired);
    story.at(1_500).completed(J1, O7, E1, None);
    assert_eq!(conformance(&story.entries), Ok(()));
}

// A worker's process that shuts down hands back a grant it never ran (its `abandoned` `shutdown`,
// then a release), and the job runs as a first attempt again. Broken variant: the same release
// of a grant it had executed under would let the next grant skip the lookup and run the effect
// a second time, and is refused.
#[test]
fn a_shutdown_hands_back_only_a_grant_it_never_ran() {
    let story = |executed: bool| {
        let mut story = History::new(2, 2);
        story.at(0).arrived(J1);
        story.at(10).granted(J1, E1, w(1), 1_010);
        if executed {
            story.at(11).executing(w(1), J1, E1);
        }
        story.at(12).abandoned(w(1), J1, E1, AbandonReason::Shutdown);
        let released = story.at(14).released(J1, E1);
        story.at(40).granted(J1, E2, w(2), 1_040);
        story.at(50).executing(w(2), J1, E2);
        story.at(60).applied(J1, E2, O7);
        story.at(70).completed(J1, O7, E2, None);
        (story, released)
    };
    let (unstarted, _) = story(false);
    assert_eq!(conformance(&unstarted.entries), Ok(()));
    assert!(check_history(&unstarted.entries).is_ok(), "{:?}", check_history(&unstarted.entries));
    let (started, released) = story(true);
    let violation = conformance(&started.entries).unwrap_err();
    assert_eq!(Rule::of(&violation), Some(Rule::WorkerReleasesOnlyWhatItDeclined), "{violation}");
    assert_eq!(violation.lines.last(), Some(&released), "{violation}");
    assert!(violation.message.contains("after it had executed under it"), "{violation}");
}

// Proves that a runtime's buffered job, whose machine self-fenced while it waited for a handler
// (never started: no `executing` line), may be released, and that a release of a grant its
// worker never gave up is refused (broken variant: a runtime that hands back a buffered job it
// still holds, which would undo the attempt of a lease it goes on acting on).
#[test]
fn a_buffered_job_given_up_unrun_may_be_released() {
    let story = |gave_up: bool| {
        let mut story = History::new(2, 2);
        story.at(0).arrived(J1);
        story.at(10).granted(J1, E1, w(1), 1_010);
        if gave_up {
            story.at(900).abandoned(w(1), J1, E1, AbandonReason::SelfFenced);
        }
        let released = story.at(950).released(J1, E1);
        (story, released)
    };
    let (given_up, _) = story(true);
    assert_eq!(conformance(&given_up.entries), Ok(()));
    let (held, released) = story(false);
    let violation = conformance(&held.entries).unwrap_err();
    assert_eq!(Rule::of(&violation), Some(Rule::WorkerReleasesOnlyWhatItDeclined), "{violation}");
    assert_eq!(violation.lines.last(), Some(&released), "{violation}");
    assert!(violation.message.contains("a grant it had not given up"), "{violation}");
}
// Proves the rules give no answer to a request about a job the table never accepted (the
// table's misuse error), to an acquire by a reclaimer, nor to a quarantine naming one output
// twice: any line answering one is wrong.
#[test]
fn misuse_has_no_answer() {
    use super::spec::{Limits, Table, TableAnswer, TableRequest};
    let limits = Limits { batch_max: 1, capacity: 1, lease_ttl_us: TTL_US, attempts_max: 1 };
    let table = Table::default();
    let unknown = JobId(9);
    for request in [
        TableRequest::Reacquire { owner: w(1), job: unknown },
        TableRequest::Renew { job: unknown, epoch: E1 },
        TableRequest::Complete { job: unknown, epoch: E1, output: Some(O7) },
        TableRequest::Requeue { job: unknown, epoch: E1 },
        TableRequest::Quarantine { job: unknown, epoch: E1, identities: None },
        TableRequest::Fence { job: unknown, expected: E1, reclaimer: r(1) },
    ] {
        let (answer, _) = table.answer(&limits, 10, request);
        assert_eq!(answer, TableAnswer::Misuse("an unknown job"), "{request}");
    }
    let by_reclaimer = TableRequest::Acquire { owner: r(1) };
    assert_eq!(table.answer(&limits, 10, by_reclaimer).0, TableAnswer::Misuse("only workers acquire leases"));
    let mut table = Table::default();
    table.take(2, TableRequest::Enqueue { job: J1 }, &TableAnswer::Arrived { backlog: 1 });
    let granted = TableAnswer::Granted { job: J1, epoch: E1, expires_at_us: 1_010, attempt: 1 };
    table.take(3, TableRequest::Acquire { owner: w(1) }, &granted);
    let quarantine = TableRequest::Quarantine { job: J1, epoch: E1, identities: Some([O7, O7]) };
    assert!(matches!(table.answer(&limits, 20, quarantine).0, TableAnswer::Misuse(_)));
    let quarantine = TableRequest::Quarantine { job: J1, epoch: E1, identities: Some([O7, O8]) };
    assert_eq!(table.answer(&limits, 20, quarantine).0, TableAnswer::Quarantined);
}

// Proves a table that displaces a lease other than the one the reclaimer listed (a fence with no
// compare-and-set) is blamed on the table's answer, not on the reclaimer, which fenced what it
// was shown.
#[test]
fn a_fence_that_displaces_another_epoch_is_the_tables_fault() {
    let mut story = crash_after_effect_story();
    story.entries.truncate(STORY_LOOKED_UP);
    story.at(2_010).listed(batch(2, 0), &[(J1, E2, 2_010)]);
    story.at(2_020).listed(batch(3, 0), &[(J1, E2, 2_010)]);
    story.at(2_020).reclaimed(J1, E2, 2_010, E3, batch(2, 0));
    let fenced = story.at(3_020).reclaimed(J1, E3, 3_020, E4, batch(3, 0));
    let violation = conformance(&story.entries).unwrap_err();
    assert_eq!(Rule::of(&violation), Some(Rule::FenceAnswer), "{violation}");
    assert_eq!(violation.lines.last(), Some(&fenced));
}

// Proves a listing that disagrees points at the lines that set the leases either side shows.
#[test]
fn a_wrong_listing_points_at_its_leases() {
    let mut story = abandon_story();
    let leases = [J2, J3].map(|job| Listing { job, epoch: E1, expires_at_us: 1_010 }).to_vec();
    replace(&mut story, D_LISTED, Event::Listed { reclaimer: r(1), batch: batch(1, 0), leases });
    let violation = conformance(&story.entries).unwrap_err();
    assert_eq!(Rule::of(&violation), Some(Rule::ListingAnswer), "{violation}");
    let granted = |job| find(&story, |event| matches!(event, Event::Granted { job: j, .. } if *j == job));
    assert_eq!(violation.lines, vec![granted(J1), granted(J2), granted(J3), D_LISTED]);
}

// Proves nothing is judged before the `run` line gives the limits.
#[test]
fn nothing_is_judged_before_the_run_line() {
    let mut story = requeue_story();
    story.entries.remove(0);
    let mut checker = Conformance::default();
    for (index, entry) in story.entries.iter().enumerate() {
        assert_eq!(checker.check(index + 1, entry), Ok(()));
        checker.absorb(index + 1, entry);
    }
}

// Proves every rule has a distinct name that opens its messages and reads back with `Rule::of`,
// and that another invariant's violation names no rule.
#[test]
fn rule_names_read_back() {
    let names = Rule::ALL.map(Rule::name);
    assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len());
    for rule in Rule::ALL {
        assert_eq!(rule.to_string(), rule.name());
        assert!(rule.name().chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{rule}");
        let violation = Violation::at(Invariant::Conformance, None, &[], 1, format!("{rule}: what happened"));
        assert_eq!(Rule::of(&violation), Some(rule));
    }
    let other = Violation::at(Invariant::Fencing, None, &[], 1, format!("{}: no", Rule::RenewAnswer));
    assert_eq!(Rule::of(&other), None);
}

// Proves the correct stories keep passing after a JSONL round trip, and the broken ones keep
// their verdict: the checker reads only what the history contract carries.
#[test]
fn verdicts_survive_a_json_round_trip() {
    use lease_history::{parse_jsonl, to_jsonl};
    let correct = correct_stories().map(|(_, story)| story);
    let broken = broken_stories().into_iter().map(|(_, story, _)| story);
    for story in correct.into_iter().chain(broken) {
        let parsed = parse_jsonl(&to_jsonl(&story.entries)).expect("own output parses");
        assert_eq!(conformance(&parsed), conformance(&story.entries));
    }
}

// Proves a store's pruned history (`pruned_before_us` on its run line) relaxes only what counts
// jobs the history no longer holds: an arrival's backlog (as a lower bound) and a rejection for
// a full queue. Every correct story still passes pruned, and every broken story is still caught,
// by its rule, at its line (a known job's second arrival among them); a larger backlog, or a
// rejection where the history sees room, passes pruned and fails unpruned.
#[test]
fn a_pruned_history_relaxes_only_the_counts_over_pruned_jobs() {
    for (name, mut story) in correct_stories() {
        story.pruned(1_000_000);
        assert_eq!(conformance(&story.entries), Ok(()), "{name}, pruned");
    }
    for (rule, mut story, line) in broken_stories() {
        story.pruned(1_000_000);
        assert_rule_alone(&story, rule, line);
    }
    let counted = |backlog_or_rejected: Option<usize>, pruned: bool| {
        let mut story = History::new(2, 4);
        if pruned {
            story.pruned(1_000_000);
        }
        story.at(0).arrived(J1);
        let second = match backlog_or_rejected {
            Some(backlog) => story.at(0).arrived_with_backlog(J2, backlog),
            None => story.at(0).rejected(J2),
        };
        (conformance(&story.entries), second)
    };
    for (answer, holds_pruned) in [(Some(3), true), (None, true), (Some(1), false)] {
        let (pruned, line) = counted(answer, true);
        assert_eq!(pruned.is_ok(), holds_pruned, "{answer:?}, pruned: {pruned:?}");
        let (unpruned, _) = counted(answer, false);
        let violation = unpruned.expect_err("unpruned, the count is exact");
        assert_eq!((Rule::of(&violation), violation.lines.last()), (Some(Rule::ArrivalAnswer), Some(&line)));
    }
}
