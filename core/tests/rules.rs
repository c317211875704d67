//! One test per protocol rule of `lease-core`, as ../shared/DESIGN.md states them.
//!
//! Every test builds the smallest world that shows its rule: a table, a ledger, or one state
//! machine driven by hand (its requests answered with hand-written or real replies). Nothing here
//! plants a bug; `Bugs::NONE` is the correct protocol with or without the `planted-bugs` feature.

use lease_core::{
    Abandon, Acquired, BatchId, Bugs, Completion, ConfigError, EffectLedger, Enqueued, Epoch, Execution, Fencing,
    Grant, JobId, Lease, LeaseTable, Lookup, OpId, Outcome, OutputId, Owner, Quarantine, ReclaimAction, ReclaimReply,
    ReclaimRequest, Reclaimer, ReclaimerConfig, ReclaimerId, Refusal, Rejection, Release, Renewal, RequestId, Requeue,
    Span, TableConfig, TableError, Terminal, Time, Worker, WorkerAction, WorkerConfig, WorkerId, WorkerReply,
    WorkerRequest,
};
use lease_core::{Apply, Outcome::Completed};
// (Outcome::Completed is imported bare because the terminal outcome is named in nearly every test.)
use std::collections::BTreeMap;

const TTL: Span = Span(100);
const W1: WorkerId = WorkerId(1);
const W2: WorkerId = WorkerId(2);
const R1: ReclaimerId = ReclaimerId(1);
const R2: ReclaimerId = ReclaimerId(2);

fn config() -> TableConfig {
    TableConfig { capacity: 3, lease_ttl: TTL, batch_max: 2, attempts_max: 3 }
}

fn table_with(config: TableConfig) -> LeaseTable {
    LeaseTable::new(config).expect("a valid table config")
}

fn table() -> LeaseTable {
    table_with(config())
}

fn job(n: u64) -> JobId {
    JobId(n)
}

fn op(n: u64) -> OpId {
    OpId::for_job(JobId(n))
}

fn out(n: u64) -> OutputId {
    OutputId(n)
}

fn t(us: u64) -> Time {
    Time(us)
}

fn enqueue(table: &mut LeaseTable, now: Time, n: u64) {
    let enqueued = table.enqueue(now, job(n)).unwrap();
    assert!(matches!(enqueued, Enqueued::Accepted { .. }), "job {n} not accepted: {enqueued:?}");
}

fn grant(table: &mut LeaseTable, now: Time, owner: WorkerId) -> Grant {
    match table.acquire(now, owner).unwrap() {
        Acquired::Granted(grant) => grant,
        other => panic!("no fresh grant at {now}: {other:?}"),
    }
}

/// Enqueues job `n` and grants it to `owner` at `now`; the queue must hold nothing older.
fn leased(table: &mut LeaseTable, now: Time, n: u64, owner: WorkerId) -> Lease {
    enqueue(table, now, n);
    let lease = grant(table, now, owner).lease;
    assert_eq!(lease.job, job(n));
    lease
}

