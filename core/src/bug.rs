//! Planted bugs: named, deliberate breaks of one protocol rule each.
//!
//! They exist to prove that the simulation harness catches the bugs production queues shipped.
//! Only the `planted-bugs` cargo feature can switch one on (`Bugs::plant`), only `lease-sim`
//! enables that feature, and a bug is chosen at run time, never by default. Without the feature
//! [`Bugs::on`] is constantly false and every planted branch compiles away.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// One planted bug. The name says which rule it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bug {
    /// The table compares expiries in whole ticks ([`crate::RECLAIM_TICK`]), so a lease counts as
    /// expired up to one tick before `expires_at`.
    ReclaimBoundaryOffByOne,
    /// The table decides expiry by the reclaimer's own (drifting) clock, not its own.
    ReclaimByReclaimerClock,
    /// The table accepts a completion without checking its epoch.
    CompleteWithoutEpochCheck,
    /// The table accepts a renewal without checking its epoch.
    RenewWithoutEpochCheck,
    /// The ledger never raises or checks its fence, so a stale effect is accepted.
    LedgerWithoutFence,
    /// The reclaimer requeues without looking the operation up, and the job restarts fresh (as
    /// River's rescuer did), so the next worker repeats the effect.
    ReclaimSkipsAdoption,
    /// The table fences a lease without comparing its epoch, so two racing reclaimers both win.
    ReclaimWithoutCas,
    /// The table ignores `batch_max` when it lists expired leases.
    UnboundedReclaimBatch,
    /// On conflicting outputs the reclaimer completes with the newest claim and carries on with
    /// the batch, instead of quarantining the job and stopping.
    ConflictDoesNotStopBatch,
    /// The worker keeps acting on its lease past its own estimate of expiry.
    WorkerWithoutSelfFence,
    /// The table fences a listed lease whose job finished between the listing and the fence, as
    /// long as the epoch still matches, and hands the finished job to the reclaimer (River's
    /// rescuer overwriting completed jobs, its issue 1302). Needs a completion to land in that
    /// window: a rare interleaving.
    FenceRevivesFinished,
    /// The table accepts a requeue under any epoch while the job is leased: a stale worker's late
    /// (or retried) failure report hands back a job someone else now holds (Oban's issue 532).
    RequeueWithoutEpochCheck,
    /// The table renews a lease up to [`crate::RENEW_GRACE`] after it expired: a renewal racing
    /// a reclaim at the boundary wins.
    RenewGrace,
    /// The ledger raises an operation's fence on a lookup only when it finds an output, so a stale
    /// writer whose call lands after an empty lookup by a newer epoch is not fenced.
    LookupFencesOnlyWhenFound,
    /// The worker counts a granted or renewed lease from when the answer arrived, not from when
    /// it asked: an answer delayed on its way stretches the worker's estimate of the lease past
    /// the table's (Graphile Worker's issue 222, a renewal answered late).
    LeaseCountedFromReply,
    /// The table dead-letters one attempt late: a job gets `attempts_max + 1` worker grants.
    DeadLetterOneLate,
    /// A requeue forgets to drop the lease's expiry from the table's index, so a later reclaim
    /// scan meets an expiry with no live lease: the table's own assertion fires. Proves that a
    /// panic inside a world is a finding with its seed, not the end of a sweep.
    RequeueKeepsExpiry,
    /// The table fences a listed lease by comparing its epoch alone, not checking that the job is
    /// still leased: a job its holder handed back (requeued) or ended between the listing and the
    /// fence is taken by the reclaimer anyway, out of the queue or out of its end. The window
    /// is `window_list_to_fence`.
    FenceChecksEpochOnly,
    /// The table takes a hand-back (a requeue, as a failure report is) by job id alone: no epoch
    /// check, and a job that already ended is put back in the queue (Solid Queue's issue 589, a
    /// failure report arriving after the job finished). The window is `window_stale_hand_back`.
    HandBackByJobId,
    /// A requeue that finds the job out of attempts dead-letters it without checking whether it
    /// already ended: a late copy of the requeue that dead-lettered a job ends it a second time.
    /// The window is `window_late_duplicate`.
    DeadLetterIgnoresTerminal,
    /// A store on a database completes a job with River's statement, `UPDATE … WHERE job = $1
    /// AND state = 'leased'`: guarded by the state alone, never the epoch (River's completion
    /// checks `state = 'running'`, never the attempt). A worker whose lease was reclaimed and
    /// granted again completes the job out from under its new holder. Lives in `lease-store`'s
    /// SQL path only ([`Bug::STORE`]): the in-memory table ignores it.
    CompleteByStateOnly,
    /// A store on a database renews with a heartbeat statement guarded by job and epoch, not
    /// expiry, `UPDATE … SET expires_at_us = $3 WHERE job = $1 AND lease_epoch = $2`: a worker
    /// back from a pause revives its expired lease if no reclaimer fenced it yet (the heartbeat
    /// that outlives its lock of Graphile Worker and Oban). SQL path only ([`Bug::STORE`]).
    RenewByEpochOnly,
    /// A runtime's batch of completions is checked by its first job's epoch alone: every later
    /// job of the batch is completed under whatever lease it holds now, so one stale epoch among
    /// many completes a job a reclaimer took meanwhile, out from under its new holder. Lives in a
    /// batch's serving on the in-memory table ([`Bug::BATCH`]).
    BatchCompleteChecksFirst,
    /// A runtime's batch of renewals (two or more) extends every named job's current lease
    /// without checking that each is the sender's: a heartbeat renews a lease its sender no longer holds (taken by
    /// a reclaimer meanwhile), and tells it its own lost lease goes on. [`Bug::BATCH`].
    BatchRenewUnchecked,
    /// A runtime's batch of acquires reads the queue's head once: an asker that finds the queue
    /// emptied by the batch's earlier grants is granted the job the batch granted last, again, so
    /// one job is handed to two workers. [`Bug::BATCH`].
    BatchAcquireGrantsTwice,
    /// A batch of enqueues stops at its first refusal, as a bulk insert that stops at its first
    /// error: the jobs after it are answered nothing, and no line says what became of them. The
    /// producer heard its batch answered; the customer's jobs are gone without a word. Only the
    /// simulator's check of offers against the history sees it. [`Bug::BATCH`].
    BatchEnqueueStopsAtRefusal,
    /// A reclaimer that gave a batch up (a request unanswered through its retries) scans again at
    /// once instead of after its interval: through an outage, every reclaimer of a fleet hammers
    /// the table it cannot reach with listings, each a transaction. Nothing unsafe is accepted;
    /// `give_up_backs_off` sees the hurried listing.
    GiveUpWithoutBackOff,
    /// The table quarantines a job under any epoch: a reclaimer that stalled past its own fence,
    /// and woke to find the conflict it was looking for, quarantines a job another reclaimer has
    /// fenced since. Only a reclaim storm reaches it: a conflict, a reclaimer stalled past its
    /// lease, and a second reclaimer still at work when the first wakes.
    QuarantineWithoutEpochCheck,
    /// A reclaimer whose wave's lookups show a conflict quarantines that job and then finishes
    /// the wave's other jobs anyway (requeues them, or adopts what the ledger holds), instead of
    /// touching nothing further: the batch goes on past the alert. Needs a wave of two or more
    /// whose lookups meet a conflict.
    WaveFinishesPastConflict,
    /// About one seed in twenty records a second terminal outcome: proves failures get reported.
    Canary,
    /// A worker runtime whose effects wait in its buffer (fewer handlers than slots) leaves a
    /// lease its machine gave up there (a pause, renewals cut off) to lapse, instead of releasing
    /// it: the job waits out the lease and is charged an attempt that never ran. Nothing unsafe
    /// is accepted; the simulator's audit of the buffer sees the release never sent. Lives in
    /// `lease-runtime` ([`Bug::RUNTIME`]).
    BufferKeepsGivenUp,
    /// A worker runtime told to stop drops a grant that answers an acquire it sent before: the
    /// lease is left to lapse, and its job waits it out and is charged an attempt that never ran.
    /// Nothing unsafe is accepted; the simulator's audit of grants after the stop sees no release.
    /// [`Bug::RUNTIME`].
    StopDropsLateGrants,
    /// A worker runtime told to stop returns without waiting for the releases it asked for: they
    /// are dropped unsent, and the leases they would hand back lapse. Nothing unsafe is accepted;
    /// the simulator counts a release as sent only once the runtime polls its call. [`Bug::RUNTIME`].
    ShutdownReleasesUnawaited,
    /// A worker runtime counts a batch of records as one output sent: its tally, and a service's
    /// dashboard, say fewer records than the ledger was asked for. The simulator audits the tally
    /// against what its client was asked to record. [`Bug::RUNTIME`].
    RecordBatchCountedOnce,
    /// A worker runtime never publishes the lease's deadline to its handler (`Job::deadline`
    /// reads zero): a handler that bounds its dependency call by it gives up at once, or never.
    /// The simulator's handler audits the deadline it is told. [`Bug::RUNTIME`].
    DeadlineUnset,
    /// A batching worker runtime writes its batch of `executing` lines at every turn, none queued
    /// or not: a store makes a transaction of nothing at every turn. The simulator's client
    /// refuses an empty batch. [`Bug::RUNTIME`].
    LinesEveryTurn,
    /// A worker runtime told to stop returns without firing the cancellation signal of a handler
    /// still running when its grace ran out: the handler's future is dropped, and work it started
    /// elsewhere (a spawned task, a remote call it waits on) never hears that it must stop. The
    /// simulator checks every handler returned or was cancelled. [`Bug::RUNTIME`].
    ShutdownLeavesHandlers,
    /// A worker runtime bounds an acquire by its request timeout, as it bounds every other call:
    /// a grant that comes later (an acquire long-polled at the table, held in the network, or
    /// sent by a process that was paused as it left) is dropped before the machine sees it, so
    /// it is never declined. The lease lapses, and the job waits it out and is charged an attempt
    /// that never ran. Nothing unsafe is accepted, and no audit of the runtime sees it: only
    /// `useful_grants` does, and almost only in the fault phase, where a grant lost is excused
    /// by the fault the history names, never by the phase. [`Bug::RUNTIME`].
    AcquireBoundedByTimeout,
}

