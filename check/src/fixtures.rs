//! Hand-made histories for the checkers' tests: a builder that writes one entry per call and
//! returns its line number, and a correct story to break in small ways.
//!
//! The builder fills in what a world would record anyway, so that a story reads as its events:
//! the backlog of an arrival, the attempt of a grant, the `from` of an answer (the holder of that
//! job and epoch), and the `listed` line that opens a reclaim batch. A fence (`reclaimed`,
//! `lost_race`, `not_expired`) of a batch the story never listed is preceded by that batch's listing at that instant: the
//! live leases the story has expired by then, earliest first, at most `batch_max` (the listing
//! the table would give). A story that lists its batch itself gets no second listing.

use lease_core::{BatchId, Epoch, JobId, OpId, OutputId, ReclaimerId};
use lease_history::{
    AbandonReason, EffectRejectReason, Entry, Event, Node, OutcomeKind, Point, RefuseReason, RefusedRequest,
    RejectReason,
};
use std::collections::{BTreeMap, BTreeSet};

pub(crate) const J1: JobId = JobId(1);
pub(crate) const J2: JobId = JobId(2);
pub(crate) const J3: JobId = JobId(3);
pub(crate) const E1: Epoch = Epoch(1);
pub(crate) const E2: Epoch = Epoch(2);
pub(crate) const E3: Epoch = Epoch(3);
pub(crate) const E4: Epoch = Epoch(4);
pub(crate) const O7: OutputId = OutputId(7);
pub(crate) const O8: OutputId = OutputId(8);
pub(crate) const O9: OutputId = OutputId(9);

/// The lease ttl of every fixture, in microseconds.
pub(crate) const TTL_US: u64 = 1_000;

/// Worker `n`.
pub(crate) fn w(n: u32) -> Node {
    Node::Worker(n)
}

/// Reclaimer `n`.
pub(crate) fn r(n: u32) -> Node {
    Node::Reclaimer(n)
}

/// Batch `seq` of reclaimer `n`.
pub(crate) fn batch(n: u32, seq: u64) -> BatchId {
    BatchId { reclaimer: ReclaimerId(n), seq }
}

/// A history under construction. Each method appends one entry at the current time and returns
/// its 1-based line number (a fence of an unlisted batch first appends the listing; see the
/// module doc).
pub(crate) struct History {
    pub entries: Vec<Entry>,
    now_us: u64,
    batch_max: usize,
    unfinished: BTreeSet<JobId>,
    /// Who holds each job's latest lease (its latest grant or reclaim).
    holder: BTreeMap<JobId, Node>,
    /// Who was granted or reclaimed each job at each epoch: the `from` of the table's and the
    /// ledger's answers at that epoch that name no batch.
    holders: BTreeMap<(JobId, Epoch), Node>,
    /// Each job's live lease: its epoch and expiry.
    leases: BTreeMap<JobId, (Epoch, u64)>,
    /// Worker grants of each job so far.
    attempts: BTreeMap<JobId, u32>,
    /// Batches with a `listed` line.
    listed: BTreeSet<BatchId>,
}

/// The calm network latency of a fixture that states one.
pub const LATENCY_CALM_US: [u64; 2] = [1_000, 10_000];

impl History {
    /// A history whose line 1 is a `run` line with these limits, and 3 attempts per job.
    pub fn new(batch_max: usize, capacity: usize) -> History {
        History::with_settings(batch_max, capacity, 3, None)
    }

    /// The opening of many stories: a history (batch_max 2, this `capacity`) in which j1 arrives
    /// at 0 and is granted to w1 under e1 at 10, its lease running to 1_010; and the grant's line.
    pub fn j1_granted_to_w1(capacity: usize) -> (History, usize) {
        let mut history = History::new(2, capacity);
        history.at(0).arrived(J1);
        let granted = history.at(10).granted(J1, E1, w(1), 1_010);
        (history, granted)
    }

    /// A history whose line 1 is a `run` line with these limits.
    pub fn with_attempts_max(batch_max: usize, capacity: usize, attempts_max: u32) -> History {
        History::with_settings(batch_max, capacity, attempts_max, None)
    }