fn reclaim(table: &mut LeaseTable, now: Time, lease: Lease, reclaimer: ReclaimerId) -> Lease {
    match table.fence(now, lease.job, lease.epoch, reclaimer, now).unwrap() {
        Fencing::Won { expired, lease: ours } => {
            assert_eq!(expired, lease);
            ours
        }
        other => panic!("fence of {lease:?} at {now} did not win: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Enqueue

#[test]
fn enqueueing_a_known_job_is_a_duplicate_and_adds_no_second_job() {
    // Proves idempotent enqueue: the second arrival of a job id changes neither backlog nor queue.
    let mut table = table();
    assert_eq!(table.enqueue(t(0), job(1)).unwrap(), Enqueued::Accepted { backlog: 1 });
    assert_eq!(table.enqueue(t(1), job(1)).unwrap(), Enqueued::Duplicate);
    assert_eq!(table.backlog(), 1);
    let lease = grant(&mut table, t(2), W1).lease;
    assert_eq!(lease.job, job(1));
    // Still a duplicate while leased, and there is no second copy left to acquire.
    assert_eq!(table.enqueue(t(3), job(1)).unwrap(), Enqueued::Duplicate);
    assert_eq!(table.acquire(t(4), W2).unwrap(), Acquired::Empty);
    // And still a duplicate once terminal: a finished job never runs again.
    assert!(matches!(table.complete(t(5), job(1), lease.epoch, out(7)).unwrap(), Completion::Completed(_)));
    assert_eq!(table.enqueue(t(6), job(1)).unwrap(), Enqueued::Duplicate);
    assert_eq!(table.acquire(t(7), W2).unwrap(), Acquired::Empty);
    assert_eq!(table.backlog(), 0);
}

#[test]
fn an_arrival_past_capacity_is_rejected_and_the_backlog_never_exceeds_capacity() {
    // Proves the bounded queue: with capacity 3, arrivals 4 and 5 are rejected with the capacity.
    let mut table = table();
    for n in 1..=3 {
        assert_eq!(table.enqueue(t(n), job(n)).unwrap(), Enqueued::Accepted { backlog: n as usize });
    }
    for n in 4..=5 {
        let rejected = table.enqueue(t(n), job(n)).unwrap();
        assert_eq!(rejected, Enqueued::Rejected(Rejection::QueueFull { capacity: 3 }));
        assert_eq!(table.backlog(), 3);
    }
    // Leased jobs still count: taking one out of the queue makes no room.
    let _ = grant(&mut table, t(6), W1);
    assert_eq!(table.enqueue(t(7), job(6)).unwrap(), Enqueued::Rejected(Rejection::QueueFull { capacity: 3 }));
    // A rejected job is not known: it was never accepted.
    assert_eq!(table.epoch(job(4)), None);
    assert_eq!(table.renew(t(8), job(4), Epoch(0)), Err(TableError::UnknownJob(job(4))));
}

#[test]
fn the_backlog_drops_when_jobs_reach_terminal_outcomes_so_new_arrivals_are_accepted_again() {
    // Proves that every terminal outcome (completed, dead-lettered, quarantined) frees a slot.
    let mut table = table_with(TableConfig { attempts_max: 1, ..config() });
    for n in 1..=3 {
        enqueue(&mut table, t(0), n);
    }
    let first = grant(&mut table, t(1), W1).lease;
    let second = grant(&mut table, t(1), W1).lease;
    let third = grant(&mut table, t(1), W1).lease;
    assert_eq!(table.enqueue(t(2), job(4)).unwrap(), Enqueued::Rejected(Rejection::QueueFull { capacity: 3 }));

    assert!(matches!(table.complete(t(3), first.job, first.epoch, out(1)).unwrap(), Completion::Completed(_)));
    assert_eq!(table.backlog(), 2);
    assert_eq!(table.enqueue(t(4), job(4)).unwrap(), Enqueued::Accepted { backlog: 3 });

    assert!(matches!(table.requeue(t(5), second.job, second.epoch).unwrap(), Requeue::DeadLettered(_)));
    assert_eq!(table.backlog(), 2);
    assert_eq!(table.enqueue(t(6), job(5)).unwrap(), Enqueued::Accepted { backlog: 3 });

    let quarantined = table.quarantine(t(7), third.job, third.epoch, out(1), out(2)).unwrap();
    assert!(matches!(quarantined, Quarantine::Quarantined(_)));
    assert_eq!(table.backlog(), 2);
    assert_eq!(table.enqueue(t(8), job(6)).unwrap(), Enqueued::Accepted { backlog: 3 });
}

// ---------------------------------------------------------------------------------------------
// Acquire

#[test]
fn acquire_grants_a_strictly_higher_epoch_on_every_grant_and_expires_one_ttl_after_now() {
    // Proves grants raise the job's epoch (1, then 2 after a requeue) and set expires_at = now + ttl.
    let mut table = table();
    enqueue(&mut table, t(0), 1);
    let first = grant(&mut table, t(10), W1).lease;
    assert_eq!(first, Lease { job: job(1), owner: Owner::Worker(W1), epoch: Epoch(1), expires_at: t(110) });
    assert_eq!(table.lease(job(1)), Some(first));
    assert!(matches!(table.requeue(t(20), job(1), first.epoch).unwrap(), Requeue::Requeued { attempts: 1 }));
    let second = grant(&mut table, t(35), W2).lease;
    assert_eq!(second, Lease { job: job(1), owner: Owner::Worker(W2), epoch: Epoch(2), expires_at: t(135) });
    assert!(second.epoch > first.epoch);
    assert_eq!(table.epoch(job(1)), Some(Epoch(2)));
}

#[test]
fn acquire_grants_the_oldest_queued_job_first() {
    // Proves FIFO order: jobs come out in arrival order, not id order, and a requeue goes last.
    let mut table = table();
    for n in [9, 4, 7] {
        enqueue(&mut table, t(0), n);
    }
    let nine = grant(&mut table, t(1), W1).lease;
    assert_eq!(nine.job, job(9));
    assert!(matches!(table.requeue(t(2), nine.job, nine.epoch).unwrap(), Requeue::Requeued { .. }));
    let order: Vec<JobId> = (0..3).map(|_| grant(&mut table, t(3), W1).lease.job).collect();
    assert_eq!(order, vec![job(4), job(7), job(9)]);
}

#[test]
fn acquire_on_an_empty_queue_is_empty() {
    // Proves an empty queue answers Empty, also when every known job is leased.
    let mut table = table();
    assert_eq!(table.acquire(t(0), W1).unwrap(), Acquired::Empty);
    enqueue(&mut table, t(0), 1);
    let _ = grant(&mut table, t(1), W1);
    assert_eq!(table.acquire(t(2), W2).unwrap(), Acquired::Empty);
}

#[test]
fn the_attempt_counts_worker_grants_and_not_reclaims() {
    // Proves attempt is 1 on the first grant, and a reclaim plus requeue does not count a grant.
    let mut table = table();
    enqueue(&mut table, t(0), 1);
    let first = grant(&mut table, t(0), W1);
    assert_eq!(first.attempt, 1);
    let ours = reclaim(&mut table, t(100), first.lease, R1);
    assert_eq!(table.requeue(t(101), job(1), ours.epoch).unwrap(), Requeue::Requeued { attempts: 1 });
    let second = grant(&mut table, t(102), W2);
    assert_eq!(second.attempt, 2);
    assert_eq!(second.lease.epoch, Epoch(3));
}

// ---------------------------------------------------------------------------------------------
// Acquire by request: a retried acquire is answered with the grant it already had

fn acquire_for(table: &mut LeaseTable, now: Time, owner: WorkerId, request: u64) -> Acquired {
    table.acquire_for(now, owner, RequestId(request)).unwrap()
}

#[test]
fn a_retried_acquire_whose_grant_stands_gets_the_same_grant_and_no_second_job() {
    // Proves idempotent acquire: worker 1's request 7 is granted job 1; its answer is lost, and
    // the copy sent again under id 7 gets the same lease (same job, epoch, attempt) as a regrant,
    // renewals included, while job 2 stays queued and the epoch and attempts do not move.
    let mut table = table();
    enqueue(&mut table, t(0), 1);
    enqueue(&mut table, t(0), 2);
    let Acquired::Granted(first) = acquire_for(&mut table, t(10), W1, 7) else { panic!("no grant") };
    assert_eq!(first.lease, Lease { job: job(1), owner: Owner::Worker(W1), epoch: Epoch(1), expires_at: t(110) });
    assert_eq!(acquire_for(&mut table, t(30), W1, 7), Acquired::Regranted(first));
    let renewed = Renewal::Renewed { epoch: Epoch(1), expires_at: t(140) };
    assert_eq!(table.renew(t(40), job(1), Epoch(1)).unwrap(), renewed);
    let again = Grant { lease: Lease { expires_at: t(140), ..first.lease }, attempt: 1 };
    assert_eq!(acquire_for(&mut table, t(139), W1, 7), Acquired::Regranted(again));
    assert_eq!(table.epoch(job(1)), Some(Epoch(1)));
    assert_eq!(table.lease(job(1)), Some(again.lease));
    // Job 2 was never taken: the next fresh acquire gets it, as attempt 1 under epoch 1.
    let Acquired::Granted(second) = acquire_for(&mut table, t(139), W2, 7) else { panic!("no grant") };
    assert_eq!((second.lease.job, second.lease.epoch, second.attempt), (job(2), Epoch(1), 1));
}

#[test]
fn a_new_request_from_the_same_worker_is_a_fresh_acquire() {
    // Proves the memory is by request, not by worker: request 8 of worker 1, after request 7 was
    // granted job 1, gets job 2; and then a late copy of request 7 is a fresh acquire too (the
    // table remembers the last grant only), finding the queue empty.
    let mut table = table();
    enqueue(&mut table, t(0), 1);
    enqueue(&mut table, t(0), 2);
    let Acquired::Granted(first) = acquire_for(&mut table, t(1), W1, 7) else { panic!("no grant") };
    let Acquired::Granted(second) = acquire_for(&mut table, t(2), W1, 8) else { panic!("no grant") };
    assert_eq!((first.lease.job, second.lease.job), (job(1), job(2)));
    assert_eq!(acquire_for(&mut table, t(3), W1, 7), Acquired::Empty);
    assert_eq!(acquire_for(&mut table, t(4), W1, 8), Acquired::Regranted(second));
}

#[test]
fn the_same_request_id_from_another_worker_is_a_fresh_acquire() {
    // Proves the memory is per worker: worker 2's request 7 is not worker 1's request 7.
    let mut table = table();
    enqueue(&mut table, t(0), 1);
    enqueue(&mut table, t(0), 2);
    let Acquired::Granted(first) = acquire_for(&mut table, t(1), W1, 7) else { panic!("no grant") };
    let Acquired::Granted(other) = acquire_for(&mut table, t(2), W2, 7) else { panic!("no grant") };
    assert_eq!((first.lease.job, other.lease.job), (job(1), job(2)));
    assert_eq!(other.lease.owner, Owner::Worker(W2));
}

#[test]
fn a_copy_of_an_acquire_whose_grant_no_longer_stands_gets_nothing() {
    // Proves a regrant only of a lease that is still the worker's, under the grant's epoch, and
    // unexpired, and that a copy of the request once its grant is spent takes no second job,
    // though one is queued: after the lease expired (not yet reclaimed), after it was reclaimed,
    // requeued and granted again, and after the job was completed. A new request is a fresh
    // acquire, and gets the queued job.
    let mut table = table();
    enqueue(&mut table, t(0), 1);
    let Acquired::Granted(first) = acquire_for(&mut table, t(0), W1, 7) else { panic!("no grant") };
    enqueue(&mut table, t(1), 2);
    assert_eq!(acquire_for(&mut table, t(99), W1, 7), Acquired::Regranted(first));
    // Expired by the table's clock: not a grant anyone can use any more, and job 2 stays queued.
    let spent = Acquired::Spent { job: job(1), epoch: Epoch(1) };
    assert_eq!(acquire_for(&mut table, t(100), W1, 7), spent);
    assert_eq!(table.lease(job(1)), Some(first.lease));
    assert_eq!(table.lease(job(2)), None);
    // Reclaimed and requeued behind job 2, which worker 2's fresh request gets: worker 1's copy
    // is still spent, and job 1 stays queued.
    let ours = reclaim(&mut table, t(100), first.lease, R1);
    assert!(matches!(table.requeue(t(101), job(1), ours.epoch).unwrap(), Requeue::Requeued { .. }));
    let Acquired::Granted(second) = acquire_for(&mut table, t(102), W2, 1) else { panic!("no grant") };
    assert_eq!((second.lease.job, second.lease.epoch), (job(2), Epoch(1)));
    assert_eq!(acquire_for(&mut table, t(103), W1, 7), spent);
    // Completed: worker 2's copy of request 1 gets nothing, not job 1; its next request gets job 1.
    assert!(matches!(table.complete(t(104), job(2), Epoch(1), out(5)).unwrap(), Completion::Completed(_)));
    assert_eq!(acquire_for(&mut table, t(105), W2, 1), Acquired::Spent { job: job(2), epoch: Epoch(1) });
    assert_eq!(table.lease(job(1)), None);
    let Acquired::Granted(third) = acquire_for(&mut table, t(106), W2, 2) else { panic!("no grant") };
    assert_eq!((third.lease.job, third.lease.epoch), (job(1), Epoch(3)));
}

#[test]
fn a_retried_acquire_answered_empty_is_a_fresh_acquire() {
    // Proves an Empty answer is not remembered: a copy of the same request after a job arrived
    // is granted it.
    let mut table = table();
    assert_eq!(acquire_for(&mut table, t(0), W1, 7), Acquired::Empty);
    enqueue(&mut table, t(1), 1);
    assert!(matches!(acquire_for(&mut table, t(2), W1, 7), Acquired::Granted(Grant { attempt: 1, .. })));
}

// ---------------------------------------------------------------------------------------------
// Renew

#[test]
fn renew_extends_only_the_current_epoch() {
    // Proves a renewal carrying any epoch but the current one is refused as stale, changing nothing.
    let mut table = table();
    let lease = leased(&mut table, t(0), 1, W1);
    for stale in [Epoch(0), Epoch(2)] {
        let refused = table.renew(t(10), job(1), stale).unwrap();
        assert_eq!(refused, Renewal::Refused(Refusal::StaleEpoch { current: Epoch(1) }));
    }
    assert_eq!(table.lease(job(1)), Some(lease));
    assert_eq!(table.renew(t(10), job(1), Epoch(1)).unwrap(), Renewal::Renewed { epoch: Epoch(1), expires_at: t(110) });
    assert_eq!(table.lease(job(1)).unwrap().expires_at, t(110));
}

#[test]
fn renew_is_accepted_one_microsecond_before_expiry_and_refused_at_it() {
    // Proves the renewal boundary: ok at expires_at - 1 (extending from now), refused at expires_at.
    let mut table = table();
    let lease = leased(&mut table, t(0), 1, W1);
    assert_eq!(lease.expires_at, t(100));
    let renewed = table.renew(t(99), job(1), lease.epoch).unwrap();
    assert_eq!(renewed, Renewal::Renewed { epoch: lease.epoch, expires_at: t(199) });
    let refused = table.renew(t(199), job(1), lease.epoch).unwrap();
    assert_eq!(refused, Renewal::Refused(Refusal::Expired { expires_at: t(199) }));
    assert_eq!(table.lease(job(1)).unwrap().expires_at, t(199));
}

#[test]
fn a_renewed_lease_cannot_be_reclaimed_at_its_old_expiry() {
    // Proves a renewal moves the reclaim boundary: at the old expiry, expired() omits it and
    // fencing it answers NotExpired with the new expiry; at the new expiry it is reclaimable.
    let mut table = table();
    let lease = leased(&mut table, t(0), 1, W1);
    let _ = table.renew(t(50), job(1), lease.epoch).unwrap();
    assert_eq!(table.expired(t(100), t(100)).unwrap(), vec![]);
    let fencing = table.fence(t(100), job(1), lease.epoch, R1, t(100)).unwrap();
    assert_eq!(fencing, Fencing::NotExpired { expires_at: t(150) });
    assert_eq!(table.epoch(job(1)), Some(lease.epoch));
    let renewed = Lease { expires_at: t(150), ..lease };
    assert_eq!(table.expired(t(150), t(150)).unwrap(), vec![renewed]);
    assert_eq!(reclaim(&mut table, t(150), renewed, R1).epoch, Epoch(2));
}

// ---------------------------------------------------------------------------------------------
// Reclaim

#[test]
fn a_lease_is_refused_for_reclaim_one_microsecond_before_expiry_and_allowed_at_it() {
    // Proves the table's clock decides expiry at exactly expires_at, whatever the reclaimer's
    // own clock (as_of) says.
    let mut table = table();
    let lease = leased(&mut table, t(0), 1, W1);
    assert_eq!(table.expired(t(99), t(10_000)).unwrap(), vec![]);
    let early = table.fence(t(99), job(1), lease.epoch, R1, t(10_000)).unwrap();
    assert_eq!(early, Fencing::NotExpired { expires_at: t(100) });
    assert_eq!(table.lease(job(1)), Some(lease));
    assert_eq!(table.expired(t(100), t(0)).unwrap(), vec![lease]);
    let on_time = table.fence(t(100), job(1), lease.epoch, R1, t(0)).unwrap();
    let ours = Lease { job: job(1), owner: Owner::Reclaimer(R1), epoch: Epoch(2), expires_at: t(200) };
    assert_eq!(on_time, Fencing::Won { expired: lease, lease: ours });
    assert_eq!(table.lease(job(1)), Some(ours));
}

#[test]
fn when_two_reclaimers_race_for_one_listed_lease_exactly_one_wins() {
    // Proves fencing is a compare-and-set: both list the lease, the first fence wins, the second
    // loses the race (a value, not an error) and the job keeps the winner's lease.
    let mut table = table();
    let lease = leased(&mut table, t(0), 1, W1);
    let seen_by_r1 = table.expired(t(100), t(100)).unwrap();
    let seen_by_r2 = table.expired(t(100), t(100)).unwrap();
    assert_eq!(seen_by_r1, vec![lease]);
    assert_eq!(seen_by_r2, vec![lease]);
    let first = table.fence(t(101), job(1), seen_by_r1[0].epoch, R1, t(101)).unwrap();
    let second = table.fence(t(101), job(1), seen_by_r2[0].epoch, R2, t(101)).unwrap();
    let Fencing::Won { lease: winner, .. } = first else { panic!("the first fence lost: {first:?}") };
    assert_eq!(second, Fencing::LostRace { current: Epoch(2) });
    assert_eq!(table.lease(job(1)), Some(winner));
    assert_eq!(winner.owner, Owner::Reclaimer(R1));
}

#[test]
fn epochs_strictly_increase_on_every_reclaim() {
    // Proves each reclaim of a reclaimed lease takes the next epoch, and an old epoch loses.
    let mut table = table();
    let mut lease = leased(&mut table, t(0), 1, W1);
    let mut now = t(0);
    for expected in 2..=5 {
        now = lease.expires_at;
        let next = reclaim(&mut table, now, lease, ReclaimerId(10 + expected as u32));
        assert_eq!(next.epoch, Epoch(expected));
        assert!(next.epoch > lease.epoch);
        lease = next;
    }
    let stale = table.fence(lease.expires_at, job(1), Epoch(4), R1, now).unwrap();
    assert_eq!(stale, Fencing::LostRace { current: Epoch(5) });
}

#[test]
fn after_a_reclaim_the_stale_worker_is_refused_at_the_table_and_the_ledger() {
    // Proves fencing end to end: once the reclaimer fenced and looked up under epoch 2, the worker
    // still on epoch 1 cannot complete, renew, requeue, or apply its effect.
    let mut table = table();
    let mut ledger = EffectLedger::new();
    let stale = leased(&mut table, t(0), 1, W1);
    let ours = reclaim(&mut table, t(100), stale, R1);
    assert_eq!(ledger.lookup(op(1), ours.epoch), Lookup::Empty);

    let refusal = Refusal::StaleEpoch { current: ours.epoch };
    assert_eq!(table.complete(t(101), job(1), stale.epoch, out(7)).unwrap(), Completion::Refused(refusal));
    assert_eq!(table.renew(t(101), job(1), stale.epoch).unwrap(), Renewal::Refused(refusal));
    assert_eq!(table.requeue(t(101), job(1), stale.epoch).unwrap(), Requeue::Refused(refusal));
    assert_eq!(ledger.apply(op(1), stale.epoch, out(7)), Apply::Fenced { fence: ours.epoch });

    assert_eq!(table.lease(job(1)), Some(ours));
    assert_eq!(table.terminal(job(1)), None);
    assert_eq!(ledger.recorded(op(1)), None);
}

#[test]
fn a_crash_after_apply_is_adopted_by_the_reclaimer_and_not_repeated() {
    // Proves adoption: the worker applied, crashed before completing; the reclaimer's lookup under
    // the new epoch finds the output, completes with it, and the ledger records nothing new.
    let mut table = table();
    let mut ledger = EffectLedger::new();
    let lease = leased(&mut table, t(0), 1, W1);
    assert_eq!(ledger.apply(op(1), lease.epoch, out(7)), Apply::Applied);
    // The worker crashes here.
    let ours = reclaim(&mut table, t(100), lease, R1);
    assert_eq!(ledger.lookup(op(1), ours.epoch), Lookup::Recorded(out(7)));
    let completion = table.complete(t(101), job(1), ours.epoch, out(7)).unwrap();
    let terminal = Terminal { job: job(1), epoch: ours.epoch, outcome: Completed { output: out(7) } };
    assert_eq!(completion, Completion::Completed(terminal));
    assert_eq!(table.terminal(job(1)), Some(&terminal));
    assert_eq!(ledger.recorded(op(1)), Some(out(7)));
    assert_eq!(ledger.apply(op(1), ours.epoch, out(7)), Apply::AlreadyApplied);
    assert_eq!(ledger.recorded(op(1)), Some(out(7)));
}

// ---------------------------------------------------------------------------------------------
// Complete

#[test]
fn complete_is_accepted_only_for_the_current_epoch() {
    // Proves a completion with an older or a newer epoch is refused, and the current one is accepted.
    let mut table = table();
    let lease = leased(&mut table, t(0), 1, W1);
    for wrong in [Epoch(0), Epoch(2)] {
        let refused = table.complete(t(1), job(1), wrong, out(7)).unwrap();
        assert_eq!(refused, Completion::Refused(Refusal::StaleEpoch { current: lease.epoch }));
        assert_eq!(table.terminal(job(1)), None);
    }
    let done = table.complete(t(2), job(1), lease.epoch, out(7)).unwrap();
    let terminal = Terminal { job: job(1), epoch: lease.epoch, outcome: Completed { output: out(7) } };
    assert_eq!(done, Completion::Completed(terminal));
    assert_eq!(table.lease(job(1)), None);
    assert_eq!(table.backlog(), 0);
}

#[test]
fn completing_again_with_the_same_output_is_idempotent_and_records_no_second_terminal() {
    // Proves a repeated completion (a retried request) succeeds without a second terminal outcome.
    let mut table = table();
    let lease = leased(&mut table, t(0), 1, W1);
    let Completion::Completed(first) = table.complete(t(1), job(1), lease.epoch, out(7)).unwrap() else {
        panic!("not completed");
    };
    let backlog = table.backlog();
    for at in [2, 3] {
        assert_eq!(table.complete(t(at), job(1), lease.epoch, out(7)).unwrap(), Completion::AlreadyCompleted);
    }
    assert_eq!(table.terminal(job(1)), Some(&first));
    assert_eq!(table.backlog(), backlog);
}

#[test]
fn completing_with_a_different_output_is_a_conflict_and_changes_nothing() {
    // Proves a second, different output for a completed job is reported and never recorded.
    let mut table = table();
    let lease = leased(&mut table, t(0), 1, W1);
    let _ = table.complete(t(1), job(1), lease.epoch, out(7)).unwrap();
    let backlog = table.backlog();
    let conflict = table.complete(t(2), job(1), lease.epoch, out(8)).unwrap();
    assert_eq!(conflict, Completion::Conflict { recorded: out(7), offered: out(8) });
    let terminal = Terminal { job: job(1), epoch: lease.epoch, outcome: Completed { output: out(7) } };
    assert_eq!(table.terminal(job(1)), Some(&terminal));
    assert_eq!(table.backlog(), backlog);
}

#[test]
fn completing_a_queued_job_is_refused() {
    // Proves a job that is not leased cannot be completed, neither fresh nor after a requeue.
    let mut table = table();
    enqueue(&mut table, t(0), 1);
    assert_eq!(table.complete(t(1), job(1), Epoch(0), out(7)).unwrap(), Completion::Refused(Refusal::NotLeased));
    let lease = grant(&mut table, t(2), W1).lease;
    let _ = table.requeue(t(3), job(1), lease.epoch).unwrap();
    let refused = table.complete(t(4), job(1), lease.epoch, out(7)).unwrap();
    assert_eq!(refused, Completion::Refused(Refusal::NotLeased));
    assert_eq!(table.terminal(job(1)), None);
    assert_eq!(table.backlog(), 1);
}

#[test]
fn completing_a_dead_lettered_job_is_refused_as_already_terminal() {
    // Proves a job that ended one way cannot be given a second, different terminal outcome.
    let mut table = table_with(TableConfig { attempts_max: 1, ..config() });
    let lease = leased(&mut table, t(0), 1, W1);
    let Requeue::DeadLettered(dead) = table.requeue(t(1), job(1), lease.epoch).unwrap() else {
        panic!("not dead-lettered");
    };
    let refused = table.complete(t(2), job(1), lease.epoch, out(7)).unwrap();
    assert_eq!(refused, Completion::Refused(Refusal::AlreadyTerminal));
    let quarantine = table.quarantine(t(3), job(1), lease.epoch, out(1), out(2)).unwrap();
    assert_eq!(quarantine, Quarantine::Refused(Refusal::AlreadyTerminal));
    assert_eq!(table.terminal(job(1)), Some(&dead));
}

// ---------------------------------------------------------------------------------------------
// Requeue, quarantine

#[test]
fn requeue_counts_attempts_and_dead_letters_after_attempts_max() {
    // Proves attempts 1 and 2 requeue, and the requeue after the third grant dead-letters with 3.
    let mut table = table();
    enqueue(&mut table, t(0), 1);
    for attempt in 1..=2 {
        let grant = grant(&mut table, t(attempt), W1);
        assert_eq!(grant.attempt, attempt as u32);
        let requeued = table.requeue(t(attempt), job(1), grant.lease.epoch).unwrap();
        assert_eq!(requeued, Requeue::Requeued { attempts: attempt as u32 });
    }
    let last = grant(&mut table, t(3), W1);
    assert_eq!(last.attempt, 3);
    let dead = table.requeue(t(4), job(1), last.lease.epoch).unwrap();
    let terminal = Terminal { job: job(1), epoch: Epoch(3), outcome: Outcome::DeadLettered { attempts: 3 } };
    assert_eq!(dead, Requeue::DeadLettered(terminal));
    assert_eq!(table.terminal(job(1)), Some(&terminal));
    assert_eq!(table.acquire(t(5), W1).unwrap(), Acquired::Empty);
    assert_eq!(table.backlog(), 0);
}

#[test]
fn dead_letter_ends_a_leased_job_at_once_with_the_attempts_it_spent() {
    // Proves a dead-letter (a worker's, after its dependency refused the job for good): only for
    // the current epoch of a leased job; the job ends after its first attempt of three, not its
    // last; a stale or repeated dead-letter, or one of a queued job, is refused.
    let mut table = table();
    enqueue(&mut table, t(0), 1);
    let first = grant(&mut table, t(1), W1);
    assert_eq!(table.requeue(t(2), job(1), first.lease.epoch).unwrap(), Requeue::Requeued { attempts: 1 });
    assert_eq!(table.dead_letter(t(3), job(1), first.lease.epoch).unwrap(), Requeue::Refused(Refusal::NotLeased));
    let second = grant(&mut table, t(4), W1);
    assert_eq!(
        table.dead_letter(t(5), job(1), first.lease.epoch).unwrap(),
        Requeue::Refused(Refusal::StaleEpoch { current: second.lease.epoch })
    );
    let ended = table.dead_letter(t(6), job(1), second.lease.epoch).unwrap();
    let terminal = Terminal { job: job(1), epoch: second.lease.epoch, outcome: Outcome::DeadLettered { attempts: 2 } };
    assert_eq!(ended, Requeue::DeadLettered(terminal));
    assert_eq!(table.terminal(job(1)), Some(&terminal));
    assert_eq!(
        table.dead_letter(t(7), job(1), second.lease.epoch).unwrap(),
        Requeue::Refused(Refusal::AlreadyTerminal)
    );
    assert_eq!((table.backlog(), table.acquire(t(8), W1).unwrap()), (0, Acquired::Empty));
}

#[test]
fn release_undoes_a_grant_and_puts_the_job_back_at_the_head_of_the_queue() {
    // Proves a release: only for the current epoch of a leased job; the grant's attempt is not
    // counted (the next grant is attempt 1 again), the job is granted before jobs queued after
    // it, a release never dead-letters, and a second release of the same grant is refused.
    let mut table = table_with(TableConfig { attempts_max: 1, ..config() });
    enqueue(&mut table, t(0), 1);
    let first = grant(&mut table, t(1), W1);
    enqueue(&mut table, t(2), 2);
    assert_eq!(
        table.release(t(3), job(1), Epoch(9)).unwrap(),
        Release::Refused(Refusal::StaleEpoch { current: first.lease.epoch })
    );
    assert_eq!(table.release(t(3), job(1), first.lease.epoch).unwrap(), Release::Released { attempts: 0 });
    assert_eq!(table.release(t(4), job(1), first.lease.epoch).unwrap(), Release::Refused(Refusal::NotLeased));
    let again = grant(&mut table, t(5), W2);
    assert_eq!((again.lease.job, again.attempt), (job(1), 1), "j1 first, and its first attempt again");
    assert!(again.lease.epoch > first.lease.epoch);
    assert_eq!(table.release(t(6), job(1), again.lease.epoch).unwrap(), Release::Released { attempts: 0 });
    assert_eq!(table.terminal(job(1)), None, "a release never dead-letters");
    assert_eq!(table.backlog(), 2);
}

#[test]
fn quarantine_records_both_outputs_as_the_terminal_outcome() {
    // Proves quarantine ends the job with the recorded and the rival output, only for the current epoch.
    let mut table = table();
    let lease = leased(&mut table, t(0), 1, W1);
    let stale = table.quarantine(t(1), job(1), Epoch(0), out(1), out(2)).unwrap();
    assert_eq!(stale, Quarantine::Refused(Refusal::StaleEpoch { current: lease.epoch }));
    let quarantined = table.quarantine(t(2), job(1), lease.epoch, out(1), out(2)).unwrap();
    let outcome = Outcome::Quarantined { recorded: out(1), rival: out(2) };
    let terminal = Terminal { job: job(1), epoch: lease.epoch, outcome };
    assert_eq!(quarantined, Quarantine::Quarantined(terminal));
    assert_eq!(table.terminal(job(1)), Some(&terminal));
    assert_eq!(table.lease(job(1)), None);
    assert_eq!(table.backlog(), 0);
}

// ---------------------------------------------------------------------------------------------
// Listing expired leases

#[test]
fn expired_lists_at_most_batch_max_leases_earliest_expiry_first_and_only_expired_ones() {
    // Proves the listing is bounded (batch_max 2 of 3 expired), ordered by expiry (not job id),
    // and leaves out the lease that has not expired by the table's clock.
    let mut table = table_with(TableConfig { capacity: 4, ..config() });
    for n in [9, 5, 7, 3] {
        enqueue(&mut table, t(0), n);
    }
    let leases: Vec<Lease> = [0, 10, 20, 30].map(|at| grant(&mut table, t(at), W1).lease).to_vec();
    assert_eq!(leases.iter().map(|lease| lease.job).collect::<Vec<_>>(), vec![job(9), job(5), job(7), job(3)]);

    let batch = table.expired(t(125), t(125)).unwrap();
    assert_eq!(batch, vec![leases[0], leases[1]]);
    for lease in &batch {
        let _ = reclaim(&mut table, t(125), *lease, R1);
    }
    assert_eq!(table.expired(t(125), t(125)).unwrap(), vec![leases[2]]);
    assert_eq!(table.poll_timeout(), Some(t(120)));
}

// ---------------------------------------------------------------------------------------------
// Misuse is a typed error

#[test]
fn time_going_backwards_is_a_typed_error_on_every_table_call() {
    // Proves each table entry point refuses a `now` before the latest one, and changes nothing.
    let mut table = table();
    let lease = leased(&mut table, t(50), 1, W1);
    let back = Err(TableError::TimeWentBackwards { last: t(50), now: t(49) });
    assert_eq!(table.enqueue(t(49), job(2)).map(|_| ()), back);
    assert_eq!(table.acquire(t(49), W1).map(|_| ()), back);
    assert_eq!(table.renew(t(49), job(1), lease.epoch).map(|_| ()), back);
    assert_eq!(table.complete(t(49), job(1), lease.epoch, out(1)).map(|_| ()), back);
    assert_eq!(table.requeue(t(49), job(1), lease.epoch).map(|_| ()), back);
    assert_eq!(table.expired(t(49), t(49)).map(|_| ()), back);
    assert_eq!(table.fence(t(49), job(1), lease.epoch, R1, t(49)).map(|_| ()), back);
    assert_eq!(table.quarantine(t(49), job(1), lease.epoch, out(1), out(2)).map(|_| ()), back);
    assert_eq!(table.lease(job(1)), Some(lease));
    assert_eq!(table.epoch(job(2)), None);
    assert_eq!(table.backlog(), 1);
}

#[test]
fn an_unknown_job_is_a_typed_error() {
    // Proves every call naming a job that was never enqueued is a misuse, not a protocol outcome.
    let mut table = table();
    let unknown = Err(TableError::UnknownJob(job(99)));
    assert_eq!(table.renew(t(0), job(99), Epoch(1)).map(|_| ()), unknown);
    assert_eq!(table.complete(t(0), job(99), Epoch(1), out(1)).map(|_| ()), unknown);
    assert_eq!(table.requeue(t(0), job(99), Epoch(1)).map(|_| ()), unknown);
    assert_eq!(table.fence(t(0), job(99), Epoch(1), R1, t(0)).map(|_| ()), unknown);
    assert_eq!(table.quarantine(t(0), job(99), Epoch(1), out(1), out(2)).map(|_| ()), unknown);
    assert_eq!(table.backlog(), 0);
}

#[test]
fn a_zero_limit_is_a_config_error() {
    // Proves LeaseTable::new refuses each limit that cannot work, naming it.
    let zero = |config: TableConfig| LeaseTable::new(config).map(|_| ()).unwrap_err();
    assert_eq!(zero(TableConfig { capacity: 0, ..config() }), ConfigError::ZeroCapacity);
    assert_eq!(zero(TableConfig { lease_ttl: Span::ZERO, ..config() }), ConfigError::ZeroLeaseTtl);
    assert_eq!(zero(TableConfig { batch_max: 0, ..config() }), ConfigError::ZeroBatchMax);
    assert_eq!(zero(TableConfig { attempts_max: 0, ..config() }), ConfigError::ZeroAttemptsMax);
    assert!(LeaseTable::new(config()).is_ok());
}

#[test]
fn unworkable_worker_timing_is_a_config_error() {
    // Proves Worker::new refuses timing that leaves no room to act or to heartbeat.
    let bad = |config: WorkerConfig| Worker::new(W1, config, Bugs::NONE, t(0)).map(|_| ()).unwrap_err();
    let ok = worker_config();
    assert_eq!(bad(WorkerConfig { lease_ttl: Span::ZERO, ..ok }), ConfigError::ZeroLeaseTtl);
    let timing = [
        WorkerConfig { drift_margin: ok.lease_ttl, ..ok },
        WorkerConfig { heartbeat_every: Span::ZERO, ..ok },
        WorkerConfig { heartbeat_every: Span(ok.lease_ttl.0 - ok.drift_margin.0), ..ok },
        WorkerConfig { request_timeout: Span::ZERO, ..ok },
        WorkerConfig { idle_backoff: Span::ZERO, ..ok },
    ];
    for config in timing {
        assert!(matches!(bad(config), ConfigError::WorkerTiming(_)), "{config:?} was accepted");
    }
    let tight = WorkerConfig { heartbeat_every: Span(ok.lease_ttl.0 - ok.drift_margin.0 - 1), ..ok };
    assert!(Worker::new(W1, tight, Bugs::NONE, t(0)).is_ok());
}

#[test]
fn a_hold_or_round_trip_that_outlives_a_grant_is_a_config_error() {
    // Proves WorkerConfig::validate refuses timing in which a grant could arrive dead: with ttl
    // 1000 and margin 200 a grant is usable for 800 after the worker asked, so a hold plus a round
    // trip (acquire_wait + request_timeout) of 800 or more is refused, naming all three, and 799 is
    // accepted. The table's longest hold is what is left of the 800 after the round trip.
    let ok = worker_config();
    let unusable = |acquire_wait: u64, request_timeout: u64| ConfigError::UnusableGrant {
        acquire_wait: Span(acquire_wait),
        request_timeout: Span(request_timeout),
        usable: Span(800),
    };
    for (wait, round_trip) in [(100, 700), (0, 800), (790, 10), (5_000, 100)] {
        let config = WorkerConfig { acquire_wait: Span(wait), request_timeout: Span(round_trip), ..ok };
        assert_eq!(config.validate(), Err(unusable(wait, round_trip)));
        let refused = Worker::new(W1, config, Bugs::NONE, t(0)).map(|_| ()).unwrap_err();
        assert_eq!(refused, unusable(wait, round_trip));
    }
    let edge = WorkerConfig { acquire_wait: Span(99), request_timeout: Span(700), ..ok };
    assert_eq!(edge.validate(), Ok(()));
    assert_eq!(edge.grant_usable_for(), Span(800));
    assert_eq!(edge.acquire_hold_max(), Span(100));
    assert!(edge.acquire_wait < edge.acquire_hold_max());
}

#[test]
fn unworkable_reclaimer_timing_is_a_config_error() {
    // Proves Reclaimer::new refuses a zero scan interval or request timeout.
    let bad = |config: ReclaimerConfig| Reclaimer::new(R1, config, Bugs::NONE, t(0)).map(|_| ()).unwrap_err();
    let ok = reclaimer_config();
    for config in
        [ReclaimerConfig { scan_every: Span::ZERO, ..ok }, ReclaimerConfig { request_timeout: Span::ZERO, ..ok }]
    {
        assert!(matches!(bad(config), ConfigError::ReclaimerTiming(_)), "{config:?} was accepted");
    }
    assert!(Reclaimer::new(R1, ReclaimerConfig { retries_max: 0, ..ok }, Bugs::NONE, t(0)).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Effect ledger

#[test]
fn ledger_lookup_raises_the_fence_and_never_lowers_it() {
    // Proves lookup(op, epoch) raises that operation's fence to epoch, and only that operation's.
    let mut ledger = EffectLedger::new();
    assert_eq!(ledger.fence(op(1)), Epoch(0));
    assert_eq!(ledger.lookup(op(1), Epoch(3)), Lookup::Empty);
    assert_eq!(ledger.fence(op(1)), Epoch(3));
    assert_eq!(ledger.lookup(op(1), Epoch(2)), Lookup::Empty);
    assert_eq!(ledger.fence(op(1)), Epoch(3));
    assert_eq!(ledger.fence(op(2)), Epoch(0));
}

#[test]
fn ledger_apply_below_the_fence_is_fenced() {
    // Proves a stale writer is refused: after a lookup at epoch 2, an apply at epoch 1 records nothing.
    let mut ledger = EffectLedger::new();
    let _ = ledger.lookup(op(1), Epoch(2));
    assert_eq!(ledger.apply(op(1), Epoch(1), out(7)), Apply::Fenced { fence: Epoch(2) });
    assert_eq!(ledger.recorded(op(1)), None);
    assert_eq!(ledger.apply(op(1), Epoch(2), out(7)), Apply::Applied);
    assert_eq!(ledger.recorded(op(1)), Some(out(7)));
    // An apply raises the fence too.
    assert_eq!(ledger.apply(op(2), Epoch(5), out(9)), Apply::Applied);
    assert_eq!(ledger.apply(op(2), Epoch(4), out(9)), Apply::Fenced { fence: Epoch(5) });
}

#[test]
fn ledger_apply_of_the_same_output_is_already_applied() {
    // Proves an idempotent retry of the same effect is a no-op, whether by the same or a later epoch.
    let mut ledger = EffectLedger::new();
    assert_eq!(ledger.apply(op(1), Epoch(1), out(7)), Apply::Applied);
    assert_eq!(ledger.apply(op(1), Epoch(1), out(7)), Apply::AlreadyApplied);
    assert_eq!(ledger.apply(op(1), Epoch(2), out(7)), Apply::AlreadyApplied);
    assert_eq!(ledger.recorded(op(1)), Some(out(7)));
    assert_eq!(ledger.lookup(op(1), Epoch(2)), Lookup::Recorded(out(7)));
}

#[test]
fn ledger_apply_of_a_different_output_is_a_conflict_that_never_overwrites_and_lookup_reports_both() {
    // Proves at most one output per operation: a rival is refused, kept aside, and every later
    // lookup reports the conflict with both identities.
    let mut ledger = EffectLedger::new();
    assert_eq!(ledger.apply(op(1), Epoch(1), out(7)), Apply::Applied);
    assert_eq!(ledger.apply(op(1), Epoch(1), out(8)), Apply::Conflict { recorded: out(7) });
    assert_eq!(ledger.recorded(op(1)), Some(out(7)));
    assert_eq!(ledger.apply(op(1), Epoch(2), out(9)), Apply::Conflict { recorded: out(7) });
    assert_eq!(ledger.recorded(op(1)), Some(out(7)));
    for epoch in [Epoch(2), Epoch(3)] {
        assert_eq!(ledger.lookup(op(1), epoch), Lookup::Conflict { recorded: out(7), rival: out(8) });
    }
    assert_eq!(ledger.lookup(op(2), Epoch(1)), Lookup::Empty);
}

// ---------------------------------------------------------------------------------------------
// Worker state machine, driven by hand

fn worker_config() -> WorkerConfig {
    WorkerConfig {
        lease_ttl: Span(1_000),
        heartbeat_every: Span(300),
        drift_margin: Span(200),
        // A round trip well inside the 800 a grant is usable for, and long enough that no test
        // below sees a retry unless it asks for one.
        request_timeout: Span(700),
        idle_backoff: Span(50),
        acquire_wait: Span::ZERO,
    }
}

fn drain_worker(worker: &mut Worker) -> Vec<WorkerAction> {
    std::iter::from_fn(|| worker.poll()).collect()
}

/// The only action out must be one send; returns it.
fn one_send(actions: Vec<WorkerAction>) -> (RequestId, WorkerRequest) {
    match actions.as_slice() {
        [WorkerAction::Send(id, request)] => (*id, *request),
        other => panic!("expected exactly one send, got {other:?}"),
    }
}

fn lease_for(owner: WorkerId, epoch: u64, expires_at: Time) -> Lease {
    Lease { job: job(1), owner: Owner::Worker(owner), epoch: Epoch(epoch), expires_at }
}

fn granted(owner: WorkerId, epoch: u64, attempt: u32, expires_at: Time) -> WorkerReply {
    WorkerReply::Acquired(Acquired::Granted(Grant { lease: lease_for(owner, epoch, expires_at), attempt }))
}

/// A worker started at 0 with `config`, whose acquire (sent at 0) is granted job 1 at `at`.
/// Returns the worker and the request it sent next.
fn worker_holding(config: WorkerConfig, epoch: u64, attempt: u32, at: Time) -> (Worker, RequestId, WorkerRequest) {
    let mut worker = Worker::new(W1, config, Bugs::NONE, t(0)).unwrap();
    let (acquire, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::Acquire);
    worker.handle_reply(at, acquire, granted(W1, epoch, attempt, at + config.lease_ttl));
    let (id, request) = one_send(drain_worker(&mut worker));
    assert_eq!(worker.holding(), Some((job(1), Epoch(epoch))));
    (worker, id, request)
}

#[test]
fn a_worker_on_a_first_attempt_executes_without_lookup_and_completes() {
    // Proves the first-attempt path: grant, Execute (no Lookup), Complete with the applied output,
    // then back to acquiring.
    let (mut worker, execute, request) = worker_holding(worker_config(), 1, 1, t(5));
    assert_eq!(request, WorkerRequest::Execute { op: op(1), epoch: Epoch(1) });
    worker.handle_reply(
        t(10),
        execute,
        WorkerReply::Executed(Execution::Done { output: out(7), apply: Apply::Applied }),
    );
    let (complete, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::Complete { job: job(1), epoch: Epoch(1), output: out(7) });
    worker.handle_reply(t(12), complete, WorkerReply::Completed(Completion::AlreadyCompleted));
    assert_eq!(one_send(drain_worker(&mut worker)).1, WorkerRequest::Acquire);
    assert_eq!(worker.holding(), None);
}

#[test]
fn a_worker_on_a_later_attempt_looks_up_first_and_adopts_a_recorded_output() {
    // Proves adoption by a worker: on attempt 2 it looks up under its epoch, and a recorded output
    // is announced as Adopted and completed with, never executed again.
    let (mut worker, lookup, request) = worker_holding(worker_config(), 3, 2, t(5));
    assert_eq!(request, WorkerRequest::Lookup { op: op(1), epoch: Epoch(3) });
    worker.handle_reply(t(10), lookup, WorkerReply::Looked(Lookup::Recorded(out(7))));
    let actions = drain_worker(&mut worker);
    let adopted = WorkerAction::Adopted { job: job(1), op: op(1), output: out(7), epoch: Epoch(3) };
    assert_eq!(actions[0], adopted);
    assert!(matches!(
        actions[1..],
        [WorkerAction::Send(_, WorkerRequest::Complete { job: JobId(1), epoch: Epoch(3), output: OutputId(7) })]
    ));
    assert!(!actions.iter().any(|action| matches!(action, WorkerAction::Send(_, WorkerRequest::Execute { .. }))));
}

#[test]
fn a_worker_on_a_later_attempt_executes_when_the_ledger_is_empty() {
    // Proves the lookup is a gate, not a stop: an empty ledger sends the worker on to Execute.
    let (mut worker, lookup, request) = worker_holding(worker_config(), 2, 2, t(5));
    assert_eq!(request, WorkerRequest::Lookup { op: op(1), epoch: Epoch(2) });
    worker.handle_reply(t(10), lookup, WorkerReply::Looked(Lookup::Empty));
    assert_eq!(one_send(drain_worker(&mut worker)).1, WorkerRequest::Execute { op: op(1), epoch: Epoch(2) });
}

#[test]
fn a_worker_heartbeats_every_heartbeat_every_while_it_holds_a_lease() {
    // Proves heartbeats: Renew goes out heartbeat_every after the acquire was sent (where the
    // worker's estimate of the lease starts), and again heartbeat_every after that, carrying the
    // lease's epoch; poll_timeout names those times.
    let (mut worker, _execute, _) = worker_holding(worker_config(), 1, 1, t(5));
    assert_eq!(worker.poll_timeout(), t(300));
    worker.handle_timeout(t(299));
    assert_eq!(drain_worker(&mut worker), vec![]);
    worker.handle_timeout(t(300));
    let (renew, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::Renew { job: job(1), epoch: Epoch(1) });
    let renewed = Renewal::Renewed { epoch: Epoch(1), expires_at: t(1_301) };
    worker.handle_reply(t(301), renew, WorkerReply::Renewed(renewed));
    assert_eq!(drain_worker(&mut worker), vec![]);
    assert_eq!(worker.poll_timeout(), t(600));
    worker.handle_timeout(t(600));
    assert_eq!(one_send(drain_worker(&mut worker)).1, WorkerRequest::Renew { job: job(1), epoch: Epoch(1) });
}

// Proves the first heartbeat is counted from the acquire's send, not from the grant's arrival: a
// grant that arrives late (an acquire held at the table, a long poll) is renewed at once when a
// heartbeat is already due, well before the worker must self-fence (ttl 1000 less a margin of
// 200 from the acquire's send at 0: 800). Counted from the arrival (650 + 300 = 950), the renewal
// would leave after the self-fence: heartbeats_keep_leases caught that in slow-dependency seed 45.
#[test]
fn a_grant_that_arrives_late_is_renewed_before_its_self_fence() {
    let config = worker_config();
    let mut worker = Worker::new(W1, config, Bugs::NONE, t(0)).unwrap();
    let (acquire, _) = one_send(drain_worker(&mut worker));
    worker.handle_reply(t(650), acquire, granted(W1, 1, 1, t(650) + config.lease_ttl));
    let sent: Vec<WorkerRequest> = drain_worker(&mut worker)
        .into_iter()
        .filter_map(|action| match action {
            WorkerAction::Send(_, request) => Some(request),
            _ => None,
        })
        .collect();
    let (execute, renew) =
        (WorkerRequest::Execute { op: op(1), epoch: Epoch(1) }, WorkerRequest::Renew { job: job(1), epoch: Epoch(1) });
    assert_eq!(sent, vec![execute, renew], "the effect, and a heartbeat already due");
    assert_eq!(worker.act_until(), Some(t(800)));
}

#[test]
fn a_worker_self_fences_at_ttl_minus_margin_after_sending_the_acquire_and_then_sends_nothing_for_the_job() {
    // Proves self-fencing: acquire sent at 0, granted at 50; with ttl 1000 and margin 200 the worker
    // abandons at 800 (not 850), and afterwards neither renews, completes nor executes for the job,
    // even when late replies for it arrive.
    let (mut worker, execute, _) = worker_holding(worker_config(), 1, 1, t(50));
    worker.handle_timeout(t(799));
    let before = drain_worker(&mut worker);
    assert!(!before.iter().any(|action| matches!(action, WorkerAction::Abandoned { .. })), "{before:?}");
    let renew = before.iter().find_map(|action| match action {
        WorkerAction::Send(id, WorkerRequest::Renew { .. }) => Some(*id),
        _ => None,
    });
    let renew = renew.expect("a heartbeat was due before 799");
    assert_eq!(worker.poll_timeout(), t(800));
    worker.handle_timeout(t(800));
    let actions = drain_worker(&mut worker);
    let abandoned = WorkerAction::Abandoned { job: job(1), epoch: Epoch(1), why: Abandon::SelfFenced };
    assert_eq!(actions.first(), Some(&abandoned));
    assert_eq!(worker.holding(), None);

    // Late replies for the abandoned lease change nothing.
    let done = WorkerReply::Executed(Execution::Done { output: out(7), apply: Apply::Applied });
    worker.handle_reply(t(810), execute, done);
    let renewed = Renewal::Renewed { epoch: Epoch(1), expires_at: t(1_800) };
    worker.handle_reply(t(811), renew, WorkerReply::Renewed(renewed));
    let mut later = actions[1..].to_vec();
    later.extend(drain_worker(&mut worker));
    for at in (900..5_000).step_by(100) {
        worker.handle_timeout(t(at));
        later.extend(drain_worker(&mut worker));
    }
    assert_eq!(worker.holding(), None);
    for action in &later {
        assert!(matches!(action, WorkerAction::Send(_, WorkerRequest::Acquire)), "{action:?} after self-fencing");
    }
}

#[test]
fn a_successful_renewal_moves_the_self_fence_to_ttl_minus_margin_after_the_renewal_was_sent() {
    // Proves a renewal extends how long the worker acts, counted from when the Renew was sent.
    let (mut worker, _execute, _) = worker_holding(worker_config(), 1, 1, t(5));
    worker.handle_timeout(t(305));
    let (renew, _) = one_send(drain_worker(&mut worker));
    let renewed = Renewal::Renewed { epoch: Epoch(1), expires_at: t(1_400) };
    worker.handle_reply(t(400), renew, WorkerReply::Renewed(renewed));
    worker.handle_timeout(t(800));
    let actions = drain_worker(&mut worker);
    assert!(!actions.iter().any(|action| matches!(action, WorkerAction::Abandoned { .. })), "{actions:?}");
    // The Renew sent at 800 is left unanswered: 305 + 1000 - 200 = 1105 is the new limit.
    worker.handle_timeout(t(1_104));
    let actions = drain_worker(&mut worker);
    assert!(!actions.iter().any(|action| matches!(action, WorkerAction::Abandoned { .. })), "{actions:?}");
    worker.handle_timeout(t(1_105));
    let abandoned = WorkerAction::Abandoned { job: job(1), epoch: Epoch(1), why: Abandon::SelfFenced };
    assert_eq!(drain_worker(&mut worker).first(), Some(&abandoned));
}

#[test]
fn a_worker_resends_a_timed_out_request_under_the_same_id_and_takes_the_first_answer() {
    // Proves retries (worker.rs module doc, since f2545d6): an unanswered Execute goes out again
    // under the same id at its deadline; the first answer to either copy moves the worker on, and
    // the answer to the other copy, arriving later, is ignored.
    let config = WorkerConfig { request_timeout: Span(100), ..worker_config() };
    let (mut worker, first, request) = worker_holding(config, 1, 1, t(5));
    assert_eq!(worker.poll_timeout(), t(105));
    worker.handle_timeout(t(104));
    assert_eq!(drain_worker(&mut worker), vec![]);
    worker.handle_timeout(t(105));
    assert_eq!(one_send(drain_worker(&mut worker)), (first, request));
    assert_eq!(worker.poll_timeout(), t(205));

    let done = WorkerReply::Executed(Execution::Done { output: out(7), apply: Apply::Applied });
    worker.handle_reply(t(110), first, done);
    let (complete, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::Complete { job: job(1), epoch: Epoch(1), output: out(7) });
    assert_ne!(complete, first);

    let other_copy = WorkerReply::Executed(Execution::Done { output: out(7), apply: Apply::AlreadyApplied });
    worker.handle_reply(t(111), first, other_copy);
    assert_eq!(drain_worker(&mut worker), vec![]);
    assert_eq!(worker.poll_timeout(), t(210), "the Complete is still the request in flight");
}

#[test]
fn a_worker_ignores_a_late_reply_to_a_request_it_is_done_with() {
    // Proves a reply to an id that is no longer in flight changes nothing: no second Complete,
    // and after the job is done no action for it at all.
    let (mut worker, execute, _) = worker_holding(worker_config(), 1, 1, t(5));
    let done = WorkerReply::Executed(Execution::Done { output: out(7), apply: Apply::Applied });
    worker.handle_reply(t(10), execute, done);
    let (complete, _) = one_send(drain_worker(&mut worker));
    worker.handle_reply(t(11), execute, done);
    assert_eq!(drain_worker(&mut worker), vec![]);
    worker.handle_reply(t(12), complete, WorkerReply::Completed(Completion::AlreadyCompleted));
    let (acquire, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::Acquire);
    for late in [execute, complete] {
        worker.handle_reply(t(13), late, WorkerReply::Completed(Completion::AlreadyCompleted));
        assert_eq!(drain_worker(&mut worker), vec![]);
    }
    assert_eq!(worker.holding(), None);
    assert_ne!(acquire, complete);
}

#[test]
fn a_grant_answering_a_resent_acquire_self_fences_from_the_first_send() {
    // Proves the lease estimate stays conservative across retries: the acquire first went out at 0
    // and again at 100 under the same id; granted at 150, the worker still stops acting at
    // 0 + 1000 - 200 = 800.
    let config = WorkerConfig { request_timeout: Span(100), ..worker_config() };
    let mut worker = Worker::new(W1, config, Bugs::NONE, t(0)).unwrap();
    let (acquire, _) = one_send(drain_worker(&mut worker));
    worker.handle_timeout(t(100));
    assert_eq!(one_send(drain_worker(&mut worker)), (acquire, WorkerRequest::Acquire));
    worker.handle_reply(t(150), acquire, granted(W1, 1, 1, t(1_150)));
    assert!(matches!(one_send(drain_worker(&mut worker)).1, WorkerRequest::Execute { .. }));
    worker.handle_timeout(t(799));
    let before = drain_worker(&mut worker);
    assert!(!before.iter().any(|action| matches!(action, WorkerAction::Abandoned { .. })), "{before:?}");
    assert_eq!(worker.poll_timeout(), t(800));
    worker.handle_timeout(t(800));
    let abandoned = WorkerAction::Abandoned { job: job(1), epoch: Epoch(1), why: Abandon::SelfFenced };
    assert_eq!(drain_worker(&mut worker).first(), Some(&abandoned));
}

#[test]
fn a_worker_sends_an_acquire_again_under_its_id_only_while_a_grant_to_the_copy_could_be_used() {
    // Proves stale acquires are not kept alive: with ttl 1000 and margin 200 a grant is usable
    // until 800 after the first copy; the worker waits 350 for an answer (a hold of 250 plus a
    // round trip of 100). At 350 a grant to a new copy would come by 700: sent again under the
    // same id. At 700 it would come by 1050, too late: asked afresh under a new id instead, whose
    // grant counts from 700 (self-fence at 1500); the old id is no longer awaited, so a late grant
    // to it is not taken, but declined and handed back.
    let config = WorkerConfig { request_timeout: Span(100), acquire_wait: Span(250), ..worker_config() };
    let mut worker = Worker::new(W1, config, Bugs::NONE, t(0)).unwrap();
    let (first, _) = one_send(drain_worker(&mut worker));
    assert_eq!(worker.poll_timeout(), t(350));
    worker.handle_timeout(t(350));
    assert_eq!(one_send(drain_worker(&mut worker)), (first, WorkerRequest::Acquire));
    assert_eq!(worker.poll_timeout(), t(700));
    worker.handle_timeout(t(700));
    let (fresh, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::Acquire);
    assert_ne!(fresh, first);
    assert_eq!(worker.awaiting(first), None);
    assert_eq!(worker.awaiting(fresh), Some(WorkerRequest::Acquire));
    worker.handle_reply(t(710), first, granted(W1, 1, 1, t(1_100)));
    let declined = WorkerAction::Abandoned { job: job(1), epoch: Epoch(1), why: Abandon::Declined };
    let actions = drain_worker(&mut worker);
    assert_eq!(actions.first(), Some(&declined));
    assert!(matches!(actions.as_slice(), [_, WorkerAction::Send(_, WorkerRequest::Release { epoch: Epoch(1), .. })]));
    assert_eq!(worker.holding(), None);
    worker.handle_reply(t(720), fresh, granted(W1, 2, 1, t(1_720)));
    assert!(matches!(one_send(drain_worker(&mut worker)).1, WorkerRequest::Execute { .. }));
    assert_eq!(worker.poll_timeout(), t(820), "the execute's timeout comes first");
    worker.handle_timeout(t(1_499));
    let before = drain_worker(&mut worker);
    assert!(!before.iter().any(|action| matches!(action, WorkerAction::Abandoned { .. })), "{before:?}");
    worker.handle_timeout(t(1_500));
    let abandoned = WorkerAction::Abandoned { job: job(1), epoch: Epoch(2), why: Abandon::SelfFenced };
    assert_eq!(drain_worker(&mut worker).first(), Some(&abandoned));
}

#[test]
fn a_worker_sends_an_acquire_again_only_while_a_grant_to_the_copy_leaves_a_renewal_to_spare() {
    // Proves a copy goes out only if its grant could still be kept, not merely used: with ttl
    // 1000 and margin 200 a grant is usable until 800 after the first copy, and with a round trip
    // of 100 kept only if it comes by 700. The worker waits 360 for an answer (a hold of 260 plus
    // the round trip): at 360 a grant to a new copy would come by 720, in time to act on for 80
    // and too late to renew (swarm seed 700599 lost a lease so). So it asks afresh, under a new
    // id counted from 360; with the hold one less (359, by 718, still too late) likewise, and at
    // 350 (by 700) it sends the copy.
    for (hold, again) in [(260, false), (259, false), (250, true)] {
        let config = WorkerConfig { request_timeout: Span(100), acquire_wait: Span(hold), ..worker_config() };
        let mut worker = Worker::new(W1, config, Bugs::NONE, t(0)).unwrap();
        let (first, _) = one_send(drain_worker(&mut worker));
        let timeout = t(100 + hold);
        assert_eq!(worker.poll_timeout(), timeout);
        worker.handle_timeout(timeout);
        let (id, request) = one_send(drain_worker(&mut worker));
        assert_eq!(request, WorkerRequest::Acquire);
        assert_eq!(id == first, again, "hold {hold}: sent again under its id: {}", id == first);
        assert_eq!(worker.awaiting(first).is_some(), again, "hold {hold}");
    }
}

#[test]
fn a_worker_acts_on_a_regrant_as_on_the_grant_it_repeats() {
    // Proves a regrant (the answer to a retried acquire whose grant stands) is taken as the grant:
    // on attempt 2 the worker looks up under its epoch, and self-fences counting from the first
    // copy of the acquire.
    let config = WorkerConfig { request_timeout: Span(100), ..worker_config() };
    let mut worker = Worker::new(W1, config, Bugs::NONE, t(0)).unwrap();
    let (acquire, _) = one_send(drain_worker(&mut worker));
    worker.handle_timeout(t(100));
    assert_eq!(one_send(drain_worker(&mut worker)), (acquire, WorkerRequest::Acquire));
    let regrant = Grant { lease: lease_for(W1, 4, t(1_050)), attempt: 2 };
    worker.handle_reply(t(120), acquire, WorkerReply::Acquired(Acquired::Regranted(regrant)));
    assert_eq!(one_send(drain_worker(&mut worker)).1, WorkerRequest::Lookup { op: op(1), epoch: Epoch(4) });
    assert_eq!(worker.holding(), Some((job(1), Epoch(4))));
    worker.handle_timeout(t(800));
    let abandoned = WorkerAction::Abandoned { job: job(1), epoch: Epoch(4), why: Abandon::SelfFenced };
    assert_eq!(drain_worker(&mut worker).first(), Some(&abandoned));
}

#[test]
fn a_worker_says_which_request_a_reply_would_answer() {
    // Proves Worker::awaiting names the main request and the renewal in flight by their ids, and
    // nothing for an id the worker is done with: the harness strikes after an effect only on a
    // reply that answers the execute in flight.
    let (mut worker, execute, request) = worker_holding(worker_config(), 1, 1, t(5));
    assert_eq!(worker.awaiting(execute), Some(request));
    worker.handle_timeout(t(305));
    let (renew, renewal) = one_send(drain_worker(&mut worker));
    assert_eq!(worker.awaiting(renew), Some(renewal));
    assert_eq!(worker.awaiting(execute), Some(WorkerRequest::Execute { op: op(1), epoch: Epoch(1) }));
    let done = WorkerReply::Executed(Execution::Done { output: out(7), apply: Apply::Applied });
    worker.handle_reply(t(310), execute, done);
    let (complete, _) = one_send(drain_worker(&mut worker));
    assert_eq!(worker.awaiting(execute), None, "the execute was answered");
    assert_eq!(
        worker.awaiting(complete),
        Some(WorkerRequest::Complete { job: job(1), epoch: Epoch(1), output: out(7) })
    );
    assert_eq!(worker.awaiting(RequestId(999)), None);
}

#[test]
fn a_refused_renewal_abandons_the_lease_as_lost() {
    // Proves a worker whose renewal the table refused stops acting on the lease at once, and a
    // later answer to its effect does not lead to a completion.
    let (mut worker, execute, _) = worker_holding(worker_config(), 1, 1, t(5));
    worker.handle_timeout(t(305));
    let (renew, _) = one_send(drain_worker(&mut worker));
    let refused = Renewal::Refused(Refusal::StaleEpoch { current: Epoch(2) });
    worker.handle_reply(t(306), renew, WorkerReply::Renewed(refused));
    let actions = drain_worker(&mut worker);
    let lost = WorkerAction::Abandoned { job: job(1), epoch: Epoch(1), why: Abandon::LeaseLost };
    assert_eq!(actions.first(), Some(&lost));
    assert!(matches!(actions[1..], [WorkerAction::Send(_, WorkerRequest::Acquire)]), "{actions:?}");
    let done = WorkerReply::Executed(Execution::Done { output: out(7), apply: Apply::Applied });
    worker.handle_reply(t(307), execute, done);
    assert_eq!(drain_worker(&mut worker), vec![]);
}

#[test]
fn a_fenced_apply_abandons_the_lease_as_effect_fenced() {
    // Proves a worker whose effect the ledger fenced does not complete: a newer epoch owns the job.
    let (mut worker, execute, _) = worker_holding(worker_config(), 1, 1, t(5));
    let fenced = WorkerReply::Executed(Execution::Done { output: out(7), apply: Apply::Fenced { fence: Epoch(2) } });
    worker.handle_reply(t(10), execute, fenced);
    let actions = drain_worker(&mut worker);
    let abandoned = WorkerAction::Abandoned { job: job(1), epoch: Epoch(1), why: Abandon::EffectFenced };
    assert_eq!(actions.first(), Some(&abandoned));
    assert!(!actions.iter().any(|action| matches!(action, WorkerAction::Send(_, WorkerRequest::Complete { .. }))));
    assert_eq!(worker.holding(), None);
}

#[test]
fn a_dependency_failure_requeues_the_job() {
    // Proves a failed dependency call hands the job back under the lease's epoch, then acquires.
    let (mut worker, execute, _) = worker_holding(worker_config(), 1, 1, t(5));
    worker.handle_reply(t(10), execute, WorkerReply::Executed(Execution::Failed));
    let (requeue, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::Requeue { job: job(1), epoch: Epoch(1) });
    worker.handle_reply(t(12), requeue, WorkerReply::Requeued(Requeue::Requeued { attempts: 1 }));
    assert_eq!(one_send(drain_worker(&mut worker)).1, WorkerRequest::Acquire);
    assert_eq!(worker.holding(), None);
}

#[test]
fn a_permanent_dependency_failure_dead_letters_the_job() {
    // Proves a dependency's refusal for good ends the job under the lease's epoch, then acquires.
    let (mut worker, execute, _) = worker_holding(worker_config(), 1, 1, t(5));
    worker.handle_reply(t(10), execute, WorkerReply::Executed(Execution::Permanent));
    let (dead_letter, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::DeadLetter { job: job(1), epoch: Epoch(1) });
    let terminal = Terminal { job: job(1), epoch: Epoch(1), outcome: Outcome::DeadLettered { attempts: 1 } };
    worker.handle_reply(t(12), dead_letter, WorkerReply::Requeued(Requeue::DeadLettered(terminal)));
    assert_eq!(one_send(drain_worker(&mut worker)).1, WorkerRequest::Acquire);
    assert_eq!(worker.holding(), None);
}

#[test]
fn an_idle_worker_asks_again_after_idle_backoff() {
    // Proves an Empty answer makes the worker wait idle_backoff before the next Acquire.
    let mut worker = Worker::new(W1, worker_config(), Bugs::NONE, t(0)).unwrap();
    let (acquire, _) = one_send(drain_worker(&mut worker));
    worker.handle_reply(t(3), acquire, WorkerReply::Acquired(Acquired::Empty));
    assert_eq!(drain_worker(&mut worker), vec![]);
    assert_eq!(worker.poll_timeout(), t(53));
    worker.handle_timeout(t(52));
    assert_eq!(drain_worker(&mut worker), vec![]);
    worker.handle_timeout(t(53));
    assert_eq!(one_send(drain_worker(&mut worker)).1, WorkerRequest::Acquire);
}

#[test]
fn a_worker_whose_renewal_is_in_flight_past_the_next_heartbeat_still_has_a_future_timeout() {
    // Proves poll_timeout always moves forward after handle_timeout: a harness that sleeps until
    // poll_timeout must not spin at one instant. With request_timeout (500) longer than
    // heartbeat_every (300), which WorkerConfig::validate accepts, a Renew still in flight when the
    // next heartbeat falls due leaves poll_timeout at that past heartbeat time.
    let config = WorkerConfig { request_timeout: Span(500), ..worker_config() };
    let (mut worker, _execute, _) = worker_holding(config, 1, 1, t(5));
    let mut now = t(5);
    for _ in 0..8 {
        let next = worker.poll_timeout();
        assert!(next > now, "poll_timeout {next} is not after the last handled time {now}");
        now = next;
        worker.handle_timeout(now);
        let _ = drain_worker(&mut worker);
        if worker.holding().is_none() {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reclaimer state machine, driven by hand against a real table and ledger

fn reclaimer_config() -> ReclaimerConfig {
    ReclaimerConfig { scan_every: Span(50), request_timeout: Span(20), retries_max: 2, wave: 1 }
}

fn drain_reclaimer(reclaimer: &mut Reclaimer) -> Vec<ReclaimAction> {
    std::iter::from_fn(|| reclaimer.poll()).collect()
}

fn sends(actions: &[ReclaimAction]) -> Vec<(RequestId, ReclaimRequest)> {
    actions
        .iter()
        .filter_map(|action| match action {
            ReclaimAction::Send(id, request) => Some((*id, *request)),
            _ => None,
        })
        .collect()
}

fn only_reclaim_send(actions: &[ReclaimAction]) -> (RequestId, ReclaimRequest) {
    match actions {
        [ReclaimAction::Send(id, request)] => (*id, *request),
        other => panic!("expected exactly one send, got {other:?}"),
    }
}

/// Answers a reclaimer's request the way a faithful network to the real table and ledger would.
/// The fence goes to the reclaimer named in the request's batch.
fn answer(table: &mut LeaseTable, ledger: &mut EffectLedger, now: Time, request: ReclaimRequest) -> ReclaimReply {
    match request {
        ReclaimRequest::ListExpired { as_of, .. } => ReclaimReply::Listed(table.expired(now, as_of).unwrap()),
        ReclaimRequest::Fence { batch, lease, as_of } => {
            ReclaimReply::Fenced(table.fence(now, lease.job, lease.epoch, batch.reclaimer, as_of).unwrap())
        }
        ReclaimRequest::Lookup { op, epoch, .. } => ReclaimReply::Looked(ledger.lookup(op, epoch)),
        ReclaimRequest::Complete { job, epoch, output, .. } => {
            ReclaimReply::Completed(table.complete(now, job, epoch, output).unwrap())
        }
        ReclaimRequest::Requeue { job, epoch, .. } => ReclaimReply::Requeued(table.requeue(now, job, epoch).unwrap()),
        ReclaimRequest::Quarantine { job, epoch, recorded, rival, .. } => {
            ReclaimReply::Quarantined(table.quarantine(now, job, epoch, recorded, rival).unwrap())
        }
    }
}

/// Answers the one request the reclaimer just sent, at `now`, and returns what it did next.
fn step(
    reclaimer: &mut Reclaimer,
    table: &mut LeaseTable,
    ledger: &mut EffectLedger,
    now: Time,
    sent: (RequestId, ReclaimRequest),
) -> Vec<ReclaimAction> {
    let reply = answer(table, ledger, now, sent.1);
    reclaimer.handle_reply(now, sent.0, reply);
    drain_reclaimer(reclaimer)
}

#[test]
fn a_reclaimer_lists_fences_looks_up_under_the_new_epoch_and_adopts_a_recorded_output() {
    // Proves the adopt path: ListExpired, Fence the listed lease, Lookup with the won epoch,
    // Adopted, Complete with the recorded output; then it scans again at once.
    let mut table = table();
    let mut ledger = EffectLedger::new();
    let lease = leased(&mut table, t(0), 1, W1);
    assert_eq!(ledger.apply(op(1), lease.epoch, out(7)), Apply::Applied);
    let now = t(100);
    let mut reclaimer = Reclaimer::new(R1, reclaimer_config(), Bugs::NONE, now).unwrap();
    let list = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    let batch = BatchId { reclaimer: R1, seq: 0 };
    assert_eq!(list.1, ReclaimRequest::ListExpired { batch, as_of: now });

    let fence = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, list));
    assert_eq!(fence.1, ReclaimRequest::Fence { batch, lease, as_of: now });
    let lookup = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, fence));
    assert_eq!(lookup.1, ReclaimRequest::Lookup { batch, op: op(1), epoch: Epoch(2) });
    let actions = step(&mut reclaimer, &mut table, &mut ledger, now, lookup);
    let adopted = ReclaimAction::Adopted { batch, job: job(1), op: op(1), output: out(7), epoch: Epoch(2) };
    assert_eq!(actions[0], adopted);
    let complete = only_reclaim_send(&actions[1..]);
    assert_eq!(complete.1, ReclaimRequest::Complete { batch, job: job(1), epoch: Epoch(2), output: out(7) });
    let actions = step(&mut reclaimer, &mut table, &mut ledger, now, complete);
    let next = BatchId { reclaimer: R1, seq: 1 };
    assert_eq!(only_reclaim_send(&actions).1, ReclaimRequest::ListExpired { batch: next, as_of: now });

    let terminal = Terminal { job: job(1), epoch: Epoch(2), outcome: Completed { output: out(7) } };
    assert_eq!(table.terminal(job(1)), Some(&terminal));
    assert_eq!(ledger.recorded(op(1)), Some(out(7)));
}

#[test]
fn a_reclaimer_requeues_a_job_whose_operation_has_no_output() {
    // Proves the empty path: after the lookup finds nothing the reclaimer requeues under its epoch,
    // and the next worker grant is attempt 2, which must look the ledger up.
    let mut table = table();
    let mut ledger = EffectLedger::new();
    let _ = leased(&mut table, t(0), 1, W1);
    let now = t(100);
    let mut reclaimer = Reclaimer::new(R1, reclaimer_config(), Bugs::NONE, now).unwrap();
    let list = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    let fence = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, list));
    let lookup = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, fence));
    let requeue = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, lookup));
    let batch = BatchId { reclaimer: R1, seq: 0 };
    assert_eq!(requeue.1, ReclaimRequest::Requeue { batch, job: job(1), epoch: Epoch(2) });
    let _ = step(&mut reclaimer, &mut table, &mut ledger, now, requeue);
    assert_eq!(ledger.fence(op(1)), Epoch(2));
    let next = grant(&mut table, t(101), W2);
    assert_eq!((next.attempt, next.lease.epoch), (2, Epoch(3)));
}