impl Bug {
    /// Every planted bug, in catalogue order.
    pub const ALL: [Bug; 24] = [
        Bug::ReclaimBoundaryOffByOne,
        Bug::ReclaimByReclaimerClock,
        Bug::CompleteWithoutEpochCheck,
        Bug::RenewWithoutEpochCheck,
        Bug::LedgerWithoutFence,
        Bug::ReclaimSkipsAdoption,
        Bug::ReclaimWithoutCas,
        Bug::UnboundedReclaimBatch,
        Bug::ConflictDoesNotStopBatch,
        Bug::WorkerWithoutSelfFence,
        Bug::FenceRevivesFinished,
        Bug::RequeueWithoutEpochCheck,
        Bug::RenewGrace,
        Bug::LookupFencesOnlyWhenFound,
        Bug::DeadLetterOneLate,
        Bug::LeaseCountedFromReply,
        Bug::RequeueKeepsExpiry,
        Bug::FenceChecksEpochOnly,
        Bug::HandBackByJobId,
        Bug::DeadLetterIgnoresTerminal,
        Bug::GiveUpWithoutBackOff,
        Bug::QuarantineWithoutEpochCheck,
        Bug::WaveFinishesPastConflict,
        Bug::Canary,
    ];

    /// The planted bugs that live in `lease-store`'s SQL statements, not in the rules: only a
    /// world whose table and ledger run on SQLite (`--store sqlite`) can plant them.
    pub const STORE: [Bug; 2] = [Bug::CompleteByStateOnly, Bug::RenewByEpochOnly];

