//! Faults: what can go wrong in a world, where it strikes, and the verbs that deal it.
//!
//! - This module holds the fault vocabulary: scheduled faults ([`Fault`]), the protocol points
//!   at which a node can be struck ([`Point`], [`Strike`]), and the rates a generator draws at.
//! - [`plan`] is a run's faults as data: recorded from a seeded run, replayed exactly, edited by
//!   hand, shrunk.
//! - The world deals them, with the verbs of its context (`lease_sim::world`'s `verbs`): `crash`,
//!   `restart`, `partition`, `repair`, `pause`, `resume`, `stall`, `fail`, `degrade`, `restore`.
//! - [`decide`] answers the question every node asks as it passes a protocol point or sends a
//!   message, "does a fault strike here?", from the seed's streams or from a plan, and records
//!   every answer that dealt one.

pub mod decide;
pub mod plan;
pub mod shrink;

pub use lease_history::Point;

use lease_history::{Node, Rate};
use rand::Rng;

/// A fault scheduled at a fixed simulated time during the fault phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Cut `node` off from everyone for `len_us`.
    Partition {
        /// The node.
        node: Node,
        /// How long.
        len_us: u64,
    },
    /// Cut the link between `a` and `b`, both ways, for `len_us`.
    CutLink {
        /// One end.
        a: Node,
        /// The other end.
        b: Node,
        /// How long.
        len_us: u64,
    },
    /// Pause `node`'s process (a GC or VM stall) for `len_us`.
    Pause {
        /// The node.
        node: Node,
        /// How long.
        len_us: u64,
    },
    /// Crash `node` at a random point, and restart it after `down_us`.
    Crash {
        /// The node.
        node: Node,
        /// How long it stays down.
        down_us: u64,
    },
    /// Tell `node`, a worker or a reclaimer, to stop (a deploy's `SIGTERM`): its runtime's
    /// shutdown signal fires, it drains and exits, and it restarts `down_us` after it exited.
    Shutdown {
        /// The node.
        node: Node,
        /// How long it stays down once it has exited.
        down_us: u64,
    },
    /// An arrival surge of `factor` times the arrival rate for `len_us`. It only puts the surge's
    /// window on the history (`surge_started`, `surge_ended`): a seeded run's arrival generator
    /// keeps its gaps from [`Surge`], and a plan lists its arrivals.
    Surge {
        /// How long.
        len_us: u64,
        /// How many times the usual arrival rate.
        factor: u64,
    },
    /// The dependency turns faulty at these rates for `len_us`, or until the heal (`None`). It
    /// puts the window on the history (`dependency_degraded`, `dependency_restored`) and opens it
    /// in the world: a seeded run draws the dependency's faults only while it is open. A plan's
    /// replay draws nothing, so there it only writes the lines.
    Degrade {
        /// How long; `None`: until the heal.
        len_us: Option<u64>,
        /// The rates the dependency's faults are drawn at meanwhile.
        rates: Degradation,
    },
}