#[test]
fn a_reclaimer_dead_letters_a_job_out_of_attempts() {
    // Proves the reclaimer's requeue of a job that used its last attempt ends it as dead-lettered.
    let mut table = table_with(TableConfig { attempts_max: 1, ..config() });
    let mut ledger = EffectLedger::new();
    let _ = leased(&mut table, t(0), 1, W1);
    let now = t(100);
    let mut reclaimer = Reclaimer::new(R1, reclaimer_config(), Bugs::NONE, now).unwrap();
    let mut sent = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    for _ in 0..3 {
        sent = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, sent));
    }
    assert!(matches!(sent.1, ReclaimRequest::Requeue { .. }), "{sent:?}");
    let _ = step(&mut reclaimer, &mut table, &mut ledger, now, sent);
    let terminal = Terminal { job: job(1), epoch: Epoch(2), outcome: Outcome::DeadLettered { attempts: 1 } };
    assert_eq!(table.terminal(job(1)), Some(&terminal));
}

#[test]
fn a_conflict_quarantines_the_job_and_stops_the_batch_touching_nothing_further() {
    // Proves the conflict rule: the first listed job has two outputs; the reclaimer quarantines it
    // with both, emits BatchStopped with the two untouched leases, and never fences them in this batch.
    let mut table = table_with(TableConfig { batch_max: 3, ..config() });
    let mut ledger = EffectLedger::new();
    let leases = [1, 2, 3].map(|n| leased(&mut table, t(n), n, W1));
    assert_eq!(ledger.apply(op(1), Epoch(1), out(7)), Apply::Applied);
    assert_eq!(ledger.apply(op(1), Epoch(1), out(8)), Apply::Conflict { recorded: out(7) });
    let now = t(200);
    let batch = BatchId { reclaimer: R1, seq: 0 };
    let mut reclaimer = Reclaimer::new(R1, reclaimer_config(), Bugs::NONE, now).unwrap();
    let list = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    let fence = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, list));
    let lookup = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, fence));
    let quarantine = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, lookup));
    let expected = ReclaimRequest::Quarantine { batch, job: job(1), epoch: Epoch(2), recorded: out(7), rival: out(8) };
    assert_eq!(quarantine.1, expected);
    let actions = step(&mut reclaimer, &mut table, &mut ledger, now, quarantine);
    let stopped = ReclaimAction::BatchStopped { batch, job: job(1), recorded: out(7), rival: out(8), untouched: 2 };
    assert_eq!(actions, vec![stopped]);

    let outcome = Outcome::Quarantined { recorded: out(7), rival: out(8) };
    assert_eq!(table.terminal(job(1)), Some(&Terminal { job: job(1), epoch: Epoch(2), outcome }));
    assert_eq!(table.lease(job(2)), Some(leases[1]));
    assert_eq!(table.lease(job(3)), Some(leases[2]));

    // Until the next scan it sends nothing; the next thing it sends is a new listing.
    let mut later = vec![];
    let mut at = now;
    while later.is_empty() {
        at = reclaimer.poll_timeout();
        assert!(at > now && at <= now + reclaimer_config().scan_every, "woke at {at}");
        reclaimer.handle_timeout(at);
        later = drain_reclaimer(&mut reclaimer);
    }
    let next = BatchId { reclaimer: R1, seq: 1 };
    assert_eq!(only_reclaim_send(&later).1, ReclaimRequest::ListExpired { batch: next, as_of: at });
}