    /// A history whose line 1 is a `run` line with these limits, a network whose fault-phase
    /// latency reaches `latency_max_us` (calm: [`LATENCY_CALM_US`]), and 3 attempts.
    pub fn with_latency(batch_max: usize, capacity: usize, latency_max_us: u64) -> History {
        History::with_settings(batch_max, capacity, 3, Some(latency_max_us))
    }

    /// A history whose line 1 is a `run` line with these limits and, when given, a network whose
    /// fault-phase latency reaches `latency_max_us` (calm: [`LATENCY_CALM_US`]).
    pub fn with_settings(batch_max: usize, capacity: usize, attempts_max: u32, latency_max_us: Option<u64>) -> History {
        let mut history = History {
            entries: Vec::new(),
            now_us: 0,
            batch_max,
            unfinished: BTreeSet::new(),
            holder: BTreeMap::new(),
            holders: BTreeMap::new(),
            leases: BTreeMap::new(),
            attempts: BTreeMap::new(),
            listed: BTreeSet::new(),
        };
        let run = Event::Run {
            history_version: lease_history::HISTORY_VERSION,
            seed: 1,
            scenario: "fixture".into(),
            batch_max,
            capacity,
            lease_ttl_us: TTL_US,
            attempts_max,
            bug: None,
            store: None,
            drift_margin_us: None,
            latency_us: latency_max_us.map(|max| [LATENCY_CALM_US[0], max]),
            latency_calm_us: latency_max_us.map(|_| LATENCY_CALM_US),
            pruned_before_us: None,
            worker_processes: None,
            scan_every_us: None,
            params: String::new(),
        };
        history.push(Node::World, run);
        history
    }

    /// Marks the history as a store's, pruned of jobs that ended before `before_us`.
    pub fn pruned(&mut self, before_us: u64) {
        if let Event::Run { pruned_before_us, .. } = &mut self.entries[0].event {
            *pruned_before_us = Some(before_us);
        }
    }

    /// Whether a `faults_healed` line was written.
    pub fn healed(&self) -> bool {
        self.entries.iter().any(|entry| matches!(entry.event, Event::FaultsHealed {}))
    }

    /// Sets the time of the following entries.
    pub fn at(&mut self, t_us: u64) -> &mut History {
        self.now_us = t_us;
        self
    }

    /// Who asked about `job` at `epoch`: the batch's reclaimer, else the holder of that epoch,
    /// else the job's latest holder (`w0` if none).
    pub fn from(&self, job: JobId, epoch: Epoch, batch: Option<BatchId>) -> Node {
        match batch {
            Some(batch) => Node::Reclaimer(batch.reclaimer.0),
            None => {
                self.holders.get(&(job, epoch)).or_else(|| self.holder.get(&job)).copied().unwrap_or(Node::Worker(0))
            }
        }
    }

    fn hold(&mut self, job: JobId, epoch: Epoch, holder: Node, expires_at_us: u64) {
        self.holder.insert(job, holder);
        self.holders.insert((job, epoch), holder);
        self.leases.insert(job, (epoch, expires_at_us));
    }

    /// j1's lease under e1, expiring at 1 010, reclaimed at its expiry by r1 (batch 1/0), found
    /// empty and requeued; then j1 granted to w2 under e3 at 1 040, until 2 040. The rescue many
    /// checker tests start from.
    pub fn reclaim_j1_and_grant_it_to_w2(&mut self) -> usize {
        self.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        self.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        self.at(1_030).requeued(J1, E2, 1, Some(batch(1, 0)));
        self.at(1_040).granted(J1, E3, w(2), 2_040)
    }

    /// The listing the table would give now: live leases expired by now, earliest first.
    pub fn expired_now(&self) -> Vec<(JobId, Epoch, u64)> {
        let mut expired = self
            .leases
            .iter()
            .filter(|(_, &(_, expires_at_us))| expires_at_us <= self.now_us)
            .map(|(&job, &(epoch, expires_at_us))| (job, epoch, expires_at_us))
            .collect::<Vec<_>>();
        expired.sort_by_key(|&(job, _, expires_at_us)| (expires_at_us, job));
        expired.truncate(self.batch_max);
        expired
    }

    /// Opens `batch` with the listing the table would give now, unless the story listed it.
    fn open(&mut self, batch: BatchId) {
        if self.listed.contains(&batch) {
            return;
        }
        let expired = self.expired_now();
        self.listed(batch, &expired);
    }