impl Fault {
    /// The verb a plan spells it with.
    pub fn verb(self) -> &'static str {
        match self {
            Fault::Crash { .. } => "crash",
            Fault::Shutdown { .. } => "shutdown",
            Fault::Partition { .. } | Fault::CutLink { .. } => "partition",
            Fault::Pause { .. } => "pause",
            Fault::Surge { .. } => "surge",
            Fault::Degrade { .. } => "degrade",
        }
    }

    /// The nodes it strikes: the dependency's faults strike the ledger, a surge no node.
    pub fn nodes(self) -> Vec<Node> {
        match self {
            Fault::Partition { node, .. }
            | Fault::Pause { node, .. }
            | Fault::Crash { node, .. }
            | Fault::Shutdown { node, .. } => vec![node],
            Fault::CutLink { a, b, .. } => vec![a, b],
            Fault::Degrade { .. } => vec![Node::Ledger],
            Fault::Surge { .. } => Vec::new(),
        }
    }

    /// The same fault, half as long, as the shrinker tries it; `None` when it cannot shrink (a
    /// length of 1 µs, or a window open until the heal).
    pub fn shrunk(self) -> Option<Fault> {
        let half = |us: u64| (us > 1).then_some(us / 2);
        Some(match self {
            Fault::Crash { node, down_us } => Fault::Crash { node, down_us: half(down_us)? },
            Fault::Shutdown { node, down_us } => Fault::Shutdown { node, down_us: half(down_us)? },
            Fault::Partition { node, len_us } => Fault::Partition { node, len_us: half(len_us)? },
            Fault::CutLink { a, b, len_us } => Fault::CutLink { a, b, len_us: half(len_us)? },
            Fault::Pause { node, len_us } => Fault::Pause { node, len_us: half(len_us)? },
            Fault::Surge { len_us, factor } => Fault::Surge { len_us: half(len_us)?, factor },
            Fault::Degrade { len_us, rates } => Fault::Degrade { len_us: Some(half(len_us?)?), rates },
        })
    }

    /// The same fault on the nodes `renumber` maps its own to; `None` when one of them is gone.
    pub fn renumbered(self, renumber: impl Fn(Node) -> Option<Node>) -> Option<Fault> {
        Some(match self {
            Fault::Crash { node, down_us } => Fault::Crash { node: renumber(node)?, down_us },
            Fault::Shutdown { node, down_us } => Fault::Shutdown { node: renumber(node)?, down_us },
            Fault::Partition { node, len_us } => Fault::Partition { node: renumber(node)?, len_us },
            Fault::CutLink { a, b, len_us } => Fault::CutLink { a: renumber(a)?, b: renumber(b)?, len_us },
            Fault::Pause { node, len_us } => Fault::Pause { node: renumber(node)?, len_us },
            Fault::Surge { .. } | Fault::Degrade { .. } => self,
        })
    }

    /// Whether a length or a factor it needs is 0: a plan refuses it.
    pub fn is_void(self) -> bool {
        match self {
            Fault::Crash { down_us: len_us, .. }
            | Fault::Shutdown { down_us: len_us, .. }
            | Fault::Partition { len_us, .. }
            | Fault::CutLink { len_us, .. }
            | Fault::Pause { len_us, .. } => len_us == 0,
            Fault::Surge { len_us, factor } => len_us == 0 || factor == 0,
            Fault::Degrade { len_us, rates } => len_us == Some(0) || rates.slow_factor == 0,
        }
    }
}

/// A dependency call's latency, `factor` times slower.
pub fn slowed(latency_us: u64, factor: u64) -> u64 {
    latency_us.saturating_mul(factor)
}

/// The rates of a faulty dependency, as the history's `dependency_degraded` line and a plan's
/// `degrade` line give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Degradation {
    /// Chance a call is slow.
    pub slow_rate: Rate,
    /// How many times slower a slow call is.
    pub slow_factor: u64,
    /// Chance a call fails before producing anything.
    pub fail_rate: Rate,
    /// Chance a call applies its output but answers "failed".
    pub lost_reply_rate: Rate,
    /// Chance a call also writes a second, different output.
    pub rival_rate: Rate,
}

impl Degradation {
    /// The fault rates of `dependency`.
    pub fn of(dependency: &Dependency) -> Degradation {
        Degradation {
            slow_rate: Rate(dependency.slow_rate),
            slow_factor: dependency.slow_factor,
            fail_rate: Rate(dependency.fail_rate),
            lost_reply_rate: Rate(dependency.lost_reply_rate),
            rival_rate: Rate(dependency.rival_rate),
        }
    }

    /// Whether any fault is drawn at all.
    pub fn any(&self) -> bool {
        [self.slow_rate, self.fail_rate, self.lost_reply_rate, self.rival_rate].iter().any(|rate| rate.0 > 0.0)
    }
}

/// The dependency behind the ledger: slow, sometimes failing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dependency {
    /// Fastest call, in microseconds.
    pub latency_min_us: u64,
    /// Slowest ordinary call.
    pub latency_max_us: u64,
    /// Chance a call is slow: its latency is multiplied by `slow_factor`.
    pub slow_rate: f64,
    /// How much slower a slow call is.
    pub slow_factor: u64,
    /// Chance a call fails before producing anything.
    pub fail_rate: f64,
    /// Chance a call applies its output but answers as failed (a timeout after the effect).
    pub lost_reply_rate: f64,
    /// Chance a call also writes a second, different output (a non-idempotent dependency).
    pub rival_rate: f64,
}