#[test]
fn a_reclaimer_that_loses_a_race_reports_it_and_goes_on_to_the_next_lease() {
    // Proves two reclaimers listing the same two leases: the second loses the race on the first
    // lease (a LostRace action, no lookup), then fences the next lease of its batch.
    let mut table = table();
    let mut ledger = EffectLedger::new();
    let first = leased(&mut table, t(0), 1, W1);
    let second = leased(&mut table, t(1), 2, W2);
    let now = t(150);
    let mut r1 = Reclaimer::new(R1, reclaimer_config(), Bugs::NONE, now).unwrap();
    let mut r2 = Reclaimer::new(R2, reclaimer_config(), Bugs::NONE, now).unwrap();
    let list1 = only_reclaim_send(&drain_reclaimer(&mut r1));
    let list2 = only_reclaim_send(&drain_reclaimer(&mut r2));
    let fence1 = only_reclaim_send(&step(&mut r1, &mut table, &mut ledger, now, list1));
    let fence2 = only_reclaim_send(&step(&mut r2, &mut table, &mut ledger, now, list2));
    assert!(matches!(fence1.1, ReclaimRequest::Fence { lease, .. } if lease == first));
    assert!(matches!(fence2.1, ReclaimRequest::Fence { lease, .. } if lease == first));

    let lookup = only_reclaim_send(&step(&mut r1, &mut table, &mut ledger, now, fence1));
    assert!(matches!(lookup.1, ReclaimRequest::Lookup { epoch: Epoch(2), .. }));
    let actions = step(&mut r2, &mut table, &mut ledger, now, fence2);
    let batch = BatchId { reclaimer: R2, seq: 0 };
    assert_eq!(actions[0], ReclaimAction::LostRace { batch, job: job(1), expected: Epoch(1) });
    let next = only_reclaim_send(&actions[1..]);
    assert_eq!(next.1, ReclaimRequest::Fence { batch, lease: second, as_of: now });
    assert!(!sends(&actions).iter().any(|(_, request)| matches!(request, ReclaimRequest::Lookup { .. })));
}