    /// The planted bugs that live in how the in-memory table serves a runtime's batch in one
    /// transaction (`lease_store::serve_worker_batch`), not in the rules: a world whose workers
    /// batch (`slots` and `batch` above 1) on the in-memory table plants them; a SQL store does not.
    pub const BATCH: [Bug; 4] = [
        Bug::BatchCompleteChecksFirst,
        Bug::BatchRenewUnchecked,
        Bug::BatchAcquireGrantsTwice,
        Bug::BatchEnqueueStopsAtRefusal,
    ];

    /// The planted bugs that live in the worker runtime (`lease-runtime`), not in the rules or a
    /// store: every world plants them, on every store. Each shows where the runtime's code is
    /// reached: the buffer (`handlers` fewer than `slots`), batching (`batch` above 1), or a
    /// graceful stop.
    pub const RUNTIME: [Bug; 8] = [
        Bug::BufferKeepsGivenUp,
        Bug::StopDropsLateGrants,
        Bug::ShutdownReleasesUnawaited,
        Bug::RecordBatchCountedOnce,
        Bug::DeadlineUnset,
        Bug::LinesEveryTurn,
        Bug::ShutdownLeavesHandlers,
        Bug::AcquireBoundedByTimeout,
    ];

    /// Every planted bug: the rules', the SQL path's, the in-memory batches' and the runtime's.
    pub fn every() -> impl Iterator<Item = Bug> {
        Bug::ALL.into_iter().chain(Bug::STORE).chain(Bug::BATCH).chain(Bug::RUNTIME)
    }

    /// Whether the bug lives in a store's SQL path only ([`Bug::STORE`]).
    pub fn store_only(self) -> bool {
        Bug::STORE.contains(&self)
    }

    /// Whether the bug lives in the in-memory table's batches only ([`Bug::BATCH`]).
    pub fn batch_only(self) -> bool {
        Bug::BATCH.contains(&self)
    }