    /// Appends any entry.
    pub fn push(&mut self, node: Node, event: Event) -> usize {
        self.entries.push(Entry { t_us: self.now_us, node, event });
        self.entries.len()
    }

    pub fn arrived(&mut self, job: JobId) -> usize {
        self.unfinished.insert(job);
        let backlog = self.unfinished.len();
        self.arrived_with_backlog(job, backlog)
    }

    pub fn arrived_with_backlog(&mut self, job: JobId, backlog: usize) -> usize {
        self.push(Node::Table, Event::Arrived { job, backlog })
    }

    pub fn rejected(&mut self, job: JobId) -> usize {
        self.push(Node::Table, Event::Rejected { job, reason: RejectReason::QueueFull })
    }

    pub fn duplicate(&mut self, job: JobId) -> usize {
        self.push(Node::Table, Event::Duplicate { job })
    }

    /// The table grants `job` to `owner`, as the job's next worker attempt.
    pub fn granted(&mut self, job: JobId, epoch: Epoch, owner: Node, expires_at_us: u64) -> usize {
        let attempt = {
            let attempts = self.attempts.entry(job).or_default();
            *attempts += 1;
            *attempts
        };
        self.hold(job, epoch, owner, expires_at_us);
        self.push(Node::Table, Event::Granted { job, epoch, owner, expires_at_us, attempt })
    }

    /// The table answers a retried acquire of `owner` with its grant of `job`, unchanged.
    pub fn regranted(&mut self, job: JobId, epoch: Epoch, owner: Node, expires_at_us: u64) -> usize {
        let attempt = self.attempts.get(&job).copied().unwrap_or_default();
        self.push(Node::Table, Event::Regranted { job, epoch, owner, expires_at_us, attempt })
    }

    pub fn acquire_empty(&mut self, owner: Node) -> usize {
        self.push(Node::Table, Event::AcquireEmpty { owner })
    }

    /// The table answers a copy of `owner`'s acquire that got `job` under `epoch` with nothing.
    pub fn acquire_spent(&mut self, owner: Node, job: JobId, epoch: Epoch) -> usize {
        self.push(Node::Table, Event::AcquireSpent { owner, job, epoch })
    }

    pub fn renewed(&mut self, job: JobId, epoch: Epoch, expires_at_us: u64) -> usize {
        let from = self.from(job, epoch, None);
        if let Some(lease) = self.leases.get_mut(&job).filter(|(live, _)| *live == epoch) {
            lease.1 = expires_at_us;
        }
        self.push(Node::Table, Event::Renewed { from, job, epoch, expires_at_us })
    }

    /// The table hands `job`'s lease (`epoch`, expiring at `expires_at_us`) to `batch`'s
    /// reclaimer under `new_epoch`, for one ttl from now. The first fence of a batch that was not
    /// listed writes its listing first (one line more).
    pub fn reclaimed(
        &mut self,
        job: JobId,
        epoch: Epoch,
        expires_at_us: u64,
        new_epoch: Epoch,
        batch: BatchId,
    ) -> usize {
        self.open(batch);
        let new_expires_at_us = self.now_us + TTL_US;
        let reclaimer = Node::Reclaimer(batch.reclaimer.0);
        self.hold(job, new_epoch, reclaimer, new_expires_at_us);
        let event = Event::Reclaimed { job, epoch, expires_at_us, new_epoch, new_expires_at_us, reclaimer, batch };
        self.push(Node::Table, event)
    }

    /// The table refuses `batch`'s fence of `job` at `expected`: the job is at `current` now.
    pub fn lost_race(&mut self, job: JobId, expected: Epoch, current: Epoch, batch: BatchId) -> usize {
        self.open(batch);
        self.push(Node::Table, Event::LostRace { job, expected, current, batch })
    }

    /// The table refuses `batch`'s fence of `job` at `expected`: renewed, it runs until then.
    pub fn not_expired(&mut self, job: JobId, expected: Epoch, expires_at_us: u64, batch: BatchId) -> usize {
        self.open(batch);
        self.push(Node::Table, Event::NotExpired { job, expected, expires_at_us, batch })
    }

