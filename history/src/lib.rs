//! # lease-history: the history of a lease-recovery run, one JSON object per line
//!
//! This is the contract for outside checkers (Jepsen-style), so it is kept stable. Every line has
//! `t_us` (simulation time, which is the table's clock, in microseconds), `node` and `kind`; each
//! kind carries its own fields, listed on [`Event`]. Times and expiries are the exact values the
//! table used. Optional fields are omitted when absent.

pub mod answers;
pub mod atomic;
pub mod render;

use lease_core::{BatchId, Epoch, JobId, OpId, OutputId};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The version of the history contract this crate writes and reads, carried in the `run` line's
/// `history_version`. It only grows; a history of another version is refused, never guessed at.
///
/// - 1 (no `history_version` field): the first contract.
/// - 2: every request that reaches the table or the ledger is on a line with its answer,
///   including the empty ones (`duplicate`, `acquire_empty`, `listed`, `lost_race`,
///   `not_expired`), and each such line names the requester in `from`.
/// - 3: message faults are on the history (`delayed`, `duplicated`), and a `paused` that a strike
///   dealt at a protocol point names the point and the job; a worker releases a grant it never
///   took (`abandoned` `declined`, then `released`, or `refused` `release`).
/// - 4: every lost message is on the history (`lost`), and the `run` line's `params` describe the
///   world (its shape, timing and network latency), not the rates a generator drew faults at: a
///   run replayed from its plan draws nothing, and writes the same `run` line.
/// - 5: the windows of the faults that strike no single node are on the history: the
///   dependency's (`dependency_degraded` with its rates, `dependency_restored`) and an arrival
///   surge's (`surge_started`, `surge_ended`). A window still open at the heal ends with
///   `faults_healed`, which writes no closing line of its own.
/// - 6: the `run` line's facts that a checker reads are typed fields (`drift_margin_us`,
///   `latency_us`, `latency_calm_us`), and `params` is for people only and may be absent, as may
///   `seed` and `scenario`: a history written outside the simulator needs only the limits.
/// - 7: a worker dead-letters a job its dependency refused for good (`dependency_failed` with
///   `permanent`, then `terminal` `dead_lettered` with `permanent`, or `refused` `dead_letter`);
///   a worker's process that shuts down hands back a grant it never ran (`abandoned` `shutdown`,
///   then `released`); and a runtime records its handler's output itself (a `record` message). A
///   version-6 reader would judge a `permanent` dead-letter as a requeue out of attempts.
/// - 8: the world tells a node to stop (`stopping`), as a deploy does, and says when it has
///   exited (`stopped`): a version-7 reader would take the lease a draining worker left to expire
///   for one lost without a cause.
/// - 9: a reclaimer's give-up is on the history (`gave_up`), and the `run` line may state the
///   reclaimers' `scan_every_us`, which `give_up_backs_off` reads.
/// - 10: a worker runtime's write of its `executing` lines is a message, `line`, that a `lost`
///   line may name: lost, the lines never committed; its answer lost, they did, unknown to the
///   runtime, which starts none of those effects and never releases their leases. A version-9
///   reader knows no message `line`.
/// - 11: a node may be struck at `before_line`, between a worker's decision to start an effect
///   and its `executing` line reaching the store. A version-10 reader knows no such point.
pub const HISTORY_VERSION: u32 = 11;

/// The oldest contract version this crate still reads. A version-5 `run` line has none of
/// version 6's typed fields, so the checkers assume their stated defaults.
pub const HISTORY_VERSION_MIN: u32 = 5;

/// A probability (0 to 1) on a history line: an `f64` that compares and hashes by its bits, so
/// that lines stay `Eq` and `Hash`. It serialises as the plain number.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Rate(pub f64);

impl PartialEq for Rate {
    fn eq(&self, other: &Rate) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Rate {}

impl std::hash::Hash for Rate {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl PartialOrd for Rate {
    fn partial_cmp(&self, other: &Rate) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Rate {
    fn cmp(&self, other: &Rate) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// One lease as a reclaim listing showed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Listing {
    /// The job.
    pub job: JobId,
    /// The lease's epoch.
    pub epoch: Epoch,
    /// The lease's expiry by the table's clock.
    pub expires_at_us: u64,
}

/// Where an event happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    /// The lease table.
    Table,
    /// The effect ledger and the dependency in front of it.
    Ledger,
    /// Worker number `n`.
    Worker(u32),
    /// Reclaimer number `n`.
    Reclaimer(u32),
    /// The arrival generator.
    Arrivals,
    /// The simulator itself: faults and phases.
    World,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Table => f.write_str("table"),
            Node::Ledger => f.write_str("ledger"),
            Node::Worker(n) => write!(f, "w{n}"),
            Node::Reclaimer(n) => write!(f, "r{n}"),
            Node::Arrivals => f.write_str("arrivals"),
            Node::World => f.write_str("world"),
        }
    }
}

impl FromStr for Node {
    type Err = String;
    fn from_str(s: &str) -> Result<Node, String> {
        let numbered = |prefix: &str| s.strip_prefix(prefix).and_then(|n| n.parse::<u32>().ok());
        match s {
            "table" => Ok(Node::Table),
            "ledger" => Ok(Node::Ledger),
            "arrivals" => Ok(Node::Arrivals),
            "world" => Ok(Node::World),
            _ => numbered("w")
                .map(Node::Worker)
                .or_else(|| numbered("r").map(Node::Reclaimer))
                .ok_or_else(|| format!("unknown node {s:?}")),
        }
    }
}