/// Crash probabilities at each protocol point, drawn per visit during the fault phase.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CrashRates {
    /// A worker crashes just before it calls the dependency.
    pub before_effect: f64,
    /// A worker crashes after its effect was accepted, before it acknowledged completion.
    pub after_effect: f64,
    /// A worker crashes after sending its completion, before the answer.
    pub during_ack: f64,
    /// A reclaimer crashes after it fenced a lease, before it finished with it.
    pub mid_reclaim: f64,
}

/// Process stalls (a GC pause, a VM freeze) that strike between a worker's decision to act and
/// its message leaving: the classic window that self-fencing cannot close and fencing must.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StallRates {
    /// Chance of a stall after deciding to call the dependency, before the call leaves.
    pub before_effect: f64,
    /// Chance of a stall after deciding to complete, before the completion leaves.
    pub before_ack: f64,
    /// Chance of a stall after deciding to heartbeat, before the renewal leaves.
    pub before_renew: f64,
    /// Stall length range, in microseconds.
    pub len_us: (u64, u64),
}

/// Faults aimed at the protocol's windows (see [`lease_check::windows`]): single messages held
/// back or delivered twice, short stalls at the points where a window opens, and timing aimed at
/// the expiry boundary. Short means the size of the windows: a few hundred µs up to the drift
/// margin (`near_us`), and now and then up to ttl/4 (`far_us`), never the ttl-sized pauses that
/// overshoot them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WindowFaults {
    /// Chance a message (request or reply) is held back on its way.
    pub delay_rate: f64,
    /// Chance a message is delivered twice, the copy some time after the original.
    pub duplicate_rate: f64,
    /// Chance a hand-back (a requeue) or an acknowledgement (a completion) is delivered twice,
    /// the copy from a drift margin up to ttl/2 after the original: after the table has moved on
    /// (granted the job again, or ended it), where stale hand-backs and late duplicates bite.
    pub hand_back_copy: f64,
    /// Chance a reclaimer stalls between a listing and its fences.
    pub after_listing: f64,
    /// Chance a reclaimer stalls between winning a fence and looking the operation up.
    pub after_fence: f64,
    /// Chance a worker stalls between a renewal's answer arriving and taking it.
    pub before_renew_reply: f64,
    /// Chance a worker's heartbeat is held so that the renewal lands within a drift margin of its
    /// lease's expiry, on either side.
    pub renew_at_boundary: f64,
    /// Chance a reclaimer's scan is timed to land just after the earliest expiry.
    pub reclaim_at_boundary: f64,
    /// Chance a worker's completion is held so that it reaches the table after its lease expired,
    /// within one scan of the expiry: between a reclaimer's listing and its fence.
    pub complete_at_boundary: f64,
    /// Chance a worker's call to the dependency is held so that it reaches the ledger after its
    /// lease expired, within one scan of the expiry: where a reclaimer fences and looks up.
    pub effect_at_boundary: f64,
    /// Chance a message is held back longer than a whole lease, one to two of them: a request
    /// queued behind a slow proxy, or a segment waiting out a TCP retransmission timeout. Its
    /// sender's request has long timed out when it arrives, and the lease it acts under has
    /// expired, been reclaimed and maybe granted again.
    pub past_lease_rate: f64,
    /// Chance a worker's call to the dependency opens a *reclaim storm*: three faults aimed into
    /// the reclaim of its job.
    /// 1. The call writes a rival output too: a conflict, two outputs claim the operation.
    /// 2. The first reclaimer to fence the job stalls right after its fence, for longer than its
    ///    own lease and a scan interval: its fence expires, and another reclaimer fences again.
    /// 3. That second reclaimer stalls right after its fence until the first has woken and had
    ///    a few round trips: the first looks the operation up, finds the conflict, and asks to
    ///    quarantine the job under a fence it lost, while the second holds the job's live lease.
    ///
    /// Drawn from a stream of its own, after every other draw of the call, so that a seed that
    /// opens none keeps every other fault.
    pub reclaim_storm_rate: f64,
    /// Chance a worker runtime's write of its `executing` lines fails: the write never commits
    /// (a `line` message lost), or commits and its answer is lost (a `line` answer lost), as a
    /// store that cannot be reached, or fails over mid-commit, fails it. Either way the runtime
    /// starts none of those effects and writes the lines again when its machines ask again.
    /// Drawn from a stream of its own, so that a seed that deals none keeps every other fault.
    pub line_loss_rate: f64,
    /// Chance a worker process stalls with its `executing` lines on their way to the store (a
    /// write waiting for the store's lock: `before_line`), landing them within a drift margin
    /// before the lease's expiry or up to a reclaim scan after it. The store writes a line only
    /// while its lease is held, so a line that lands late is refused and its effect never
    /// starts. Drawn from a stream of its own, so that a seed that deals none keeps every other
    /// fault.
    pub line_stall_rate: f64,
    /// The upper end of a near draw: the drift margin.
    pub near_us: u64,
    /// The upper end of a far draw: ttl/4.
    pub far_us: u64,
}