    /// The table lists `leases` (job, epoch, expiry) to `batch`'s reclaimer.
    pub fn listed(&mut self, batch: BatchId, leases: &[(JobId, Epoch, u64)]) -> usize {
        self.listed.insert(batch);
        let reclaimer = Node::Reclaimer(batch.reclaimer.0);
        let leases = leases
            .iter()
            .map(|&(job, epoch, expires_at_us)| lease_history::Listing { job, epoch, expires_at_us })
            .collect();
        self.push(Node::Table, Event::Listed { reclaimer, batch, leases })
    }

    pub fn looked_up(
        &mut self,
        job: JobId,
        epoch: Epoch,
        found: Option<OutputId>,
        rival: Option<OutputId>,
        batch: Option<BatchId>,
    ) -> usize {
        let op = OpId::for_job(job);
        let from = self.from(job, epoch, batch);
        self.push(Node::Ledger, Event::LookedUp { from, job, op, epoch, found, rival, batch })
    }

    pub fn executing(&mut self, worker: Node, job: JobId, epoch: Epoch) -> usize {
        self.push(worker, Event::Executing { job, op: OpId::for_job(job), epoch })
    }

    pub fn dependency_failed(&mut self, job: JobId, epoch: Epoch) -> usize {
        self.dependency_answered_failed(job, epoch, false)
    }

    /// The dependency answers "failed" after its effect was applied (a timeout after the fact).
    pub fn failed_after_effect(&mut self, job: JobId, epoch: Epoch) -> usize {
        self.dependency_answered_failed(job, epoch, true)
    }

    /// The dependency refuses the call for good, before any effect.
    pub fn refused_for_good(&mut self, job: JobId, epoch: Epoch) -> usize {
        let from = self.from(job, epoch, None);
        let event =
            Event::DependencyFailed { from, job, op: OpId::for_job(job), epoch, after_effect: false, permanent: true };
        self.push(Node::Ledger, event)
    }

    fn dependency_answered_failed(&mut self, job: JobId, epoch: Epoch, after_effect: bool) -> usize {
        let from = self.from(job, epoch, None);
        let event =
            Event::DependencyFailed { from, job, op: OpId::for_job(job), epoch, after_effect, permanent: false };
        self.push(Node::Ledger, event)
    }

    pub fn applied(&mut self, job: JobId, epoch: Epoch, output: OutputId) -> usize {
        self.applied_to(OpId::for_job(job), epoch, output)
    }

    pub fn applied_to(&mut self, op: OpId, epoch: Epoch, output: OutputId) -> usize {
        let from = self.from(op.job, epoch, None);
        self.push(Node::Ledger, Event::EffectApplied { from, job: op.job, op, epoch, output })
    }

    pub fn effect_rejected(&mut self, job: JobId, epoch: Epoch, output: OutputId, reason: EffectRejectReason) -> usize {
        let op = OpId::for_job(job);
        let from = self.from(job, epoch, None);
        self.push(Node::Ledger, Event::EffectRejected { from, job, op, epoch, output, reason })
    }

    /// The dependency's own second write of `output` for `job` at `epoch`, a rival the ledger
    /// refuses as a conflict (from: the ledger, no worker asked for it).
    pub fn rival(&mut self, job: JobId, epoch: Epoch, output: OutputId) -> usize {
        let (op, reason) = (OpId::for_job(job), EffectRejectReason::Conflict);
        self.push(Node::Ledger, Event::EffectRejected { from: Node::Ledger, job, op, epoch, output, reason })
    }

    pub fn adopted(&mut self, node: Node, job: JobId, output: OutputId, epoch: Epoch) -> usize {
        self.push(node, Event::Adopted { job, op: OpId::for_job(job), output, epoch })
    }

    fn terminal(&mut self, job: JobId, outcome: OutcomeKind, epoch: Epoch, batch: Option<BatchId>) -> Event {
        self.unfinished.remove(&job);
        self.leases.remove(&job);
        let from = self.from(job, epoch, batch);
        Event::Terminal {
            from,
            job,
            outcome,
            output: None,
            epoch,
            attempts: None,
            identities: None,
            batch,
            permanent: false,
        }
    }