#[test]
fn a_reclaimer_retries_a_request_up_to_retries_max_under_the_same_id_then_gives_up() {
    // Proves bounded retries (reclaimer.rs module doc, since f2545d6): an unanswered Fence goes out
    // 1 + retries_max times under one id, then the reclaimer reports GaveUp, drops the rest of the
    // batch and scans again only after scan_every; an answer to that id after it gave up is ignored.
    let mut table = table();
    let mut ledger = EffectLedger::new();
    let _ = leased(&mut table, t(0), 1, W1);
    let now = t(100);
    let mut reclaimer = Reclaimer::new(R1, reclaimer_config(), Bugs::NONE, now).unwrap();
    let list = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    let fence = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, list));
    for retry in 1..=2 {
        assert_eq!(reclaimer.poll_timeout(), now + Span(20 * retry));
        reclaimer.handle_timeout(now + Span(20 * retry) - Span(1));
        assert_eq!(drain_reclaimer(&mut reclaimer), vec![]);
        reclaimer.handle_timeout(now + Span(20 * retry));
        assert_eq!(only_reclaim_send(&drain_reclaimer(&mut reclaimer)), fence);
    }
    reclaimer.handle_timeout(now + Span(60));
    let actions = drain_reclaimer(&mut reclaimer);
    let batch = BatchId { reclaimer: R1, seq: 0 };
    assert_eq!(actions, vec![ReclaimAction::GaveUp { batch, job: job(1) }]);
    let rescan = now + Span(60) + reclaimer_config().scan_every;
    assert_eq!(reclaimer.poll_timeout(), rescan, "the next scan waits scan_every");

    let late = answer(&mut table, &mut ledger, now + Span(61), fence.1);
    assert!(matches!(late, ReclaimReply::Fenced(Fencing::Won { .. })));
    reclaimer.handle_reply(now + Span(61), fence.0, late);
    assert_eq!(drain_reclaimer(&mut reclaimer), vec![]);
    reclaimer.handle_timeout(rescan);
    let (list, request) = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    assert!(matches!(request, ReclaimRequest::ListExpired { .. }));
    assert_ne!(list, fence.0);
}

