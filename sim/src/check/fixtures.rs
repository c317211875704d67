//! Hand-made histories for the checkers' tests: a builder that writes one entry per call and
//! returns its line number, and a correct story to break in small ways.

use crate::history::{
    AbandonReason, CrashPoint, EffectRejectReason, Entry, Event, Node, OutcomeKind, RefuseReason, RefusedRequest,
    RejectReason,
};
use lease_core::{BatchId, Epoch, JobId, OpId, OutputId, ReclaimerId};
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
/// its 1-based line number; `arrived` fills in the backlog it should carry.
pub(crate) struct History {
    pub entries: Vec<Entry>,
    now_us: u64,
    unfinished: BTreeSet<JobId>,
    /// Who holds each job's latest lease (its latest grant or reclaim): the `from` of the table's
    /// and the ledger's answers that name no batch.
    holder: BTreeMap<JobId, Node>,
    /// Batches with a `listed` line.
    listed: BTreeSet<BatchId>,
}

impl History {
    /// A history whose line 1 is a `run` line with these limits.
    pub fn new(batch_max: usize, capacity: usize) -> History {
        History::with_params(batch_max, capacity, "")
    }

    /// A history whose line 1 is a `run` line with these limits and `params`.
    pub fn with_params(batch_max: usize, capacity: usize, params: &str) -> History {
        let mut history = History {
            entries: Vec::new(),
            now_us: 0,
            unfinished: BTreeSet::new(),
            holder: BTreeMap::new(),
            listed: BTreeSet::new(),
        };
        let run = Event::Run {
            history_version: crate::history::HISTORY_VERSION,
            seed: 1,
            scenario: "fixture".into(),
            batch_max,
            capacity,
            lease_ttl_us: TTL_US,
            attempts_max: 3,
            bug: None,
            params: params.to_string(),
        };
        history.push(Node::World, run);
        history
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

    /// Who asked about `job`: the batch's reclaimer, else the job's latest holder (`w0` if none).
    pub fn from(&self, job: JobId, batch: Option<BatchId>) -> Node {
        match batch {
            Some(batch) => Node::Reclaimer(batch.reclaimer.0),
            None => self.holder.get(&job).copied().unwrap_or(Node::Worker(0)),
        }
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

    pub fn granted(&mut self, job: JobId, epoch: Epoch, owner: Node, expires_at_us: u64) -> usize {
        let attempt = u32::try_from(epoch.0).unwrap();
        self.holder.insert(job, owner);
        self.push(Node::Table, Event::Granted { job, epoch, owner, expires_at_us, attempt })
    }

    /// The table answers a retried acquire of `owner` with its standing grant.
    pub fn regranted(&mut self, job: JobId, epoch: Epoch, owner: Node, expires_at_us: u64) -> usize {
        let attempt = u32::try_from(epoch.0).unwrap();
        self.push(Node::Table, Event::Regranted { job, epoch, owner, expires_at_us, attempt })
    }

    pub fn renewed(&mut self, job: JobId, epoch: Epoch, expires_at_us: u64) -> usize {
        let from = self.from(job, None);
        self.push(Node::Table, Event::Renewed { from, job, epoch, expires_at_us })
    }

    /// Writes a `listed` line showing the one lease `batch` fences first, unless the batch was
    /// listed already: a test that cares about the listing writes it with [`History::listed`].
    fn list_if_new(&mut self, batch: BatchId, job: JobId, epoch: Epoch, expires_at_us: u64) {
        if !self.listed.contains(&batch) {
            self.listed(batch, &[(job, epoch, expires_at_us)]);
        }
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
        self.list_if_new(batch, job, epoch, expires_at_us);
        let new_expires_at_us = self.now_us + TTL_US;
        let reclaimer = Node::Reclaimer(batch.reclaimer.0);
        self.holder.insert(job, reclaimer);
        let event = Event::Reclaimed { job, epoch, expires_at_us, new_epoch, new_expires_at_us, reclaimer, batch };
        self.push(Node::Table, event)
    }

    /// The table refuses `batch`'s fence of `job` at `expected`: the job is at `current` now.
    pub fn lost_race(&mut self, job: JobId, expected: Epoch, current: Epoch, batch: BatchId) -> usize {
        self.list_if_new(batch, job, expected, 0);
        self.push(Node::Table, Event::LostRace { job, expected, current, batch })
    }

    /// The table refuses `batch`'s fence of `job` at `expected`: the lease runs to `expires_at_us`.
    pub fn not_expired(&mut self, job: JobId, expected: Epoch, expires_at_us: u64, batch: BatchId) -> usize {
        self.list_if_new(batch, job, expected, expires_at_us);
        self.push(Node::Table, Event::NotExpired { job, expected, expires_at_us, batch })
    }

    /// The table lists `leases` (job, epoch, expiry) to `batch`'s reclaimer.
    pub fn listed(&mut self, batch: BatchId, leases: &[(JobId, Epoch, u64)]) -> usize {
        self.listed.insert(batch);
        let reclaimer = Node::Reclaimer(batch.reclaimer.0);
        let leases = leases
            .iter()
            .map(|&(job, epoch, expires_at_us)| crate::history::Listing { job, epoch, expires_at_us })
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
        let from = self.from(job, batch);
        self.push(Node::Ledger, Event::LookedUp { from, job, op, epoch, found, rival, batch })
    }

    pub fn executing(&mut self, worker: Node, job: JobId, epoch: Epoch) -> usize {
        self.push(worker, Event::Executing { job, op: OpId::for_job(job), epoch })
    }

    pub fn dependency_failed(&mut self, job: JobId, epoch: Epoch) -> usize {
        let from = self.from(job, None);
        let event = Event::DependencyFailed { from, job, op: OpId::for_job(job), epoch, after_effect: false };
        self.push(Node::Ledger, event)
    }

    pub fn applied(&mut self, job: JobId, epoch: Epoch, output: OutputId) -> usize {
        self.applied_to(OpId::for_job(job), epoch, output)
    }

    pub fn applied_to(&mut self, op: OpId, epoch: Epoch, output: OutputId) -> usize {
        let from = self.from(op.job, None);
        self.push(Node::Ledger, Event::EffectApplied { from, job: op.job, op, epoch, output })
    }

    pub fn effect_rejected(&mut self, job: JobId, epoch: Epoch, output: OutputId, reason: EffectRejectReason) -> usize {
        let op = OpId::for_job(job);
        let from = self.from(job, None);
        self.push(Node::Ledger, Event::EffectRejected { from, job, op, epoch, output, reason })
    }

    pub fn adopted(&mut self, node: Node, job: JobId, output: OutputId, epoch: Epoch) -> usize {
        self.push(node, Event::Adopted { job, op: OpId::for_job(job), output, epoch })
    }

    fn terminal(&mut self, job: JobId, outcome: OutcomeKind, epoch: Epoch, batch: Option<BatchId>) -> Event {
        self.unfinished.remove(&job);
        let from = self.from(job, batch);
        Event::Terminal { from, job, outcome, output: None, epoch, attempts: None, identities: None, batch }
    }

    pub fn completed(&mut self, job: JobId, output: OutputId, epoch: Epoch, batch: Option<BatchId>) -> usize {
        let mut event = self.terminal(job, OutcomeKind::Completed, epoch, batch);
        if let Event::Terminal { output: slot, .. } = &mut event {
            *slot = Some(output);
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

    pub fn requeued(&mut self, job: JobId, epoch: Epoch, attempts: u32, batch: Option<BatchId>) -> usize {
        let from = self.from(job, batch);
        self.push(Node::Table, Event::Requeued { from, job, epoch, attempts, batch })
    }

    pub fn refused(&mut self, job: JobId, epoch: Epoch, request: RefusedRequest, reason: RefuseReason) -> usize {
        let from = self.from(job, None);
        self.push(Node::Table, Event::Refused { from, job, epoch, request, reason, batch: None })
    }

    pub fn abandoned(&mut self, worker: Node, job: JobId, epoch: Epoch, why: AbandonReason) -> usize {
        self.push(worker, Event::Abandoned { job, epoch, why })
    }

    pub fn batch_stopped(&mut self, batch: BatchId, job: JobId, identities: [OutputId; 2]) -> usize {
        let reclaimer = Node::Reclaimer(batch.reclaimer.0);
        self.push(reclaimer, Event::BatchStopped { batch, job, identities, untouched: 0 })
    }

    pub fn crashed(&mut self, target: Node, point: CrashPoint, job: Option<JobId>) -> usize {
        self.push(Node::World, Event::Crashed { target, point, job })
    }

    pub fn paused(&mut self, target: Node) -> usize {
        self.push(Node::World, Event::Paused { target })
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
pub(crate) const STORY_RECLAIMED: usize = 8;
pub(crate) const STORY_LOOKED_UP: usize = 9;
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
///  7 t=1_010  listed to r1, batch r1#0: j1 e1 (expired 1_010)
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
    assert_eq!(history.at(40).crashed(w(1), CrashPoint::AfterEffect, Some(J1)), 6);
    assert_eq!(history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0)), STORY_RECLAIMED);
    assert_eq!(history.at(1_020).looked_up(J1, E2, Some(O7), None, Some(batch(1, 0))), STORY_LOOKED_UP);
    assert_eq!(history.at(1_020).adopted(r(1), J1, O7, E2), 10);
    assert_eq!(history.at(1_030).completed(J1, O7, E2, Some(batch(1, 0))), STORY_TERMINAL);
    history
}