    pub fn completed(&mut self, job: JobId, output: OutputId, epoch: Epoch, batch: Option<BatchId>) -> usize {
        let mut event = self.terminal(job, OutcomeKind::Completed, epoch, batch);
        if let Event::Terminal { output: slot, .. } = &mut event {
            *slot = Some(output);
        }
        self.push(Node::Table, event)
    }

    /// The job dead-lettered at its worker's word (a `dead_letter` request), after `attempts`.
    pub fn dead_lettered_for_good(&mut self, job: JobId, epoch: Epoch, attempts: u32) -> usize {
        let mut event = self.terminal(job, OutcomeKind::DeadLettered, epoch, None);
        if let Event::Terminal { attempts: slot, permanent, .. } = &mut event {
            *slot = Some(attempts);
            *permanent = true;
        }
        self.push(Node::Table, event)
    }

    pub fn dead_lettered(&mut self, job: JobId, epoch: Epoch, attempts: u32, batch: Option<BatchId>) -> usize {
        let mut event = self.terminal(job, OutcomeKind::DeadLettered, epoch, batch);
        if let Event::Terminal { attempts: slot, .. } = &mut event {
            *slot = Some(attempts);
        }
        self.push(Node::Table, event)
    }

    pub fn quarantined(
        &mut self,
        job: JobId,
        epoch: Epoch,
        identities: [OutputId; 2],
        batch: Option<BatchId>,
    ) -> usize {
        let mut event = self.terminal(job, OutcomeKind::Quarantined, epoch, batch);
        if let Event::Terminal { identities: slot, .. } = &mut event {
            *slot = Some(identities);
        }
        self.push(Node::Table, event)
    }

    /// The table answers a completion of `job`, completed with `output` already, as idempotent.
    pub fn already_completed(&mut self, job: JobId, epoch: Epoch, output: OutputId, batch: Option<BatchId>) -> usize {
        let from = self.from(job, epoch, batch);
        self.push(Node::Table, Event::AlreadyCompleted { from, job, epoch, output })
    }

    pub fn requeued(&mut self, job: JobId, epoch: Epoch, attempts: u32, batch: Option<BatchId>) -> usize {
        let from = self.from(job, epoch, batch);
        self.leases.remove(&job);
        self.push(Node::Table, Event::Requeued { from, job, epoch, attempts, batch })
    }

    /// The holder of `job` at `epoch` releases the grant: it is undone, attempt included.
    pub fn released(&mut self, job: JobId, epoch: Epoch) -> usize {
        let from = self.from(job, epoch, None);
        self.leases.remove(&job);
        let attempts = self.attempts.entry(job).or_default();
        *attempts = attempts.saturating_sub(1);
        let attempts = *attempts;
        self.push(Node::Table, Event::Released { from, job, epoch, attempts })
    }

    pub fn refused(&mut self, job: JobId, epoch: Epoch, request: RefusedRequest, reason: RefuseReason) -> usize {
        self.refused_in(job, epoch, request, reason, None)
    }

    /// The table refuses a request about `job` at `epoch`, from `batch`'s reclaimer if any.
    pub fn refused_in(
        &mut self,
        job: JobId,
        epoch: Epoch,
        request: RefusedRequest,
        reason: RefuseReason,
        batch: Option<BatchId>,
    ) -> usize {
        let from = self.from(job, epoch, batch);
        self.push(Node::Table, Event::Refused { from, job, epoch, request, reason, batch })
    }

    pub fn abandoned(&mut self, worker: Node, job: JobId, epoch: Epoch, why: AbandonReason) -> usize {
        self.push(worker, Event::Abandoned { job, epoch, why })
    }

    pub fn batch_stopped(&mut self, batch: BatchId, job: JobId, identities: [OutputId; 2]) -> usize {
        let reclaimer = Node::Reclaimer(batch.reclaimer.0);
        self.push(reclaimer, Event::BatchStopped { batch, job, identities, untouched: 0 })
    }

    pub fn gave_up(&mut self, batch: BatchId, job: JobId) -> usize {
        let reclaimer = Node::Reclaimer(batch.reclaimer.0);
        self.push(reclaimer, Event::GaveUp { batch, job })
    }

    pub fn crashed(&mut self, target: Node, point: Point, job: Option<JobId>) -> usize {
        self.push(Node::World, Event::Crashed { target, point, job })
    }