#[test]
fn a_reclaimer_takes_the_first_answer_to_any_copy_of_a_retried_fence() {
    // Proves why a retry keeps its id: the first copy of a Fence wins at the table, the retried
    // copy then loses the race to it; the reclaimer goes on with the win (Lookup under epoch 2)
    // and ignores the copy that lost, so it never reports a race against itself.
    let mut table = table();
    let mut ledger = EffectLedger::new();
    let _ = leased(&mut table, t(0), 1, W1);
    let now = t(100);
    let mut reclaimer = Reclaimer::new(R1, reclaimer_config(), Bugs::NONE, now).unwrap();
    let list = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    let fence = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, list));
    reclaimer.handle_timeout(now + Span(20));
    assert_eq!(only_reclaim_send(&drain_reclaimer(&mut reclaimer)), fence);
    let first_copy = answer(&mut table, &mut ledger, now + Span(21), fence.1);
    let second_copy = answer(&mut table, &mut ledger, now + Span(22), fence.1);
    assert_eq!(second_copy, ReclaimReply::Fenced(Fencing::LostRace { current: Epoch(2) }));

    reclaimer.handle_reply(now + Span(23), fence.0, first_copy);
    let lookup = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    let batch = BatchId { reclaimer: R1, seq: 0 };
    assert_eq!(lookup.1, ReclaimRequest::Lookup { batch, op: op(1), epoch: Epoch(2) });
    reclaimer.handle_reply(now + Span(24), fence.0, second_copy);
    assert_eq!(drain_reclaimer(&mut reclaimer), vec![]);
}

#[test]
fn a_reclaimer_says_which_request_a_reply_would_answer() {
    // Proves Reclaimer::awaiting names the request in flight by its id, and nothing for a request
    // already answered: the harness strikes mid-reclaim only on the fence the reclaimer awaits.
    let mut table = table();
    let mut ledger = EffectLedger::new();
    let _ = leased(&mut table, t(0), 1, W1);
    let now = t(100);
    let mut reclaimer = Reclaimer::new(R1, reclaimer_config(), Bugs::NONE, now).unwrap();
    let list = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    assert_eq!(reclaimer.awaiting(list.0), Some(list.1));
    let fence = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now, list));
    assert_eq!(reclaimer.awaiting(list.0), None);
    assert_eq!(reclaimer.awaiting(fence.0), Some(fence.1));
    let lookup = only_reclaim_send(&step(&mut reclaimer, &mut table, &mut ledger, now + Span(1), fence));
    assert_eq!(reclaimer.awaiting(fence.0), None, "a late copy of the won fence answers nothing");
    assert_eq!(reclaimer.awaiting(lookup.0), Some(lookup.1));
}