    /// The bug's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Bug::ReclaimBoundaryOffByOne => "reclaim-boundary-off-by-one",
            Bug::ReclaimByReclaimerClock => "reclaim-by-reclaimer-clock",
            Bug::CompleteWithoutEpochCheck => "complete-without-epoch-check",
            Bug::RenewWithoutEpochCheck => "renew-without-epoch-check",
            Bug::LedgerWithoutFence => "ledger-without-fence",
            Bug::ReclaimSkipsAdoption => "reclaim-skips-adoption",
            Bug::ReclaimWithoutCas => "reclaim-without-cas",
            Bug::UnboundedReclaimBatch => "unbounded-reclaim-batch",
            Bug::ConflictDoesNotStopBatch => "conflict-does-not-stop-batch",
            Bug::WorkerWithoutSelfFence => "worker-without-self-fence",
            Bug::FenceRevivesFinished => "fence-revives-finished",
            Bug::RequeueWithoutEpochCheck => "requeue-without-epoch-check",
            Bug::RenewGrace => "renew-grace",
            Bug::LookupFencesOnlyWhenFound => "lookup-fences-only-when-found",
            Bug::DeadLetterOneLate => "dead-letter-one-late",
            Bug::LeaseCountedFromReply => "lease-counted-from-reply",
            Bug::RequeueKeepsExpiry => "requeue-keeps-expiry",
            Bug::FenceChecksEpochOnly => "fence-checks-epoch-only",
            Bug::HandBackByJobId => "hand-back-by-job-id",
            Bug::DeadLetterIgnoresTerminal => "dead-letter-ignores-terminal",
            Bug::CompleteByStateOnly => "complete-by-state-only",
            Bug::RenewByEpochOnly => "renew-by-epoch-only",
            Bug::BatchCompleteChecksFirst => "batch-complete-checks-first",
            Bug::BatchRenewUnchecked => "batch-renew-unchecked",
            Bug::BatchAcquireGrantsTwice => "batch-acquire-grants-twice",
            Bug::BatchEnqueueStopsAtRefusal => "batch-enqueue-stops-at-refusal",
            Bug::GiveUpWithoutBackOff => "give-up-without-back-off",
            Bug::QuarantineWithoutEpochCheck => "quarantine-without-epoch-check",
            Bug::WaveFinishesPastConflict => "wave-finishes-past-conflict",
            Bug::Canary => "canary",
            Bug::BufferKeepsGivenUp => "buffer-keeps-given-up",
            Bug::StopDropsLateGrants => "stop-drops-late-grants",
            Bug::ShutdownReleasesUnawaited => "shutdown-releases-unawaited",
            Bug::RecordBatchCountedOnce => "record-batch-counted-once",
            Bug::DeadlineUnset => "deadline-unset",
            Bug::LinesEveryTurn => "lines-every-turn",
            Bug::ShutdownLeavesHandlers => "shutdown-leaves-handlers",
            Bug::AcquireBoundedByTimeout => "acquire-bounded-by-timeout",
        }
    }

    /// What the bug breaks, in one line (`lease-sim bugs` lists it beside the name); the
    /// variant's doc says the rest.
    pub fn about(self) -> &'static str {
        match self {
            Bug::ReclaimBoundaryOffByOne => "expiry compared in whole ticks: a lease counts as expired a tick early",
            Bug::ReclaimByReclaimerClock => "expiry decided by the reclaimer's drifting clock, not the table's",
            Bug::CompleteWithoutEpochCheck => "the table accepts a completion without checking its epoch",
            Bug::RenewWithoutEpochCheck => "the table accepts a renewal without checking its epoch",
            Bug::LedgerWithoutFence => "the ledger never raises or checks its fence: a stale effect is accepted",
            Bug::ReclaimSkipsAdoption => "the reclaimer requeues without a lookup: the next worker repeats the effect",
            Bug::ReclaimWithoutCas => "a fence without comparing the epoch: two racing reclaimers both win",
            Bug::UnboundedReclaimBatch => "the table ignores batch_max when it lists expired leases",
            Bug::ConflictDoesNotStopBatch => "conflicting outputs: the newest completes the job and the batch goes on",
            Bug::WorkerWithoutSelfFence => "the worker keeps acting on its lease past its own estimate of expiry",
            Bug::FenceRevivesFinished => "a fence of a job finished since its listing hands it to the reclaimer",
            Bug::RequeueWithoutEpochCheck => "a requeue under any epoch: a stale failure report hands back a held job",
            Bug::RenewGrace => "the table renews a lease up to RENEW_GRACE after it expired",
            Bug::LookupFencesOnlyWhenFound => "a lookup raises the ledger's fence only when it finds an output",
            Bug::LeaseCountedFromReply => "the worker counts its lease from the answer, not from when it asked",
            Bug::DeadLetterOneLate => "the table dead-letters one attempt late: attempts_max + 1 grants",
            Bug::RequeueKeepsExpiry => "a requeue leaves the lease's expiry indexed: the table's own assertion fires",
            Bug::FenceChecksEpochOnly => "a fence checks the epoch alone: a job handed back or ended is taken anyway",
            Bug::HandBackByJobId => "a hand-back by job id alone: no epoch check, and an ended job is requeued",
            Bug::DeadLetterIgnoresTerminal => "a dead-letter without checking the job ended: a late copy ends it twice",
            Bug::CompleteByStateOnly => "SQL completion guarded by state = 'leased' alone, never the epoch",
            Bug::RenewByEpochOnly => "SQL renewal guarded by job and epoch, not expiry: an expired lease revives",
            Bug::BatchCompleteChecksFirst => "a batch of completions checked by its first epoch alone",
            Bug::BatchRenewUnchecked => "a batch of renewals extends each job's lease, whoever holds it",
            Bug::BatchAcquireGrantsTwice => "a batch of acquires grants its last job again once the queue is empty",
            Bug::BatchEnqueueStopsAtRefusal => "a batch of enqueues stops at its first refusal: the rest go unanswered",
            Bug::GiveUpWithoutBackOff => "a reclaimer that gave a batch up scans again at once, not after its interval",
            Bug::QuarantineWithoutEpochCheck => {
                "a quarantine under any epoch: a reclaimer that lost its fence ends the job"
            }
            Bug::WaveFinishesPastConflict => "a reclaim wave finishes its other jobs after a conflict stopped it",
            Bug::Canary => "about one seed in twenty records a second terminal outcome",
            Bug::BufferKeepsGivenUp => "a runtime leaves a lease given up in its buffer to lapse, not released",
            Bug::StopDropsLateGrants => "a runtime told to stop leaves a grant that answers afterwards to lapse",
            Bug::ShutdownReleasesUnawaited => "a runtime told to stop returns before its releases are sent",
            Bug::RecordBatchCountedOnce => "a runtime counts a batch of records as one output sent",
            Bug::DeadlineUnset => "a runtime never tells its handler the lease's deadline (it reads zero)",
            Bug::LinesEveryTurn => "a batching runtime writes its executing lines at every turn, even none",
            Bug::ShutdownLeavesHandlers => "a runtime told to stop returns without cancelling its running handlers",
            Bug::AcquireBoundedByTimeout => "a runtime drops a grant answering an acquire after its request timeout",
        }
    }
}