    /// The network lost the answer to `target`'s `message` request about `job`, on its way from
    /// the table.
    pub fn lost_reply(&mut self, target: Node, message: lease_history::MessageKind, job: Option<JobId>) -> usize {
        self.push(Node::World, Event::Lost { target: Node::Table, peer: target, message, reply: true, job })
    }

    /// The network held the answer to `target`'s `message` request about `job` back for
    /// `len_us`, on its way from the table.
    pub fn delayed_reply(
        &mut self,
        target: Node,
        message: lease_history::MessageKind,
        job: Option<JobId>,
        len_us: u64,
    ) -> usize {
        self.push(Node::World, Event::Delayed { target: Node::Table, peer: target, message, reply: true, job, len_us })
    }

    pub fn paused(&mut self, target: Node) -> usize {
        self.push(Node::World, Event::Paused { target, point: None, job: None })
    }

    pub fn resumed(&mut self, target: Node) -> usize {
        self.push(Node::World, Event::Resumed { target })
    }

    pub fn partitioned(&mut self, target: Node, peer: Option<Node>) -> usize {
        self.push(Node::World, Event::Partitioned { target, peer })
    }

    pub fn healed_link(&mut self, target: Node, peer: Option<Node>) -> usize {
        self.push(Node::World, Event::Healed { target, peer })
    }

    pub fn restarted(&mut self, target: Node) -> usize {
        self.push(Node::World, Event::Restarted { target })
    }

    pub fn faults_healed(&mut self) -> usize {
        self.push(Node::World, Event::FaultsHealed {})
    }
}

/// Line numbers of [`crash_after_effect_story`].
pub(crate) const STORY_GRANTED: usize = 3;
pub(crate) const STORY_EXECUTING: usize = 4;
pub(crate) const STORY_APPLIED: usize = 5;
pub(crate) const STORY_LISTED: usize = 7;
pub(crate) const STORY_RECLAIMED: usize = 8;
pub(crate) const STORY_LOOKED_UP: usize = 9;
pub(crate) const STORY_ADOPTED: usize = 10;
pub(crate) const STORY_TERMINAL: usize = 11;

/// A correct history (batch_max 2, capacity 2, ttl 1 000 us): worker w1 applies j1's effect and
/// crashes before completing; at its expiry r1 reclaims the lease and adopts the output.
///
/// ```text
///  1 t=0      run
///  2 t=0      arrived j1
///  3 t=10     granted j1 e1 to w1, expires 1_010
///  4 t=20     w1 executing j1 e1
///  5 t=30     effect_applied j1 e1 o7
///  6 t=40     crashed w1 after_effect j1
///  7 t=1_010  listed r1#0: j1 e1 (expired 1_010)
///  8 t=1_010  reclaimed j1 e1 (expired 1_010) as e2 by r1 batch r1#0, expires 2_010
///  9 t=1_020  looked_up j1 e2 found o7, batch r1#0
/// 10 t=1_020  r1 adopted j1 o7 e2
/// 11 t=1_030  terminal completed j1 o7 e2, batch r1#0
/// ```
pub(crate) fn crash_after_effect_story() -> History {
    let mut history = History::new(2, 2);
    assert_eq!(history.at(0).arrived(J1), 2);
    assert_eq!(history.at(10).granted(J1, E1, w(1), 1_010), STORY_GRANTED);
    assert_eq!(history.at(20).executing(w(1), J1, E1), STORY_EXECUTING);
    assert_eq!(history.at(30).applied(J1, E1, O7), STORY_APPLIED);
    assert_eq!(history.at(40).crashed(w(1), Point::AfterEffect, Some(J1)), 6);
    assert_eq!(history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010)]), STORY_LISTED);
    assert_eq!(history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0)), STORY_RECLAIMED);
    assert_eq!(history.at(1_020).looked_up(J1, E2, Some(O7), None, Some(batch(1, 0))), STORY_LOOKED_UP);
    assert_eq!(history.at(1_020).adopted(r(1), J1, O7, E2), STORY_ADOPTED);
    assert_eq!(history.at(1_030).completed(J1, O7, E2, Some(batch(1, 0))), STORY_TERMINAL);
    history
}