impl Serialize for Node {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How a job ended, as the history spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// `completed`, with `output`.
    Completed,
    /// `dead_lettered`, with `attempts`.
    DeadLettered,
    /// `quarantined`, with `recorded` and `rival`.
    Quarantined,
}

/// Gives each history enum a `Display` that writes its `name()`: the string the history spells,
/// with no allocation.
macro_rules! display_by_name {
    ($($kind:ty),+ $(,)?) => {$(
        impl fmt::Display for $kind {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.name())
            }
        }
    )+};
}

/// Why the table turned an arrival away: `rejected`'s `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// `queue_full`: the queue already held `capacity` accepted, non-terminal jobs.
    QueueFull,
}

impl RejectReason {
    /// The reason as the history spells it.
    pub fn name(self) -> &'static str {
        match self {
            RejectReason::QueueFull => "queue_full",
        }
    }
}

impl From<lease_core::Rejection> for RejectReason {
    fn from(rejection: lease_core::Rejection) -> RejectReason {
        match rejection {
            lease_core::Rejection::QueueFull { .. } => RejectReason::QueueFull,
        }
    }
}

/// Why the ledger did not record an output: `effect_rejected`'s `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectRejectReason {
    /// `fenced`: the epoch is below the operation's fence, a stale writer.
    Fenced,
    /// `conflict`: a different output is recorded, and it is never overwritten.
    Conflict,
    /// `already_applied`: the same output was recorded before, a no-op.
    AlreadyApplied,
}

impl EffectRejectReason {
    /// The reason as the history spells it.
    pub fn name(self) -> &'static str {
        match self {
            EffectRejectReason::Fenced => "fenced",
            EffectRejectReason::Conflict => "conflict",
            EffectRejectReason::AlreadyApplied => "already_applied",
        }
    }

    /// Why the ledger's answer `apply` recorded nothing, or `None` when it recorded the output.
    pub fn of(apply: lease_core::Apply) -> Option<EffectRejectReason> {
        match apply {
            lease_core::Apply::Applied => None,
            lease_core::Apply::AlreadyApplied => Some(EffectRejectReason::AlreadyApplied),
            lease_core::Apply::Fenced { .. } => Some(EffectRejectReason::Fenced),
            lease_core::Apply::Conflict { .. } => Some(EffectRejectReason::Conflict),
        }
    }
}

/// What a refused request asked the table for: `refused`'s `request`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusedRequest {
    /// `renew`: a worker's heartbeat.
    Renew,
    /// `complete`: a worker's or reclaimer's completion with an output.
    Complete,
    /// `requeue`: putting a leased job back in the queue.
    Requeue,
    /// `quarantine`: a reclaimer's quarantine on conflicting outputs.
    Quarantine,
    /// `release`: a worker handing back a grant it never took.
    Release,
    /// `dead_letter`: a worker ending a job after its dependency refused it for good.
    DeadLetter,
}

impl RefusedRequest {
    /// The request as the history spells it.
    pub fn name(self) -> &'static str {
        match self {
            RefusedRequest::Renew => "renew",
            RefusedRequest::Complete => "complete",
            RefusedRequest::Requeue => "requeue",
            RefusedRequest::Quarantine => "quarantine",
            RefusedRequest::Release => "release",
            RefusedRequest::DeadLetter => "dead_letter",
        }
    }
}

/// Why the table refused a request: `refused`'s `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefuseReason {
    /// `stale_epoch`: the request carried an epoch that is not the job's current one.
    StaleEpoch,
    /// `expired`: the lease had expired by the table's clock.
    Expired,
    /// `not_leased`: the job is queued, not leased.
    NotLeased,
    /// `already_terminal`: the job has reached its terminal outcome already.
    AlreadyTerminal,
    /// `conflict`: a completion offered an output other than the recorded one.
    Conflict,
}

impl RefuseReason {
    /// The reason as the history spells it.
    pub fn name(self) -> &'static str {
        match self {
            RefuseReason::StaleEpoch => "stale_epoch",
            RefuseReason::Expired => "expired",
            RefuseReason::NotLeased => "not_leased",
            RefuseReason::AlreadyTerminal => "already_terminal",
            RefuseReason::Conflict => "conflict",
        }
    }
}

impl From<lease_core::Refusal> for RefuseReason {
    fn from(refusal: lease_core::Refusal) -> RefuseReason {
        match refusal {
            lease_core::Refusal::StaleEpoch { .. } => RefuseReason::StaleEpoch,
            lease_core::Refusal::Expired { .. } => RefuseReason::Expired,
            lease_core::Refusal::NotLeased => RefuseReason::NotLeased,
            lease_core::Refusal::AlreadyTerminal => RefuseReason::AlreadyTerminal,
        }
    }
}

/// Why a worker stopped acting on its lease: `abandoned`'s `why`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbandonReason {
    /// `self_fenced`: its own estimate of the expiry, minus the margin, had passed.
    SelfFenced,
    /// `lease_lost`: the table refused a renewal.
    LeaseLost,
    /// `effect_fenced`: the ledger fenced its effect, so a newer epoch owns the operation.
    EffectFenced,
    /// `conflict`: two different outputs claim the operation, left for a reclaimer to quarantine.
    Conflict,
    /// `declined`: a grant answered an acquire the worker no longer waited for; it hands the job
    /// back (a `requeue`) without ever taking it.
    Declined,
    /// `shutdown`: the worker's process shut down before it started the job's effect (the grant
    /// came while it drained, or its lookup was still in flight when the grace ran out); it hands
    /// the job back (a `release`), its attempt undone. The runtime's reason, not a machine's.
    Shutdown,
}