#[test]
fn a_reclaimer_that_finds_nothing_expired_scans_again_after_scan_every() {
    // Proves the idle scan loop: an empty listing means no batch, and the next listing waits scan_every.
    let mut reclaimer = Reclaimer::new(R1, reclaimer_config(), Bugs::NONE, t(0)).unwrap();
    let (list, _) = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    reclaimer.handle_reply(t(5), list, ReclaimReply::Listed(vec![]));
    assert_eq!(drain_reclaimer(&mut reclaimer), vec![]);
    assert_eq!(reclaimer.poll_timeout(), t(55));
    reclaimer.handle_timeout(t(54));
    assert_eq!(drain_reclaimer(&mut reclaimer), vec![]);
    reclaimer.handle_timeout(t(55));
    let next = BatchId { reclaimer: R1, seq: 1 };
    assert_eq!(
        only_reclaim_send(&drain_reclaimer(&mut reclaimer)).1,
        ReclaimRequest::ListExpired { batch: next, as_of: t(55) }
    );
}

// ---------------------------------------------------------------------------------------------
// End to end: one table, one ledger, two workers, one reclaimer, wired by hand

const LATENCY: Span = Span(1_000);
const STEPS_MAX: usize = 10_000;
const RUN_US_MAX: Time = Time(2_000_000);

/// A message in flight, delivered LATENCY after it was sent.
#[derive(Debug)]
enum Message {
    WorkerAsks { from: WorkerId, id: RequestId, request: WorkerRequest },
    WorkerHears { to: WorkerId, id: RequestId, reply: WorkerReply },
    ReclaimerAsks { id: RequestId, request: ReclaimRequest },
    ReclaimerHears { id: RequestId, reply: ReclaimReply },
}

/// A deterministic world: one clock for everyone, messages ordered by (delivery time, send order).
struct World {
    now: Time,
    table: LeaseTable,
    ledger: EffectLedger,
    workers: BTreeMap<WorkerId, Worker>,
    reclaimer: Reclaimer,
    inbox: BTreeMap<(Time, u64), Message>,
    sent_count: u64,
    /// The worker that crashes right after its first effect is applied, if any still.
    crash_after_apply: Option<WorkerId>,
    executions: Vec<(WorkerId, OpId, Epoch)>,
    applied: Vec<(OpId, Epoch, OutputId)>,
    terminals: Vec<Terminal>,
    adopted_by_reclaimer: Vec<(JobId, OutputId)>,
    /// Every won fence: when, and the lease it displaced.
    reclaims: Vec<(Time, Lease)>,
}

impl World {
    fn post(&mut self, message: Message) {
        self.inbox.insert((self.now + LATENCY, self.sent_count), message);
        self.sent_count += 1;
    }

    fn drain(&mut self) {
        let ids: Vec<WorkerId> = self.workers.keys().copied().collect();
        for from in ids {
            while let Some(action) = self.workers.get_mut(&from).and_then(Worker::poll) {
                if let WorkerAction::Send(id, request) = action {
                    self.post(Message::WorkerAsks { from, id, request });
                }
            }
        }
        while let Some(action) = self.reclaimer.poll() {
            match action {
                ReclaimAction::Send(id, request) => self.post(Message::ReclaimerAsks { id, request }),
                ReclaimAction::Adopted { job, output, .. } => self.adopted_by_reclaimer.push((job, output)),
                _ => {}
            }
        }
    }

    /// The dependency: a fresh output per (op, epoch), so a repeated effect shows as a conflict.
    fn execute(&mut self, from: WorkerId, op: OpId, epoch: Epoch) -> Execution {
        self.executions.push((from, op, epoch));
        let output = OutputId(op.job.0 * 1_000 + epoch.0);
        let apply = self.ledger.apply(op, epoch, output);
        if apply == Apply::Applied {
            self.applied.push((op, epoch, output));
        }
        Execution::Done { output, apply }
    }

    fn note(&mut self, terminal: Option<Terminal>) {
        self.terminals.extend(terminal);
    }

    fn serve_worker(&mut self, from: WorkerId, id: RequestId, request: WorkerRequest) {
        let now = self.now;
        let reply = match request {
            WorkerRequest::Acquire => WorkerReply::Acquired(self.table.acquire_for(now, from, id).unwrap()),
            WorkerRequest::Renew { job, epoch } => WorkerReply::Renewed(self.table.renew(now, job, epoch).unwrap()),
            WorkerRequest::Lookup { op, epoch } => WorkerReply::Looked(self.ledger.lookup(op, epoch)),
            WorkerRequest::Execute { op, epoch } => WorkerReply::Executed(self.execute(from, op, epoch)),
            WorkerRequest::Complete { job, epoch, output } => {
                let completion = self.table.complete(now, job, epoch, output).unwrap();
                self.note(completed(completion));
                WorkerReply::Completed(completion)
            }
            WorkerRequest::Requeue { job, epoch } => {
                let requeue = self.table.requeue(now, job, epoch).unwrap();
                self.note(dead_lettered(requeue));
                WorkerReply::Requeued(requeue)
            }
            WorkerRequest::Release { job, epoch } => {
                WorkerReply::Released(self.table.release(now, job, epoch).unwrap())
            }
            WorkerRequest::DeadLetter { job, epoch } => {
                let ended = self.table.dead_letter(now, job, epoch).unwrap();
                self.note(dead_lettered(ended));
                WorkerReply::Requeued(ended)
            }
        };
        let crash = matches!(reply, WorkerReply::Executed(Execution::Done { apply: Apply::Applied, .. }))
            && self.crash_after_apply == Some(from);
        if crash {
            // The effect is in the ledger; the worker dies before it hears so, its state gone.
            self.workers.remove(&from);
            self.crash_after_apply = None;
            return;
        }
        self.post(Message::WorkerHears { to: from, id, reply });
    }

    fn serve_reclaimer(&mut self, id: RequestId, request: ReclaimRequest) {
        let now = self.now;
        let reply = answer(&mut self.table, &mut self.ledger, now, request);
        match &reply {
            ReclaimReply::Fenced(Fencing::Won { expired, .. }) => self.reclaims.push((now, *expired)),
            ReclaimReply::Completed(completion) => self.note(completed(*completion)),
            ReclaimReply::Requeued(requeue) => self.note(dead_lettered(*requeue)),
            ReclaimReply::Quarantined(Quarantine::Quarantined(terminal)) => self.note(Some(*terminal)),
            _ => {}
        }
        self.post(Message::ReclaimerHears { id, reply });
    }

    fn deliver(&mut self, message: Message) {
        let now = self.now;
        match message {
            Message::WorkerAsks { from, id, request } => self.serve_worker(from, id, request),
            Message::ReclaimerAsks { id, request } => self.serve_reclaimer(id, request),
            Message::WorkerHears { to, id, reply } => {
                if let Some(worker) = self.workers.get_mut(&to) {
                    worker.handle_reply(now, id, reply);
                }
            }
            Message::ReclaimerHears { id, reply } => self.reclaimer.handle_reply(now, id, reply),
        }
    }

    /// The earliest timer of any live node.
    fn next_timeout(&self) -> Time {
        let workers = self.workers.values().map(Worker::poll_timeout);
        workers.chain([self.reclaimer.poll_timeout()]).min().expect("the reclaimer always has a timer")
    }

    /// One step: the earliest message or timer, whichever comes first (messages first on a tie).
    fn step(&mut self) {
        let timer = self.next_timeout().max(self.now);
        let message = self.inbox.first_key_value().map(|(&(at, _), _)| at);
        if let Some(at) = message.filter(|&at| at <= timer) {
            self.now = at;
            let (_, message) = self.inbox.pop_first().expect("a message is due");
            self.deliver(message);
        } else {
            self.now = timer;
            let now = self.now;
            for worker in self.workers.values_mut().filter(|worker| worker.poll_timeout() <= now) {
                worker.handle_timeout(now);
            }
            if self.reclaimer.poll_timeout() <= now {
                self.reclaimer.handle_timeout(now);
            }
        }
        self.drain();
    }
}

fn completed(completion: Completion) -> Option<Terminal> {
    match completion {
        Completion::Completed(terminal) => Some(terminal),
        _ => None,
    }
}

fn dead_lettered(requeue: Requeue) -> Option<Terminal> {
    match requeue {
        Requeue::DeadLettered(terminal) => Some(terminal),
        _ => None,
    }
}

#[test]
fn crash_after_effect_is_adopted_not_repeated() {
    // Proves the headline scenario end to end: worker 1 applies job 1's effect and crashes before
    // completing; worker 2 finishes job 2 and idles; after job 1's lease expires the reclaimer
    // fences it, finds the output in the ledger and completes with it. Job 1 ends Completed with
    // the applied output, its effect was executed and applied exactly once, each job has exactly
    // one terminal outcome, and nothing was quarantined.
    let ttl = Span::from_ms(100);
    let table_config = TableConfig { capacity: 4, lease_ttl: ttl, batch_max: 2, attempts_max: 3 };
    let worker_config = WorkerConfig {
        lease_ttl: ttl,
        heartbeat_every: Span::from_ms(30),
        drift_margin: Span::from_ms(20),
        request_timeout: Span::from_ms(10),
        idle_backoff: Span::from_ms(5),
        acquire_wait: Span::ZERO,
    };
    let reclaim_config =
        ReclaimerConfig { scan_every: Span::from_ms(10), request_timeout: Span::from_ms(10), retries_max: 3, wave: 1 };
    let mut table = table_with(table_config);
    for n in [1, 2] {
        enqueue(&mut table, Time::ZERO, n);
    }
    let workers = [W1, W2].map(|id| (id, Worker::new(id, worker_config, Bugs::NONE, Time::ZERO).unwrap()));
    let mut world = World {
        now: Time::ZERO,
        table,
        ledger: EffectLedger::new(),
        workers: workers.into_iter().collect(),
        reclaimer: Reclaimer::new(R1, reclaim_config, Bugs::NONE, Time::ZERO).unwrap(),
        inbox: BTreeMap::new(),
        sent_count: 0,
        crash_after_apply: Some(W1),
        executions: vec![],
        applied: vec![],
        terminals: vec![],
        adopted_by_reclaimer: vec![],
        reclaims: vec![],
    };
    world.drain();
    let mut steps = 0;
    while world.terminals.len() < 2 && world.now < RUN_US_MAX {
        assert!(steps < STEPS_MAX, "no progress after {steps} steps at {}", world.now);
        world.step();
        steps += 1;
    }

    assert!(!world.workers.contains_key(&W1), "worker 1 never crashed");
    let (job1, job2) = (job(1), job(2));
    let job1_applied: Vec<_> = world.applied.iter().filter(|(op, ..)| op.job == job1).collect();
    assert_eq!(job1_applied.len(), 1, "job 1 applied {job1_applied:?}");
    let &(_, applied_epoch, output) = job1_applied[0];
    assert_eq!(applied_epoch, Epoch(1));
    let job1_executions: Vec<_> = world.executions.iter().filter(|(_, op, _)| op.job == job1).collect();
    assert_eq!(job1_executions, vec![&(W1, op(1), Epoch(1))]);

    let terminal = world.table.terminal(job1).expect("job 1 ended");
    assert_eq!(terminal.outcome, Completed { output });
    assert_eq!(terminal.epoch, Epoch(2), "completed by the reclaimer's epoch");
    assert_eq!(world.ledger.recorded(op(1)), Some(output));
    assert_eq!(world.adopted_by_reclaimer, vec![(job1, output)]);
    let [(reclaimed_at, expired)] = world.reclaims[..] else { panic!("reclaims: {:?}", world.reclaims) };
    assert_eq!((expired.job, expired.owner, expired.epoch), (job1, Owner::Worker(W1), Epoch(1)));
    assert!(reclaimed_at >= expired.expires_at, "reclaimed at {reclaimed_at}, before {}", expired.expires_at);

    let job2_terminal = world.table.terminal(job2).expect("job 2 ended");
    assert!(matches!(job2_terminal.outcome, Completed { output } if world.ledger.recorded(op(2)) == Some(output)));
    for n in [job1, job2] {
        assert_eq!(world.terminals.iter().filter(|terminal| terminal.job == n).count(), 1, "terminals of {n}");
    }
    assert_eq!(world.applied.len(), 2);
    assert_eq!(world.table.backlog(), 0);
}

#[test]
fn an_unknown_job_does_not_move_the_table_clock() {
    // Proves misuse changes nothing: a call on an unknown job is an error and leaves the clock
    // where it was, so a later call at an earlier (but valid) time still succeeds.
    let mut table = table();
    let _ = leased(&mut table, t(0), 1, W1);
    assert_eq!(table.renew(t(500), job(9), Epoch(1)), Err(TableError::UnknownJob(job(9))));
    assert!(table.renew(t(10), job(1), Epoch(1)).is_ok(), "the clock did not move to 500");
}

#[test]
fn a_quarantine_without_two_different_outputs_is_misuse() {
    // Proves quarantine refuses, as a typed error, a "conflict" of one output with itself.
    let mut table = table();
    let _ = leased(&mut table, t(0), 1, W1);
    let error = table.quarantine(t(1), job(1), Epoch(1), OutputId(7), OutputId(7));
    assert_eq!(error, Err(TableError::NotAConflict { job: job(1), output: OutputId(7) }));
    assert!(table.terminal(job(1)).is_none());
}

#[test]
fn an_acquire_held_back_by_a_pause_is_awaited_from_when_it_left_and_its_grant_used() {
    // Proves handle_sent: an acquire decided at 0 that a pause keeps from leaving until 5_000 is
    // still the one awaited when the worker wakes (no fresh acquire under a new id, which would
    // get a second job while the first grant went unused), and its lease is counted from 5_000:
    // a grant at 5_050 is acted on, and the worker stops by 5_000 + ttl - margin, not earlier.
    let config = worker_config();
    let mut worker = Worker::new(W1, config, Bugs::NONE, t(0)).unwrap();
    let (acquire, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::Acquire);
    worker.handle_sent(t(5_000), acquire);
    assert_eq!(drain_worker(&mut worker), vec![], "nothing new: the acquire just left");
    assert_eq!(worker.poll_timeout(), t(5_000) + config.request_timeout + config.acquire_wait);
    worker.handle_reply(t(5_050), acquire, granted(W1, 1, 1, t(5_050) + config.lease_ttl));
    let (_, request) = one_send(drain_worker(&mut worker));
    assert_eq!(request, WorkerRequest::Execute { op: op(1), epoch: Epoch(1) });
    let act_until = t(5_000) + config.lease_ttl - config.drift_margin;
    assert!(worker.poll_timeout() <= act_until);
    worker.handle_timeout(act_until - Span(1));
    assert_eq!(worker.holding(), Some((job(1), Epoch(1))), "still acting before its estimate");
    // A later copy's departure does not stretch the estimate: only the first copy's counts.
    worker.handle_sent(act_until, acquire);
    worker.handle_timeout(act_until);
    let abandoned = drain_worker(&mut worker);
    let why = Abandon::SelfFenced;
    assert!(abandoned.contains(&WorkerAction::Abandoned { job: job(1), epoch: Epoch(1), why }), "{abandoned:?}");
}