impl fmt::Display for Bug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown planted-bug name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown planted bug {0:?}; known bugs: {known}",
    known = Bug::every().map(|bug| bug.name()).collect::<Vec<_>>().join(", ")
)]
pub struct UnknownBug(pub String);

impl FromStr for Bug {
    type Err = UnknownBug;
    fn from_str(s: &str) -> Result<Bug, UnknownBug> {
        Bug::every().find(|bug| bug.name() == s).ok_or_else(|| UnknownBug(s.to_string()))
    }
}

/// The planted bug in force for one table, ledger, worker or reclaimer: none by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bugs {
    #[cfg(feature = "planted-bugs")]
    planted: Option<Bug>,
}

impl Bugs {
    /// No planted bug: the correct protocol.
    pub const NONE: Bugs = Bugs {
        #[cfg(feature = "planted-bugs")]
        planted: None,
    };

    /// Plant one bug. Only the `planted-bugs` feature has this.
    #[cfg(feature = "planted-bugs")]
    pub fn plant(bug: Option<Bug>) -> Bugs {
        Bugs { planted: bug }
    }

    /// Whether `bug` is planted.
    #[inline]
    pub fn on(self, bug: Bug) -> bool {
        #[cfg(feature = "planted-bugs")]
        return self.planted == Some(bug);
        #[cfg(not(feature = "planted-bugs"))]
        {
            let _ = bug;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Bug;

    // Proves every planted bug has a description that fits one line of `lease-sim bugs` beside
    // its name, and that no two bugs share one.
    #[test]
    fn every_bug_has_its_own_one_line_description() {
        let mut seen = std::collections::BTreeSet::new();
        for bug in Bug::every() {
            let about = bug.about();
            assert!(!about.is_empty() && !about.contains('\n'), "{bug}: {about:?}");
            assert!(bug.name().len() + about.len() <= 120, "{bug}: {} characters", about.len());
            assert!(seen.insert(about), "{bug} shares its description");
        }
    }
}