impl AbandonReason {
    /// The reason as the history spells it.
    pub fn name(self) -> &'static str {
        match self {
            AbandonReason::SelfFenced => "self_fenced",
            AbandonReason::LeaseLost => "lease_lost",
            AbandonReason::EffectFenced => "effect_fenced",
            AbandonReason::Conflict => "conflict",
            AbandonReason::Declined => "declined",
            AbandonReason::Shutdown => "shutdown",
        }
    }
}

impl From<lease_core::Abandon> for AbandonReason {
    fn from(abandon: lease_core::Abandon) -> AbandonReason {
        match abandon {
            lease_core::Abandon::SelfFenced => AbandonReason::SelfFenced,
            lease_core::Abandon::LeaseLost => AbandonReason::LeaseLost,
            lease_core::Abandon::EffectFenced => AbandonReason::EffectFenced,
            lease_core::Abandon::Conflict => AbandonReason::Conflict,
            lease_core::Abandon::Declined => AbandonReason::Declined,
        }
    }
}

/// A protocol point: where a node is struck (`crashed`'s and `paused`'s `point`), as the
/// simulator's fault plans, the live runner's strikes and the runtime's hooks all name it;
/// `at_random` is a crash the fault schedule dealt, at no particular point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// `before_effect`: a worker decided to call the dependency; the call had not left.
    BeforeEffect,
    /// `after_effect`: a worker's effect was accepted by the ledger; it had not acknowledged it.
    AfterEffect,
    /// `during_ack`: a worker sent its completion; the answer had not come.
    DuringAck,
    /// `mid_reclaim`: a reclaimer fenced a lease; it had not finished with it.
    MidReclaim,
    /// `before_renew`: a worker decided to heartbeat. Scenarios only stall here today.
    BeforeRenew,
    /// `before_renew_reply`: a renewal's answer reached its worker, which has not yet taken it.
    /// Only stalls strike here.
    BeforeRenewReply,
    /// `after_listing`: a reclaimer has a listing of expired leases and has not fenced them yet.
    /// Only stalls strike here.
    AfterListing,
    /// `before_listing`: a reclaimer decided to scan and has not asked yet. A plan holds its scans
    /// here; no history line names this point.
    BeforeListing,
    /// `at_random`: the fault schedule crashed the node wherever it was.
    AtRandom,
    /// `buffered`: a worker decided an effect while every handler its process allows was taken;
    /// the effect waits in the process's buffer, not started (no `executing` line yet). Once its
    /// lease is given up there, the worker releases it. Only plans strike here.
    Buffered,
    /// `before_line`: a worker decided an effect (its lease still acted on) and its `executing`
    /// line has not reached the store: a stall here is a write waiting for the store (a lock,
    /// a failover), and the store writes the line only if the lease is still held when it
    /// arrives. Version 11 and later.
    BeforeLine,
}

impl Point {
    /// The point as the history spells it.
    pub fn name(self) -> &'static str {
        match self {
            Point::BeforeEffect => "before_effect",
            Point::AfterEffect => "after_effect",
            Point::DuringAck => "during_ack",
            Point::MidReclaim => "mid_reclaim",
            Point::BeforeRenew => "before_renew",
            Point::BeforeRenewReply => "before_renew_reply",
            Point::AfterListing => "after_listing",
            Point::BeforeListing => "before_listing",
            Point::AtRandom => "at_random",
            Point::Buffered => "buffered",
            Point::BeforeLine => "before_line",
        }
    }
}

/// What a message on the network is: the request it makes, or answers. `delayed`'s and
/// `duplicated`'s `message`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// `enqueue`: the arrival generator offers a job.
    Enqueue,
    /// `acquire`: a worker asks for a job.
    Acquire,
    /// `renew`: a worker's heartbeat.
    Renew,
    /// `complete`: a worker or reclaimer ends a job with an output.
    Complete,
    /// `requeue`: a worker or reclaimer hands a job back (dead-lettered when out of attempts).
    Requeue,
    /// `execute`: a worker's call to the dependency through the ledger.
    Execute,
    /// `lookup`: a ledger lookup, which raises the operation's fence.
    Lookup,
    /// `list`: a reclaimer's listing of expired leases.
    List,
    /// `fence`: a reclaimer's compare-and-set on an expired lease.
    Fence,
    /// `quarantine`: a reclaimer ends a job with two outputs.
    Quarantine,
    /// `release`: a worker hands back a grant it never took.
    Release,
    /// `record`: a worker records its handler's output in the ledger, under its epoch (the
    /// runtime's record of an output the dependency did not record itself).
    Record,
    /// `dead_letter`: a worker ends a job its dependency refused for good.
    DeadLetter,
    /// `line`: a worker runtime writes an `executing` line of its own to the store (with the
    /// others of its turn, in one transaction). Lost, the write never committed and the line is
    /// not in the history; its answer lost, the line is in the history, and the runtime, not
    /// knowing it written, starts no effect under it and writes it again.
    Line,
}

impl MessageKind {
    /// The kind as the history spells it.
    pub fn name(self) -> &'static str {
        match self {
            MessageKind::Enqueue => "enqueue",
            MessageKind::Acquire => "acquire",
            MessageKind::Renew => "renew",
            MessageKind::Complete => "complete",
            MessageKind::Requeue => "requeue",
            MessageKind::Execute => "execute",
            MessageKind::Lookup => "lookup",
            MessageKind::List => "list",
            MessageKind::Fence => "fence",
            MessageKind::Quarantine => "quarantine",
            MessageKind::Release => "release",
            MessageKind::Record => "record",
            MessageKind::DeadLetter => "dead_letter",
            MessageKind::Line => "line",
        }
    }
}