/// The shortest hold-back or stall a window fault deals.
pub const WINDOW_FAULT_MIN_US: u64 = 300;

impl WindowFaults {
    /// The gap before a hand-back's late copy: from the drift margin up to ttl/2.
    pub fn draw_late_gap_us(&self, rng: &mut impl Rng) -> u64 {
        let near = self.near_us.max(WINDOW_FAULT_MIN_US);
        rng.gen_range(near..=(2 * self.far_us).max(near))
    }

    /// A hold past a lease of `lease_us`: one to two lease lengths.
    pub fn draw_past_lease_us(lease_us: u64, rng: &mut impl Rng) -> u64 {
        let lease_us = lease_us.max(WINDOW_FAULT_MIN_US);
        rng.gen_range(lease_us + 1..=2 * lease_us)
    }

    /// A reclaim storm's stall of its first reclaimer, right after its fence: past that fence's
    /// lease of `lease_us` and a scan interval of `scan_us`, by up to one more lease, so that a
    /// second reclaimer has listed and fenced the job when the first wakes.
    pub fn draw_storm_stall_us(lease_us: u64, scan_us: u64, rng: &mut impl Rng) -> u64 {
        let past = lease_us.saturating_add(scan_us).saturating_add(1);
        rng.gen_range(past..=past.saturating_add(lease_us))
    }

    /// A reclaim storm's stall of its second reclaimer, right after its fence at `now_us`: until
    /// the first wakes at `wakes_us`, then `round_trips_us` (time for the first to look up and
    /// ask), then up to a quarter of a lease of `lease_us` more. `None` when the first is awake.
    pub fn draw_storm_hold_us(
        now_us: u64,
        wakes_us: u64,
        round_trips_us: u64,
        lease_us: u64,
        rng: &mut impl Rng,
    ) -> Option<u64> {
        let until = wakes_us.checked_sub(now_us).filter(|&left| left > 0)?.saturating_add(round_trips_us);
        Some(rng.gen_range(until..=until.saturating_add(lease_us / 4)))
    }

    /// A hold-back, gap or stall length: up to the drift margin two times in three, else up to
    /// ttl/4.
    pub fn draw_len_us(&self, rng: &mut impl Rng) -> u64 {
        let near = self.near_us.max(WINDOW_FAULT_MIN_US + 1);
        let far = self.far_us.max(near + 1);
        if rng.gen_bool(2.0 / 3.0) {
            rng.gen_range(WINDOW_FAULT_MIN_US..near)
        } else {
            rng.gen_range(near..far)
        }
    }
}

/// What strikes at a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strike {
    /// The node crashes, and restarts after the restart delay.
    Crash,
    /// The node stalls for this long, then carries on with what it had decided.
    Stall(u64),
}

/// A scripted strike: the exact situation a named scenario is about. It fires once, the first
/// time any node passes `point` for `job` during the fault phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scripted {
    /// The job.
    pub job: lease_core::JobId,
    /// Where.
    pub point: Point,
    /// What.
    pub strike: Strike,
}

/// A burst of arrivals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Surge {
    /// When it starts.
    pub at_us: u64,
    /// How long it lasts.
    pub len_us: u64,
    /// How many times the usual arrival rate.
    pub factor: u64,
}