#[test]
fn a_worker_hands_back_a_grant_to_an_acquire_it_gave_up_and_nothing_else() {
    // Proves the decline: a worker gives up an acquire whose answer could no longer come in time
    // and asks afresh; when a grant answering the given-up acquire arrives after all (its copy
    // was held back), the worker records it declined and hands it straight back with a requeue
    // under that grant's epoch, while it keeps waiting on its fresh acquire. A second copy of that
    // answer, and a late copy of the answer it took, change nothing: a lease it took and left
    // (for a reclaimer, on a conflict) is never handed back by accident.
    let config = WorkerConfig { request_timeout: Span(100), ..worker_config() };
    let mut worker = Worker::new(W1, config, Bugs::NONE, t(0)).unwrap();
    let (given_up, _) = one_send(drain_worker(&mut worker));
    let mut now = 0;
    let fresh = loop {
        now += 100;
        worker.handle_timeout(t(now));
        let (id, request) = one_send(drain_worker(&mut worker));
        assert_eq!(request, WorkerRequest::Acquire);
        if id != given_up {
            break id;
        }
    };
    assert_eq!(worker.awaiting(fresh), Some(WorkerRequest::Acquire));
    let late = granted(W1, 3, 1, t(now + 1_000));
    worker.handle_reply(t(now + 1), given_up, late);
    let actions = drain_worker(&mut worker);
    let declined = WorkerAction::Abandoned { job: job(1), epoch: Epoch(3), why: Abandon::Declined };
    assert_eq!(actions.first(), Some(&declined), "{actions:?}");
    assert!(matches!(actions.as_slice(), [_, WorkerAction::Send(_, WorkerRequest::Release { epoch: Epoch(3), .. })]));
    assert_eq!(worker.awaiting(fresh), Some(WorkerRequest::Acquire), "still waiting on the fresh acquire");
    assert_eq!(worker.holding(), None);
    worker.handle_reply(t(now + 2), given_up, late);
    assert_eq!(drain_worker(&mut worker), Vec::new(), "a second copy of the declined answer");
    let taken = granted(W1, 5, 1, t(now + 1_003));
    worker.handle_reply(t(now + 3), fresh, taken);
    assert_eq!(worker.holding(), Some((job(1), Epoch(5))));
    let _ = drain_worker(&mut worker);
    worker.handle_timeout(t(now + 900));
    let left = WorkerAction::Abandoned { job: job(1), epoch: Epoch(5), why: Abandon::SelfFenced };
    assert_eq!(drain_worker(&mut worker).first(), Some(&left));
    worker.handle_reply(t(now + 901), fresh, taken);
    let after = drain_worker(&mut worker);
    assert!(
        after.iter().all(|action| !matches!(action, WorkerAction::Send(_, WorkerRequest::Release { .. }))),
        "{after:?}"
    );
}

#[test]
fn a_copy_of_an_acquire_granted_another_job_is_declined() {
    // Proves the decline covers copies: an acquire sent again under its id can reach the table
    // after the lease its first answer brought has ended (expired, declined, or finished), and be
    // granted another job. That grant answers an id the worker is done with; left alone, the job
    // would wait out a whole lease and lose an attempt nobody made (the swarm's large-batches
    // scenario found it: seed 23, a grant nobody used). Both after an acquire given up (its
    // first late answer declined) and after one answered and taken, a grant of another lease
    // under the same id is declined and handed back; a copy of the same answer is not.
    let other = |epoch: u64| {
        let lease = Lease { job: job(2), owner: Owner::Worker(W1), epoch: Epoch(epoch), expires_at: t(5_000) };
        WorkerReply::Acquired(Acquired::Granted(Grant { lease, attempt: 1 }))
    };
    let released = |actions: &[WorkerAction], job_: JobId, epoch: u64| {
        actions.contains(&WorkerAction::Abandoned { job: job_, epoch: Epoch(epoch), why: Abandon::Declined })
            && actions.iter().any(|action| {
                matches!(action, WorkerAction::Send(_, WorkerRequest::Release { job: j, epoch: e }) if *j == job_ && *e == Epoch(epoch))
            })
    };
    // Given up: the first late answer, then a copy granted afresh, each declined once.
    let config = WorkerConfig { request_timeout: Span(100), ..worker_config() };
    let mut worker = Worker::new(W1, config, Bugs::NONE, t(0)).unwrap();
    let (given_up, _) = one_send(drain_worker(&mut worker));
    let mut now = 0;
    loop {
        now += 100;
        worker.handle_timeout(t(now));
        let (id, _) = one_send(drain_worker(&mut worker));
        if id != given_up {
            break;
        }
    }
    worker.handle_reply(t(now + 1), given_up, granted(W1, 3, 1, t(now + 1_000)));
    assert!(released(&drain_worker(&mut worker), job(1), 3));
    worker.handle_reply(t(now + 2), given_up, other(4));
    assert!(released(&drain_worker(&mut worker), job(2), 4), "the copy's grant of another job is handed back");
    worker.handle_reply(t(now + 3), given_up, other(4));
    assert_eq!(drain_worker(&mut worker), Vec::new(), "a copy of an answer already declined");
    // Taken: the worker runs job 1 under the first answer; a copy of the acquire granted job 2.
    let mut worker = Worker::new(W1, worker_config(), Bugs::NONE, t(0)).unwrap();
    let (acquire, _) = one_send(drain_worker(&mut worker));
    worker.handle_reply(t(10), acquire, granted(W1, 1, 1, t(1_010)));
    let _execute = drain_worker(&mut worker);
    assert_eq!(worker.holding(), Some((job(1), Epoch(1))));
    worker.handle_reply(t(11), acquire, granted(W1, 1, 1, t(1_010)));
    assert_eq!(drain_worker(&mut worker), Vec::new(), "a copy of the answer taken is no news");
    worker.handle_reply(t(12), acquire, other(1));
    assert!(released(&drain_worker(&mut worker), job(2), 1), "another job under a taken id is handed back");
    assert_eq!(worker.holding(), Some((job(1), Epoch(1))), "the lease it runs is kept");
}

// Reclaim waves

fn wave_config(wave: u32) -> ReclaimerConfig {
    ReclaimerConfig { wave, ..reclaimer_config() }
}

/// Answers every request of `sent` in order, at `now`, and returns what the reclaimer did after
/// the last.
fn step_all(
    reclaimer: &mut Reclaimer,
    table: &mut LeaseTable,
    ledger: &mut EffectLedger,
    now: Time,
    sent: &[(RequestId, ReclaimRequest)],
) -> Vec<ReclaimAction> {
    let mut actions = Vec::new();
    for &(id, request) in sent {
        assert!(actions.is_empty(), "it went on before the whole step was answered: {actions:?}");
        let reply = answer(table, ledger, now, request);
        reclaimer.handle_reply(now, id, reply);
        actions = drain_reclaimer(reclaimer);
    }
    actions
}

#[test]
fn a_wave_fences_its_leases_together_then_looks_up_together_then_finishes_together() {
    // Proves the wave: three expired leases and a wave of two. It fences j1 and j2 at once, and
    // sends nothing more until both fences are answered; then both lookups; then j2's requeue and
    // j1's adoption together; then the third lease alone, as the next wave.
    let mut table = table_with(TableConfig { batch_max: 3, ..config() });
    let mut ledger = EffectLedger::new();
    let leases = [1, 2, 3].map(|n| leased(&mut table, t(n), n, W1));
    assert_eq!(ledger.apply(op(1), Epoch(1), out(7)), Apply::Applied);
    let now = t(200);
    let batch = BatchId { reclaimer: R1, seq: 0 };
    let mut reclaimer = Reclaimer::new(R1, wave_config(2), Bugs::NONE, now).unwrap();
    let list = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    let fences = sends(&step(&mut reclaimer, &mut table, &mut ledger, now, list));
    let fence = |lease: Lease| ReclaimRequest::Fence { batch, lease, as_of: now };
    assert_eq!(fences.iter().map(|sent| sent.1).collect::<Vec<_>>(), vec![fence(leases[0]), fence(leases[1])]);

    let lookups = sends(&step_all(&mut reclaimer, &mut table, &mut ledger, now, &fences));
    let lookup = |n| ReclaimRequest::Lookup { batch, op: op(n), epoch: Epoch(2) };
    assert_eq!(lookups.iter().map(|sent| sent.1).collect::<Vec<_>>(), vec![lookup(1), lookup(2)]);

    let actions = step_all(&mut reclaimer, &mut table, &mut ledger, now, &lookups);
    let adopted = ReclaimAction::Adopted { batch, job: job(1), op: op(1), output: out(7), epoch: Epoch(2) };
    assert_eq!(actions[0], adopted);
    let finishes = sends(&actions);
    let complete = ReclaimRequest::Complete { batch, job: job(1), epoch: Epoch(2), output: out(7) };
    let requeue = ReclaimRequest::Requeue { batch, job: job(2), epoch: Epoch(2) };
    // The requeues first, then the completions: each kind one run, which a store serves together.
    assert_eq!(finishes.iter().map(|sent| sent.1).collect::<Vec<_>>(), vec![requeue, complete]);

    let next = sends(&step_all(&mut reclaimer, &mut table, &mut ledger, now, &finishes));
    assert_eq!(next.iter().map(|sent| sent.1).collect::<Vec<_>>(), vec![fence(leases[2])]);
    let terminal = Terminal { job: job(1), epoch: Epoch(2), outcome: Completed { output: out(7) } };
    assert_eq!(table.terminal(job(1)), Some(&terminal));
    assert_eq!(table.lease(job(2)), None, "j2 was requeued");
}

#[test]
fn a_conflict_in_a_wave_quarantines_the_first_in_listing_order_and_finishes_no_other() {
    // Proves the conflict rule in a wave of three: j2 and j3 both have two outputs, j1 none. The
    // lookups are answered last to first. The reclaimer quarantines j2 alone, finishes neither j1
    // nor j3 (they stay fenced under its epoch, to expire), and stops the batch with nothing left
    // untouched.
    let mut table = table_with(TableConfig { batch_max: 3, ..config() });
    let mut ledger = EffectLedger::new();
    let _ = [1, 2, 3].map(|n| leased(&mut table, t(n), n, W1));
    for n in [2, 3] {
        assert_eq!(ledger.apply(op(n), Epoch(1), out(7)), Apply::Applied);
        assert_eq!(ledger.apply(op(n), Epoch(1), out(8)), Apply::Conflict { recorded: out(7) });
    }
    let now = t(200);
    let batch = BatchId { reclaimer: R1, seq: 0 };
    let mut reclaimer = Reclaimer::new(R1, wave_config(3), Bugs::NONE, now).unwrap();
    let list = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    let fences = sends(&step(&mut reclaimer, &mut table, &mut ledger, now, list));
    assert_eq!(fences.len(), 3);
    let mut lookups = sends(&step_all(&mut reclaimer, &mut table, &mut ledger, now, &fences));
    lookups.reverse();
    let quarantine = only_reclaim_send(&step_all(&mut reclaimer, &mut table, &mut ledger, now, &lookups));
    let expected = ReclaimRequest::Quarantine { batch, job: job(2), epoch: Epoch(2), recorded: out(7), rival: out(8) };
    assert_eq!(quarantine.1, expected);
    let actions = step(&mut reclaimer, &mut table, &mut ledger, now, quarantine);
    let stopped = ReclaimAction::BatchStopped { batch, job: job(2), recorded: out(7), rival: out(8), untouched: 0 };
    assert_eq!(actions, vec![stopped]);
    for n in [1, 3] {
        let lease = table.lease(job(n)).expect("still leased");
        assert_eq!((lease.owner, lease.epoch), (Owner::Reclaimer(R1), Epoch(2)), "j{n} was finished");
    }
}

#[test]
fn a_wave_unanswered_through_its_retries_gives_up_every_job_still_unanswered() {
    // Proves the give-up of a wave: of three fences, only j1's is answered. The other two are sent
    // again, together and under the same ids, `retries_max` times; then the reclaimer gives up j2
    // and j3 (not j1, whose fence was answered), drops the batch, and lists again only after
    // `scan_every`.
    let mut table = table_with(TableConfig { batch_max: 3, ..config() });
    let mut ledger = EffectLedger::new();
    let _ = [1, 2, 3].map(|n| leased(&mut table, t(n), n, W1));
    let now = t(200);
    let batch = BatchId { reclaimer: R1, seq: 0 };
    let config = wave_config(4);
    let mut reclaimer = Reclaimer::new(R1, config, Bugs::NONE, now).unwrap();
    let list = only_reclaim_send(&drain_reclaimer(&mut reclaimer));
    let fences = sends(&step(&mut reclaimer, &mut table, &mut ledger, now, list));
    assert_eq!(fences.len(), 3, "a wave larger than the batch is the whole batch");
    assert_eq!(step_all(&mut reclaimer, &mut table, &mut ledger, now, &fences[..1]), vec![]);
    let mut at = now;
    for _ in 0..config.retries_max {
        assert_eq!(reclaimer.poll_timeout(), at + config.request_timeout, "one deadline for the step");
        at = reclaimer.poll_timeout();
        reclaimer.handle_timeout(at);
        assert_eq!(sends(&drain_reclaimer(&mut reclaimer)), fences[1..].to_vec(), "not the same ids again");
    }
    at = reclaimer.poll_timeout();
    reclaimer.handle_timeout(at);
    let gave_up = drain_reclaimer(&mut reclaimer);
    let given = |n| ReclaimAction::GaveUp { batch, job: job(n) };
    assert_eq!(gave_up, vec![given(2), given(3)]);
    assert!(!reclaimer.awaits_any());
    assert_eq!(reclaimer.poll_timeout(), at + config.scan_every);
    // A late answer to a request given up is ignored.
    reclaimer.handle_reply(at, fences[1].0, answer(&mut table, &mut ledger, at, fences[1].1));
    assert_eq!(drain_reclaimer(&mut reclaimer), vec![]);
}

#[test]
fn a_wave_of_zero_is_a_config_error() {
    // Proves Reclaimer::new refuses a wave of no leases: it would never fence anything.
    let error = Reclaimer::new(R1, wave_config(0), Bugs::NONE, t(0)).map(|_| ()).unwrap_err();
    assert!(matches!(error, ConfigError::ReclaimerTiming(_)), "{error:?}");
}