display_by_name!(RejectReason, EffectRejectReason, RefusedRequest, RefuseReason, AbandonReason, Point, MessageKind);

/// One history line's payload. `kind` is the variant's snake_case name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The first line: the seed and every limit and parameter of the run.
    Run {
        /// The history contract's version ([`HISTORY_VERSION`]); 1 when the field is absent.
        #[serde(default = "version_one")]
        history_version: u32,
        /// The seed (0 when the writer has none).
        #[serde(default)]
        seed: u64,
        /// The scenario's name, or the writer's (empty when absent).
        #[serde(default)]
        scenario: String,
        /// The most leases one reclaim batch may take.
        batch_max: usize,
        /// The queue's capacity (accepted, non-terminal jobs).
        capacity: usize,
        /// The lease ttl, by the table's clock.
        lease_ttl_us: u64,
        /// Worker grants before a job is dead-lettered.
        attempts_max: u32,
        /// The planted bug in force, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bug: Option<String>,
        /// The store the table and ledger ran on, when not the in-memory one (`sqlite`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        store: Option<String>,
        /// How long before its own estimate of a lease's expiry a worker stops acting on it.
        /// Absent: an eighth of the ttl. Version 6 and later.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        drift_margin_us: Option<u64>,
        /// The network's one-way latency during the fault phase, `[min, max]`, when it is a
        /// simulated one. Version 6 and later.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        latency_us: Option<[u64; 2]>,
        /// The network's one-way latency outside the fault phase, `[min, max]`. A fault-phase
        /// maximum above this one delays messages beyond what the history names line by line.
        /// Version 6 and later.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        latency_calm_us: Option<[u64; 2]>,
        /// A store's history pruned of jobs that ended before this time (`lease_store`'s
        /// `TableStore::prune`): every line of every job it holds is there, but the jobs pruned,
        /// which were live once, are not, so counts over all jobs (the backlog an arrival
        /// reports) are bounded below by the history, not equal to it. Absent: nothing pruned.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pruned_before_us: Option<u64>,
        /// How many worker processes ran, when each runs several slots (`lease-runtime`'s
        /// workers, each slot a worker id of its own): worker `w` ran in process
        /// `w % worker_processes`. Its requests of one kind made at one turn go to the table
        /// together, in one transaction, and their lines follow one another at one time: a
        /// batch. Absent: one slot a process.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker_processes: Option<u32>,
        /// How long a reclaimer waits between scans, and after it gave a batch up (`gave_up`),
        /// by its own clock. Absent: unknown, and no checker judges the wait. Version 9 and later.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scan_every_us: Option<u64>,
        /// The world's shape and timing as `name=value` pairs, for people. No checker reads it
        /// (every fact a checker needs is a field of its own); it may be absent.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        params: String,
    },
    /// The table accepted a job; `backlog` counts accepted, non-terminal jobs after it.
    Arrived {
        /// The job.
        job: JobId,
        /// Accepted, non-terminal jobs, this one included.
        backlog: usize,
    },
    /// The table turned a job away.
    Rejected {
        /// The job.
        job: JobId,
        /// Why: `queue_full`.
        reason: RejectReason,
    },
    /// The table answered an enqueue of a job it already knew: accepted, and nothing changed.
    Duplicate {
        /// The job.
        job: JobId,
    },
    /// The table granted a worker a lease.
    Granted {
        /// The job.
        job: JobId,
        /// The new epoch.
        epoch: Epoch,
        /// The worker, e.g. `w3`.
        owner: Node,
        /// The lease's expiry by the table's clock.
        expires_at_us: u64,
        /// Which worker grant of the job this is, from 1.
        attempt: u32,
    },
    /// The table answered a retried copy of an acquire it had already granted with the same
    /// grant, because the lease is still that worker's: nothing changed (a grant whose reply was
    /// lost is not a second job).
    Regranted {
        /// The job.
        job: JobId,
        /// The epoch of the grant, unchanged.
        epoch: Epoch,
        /// The worker, e.g. `w3`.
        owner: Node,
        /// The lease's expiry now, unchanged.
        expires_at_us: u64,
        /// Which worker grant of the job it was, unchanged.
        attempt: u32,
    },
    /// The table answered a worker's acquire with nothing: no job was queued (after holding the
    /// request open for as long as it may, when it long-polls).
    AcquireEmpty {
        /// The worker that asked.
        owner: Node,
    },
    /// The table answered a copy of a worker's acquire with nothing: the request already got the
    /// worker's last grant, `job` under `epoch`, which no longer stands (used, or expired). A
    /// request is granted a job once.
    AcquireSpent {
        /// The worker that asked.
        owner: Node,
        /// The job of the grant the request got.
        job: JobId,
        /// Its epoch.
        epoch: Epoch,
    },
    /// The table extended a lease.
    Renewed {
        /// The worker that asked.
        from: Node,
        /// The job.
        job: JobId,
        /// The epoch the request carried.
        epoch: Epoch,
        /// The new expiry.
        expires_at_us: u64,
    },
    /// The table handed an expired lease to a reclaimer under `new_epoch`.
    Reclaimed {
        /// The job.
        job: JobId,
        /// The epoch of the lease that expired.
        epoch: Epoch,
        /// That lease's expiry, which the table compared with its clock (`t_us`).
        expires_at_us: u64,
        /// The reclaimer's epoch.
        new_epoch: Epoch,
        /// The reclaimer's lease expiry.
        new_expires_at_us: u64,
        /// The reclaimer.
        reclaimer: Node,
        /// The reclaim batch.
        batch: BatchId,
    },
    /// The table answered a reclaimer's listing of expired leases: at most `batch_max`, earliest
    /// expiry first, possibly none. `batch` is the batch the reclaimer opens with this listing.
    Listed {
        /// The reclaimer that asked.
        reclaimer: Node,
        /// The batch.
        batch: BatchId,
        /// The expired leases, in the order the table listed them.
        leases: Vec<Listing>,
    },
    /// The table refused a reclaimer's fence because the job moved on from the listed epoch: it
    /// was completed, requeued, or fenced by someone else. A normal outcome.
    LostRace {
        /// The job.
        job: JobId,
        /// The epoch the reclaimer expected.
        expected: Epoch,
        /// The job's epoch now.
        current: Epoch,
        /// The batch.
        batch: BatchId,
    },
    /// The table refused a reclaimer's fence because the listed lease was renewed since and has
    /// not expired.
    NotExpired {
        /// The job.
        job: JobId,
        /// The epoch the reclaimer expected (still current).
        expected: Epoch,
        /// The lease's expiry now.
        expires_at_us: u64,
        /// The batch.
        batch: BatchId,
    },
    /// The ledger answered a lookup and raised its fence to `epoch`.
    LookedUp {
        /// The worker or reclaimer that asked.
        from: Node,
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The epoch of the lookup.
        epoch: Epoch,
        /// The recorded output, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        found: Option<OutputId>,
        /// A conflicting second output, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rival: Option<OutputId>,
        /// The reclaim batch, when a reclaimer asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// A worker starts the effect: it calls the dependency (node: the worker).
    Executing {
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The worker's epoch.
        epoch: Epoch,
    },
    /// The dependency answered a call as failed (node: the ledger). `after_effect`: it failed
    /// only in its answer, after the output was applied (a timeout after the fact, or a second,
    /// rival output written on its own retry); otherwise it produced nothing.
    DependencyFailed {
        /// The worker that called.
        from: Node,
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The caller's epoch.
        epoch: Epoch,
        /// Whether the effect happened before the failed answer.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        after_effect: bool,
        /// Whether the dependency refused the job for good (before any effect): the worker
        /// dead-letters it now (`dead_letter`) instead of requeueing it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        permanent: bool,
    },
    /// The ledger recorded an output: the effect happened.
    EffectApplied {
        /// The worker whose call produced it (`ledger`: the dependency's own rival write).
        from: Node,
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The epoch it was applied under.
        epoch: Epoch,
        /// The output.
        output: OutputId,
    },
    /// The ledger did not record an output: `fenced`, `conflict` or `already_applied`.
    EffectRejected {
        /// The worker whose call offered it (`ledger`: the dependency's own rival write).
        from: Node,
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The epoch offered.
        epoch: Epoch,
        /// The output offered.
        output: OutputId,
        /// Why.
        reason: EffectRejectReason,
    },
    /// A worker or reclaimer found an output in the ledger and completes with it.
    Adopted {
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The adopted output.
        output: OutputId,
        /// The adopter's epoch.
        epoch: Epoch,
    },
    /// A job reached its terminal outcome (node: the table).
    Terminal {
        /// The worker or reclaimer whose request ended it.
        from: Node,
        /// The job.
        job: JobId,
        /// `completed`, `dead_lettered` or `quarantined`.
        outcome: OutcomeKind,
        /// The output, when completed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<OutputId>,
        /// The epoch of the request that ended it.
        epoch: Epoch,
        /// Worker grants spent, when dead-lettered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempts: Option<u32>,
        /// The two outputs, when quarantined.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identities: Option<[OutputId; 2]>,
        /// The reclaim batch, when a reclaimer ended it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
        /// Dead-lettered at its worker's word (a `dead_letter` request: its dependency refused
        /// the job for good), not for running out of attempts.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        permanent: bool,
    },
    /// The table answered a completion of an already completed job, with the same output, as an
    /// idempotent success: no second terminal outcome.
    AlreadyCompleted {
        /// The worker or reclaimer that asked.
        from: Node,
        /// The job.
        job: JobId,
        /// The epoch the request carried.
        epoch: Epoch,
        /// The output it offered, the same as the recorded one.
        output: OutputId,
    },
    /// The table put a leased job back in the queue.
    Requeued {
        /// The worker or reclaimer that asked.
        from: Node,
        /// The job.
        job: JobId,
        /// The epoch of the request.
        epoch: Epoch,
        /// Worker grants spent so far.
        attempts: u32,
        /// The reclaim batch, when a reclaimer asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// The table undid a grant its worker never took (a grant to an acquire it had given up): the
    /// job is back at the head of the queue, and the grant's attempt is not counted.
    Released {
        /// The worker that released it.
        from: Node,
        /// The job.
        job: JobId,
        /// The released grant's epoch.
        epoch: Epoch,
        /// Worker grants spent, without the released one.
        attempts: u32,
    },
    /// The table refused a request: `request` is what was asked, `reason` why.
    Refused {
        /// The worker or reclaimer that asked.
        from: Node,
        /// The job.
        job: JobId,
        /// The epoch the request carried.
        epoch: Epoch,
        /// `renew`, `complete`, `requeue` or `quarantine`.
        request: RefusedRequest,
        /// `stale_epoch`, `expired`, `not_leased`, `already_terminal` or `conflict`.
        reason: RefuseReason,
        /// The reclaim batch, when a reclaimer asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// A worker stopped acting on its lease (node: the worker).
    Abandoned {
        /// The job.
        job: JobId,
        /// Its epoch.
        epoch: Epoch,
        /// `self_fenced`, `lease_lost`, `effect_fenced` or `conflict`.
        why: AbandonReason,
    },
    /// A reclaimer stopped a batch on conflicting outputs: the operator alert (node: the reclaimer).
    BatchStopped {
        /// The batch.
        batch: BatchId,
        /// The quarantined job.
        job: JobId,
        /// The two outputs.
        identities: [OutputId; 2],
        /// Listed leases left untouched.
        untouched: usize,
    },
    /// A reclaimer's request of a batch went unanswered through all its retries: it dropped the
    /// rest of the batch, and scans again after its interval (node: the reclaimer). The request
    /// may still have reached the table: silence is not a refusal.
    GaveUp {
        /// The batch.
        batch: BatchId,
        /// The job whose request went unanswered.
        job: JobId,
    },
    /// A node crashed (node: world; `target` names it; `point` is the protocol point).
    Crashed {
        /// The crashed node.
        target: Node,
        /// Where in the protocol: `before_effect`, `after_effect`, `during_ack`, `mid_reclaim`,
        /// `before_renew` or `at_random`.
        point: Point,
        /// The job the node was working on, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<JobId>,
    },
    /// A node was told to stop (node: world), as a deploy's `SIGTERM` tells a service: a worker
    /// asks for nothing more, lets the handlers in flight finish within its grace, hands back
    /// every lease under which nothing ran (`abandoned` `shutdown`, then `released`) and leaves the
    /// rest to expire; a reclaimer stops at once. `stopped` follows when it has exited, unless a
    /// crash strikes first.
    Stopping {
        /// The node.
        target: Node,
        /// How long a worker lets the handlers it has running finish before it gives up on
        /// them, by its own clock (absent: not stated). Version 9 and later.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grace_us: Option<u64>,
    },
    /// A node told to stop has exited (node: world); `restarted` brings it back.
    Stopped {
        /// The node.
        target: Node,
    },
    /// A node restarted with its durable state only.
    Restarted {
        /// The node.
        target: Node,
    },
    /// A node's process paused: a scheduled pause, or a stall a strike dealt at a protocol
    /// point, which `point` and `job` then name.
    Paused {
        /// The node.
        target: Node,
        /// Where in the protocol the stall struck, when a strike dealt it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        point: Option<Point>,
        /// The job the node was at, when a strike dealt it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<JobId>,
    },
    /// A paused node resumed.
    Resumed {
        /// The node.
        target: Node,
    },
    /// Messages between `target` and `peer` (or everyone, when absent) are dropped.
    Partitioned {
        /// One side.
        target: Node,
        /// The other side, for a single link.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<Node>,
    },
    /// A partition ended.
    Healed {
        /// One side.
        target: Node,
        /// The other side, for a single link.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<Node>,
    },
    /// The network held one message back for `len_us` on its way (node: world). It was sent at
    /// `t_us`; it arrives `len_us` later than it would have, after messages sent behind it.
    Delayed {
        /// The sender.
        target: Node,
        /// The receiver.
        peer: Node,
        /// What the message is: a request, or the answer to one (`reply`).
        message: MessageKind,
        /// Whether it is the answer to a `message` request.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reply: bool,
        /// The job it is about, when it names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<JobId>,
        /// How much later it arrives.
        len_us: u64,
    },
    /// The network lost one message (node: world): it was sent at `t_us` and never arrives.
    /// Version 4 and later; earlier histories only say, in the `run` line, that the world lost
    /// messages (`loss=`).
    Lost {
        /// The sender.
        target: Node,
        /// The receiver.
        peer: Node,
        /// What the message is: a request, or the answer to one (`reply`).
        message: MessageKind,
        /// Whether it is the answer to a `message` request.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reply: bool,
        /// The job it is about, when it names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<JobId>,
    },
    /// The network delivered one message twice (node: world): the copy arrives `gap_us` after the
    /// original would, as a retransmission crossing the first delivery does.
    Duplicated {
        /// The sender.
        target: Node,
        /// The receiver.
        peer: Node,
        /// What the message is.
        message: MessageKind,
        /// Whether it is the answer to a `message` request.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reply: bool,
        /// The job it is about, when it names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<JobId>,
        /// How long after the original the copy is sent.
        gap_us: u64,
    },
    /// The dependency behind the ledger turned faulty (node: world): from now on its calls are
    /// drawn slow, failing, failing after the effect, or writing a rival output at these rates,
    /// until `dependency_restored` or the heal. Version 5 and later.
    DependencyDegraded {
        /// Chance a call is slow.
        slow_rate: Rate,
        /// How many times slower a slow call is.
        slow_factor: u64,
        /// Chance a call fails before producing anything.
        fail_rate: Rate,
        /// Chance a call applies its output but answers "failed".
        lost_reply_rate: Rate,
        /// Chance a call also writes a second, different output.
        rival_rate: Rate,
    },
    /// The dependency's faulty window ended before the heal (node: world). Version 5 and later.
    DependencyRestored {},
    /// Arrivals surge to `factor` times their rate for `len_us` (node: world). Version 5 and
    /// later.
    SurgeStarted {
        /// How many times the usual arrival rate.
        factor: u64,
        /// How long the surge lasts.
        len_us: u64,
    },
    /// An arrival surge ended before the heal (node: world). Version 5 and later.
    SurgeEnded {},
    /// The fault phase ended: everything healed, and the system must now converge. It also ends
    /// the dependency's and a surge's window, if one is still open.
    FaultsHealed {},
}

/// One history line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Entry {
    /// Simulation time in microseconds: the table's clock.
    pub t_us: u64,
    /// Where it happened.
    pub node: Node,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

fn version_one() -> u32 {
    1
}

impl Entry {
    /// The entry as one JSON line, without the newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("history entries always serialise")
    }

    /// The job this entry is about, if any.
    pub fn job(&self) -> Option<JobId> {
        self.event.job()
    }
}

impl Event {
    /// The one job this event is about, if any (a listing names several: none).
    pub fn job(&self) -> Option<JobId> {
        match self {
            Event::Arrived { job, .. }
            | Event::Rejected { job, .. }
            | Event::Duplicate { job }
            | Event::Granted { job, .. }
            | Event::Regranted { job, .. }
            | Event::Renewed { job, .. }
            | Event::Reclaimed { job, .. }
            | Event::LostRace { job, .. }
            | Event::NotExpired { job, .. }
            | Event::LookedUp { job, .. }
            | Event::Executing { job, .. }
            | Event::DependencyFailed { job, .. }
            | Event::EffectApplied { job, .. }
            | Event::EffectRejected { job, .. }
            | Event::Adopted { job, .. }
            | Event::Terminal { job, .. }
            | Event::Requeued { job, .. }
            | Event::Released { job, .. }
            | Event::AlreadyCompleted { job, .. }
            | Event::Refused { job, .. }
            | Event::Abandoned { job, .. }
            | Event::BatchStopped { job, .. }
            | Event::GaveUp { job, .. }
            | Event::AcquireSpent { job, .. } => Some(*job),
            Event::Run { .. }
            | Event::AcquireEmpty { .. }
            | Event::Listed { .. }
            | Event::Crashed { .. }
            | Event::Stopping { .. }
            | Event::Stopped { .. }
            | Event::Restarted { .. }
            | Event::Paused { .. }
            | Event::Resumed { .. }
            | Event::Partitioned { .. }
            | Event::Healed { .. }
            | Event::Delayed { .. }
            | Event::Lost { .. }
            | Event::Duplicated { .. }
            | Event::DependencyDegraded { .. }
            | Event::DependencyRestored {}
            | Event::SurgeStarted { .. }
            | Event::SurgeEnded {}
            | Event::FaultsHealed {} => None,
        }
    }
}

/// A history file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be read.
    #[error("cannot read history {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not a history entry.
    #[error("history line {line}: {message}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The first line is not the `run` line.
    #[error(
        "history line 1 must be the `run` line, with at least the limits the checkers judge by: \
         {{\"t_us\":0,\"node\":\"table\",\"kind\":\"run\",\"history_version\":{HISTORY_VERSION},\
         \"batch_max\":8,\"capacity\":1000,\"lease_ttl_us\":30000000,\"attempts_max\":3}} \
         (a lease-store log begins with one)"
    )]
    NoRunLine,
    /// The file holds no entry at all.
    #[error("the history is empty: it has no `run` line")]
    Empty,
    /// The `run` line names a contract version this build does not read.
    #[error(
        "history_version {found} is not one this build reads (it reads {HISTORY_VERSION_MIN} to \
         {HISTORY_VERSION}); check it with the lease-check that matches its writer"
    )]
    UnknownVersion {
        /// The version the `run` line carries (1 when it has no `history_version`).
        found: u32,
    },
    /// A second `run` line: one history is one run.
    #[error("history line {line} is a second `run` line: one history holds one run (split the file)")]
    SecondRunLine {
        /// 1-based line number.
        line: usize,
    },
}

/// Parses a JSONL history, line by line, with the line number of the first bad line. The first
/// line must be the `run` line of a version this build reads, and no other line may be one.
pub fn parse_jsonl(text: &str) -> Result<Vec<Entry>, HistoryError> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let entry = serde_json::from_str::<Entry>(line)
            .map_err(|error| HistoryError::BadLine { line: index + 1, message: error.to_string() })?;
        match (&entry.event, entries.is_empty()) {
            (Event::Run { history_version, .. }, true) => {
                if !(HISTORY_VERSION_MIN..=HISTORY_VERSION).contains(history_version) {
                    return Err(HistoryError::UnknownVersion { found: *history_version });
                }
            }
            (Event::Run { .. }, false) => return Err(HistoryError::SecondRunLine { line: index + 1 }),
            (_, true) => return Err(HistoryError::NoRunLine),
            (_, false) => {}
        }
        entries.push(entry);
    }
    if entries.is_empty() {
        return Err(HistoryError::Empty);
    }
    Ok(entries)
}

/// Renders entries as JSONL, one line each, newline-terminated.
pub fn to_jsonl(entries: &[Entry]) -> String {
    let mut out = String::with_capacity(entries.len() * 96);
    for entry in entries {
        out.push_str(&entry.to_json());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a history file that is not a history is refused with a message naming what is wrong.
    #[test]
    fn bad_history_files_are_refused_with_a_reason() {
        assert!(matches!(parse_jsonl(""), Err(HistoryError::Empty)));
        assert!(matches!(parse_jsonl("\n\n"), Err(HistoryError::Empty)));
        let arrived = r#"{"t_us":0,"node":"table","kind":"arrived","job":1,"backlog":1}"#;
        assert!(matches!(parse_jsonl(arrived), Err(HistoryError::NoRunLine)));
        let bad_node = r#"{"t_us":0,"node":"x9","kind":"faults_healed"}"#;
        assert!(matches!(parse_jsonl(bad_node), Err(HistoryError::BadLine { line: 1, .. })));
        let run = r#"{"t_us":0,"node":"world","kind":"run","history_version":5,"seed":1,"scenario":"s","batch_max":1,"capacity":1,"lease_ttl_us":1,"attempts_max":1,"params":""}"#;
        let text = format!("{run}\n{arrived}\nnot json\n");
        assert!(matches!(parse_jsonl(&text), Err(HistoryError::BadLine { line: 3, .. })));
        assert_eq!(parse_jsonl(&format!("{run}\n{arrived}\n")).unwrap().len(), 2);
        let older =
            [("", 1), (r#""history_version":2,"#, 2), (r#""history_version":3,"#, 3), (r#""history_version":4,"#, 4)];
        for (version, found) in older.into_iter().chain([(r#""history_version":12,"#, 12)]) {
            let other = run.replace(r#""history_version":5,"#, version);
            let refused = parse_jsonl(&format!("{other}\n{arrived}\n"));
            assert!(matches!(refused, Err(HistoryError::UnknownVersion { found: f }) if f == found), "{refused:?}");
        }
        // Version 6 reads without the fields a simulator writes (seed, scenario, params).
        let minimal = r#"{"t_us":5,"node":"table","kind":"run","history_version":6,"batch_max":2,"capacity":9,"lease_ttl_us":10,"attempts_max":3}"#;
        assert_eq!(parse_jsonl(&format!("{minimal}\n{arrived}\n")).unwrap().len(), 2);
        // One history is one run: a second `run` line is refused by number.
        let twice = parse_jsonl(&format!("{minimal}\n{arrived}\n{minimal}\n"));
        assert!(matches!(twice, Err(HistoryError::SecondRunLine { line: 3 })), "{twice:?}");
    }

    // Proves the closed sets are closed: a reason, why or point outside its enum is a bad line,
    // named by number, while every known value parses. How: one known and one unknown value for
    // each such field, after a valid `run` line.
    #[test]
    fn an_unknown_reason_why_or_point_is_a_bad_line() {
        let run = r#"{"t_us":0,"node":"world","kind":"run","history_version":5,"seed":1,"scenario":"s","batch_max":1,"capacity":1,"lease_ttl_us":1,"attempts_max":1,"params":"x=1"}"#;
        let lines = [
            r#"{"t_us":1,"node":"table","kind":"rejected","job":1,"reason":"?"}"#,
            r#"{"t_us":1,"node":"ledger","kind":"effect_rejected","from":"w1","job":1,"op":{"job":1,"step":0},"epoch":1,"output":7,"reason":"?"}"#,
            r#"{"t_us":1,"node":"table","kind":"refused","from":"w1","job":1,"epoch":1,"request":"?","reason":"stale_epoch"}"#,
            r#"{"t_us":1,"node":"table","kind":"refused","from":"w1","job":1,"epoch":1,"request":"renew","reason":"?"}"#,
            r#"{"t_us":1,"node":"w1","kind":"abandoned","job":1,"epoch":1,"why":"?"}"#,
            r#"{"t_us":1,"node":"world","kind":"crashed","target":"w1","point":"?"}"#,
        ];
        let known = ["queue_full", "fenced", "complete", "conflict", "lease_lost", "during_ack"];
        for (line, known) in lines.iter().zip(known) {
            let good = line.replace("\"?\"", &format!("{known:?}"));
            let good = parse_jsonl(&format!("{run}\n{good}\n")).unwrap_or_else(|e| panic!("{good}: {e}"));
            assert_eq!(to_jsonl(&good), format!("{run}\n{}\n", line.replace("\"?\"", &format!("{known:?}"))));
            for bad in ["\"Fenced\"", "\"\"", "\"sideways\"", "3"] {
                let text = format!("{run}\n\n{}\n", line.replace("\"?\"", bad));
                let refused = parse_jsonl(&text);
                assert!(matches!(refused, Err(HistoryError::BadLine { line: 3, .. })), "{text}: {refused:?}");
            }
        }
    }

    // Proves `name()` (and so `Display`) spells each value exactly as the history's JSON does.
    #[test]
    fn names_match_the_history_spelling() {
        fn spelled<T: Serialize + fmt::Display>(values: &[T]) {
            for value in values {
                assert_eq!(serde_json::to_string(value).unwrap(), format!("\"{value}\""));
            }
        }
        spelled(&[RejectReason::QueueFull]);
        spelled(&[EffectRejectReason::Fenced, EffectRejectReason::Conflict, EffectRejectReason::AlreadyApplied]);
        spelled(&[
            RefusedRequest::Renew,
            RefusedRequest::Complete,
            RefusedRequest::Requeue,
            RefusedRequest::Quarantine,
        ]);
        spelled(&[
            RefuseReason::StaleEpoch,
            RefuseReason::Expired,
            RefuseReason::NotLeased,
            RefuseReason::AlreadyTerminal,
            RefuseReason::Conflict,
        ]);
        spelled(&[
            AbandonReason::SelfFenced,
            AbandonReason::LeaseLost,
            AbandonReason::EffectFenced,
            AbandonReason::Conflict,
        ]);
        spelled(&[
            Point::BeforeEffect,
            Point::AfterEffect,
            Point::DuringAck,
            Point::MidReclaim,
            Point::BeforeRenew,
            Point::AtRandom,
            Point::Buffered,
        ]);
    }
}
