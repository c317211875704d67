//! A run's faults as data: the plan.
//!
//! A plan holds everything a world needs to play one run again without drawing anything: the
//! world's shape and timing, the arrival list, and every fault, one per line, in time order:
//! - **scheduled** faults strike at a time (`at_us`): `crash` (restart after `restart_after_us`),
//!   `partition` (a node from everyone, or from one `peer`; repaired after `repair_after_us`),
//!   `pause` (resumed after `resume_after_us`), and the windows of faults on no single node:
//!   `surge` (arrivals `factor` times faster for `len_us`) and `degrade` (the dependency faulty
//!   at its rates for `len_us`, or until the heal when `len_us` is absent);
//! - **clocks**: `skew` gives a worker or reclaimer its offset and drift from the start;
//! - **keyed** faults strike at a visit: the `occurrence`-th time a node passes a protocol
//!   `point` for a `job` (`crash`, `stall`), a dependency call for a `job` and `epoch` (`slow`,
//!   `fail`, `rival`), or a message from one node to another (`lose`, `delay`, `duplicate`).
//!   `fired_us` says when it struck in the run the plan was recorded from, to read and to sort
//!   by; the visit decides.
//!
//! Recording a seeded run and replaying its plan gives the same history, byte for byte: the
//! replay asks the same questions at the same visits and looks every answer up. See
//! docs/faults-and-plans.md, "Fault plans", for the format with an example.

use super::decide::{Dealt, Keyed, Site, Visit};
use super::{Degradation, Fault, Point};
use crate::clock::{LocalClock, BASE_US, DRIFT_PPM_MAX};
use crate::world::durable::StoreKind;
pub use crate::world::params::Arrival;
use crate::world::params::Params;
use lease_core::{Bug, Epoch, JobId, ReclaimerConfig, Span, TableConfig, WorkerConfig};
use lease_history::{MessageKind, Node, Rate};
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The plan format's version. A plan of another version is refused.
pub const PLAN_VERSION: u32 = 1;

/// A run's faults as data. See the module documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// What the plan shows, for a person (a regression plan says what it exposed).
    pub comment: Option<String>,
    /// The scenario it came from.
    pub scenario: String,
    /// The run's seed: madsim's scheduler, the output identities, the dependency's latencies.
    pub seed: u64,
    /// The planted bug, if any.
    pub bug: Option<Bug>,
    /// Where the table and ledger keep their state (absent: `memory`).
    pub store: StoreKind,
    /// What a replay must end with: `held`, or the name of the invariant it fails.
    pub expect: Option<String>,
    /// The world's shape and timing.
    pub world: World,
    /// The jobs offered, in order, and when.
    pub arrivals: Vec<Arrival>,
    /// Every fault, in time order.
    pub faults: Vec<Planned>,
}

/// The world's shape and timing: everything of [`Params`] that is not a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct World {
    /// Jobs the world offers: the arrival list's, or more when the run it was recorded from
    /// stopped at a violation before it offered them all.
    pub jobs: u32,
    /// Worker count.
    pub workers: u32,
    /// Reclaimer count.
    pub reclaimers: u32,
    /// Workers whose handler records its output through the runtime (the first ones); the
    /// others' dependency is fenced. Absent: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recorders: u32,
    /// The share of jobs, in parts per million, that the dependency refuses for good (by a hash
    /// of the seed and the job). Absent: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub poison_ppm: u32,
    /// How long a worker told to stop lets its handlers finish. Absent: a lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_grace_us: Option<u64>,
    /// The longest a handler runs before the runtime drops it. Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler_timeout_us: Option<u64>,
    /// Jobs in flight per worker process (its runtime's slots, worker ids `n + k × workers`).
    /// Absent: one.
    #[serde(default = "one_slot", skip_serializing_if = "is_one_slot")]
    pub slots: u32,
    /// Requests of a kind per call of a worker process. Absent: one (each alone).
    #[serde(default = "one_request", skip_serializing_if = "is_one_request")]
    pub batch: usize,
    /// How long a worker process's batch that is not full waits for more, in µs. Absent: zero.
    #[serde(default, skip_serializing_if = "is_zero_us")]
    pub linger_us: u64,
    /// How many handlers a worker process runs at once; its other slots buffer granted jobs.
    /// Absent: zero (one per slot).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub handlers: u32,
    /// The most arrivals offered in one enqueue; absent or 0, one at a time.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub enqueue_batch: usize,
    /// The lease length.
    pub lease_ttl_us: u64,
    /// The most jobs accepted and not yet terminal.
    pub capacity: usize,
    /// The most expired leases one reclaim batch takes.
    pub batch_max: usize,
    /// The most grants a job gets.
    pub attempts_max: u32,
    /// A worker's heartbeat period.
    pub heartbeat_us: u64,
    /// A worker's margin for clock drift.
    pub drift_margin_us: u64,
    /// A worker's round-trip allowance.
    pub worker_request_timeout_us: u64,
    /// A worker's wait after an empty acquire.
    pub idle_backoff_us: u64,
    /// How long the table may hold an acquire.
    pub acquire_wait_us: u64,
    /// A reclaimer's scan period.
    pub scan_every_us: u64,
    /// A reclaimer's round-trip allowance.
    pub reclaimer_request_timeout_us: u64,
    /// A reclaimer's retries of one request.
    pub reclaimer_retries_max: u32,
    /// How many leases of a batch a reclaimer fences, looks up and finishes together. Absent: 1,
    /// one lease at a time.
    #[serde(default = "one_slot", skip_serializing_if = "is_one_slot")]
    pub reclaimer_wave: u32,
    /// The dependency's ordinary latency range, `[min, max]`.
    pub dependency_latency_us: (u64, u64),
    /// The network's one-way latency range during the fault phase, `[min, max]`.
    pub network_latency_us: (u64, u64),
    /// The mean gap between arrivals the plan was drawn with (the arrival list decides).
    pub arrival_mean_us: u64,
    /// When the faults heal.
    pub fault_phase_us: u64,
    /// How long after the heal every accepted job has to reach a terminal outcome.
    pub liveness_budget_us: u64,
}

impl World {
    /// When a run of this world ends at the latest: the heal, then the liveness budget.
    pub fn end_us(&self) -> u64 {
        self.fault_phase_us.saturating_add(self.liveness_budget_us)
    }

    /// The longest idle backoff that means anything: the run's whole length. A worker that waits
    /// that long after an empty acquire never asks again within the run, as with any longer wait,
    /// and its next acquire stays a time on the clock. (The shrinker once multiplied the backoff
    /// up to `u64::MAX`, which plans recorded as 18446744073709551615 and which overflowed the
    /// worker's clock at its next empty acquire: a crash of the shrinker's own making.)
    pub fn idle_backoff_max_us(&self) -> u64 {
        self.end_us()
    }
}

/// One line of the plan's faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planned {
    /// A fault at a fixed time.
    Scheduled {
        /// When.
        at_us: u64,
        /// What.
        fault: Fault,
    },
    /// A node's clock, from the start.
    Skew {
        /// The node.
        node: Node,
        /// Its clock.
        clock: LocalClock,
    },
    /// A fault at a visit.
    Keyed(Keyed),
}

impl Planned {
    /// When it strikes, or struck when recorded: the plan's order.
    pub fn time_us(&self) -> u64 {
        match self {
            Planned::Scheduled { at_us, .. } => *at_us,
            Planned::Skew { .. } => 0,
            Planned::Keyed(keyed) => keyed.fired_us,
        }
    }

    /// The nodes it names.
    pub fn nodes(&self) -> Vec<Node> {
        match *self {
            Planned::Scheduled { fault, .. } => fault.nodes(),
            Planned::Skew { node, .. } => vec![node],
            Planned::Keyed(keyed) => keyed.visit.site.nodes(),
        }
    }

    /// The job it names, if any.
    pub fn job(&self) -> Option<JobId> {
        match self {
            Planned::Keyed(keyed) => keyed.visit.site.job(),
            _ => None,
        }
    }

    /// The verb, as the plan spells it.
    pub fn verb(&self) -> &'static str {
        match self {
            Planned::Scheduled { fault, .. } => fault.verb(),
            Planned::Skew { .. } => "skew",
            Planned::Keyed(keyed) => keyed.dealt.verb(),
        }
    }

    /// Whether a length or a factor it needs is 0.
    fn is_void(&self) -> bool {
        match self {
            Planned::Scheduled { fault, .. } => fault.is_void(),
            Planned::Skew { .. } => false,
            Planned::Keyed(keyed) => keyed.dealt.is_void(),
        }
    }
}

/// A plan that cannot be read or played.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

fn is_zero(count: &u32) -> bool {
    *count == 0
}

fn one_slot() -> u32 {
    1
}

fn is_one_slot(slots: &u32) -> bool {
    *slots == 1
}

fn one_request() -> usize {
    1
}

fn is_one_request(batch: &usize) -> bool {
    *batch == 1
}

fn is_zero_us(value: &u64) -> bool {
    *value == 0
}

fn is_zero_u32(value: &u32) -> bool {
    *value == 0
}

fn is_zero_usize(value: &usize) -> bool {
    *value == 0
}

fn err<T>(message: impl Into<String>) -> Result<T, PlanError> {
    Err(PlanError(message.into()))
}

/// One fault line as written: its `verb` names the variant, and each verb takes its own fields,
/// each required unless shown as optional. serde reads and writes it; only what a field's type
/// cannot say (a rate from 0 to 1, a message's ends or its lease) is checked by hand, in
/// [`Line::typed`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "verb", rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    /// A crash at a time (`at_us`), or at a visit (`fired_us`, `occurrence`, `point`).
    Crash(CrashLine),
    /// A node cut off from everyone, or from `peer`.
    Partition {
        at_us: u64,
        node: Node,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<Node>,
        repair_after_us: u64,
    },
    /// A node's process paused.
    Pause { at_us: u64, node: Node, resume_after_us: u64 },
    /// A worker or a reclaimer told to stop, as a deploy does: it drains and exits, and restarts
    /// `restart_after_us` after it has exited.
    Shutdown { at_us: u64, node: Node, restart_after_us: u64 },
    /// Arrivals `factor` times faster.
    Surge { at_us: u64, len_us: u64, factor: u64 },
    /// The dependency faulty at these rates, for `len_us` or until the heal.
    Degrade {
        at_us: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        len_us: Option<u64>,
        slow_rate: Rate,
        slow_factor: u64,
        fail_rate: Rate,
        lost_reply_rate: Rate,
        rival_rate: Rate,
    },
    /// A node's clock from the start: `at_us` is 0.
    Skew { at_us: u64, node: Node, offset_us: i64, drift_ppm: i32 },
    /// A node stalled at a protocol point.
    Stall {
        fired_us: u64,
        node: Node,
        point: Point,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<u64>,
        occurrence: u32,
        len_us: u64,
    },
    /// A dependency call made slower.
    Slow {
        fired_us: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<Node>,
        job: u64,
        epoch: u64,
        occurrence: u32,
        factor: u64,
    },
    /// A dependency call that fails, before its effect or after it (a lost answer).
    Fail {
        fired_us: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<Node>,
        job: u64,
        epoch: u64,
        occurrence: u32,
        after_effect: bool,
    },
    /// A dependency call that also writes a second, different output.
    Rival {
        fired_us: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<Node>,
        job: u64,
        epoch: u64,
        occurrence: u32,
    },
    /// A message lost.
    Lose {
        fired_us: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<Node>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<Node>,
        message: MessageKind,
        reply: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<u64>,
        occurrence: u32,
    },
    /// A message held back.
    Delay {
        fired_us: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<Node>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<Node>,
        message: MessageKind,
        reply: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<u64>,
        occurrence: u32,
        len_us: u64,
    },
    /// A message delivered twice, the copy `gap_us` later.
    Duplicate {
        fired_us: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<Node>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<Node>,
        message: MessageKind,
        reply: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<u64>,
        occurrence: u32,
        gap_us: u64,
    },
}
/// A `crash` line: at a time (`at_us`: the schedule's crash, wherever the node is), or at a visit
/// (`fired_us`, `occurrence` and `point`, with the `job` when the point has one).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CrashLine {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fired_us: Option<u64>,
    node: Node,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    point: Option<Point>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    job: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    occurrence: Option<u32>,
    restart_after_us: u64,
}

impl Line {
    fn of(planned: &Planned) -> Line {
        match *planned {
            Planned::Scheduled { at_us, fault } => match fault {
                Fault::Crash { node, down_us } => Line::Crash(CrashLine {
                    at_us: Some(at_us),
                    fired_us: None,
                    node,
                    point: None,
                    job: None,
                    occurrence: None,
                    restart_after_us: down_us,
                }),
                Fault::Partition { node, len_us } => {
                    Line::Partition { at_us, node, peer: None, repair_after_us: len_us }
                }
                Fault::CutLink { a, b, len_us } => {
                    Line::Partition { at_us, node: a, peer: Some(b), repair_after_us: len_us }
                }
                Fault::Pause { node, len_us } => Line::Pause { at_us, node, resume_after_us: len_us },
                Fault::Shutdown { node, down_us } => Line::Shutdown { at_us, node, restart_after_us: down_us },
                Fault::Surge { len_us, factor } => Line::Surge { at_us, len_us, factor },
                Fault::Degrade { len_us, rates } => Line::Degrade {
                    at_us,
                    len_us,
                    slow_rate: rates.slow_rate,
                    slow_factor: rates.slow_factor,
                    fail_rate: rates.fail_rate,
                    lost_reply_rate: rates.lost_reply_rate,
                    rival_rate: rates.rival_rate,
                },
            },
            Planned::Skew { node, clock } => {
                Line::Skew { at_us: 0, node, offset_us: clock.offset_us, drift_ppm: clock.drift_ppm }
            }
            Planned::Keyed(Keyed { fired_us, visit: Visit { site, occurrence }, dealt }) => match (site, dealt) {
                (Site::Point { node, point, job }, Dealt::Crash { restart_after_us }) => Line::Crash(CrashLine {
                    at_us: None,
                    fired_us: Some(fired_us),
                    node,
                    point: Some(point),
                    job: job.map(|job| job.0),
                    occurrence: Some(occurrence),
                    restart_after_us,
                }),
                (Site::Point { node, point, job }, Dealt::Stall { len_us }) => {
                    Line::Stall { fired_us, node, point, job: job.map(|job| job.0), occurrence, len_us }
                }
                (Site::Call { job, epoch }, dealt) => {
                    let (node, job, epoch) = (Some(Node::Ledger), job.0, epoch.0);
                    match dealt {
                        Dealt::Slow { factor } => Line::Slow { fired_us, node, job, epoch, occurrence, factor },
                        Dealt::Fail { after_effect } => {
                            Line::Fail { fired_us, node, job, epoch, occurrence, after_effect }
                        }
                        Dealt::Rival => Line::Rival { fired_us, node, job, epoch, occurrence },
                        other => unreachable!("{other:?} is not dealt at a dependency call"),
                    }
                }
                (Site::Message { ends, message, reply, job, epoch }, dealt) => {
                    let (from, to) = (ends.map(|(from, _)| from), ends.map(|(_, to)| to));
                    let (job, epoch) = (job.map(|job| job.0), epoch.map(|epoch| epoch.0));
                    match dealt {
                        Dealt::Lose => Line::Lose { fired_us, from, to, message, reply, job, epoch, occurrence },
                        Dealt::Delay { len_us } => {
                            Line::Delay { fired_us, from, to, message, reply, job, epoch, occurrence, len_us }
                        }
                        Dealt::Duplicate { gap_us } => {
                            Line::Duplicate { fired_us, from, to, message, reply, job, epoch, occurrence, gap_us }
                        }
                        other => unreachable!("{other:?} is not dealt to a message"),
                    }
                }
                (site, dealt) => unreachable!("{dealt:?} is not dealt at {site:?}"),
            },
        }
    }

    /// The typed line, or what is wrong with it that its fields' types cannot say.
    fn typed(self) -> Result<Planned, String> {
        let scheduled = |at_us: u64, fault: Fault| Ok(Planned::Scheduled { at_us, fault });
        let keyed = |fired_us: u64, site: Site, occurrence: u32, dealt: Dealt| {
            if occurrence == 0 {
                return Err("`occurrence` counts from 1".to_string());
            }
            Ok(Planned::Keyed(Keyed { fired_us, visit: Visit { site, occurrence }, dealt }))
        };
        let point_site = |verb: &str, node: Node, point: Point, job: Option<u64>| {
            if point == Point::AtRandom {
                return Err(format!(
                    "`{verb}` at `at_random`: that is where a crash at `at_us` strikes, not a point a node passes"
                ));
            }
            if job.is_none() && point != Point::BeforeListing {
                return Err(format!("`{verb}` at `{}` needs `job`", point.name()));
            }
            Ok(Site::Point { node, point, job: job.map(JobId) })
        };
        let call_site = |verb: &str, node: Option<Node>, job: u64, epoch: u64| match node {
            None | Some(Node::Ledger) => Ok(Site::Call { job: JobId(job), epoch: Epoch(epoch) }),
            Some(other) => Err(format!("`{verb}` strikes a dependency call, at the ledger, not at {other}")),
        };
        match self {
            Line::Crash(CrashLine { at_us, fired_us, node, point, job, occurrence, restart_after_us }) => {
                match (at_us, fired_us) {
                    (Some(at_us), None) => {
                        if point.is_some() || job.is_some() || occurrence.is_some() {
                            return Err("a crash at `at_us` strikes wherever the node is: it takes no `point`, \
                                        `job` or `occurrence` (a crash at a visit takes `fired_us`)"
                                .into());
                        }
                        scheduled(at_us, Fault::Crash { node, down_us: restart_after_us })
                    }
                    (None, Some(fired_us)) => {
                        let point = point.ok_or("`crash` at a visit needs `point`")?;
                        let occurrence = occurrence.ok_or("`crash` at a visit needs `occurrence`")?;
                        let site = point_site("crash", node, point, job)?;
                        keyed(fired_us, site, occurrence, Dealt::Crash { restart_after_us })
                    }
                    (Some(_), Some(_)) => {
                        Err("a line has `at_us` (a scheduled fault) or `fired_us` (a keyed one), not both".into())
                    }
                    (None, None) => Err("`crash` needs `at_us` (at a time) or `fired_us` (at a visit)".into()),
                }
            }
            Line::Partition { at_us, node, peer: None, repair_after_us } => {
                scheduled(at_us, Fault::Partition { node, len_us: repair_after_us })
            }
            Line::Partition { at_us, node, peer: Some(peer), repair_after_us } => {
                scheduled(at_us, Fault::CutLink { a: node, b: peer, len_us: repair_after_us })
            }
            Line::Pause { at_us, node, resume_after_us } => {
                scheduled(at_us, Fault::Pause { node, len_us: resume_after_us })
            }
            Line::Shutdown { at_us, node, restart_after_us } => {
                if !matches!(node, Node::Worker(_) | Node::Reclaimer(_)) {
                    return Err(format!("`shutdown` tells a worker or a reclaimer to stop, not {node}"));
                }
                scheduled(at_us, Fault::Shutdown { node, down_us: restart_after_us })
            }
            Line::Surge { at_us, len_us, factor } => scheduled(at_us, Fault::Surge { len_us, factor }),
            Line::Degrade { at_us, len_us, slow_rate, slow_factor, fail_rate, lost_reply_rate, rival_rate } => {
                for (name, rate) in [
                    ("slow_rate", slow_rate),
                    ("fail_rate", fail_rate),
                    ("lost_reply_rate", lost_reply_rate),
                    ("rival_rate", rival_rate),
                ] {
                    if !(0.0..=1.0).contains(&rate.0) {
                        return Err(format!("`degrade`'s `{name}` is a probability, from 0 to 1, not {}", rate.0));
                    }
                }
                let rates = Degradation { slow_rate, slow_factor, fail_rate, lost_reply_rate, rival_rate };
                scheduled(at_us, Fault::Degrade { len_us, rates })
            }
            Line::Skew { at_us, node, offset_us, drift_ppm } => {
                if offset_us.unsigned_abs() >= BASE_US {
                    return Err(format!("a clock offset of {offset_us}us is beyond ±{BASE_US}us"));
                }
                if drift_ppm.abs() > DRIFT_PPM_MAX {
                    return Err(format!("a drift of {drift_ppm}ppm is beyond ±{DRIFT_PPM_MAX}ppm"));
                }
                if at_us != 0 {
                    return Err("`skew` sets a clock from the start: its `at_us` is 0".into());
                }
                Ok(Planned::Skew { node, clock: LocalClock::new(offset_us, drift_ppm) })
            }
            Line::Stall { fired_us, node, point, job, occurrence, len_us } => {
                keyed(fired_us, point_site("stall", node, point, job)?, occurrence, Dealt::Stall { len_us })
            }
            Line::Slow { fired_us, node, job, epoch, occurrence, factor } => {
                keyed(fired_us, call_site("slow", node, job, epoch)?, occurrence, Dealt::Slow { factor })
            }
            Line::Fail { fired_us, node, job, epoch, occurrence, after_effect } => {
                keyed(fired_us, call_site("fail", node, job, epoch)?, occurrence, Dealt::Fail { after_effect })
            }
            Line::Rival { fired_us, node, job, epoch, occurrence } => {
                keyed(fired_us, call_site("rival", node, job, epoch)?, occurrence, Dealt::Rival)
            }
            Line::Lose { fired_us, from, to, message, reply, job, epoch, occurrence } => {
                keyed(fired_us, message_site("lose", from, to, message, reply, job, epoch)?, occurrence, Dealt::Lose)
            }
            Line::Delay { fired_us, from, to, message, reply, job, epoch, occurrence, len_us } => {
                let site = message_site("delay", from, to, message, reply, job, epoch)?;
                keyed(fired_us, site, occurrence, Dealt::Delay { len_us })
            }
            Line::Duplicate { fired_us, from, to, message, reply, job, epoch, occurrence, gap_us } => {
                let site = message_site("duplicate", from, to, message, reply, job, epoch)?;
                keyed(fired_us, site, occurrence, Dealt::Duplicate { gap_us })
            }
        }
    }
}

/// A message's site: between two nodes (`from`, `to`), or about a lease (`job`, `epoch`).
fn message_site(
    verb: &str,
    from: Option<Node>,
    to: Option<Node>,
    message: MessageKind,
    reply: bool,
    job: Option<u64>,
    epoch: Option<u64>,
) -> Result<Site, String> {
    let (job, epoch) = (job.map(JobId), epoch.map(Epoch));
    let ends = match (from, to, epoch) {
        (None, None, Some(_)) => None,
        (Some(from), Some(to), None) => Some((from, to)),
        (_, _, Some(_)) => {
            return Err(format!("`{verb}` of a message about a lease names its `job` and `epoch`, not `from` and `to`"))
        }
        _ => return Err(format!("`{verb}` needs `from` and `to` (or, for a lease's message, `epoch`)")),
    };
    Ok(Site::Message { ends, message, reply, job, epoch })
}

/// The plan as read, before its lines are typed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    #[allow(dead_code, reason = "checked before the plan is read")]
    plan_version: u32,
    #[serde(default)]
    comment: Option<String>,
    scenario: String,
    seed: u64,
    #[serde(default)]
    bug: Option<String>,
    #[serde(default)]
    store: StoreKind,
    #[serde(default)]
    expect: Option<String>,
    world: World,
    arrivals: Vec<Arrival>,
    faults: Vec<serde_json::Value>,
}

impl Plan {
    /// Reads a plan, and checks it can be played: its version, every field, every node, every
    /// time.
    pub fn parse(text: &str) -> Result<Plan, PlanError> {
        let value: serde_json::Value = serde_json::from_str(text).or_else(|e| err(format!("not a JSON plan: {e}")))?;
        match value.get("plan_version").and_then(serde_json::Value::as_u64) {
            Some(version) if version == u64::from(PLAN_VERSION) => {}
            Some(version) => return err(format!("plan version {version}; this build reads version {PLAN_VERSION}")),
            None => return err("no `plan_version`: not a plan"),
        }
        let raw: RawPlan = serde_json::from_value(value).or_else(|e| err(format!("bad plan: {e}")))?;
        let bug = raw.bug.map(|name| name.parse::<Bug>()).transpose().or_else(|e| err(e.to_string()))?;
        let mut faults = Vec::with_capacity(raw.faults.len());
        for (index, line) in raw.faults.into_iter().enumerate() {
            let verb = line.get("verb").and_then(serde_json::Value::as_str).map(|verb| format!(" (`{verb}`)"));
            let typed = serde_json::from_value::<Line>(line).map_err(|e| e.to_string()).and_then(Line::typed);
            faults.push(typed.or_else(|e| err(format!("fault {}{}: {e}", index + 1, verb.unwrap_or_default())))?);
        }
        let mut world = raw.world;
        // A plan shrunk before the bound holds `u64::MAX` here: it reads as the same "never again".
        world.idle_backoff_us = world.idle_backoff_us.min(world.idle_backoff_max_us());
        let plan = Plan {
            comment: raw.comment,
            scenario: raw.scenario,
            seed: raw.seed,
            bug,
            store: raw.store,
            expect: raw.expect,
            world,
            arrivals: raw.arrivals,
            faults,
        };
        plan.validate()?;
        Ok(plan)
    }

    /// Checks that the plan can be played: a workable world, known nodes, times in range.
    pub fn validate(&self) -> Result<(), PlanError> {
        let params = self.params_unchecked();
        if let Err(why) = crate::world::durable::parse_world_store(self.store.name()) {
            return err(format!("store: {why}"));
        }
        if let Some(why) = crate::world::durable::refuses(self.store, self.bug) {
            return err(why);
        }
        params.table.validate().or_else(|e| err(format!("world: {e}")))?;
        params.worker.validate().or_else(|e| err(format!("world: {e}")))?;
        params.reclaimer.validate().or_else(|e| err(format!("world: {e}")))?;
        let w = &self.world;
        if w.workers == 0 || w.reclaimers == 0 {
            return err("world: a world needs at least one worker and one reclaimer");
        }
        if w.poison_ppm > 1_000_000 {
            return err(format!("world: poison_ppm {} is more than a million parts per million", w.poison_ppm));
        }
        if w.handler_timeout_us == Some(0) {
            return err("world: handler_timeout_us of 0 would refuse every handler before it starts");
        }
        if !(1..=64).contains(&w.slots) {
            return err(format!("world: {} slots per worker process, not 1 to 64", w.slots));
        }
        if !(1..=64).contains(&w.batch) {
            return err(format!("world: a batch of {} requests per call, not 1 to 64", w.batch));
        }
        if w.enqueue_batch > w.batch_max {
            return err(format!("world: enqueue_batch {} is past batch_max {}", w.enqueue_batch, w.batch_max));
        }
        if w.handlers > w.slots {
            return err(format!("world: {} handlers at once, but {} slots per worker process", w.handlers, w.slots));
        }
        if w.linger_us > w.worker_request_timeout_us / 2 {
            let most = w.worker_request_timeout_us / 2;
            return err(format!("world: a linger of {} us, past half the request timeout ({most} us)", w.linger_us));
        }
        if w.recorders > w.workers {
            return err(format!("world: {} recorders, but the world has {} workers", w.recorders, w.workers));
        }
        if w.dependency_latency_us.0 > w.dependency_latency_us.1 || w.network_latency_us.0 > w.network_latency_us.1 {
            return err("world: a latency range is [min, max] with min <= max");
        }
        if w.network_latency_us.0 == 0 {
            return err("world: the network's latency is at least 1us");
        }
        if self.arrivals.len() > w.jobs as usize {
            return err(format!("world: {} arrivals, but the world offers {} jobs", self.arrivals.len(), w.jobs));
        }
        let end_us = w.end_us();
        let mut jobs = std::collections::BTreeSet::new();
        let mut last = 0;
        for (index, arrival) in self.arrivals.iter().enumerate() {
            if !jobs.insert(arrival.job) {
                return err(format!("arrival {}: job {} is offered twice", index + 1, arrival.job));
            }
            if arrival.at_us < last {
                return err(format!("arrival {}: the arrivals are in time order", index + 1));
            }
            if arrival.at_us > end_us {
                return err(format!("arrival {}: at {}us, after the run ends ({end_us}us)", index + 1, arrival.at_us));
            }
            last = arrival.at_us;
        }
        let known = |node: Node, what: &str| -> Result<(), PlanError> {
            let ok = match node {
                // A worker process, or (a point or a message) one of its slots.
                Node::Worker(n) => n < w.workers || (what != "skew" && n < w.workers * w.slots),
                Node::Reclaimer(n) => n < w.reclaimers,
                Node::Table | Node::Ledger => what != "skew",
                Node::Arrivals => what == "message",
                Node::World => false,
            };
            if ok {
                return Ok(());
            }
            err(format!(
                "unknown node {node} for `{what}` (the world has w0..w{} and r0..r{})",
                w.workers - 1,
                w.reclaimers - 1
            ))
        };
        for (index, planned) in self.faults.iter().enumerate() {
            let line = index + 1;
            let time = planned.time_us();
            if time > w.fault_phase_us {
                return err(format!("fault {line}: at {time}us, after the faults heal ({}us)", w.fault_phase_us));
            }
            let what = match planned {
                Planned::Keyed(Keyed { visit: Visit { site: Site::Message { .. }, .. }, .. }) => "message",
                other => other.verb(),
            };
            for node in planned.nodes() {
                known(node, what).or_else(|e| err(format!("fault {line}: {e}")))?;
            }
            if planned.is_void() {
                return err(format!("fault {line}: a length or factor of 0"));
            }
            if let Planned::Scheduled { fault: Fault::CutLink { a, b, .. }, .. } = planned {
                if a == b {
                    return err(format!("fault {line}: a node cannot be cut off from itself"));
                }
            }
        }
        Ok(())
    }

    /// The parameters that play this plan: the world's, no rate, the scheduled faults, the
    /// clocks, the arrival list and the keyed faults.
    pub fn params(&self) -> Result<Params, PlanError> {
        self.validate()?;
        Ok(self.params_unchecked())
    }

    fn params_unchecked(&self) -> Params {
        let w = &self.world;
        let lease_ttl = Span::from_us(w.lease_ttl_us);
        let mut params = Params::quiet(self.scenario.clone(), self.seed, self.bug);
        params.store = self.store;
        params.workers = w.workers;
        params.reclaimers = w.reclaimers;
        params.recorders = w.recorders;
        params.poison_ppm = w.poison_ppm;
        params.shutdown_grace_us = w.shutdown_grace_us;
        params.handler_timeout_us = w.handler_timeout_us;
        params.slots = w.slots;
        params.batch = w.batch;
        params.linger = Span(w.linger_us);
        params.handlers = w.handlers;
        params.enqueue_batch = w.enqueue_batch;
        params.table =
            TableConfig { capacity: w.capacity, lease_ttl, batch_max: w.batch_max, attempts_max: w.attempts_max };
        params.worker = WorkerConfig {
            lease_ttl,
            heartbeat_every: Span::from_us(w.heartbeat_us),
            drift_margin: Span::from_us(w.drift_margin_us),
            request_timeout: Span::from_us(w.worker_request_timeout_us),
            idle_backoff: Span::from_us(w.idle_backoff_us),
            acquire_wait: Span::from_us(w.acquire_wait_us),
        };
        params.reclaimer = ReclaimerConfig {
            scan_every: Span::from_us(w.scan_every_us),
            request_timeout: Span::from_us(w.reclaimer_request_timeout_us),
            retries_max: w.reclaimer_retries_max,
            wave: w.reclaimer_wave,
        };
        params.dependency.latency_min_us = w.dependency_latency_us.0;
        params.dependency.latency_max_us = w.dependency_latency_us.1;
        params.latency_us = w.network_latency_us;
        params.arrival_mean_us = w.arrival_mean_us;
        params.fault_phase_us = w.fault_phase_us;
        params.liveness_budget_us = w.liveness_budget_us;
        params.jobs = w.jobs;
        params.worker_clocks = vec![LocalClock::EXACT; w.workers as usize];
        params.reclaimer_clocks = vec![LocalClock::EXACT; w.reclaimers as usize];
        params.arrivals = Some(self.arrivals.clone());
        let mut keyed = Vec::new();
        for planned in &self.faults {
            match *planned {
                Planned::Scheduled { at_us, fault } => params.schedule.push((at_us, fault)),
                Planned::Skew { node, clock } => params.skew(node, clock),
                Planned::Keyed(k) => keyed.push(k),
            }
        }
        params.schedule.sort_by_key(|&(at, _)| at);
        params.planned = Some(std::sync::Arc::new(keyed));
        params
    }

    /// The plan of a run: its world, its arrivals, its schedule and clocks, and every keyed fault
    /// it dealt.
    pub fn of_run(params: &Params, arrivals: &[Arrival], keyed: &[Keyed]) -> Plan {
        let world = World {
            jobs: params.jobs,
            workers: params.workers,
            reclaimers: params.reclaimers,
            recorders: params.recorders,
            poison_ppm: params.poison_ppm,
            shutdown_grace_us: params.shutdown_grace_us,
            handler_timeout_us: params.handler_timeout_us,
            slots: params.slots,
            batch: params.batch,
            linger_us: params.linger.as_us(),
            handlers: params.handlers,
            enqueue_batch: params.enqueue_batch,
            lease_ttl_us: params.table.lease_ttl.as_us(),
            capacity: params.table.capacity,
            batch_max: params.table.batch_max,
            attempts_max: params.table.attempts_max,
            heartbeat_us: params.worker.heartbeat_every.as_us(),
            drift_margin_us: params.worker.drift_margin.as_us(),
            worker_request_timeout_us: params.worker.request_timeout.as_us(),
            idle_backoff_us: params.worker.idle_backoff.as_us(),
            acquire_wait_us: params.worker.acquire_wait.as_us(),
            scan_every_us: params.reclaimer.scan_every.as_us(),
            reclaimer_request_timeout_us: params.reclaimer.request_timeout.as_us(),
            reclaimer_retries_max: params.reclaimer.retries_max,
            reclaimer_wave: params.reclaimer.wave,
            dependency_latency_us: (params.dependency.latency_min_us, params.dependency.latency_max_us),
            network_latency_us: params.latency_us,
            arrival_mean_us: params.arrival_mean_us,
            fault_phase_us: params.fault_phase_us,
            liveness_budget_us: params.liveness_budget_us,
        };
        let mut faults: Vec<Planned> = Vec::new();
        let clocks = params.worker_clocks.iter().enumerate().map(|(n, c)| (Node::Worker(n as u32), *c));
        let clocks =
            clocks.chain(params.reclaimer_clocks.iter().enumerate().map(|(n, c)| (Node::Reclaimer(n as u32), *c)));
        faults.extend(
            clocks.filter(|(_, clock)| *clock != LocalClock::EXACT).map(|(node, clock)| Planned::Skew { node, clock }),
        );
        faults.extend(params.schedule.iter().map(|&(at_us, fault)| Planned::Scheduled { at_us, fault }));
        faults.extend(keyed.iter().map(|&k| Planned::Keyed(k)));
        // Stable: faults dealt at the same time keep the order they were dealt in.
        faults.sort_by_key(Planned::time_us);
        Plan {
            comment: None,
            scenario: params.scenario.clone(),
            seed: params.seed,
            bug: params.bug,
            store: params.store,
            expect: None,
            world,
            arrivals: arrivals.to_vec(),
            faults,
        }
    }

    /// The plan as a person reads it: JSON, one arrival and one fault per line, in time order.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{{");
        let _ = writeln!(out, "  \"plan_version\": {PLAN_VERSION},");
        if let Some(comment) = &self.comment {
            let _ = writeln!(out, "  \"comment\": {},", json(comment));
        }
        let _ = writeln!(out, "  \"scenario\": {},", json(&self.scenario));
        let _ = writeln!(out, "  \"seed\": {},", self.seed);
        if let Some(bug) = self.bug {
            let _ = writeln!(out, "  \"bug\": {},", json(&bug.name().to_string()));
        }
        if self.store != StoreKind::Memory {
            let _ = writeln!(out, "  \"store\": {},", json(&self.store));
        }
        if let Some(expect) = &self.expect {
            let _ = writeln!(out, "  \"expect\": {},", json(expect));
        }
        let _ = writeln!(out, "  \"world\": {},", json(&self.world));
        list(&mut out, "arrivals", self.arrivals.iter().map(json), true);
        list(&mut out, "faults", self.faults.iter().map(|f| json(&Line::of(f))), false);
        let _ = writeln!(out, "}}");
        out
    }
}

fn list(out: &mut String, name: &str, items: impl ExactSizeIterator<Item = String>, more: bool) {
    let count = items.len();
    if count == 0 {
        let _ = writeln!(out, "  \"{name}\": []{}", if more { "," } else { "" });
        return;
    }
    let _ = writeln!(out, "  \"{name}\": [");
    for (index, item) in items.enumerate() {
        let _ = writeln!(out, "    {item}{}", if index + 1 < count { "," } else { "" });
    }
    let _ = writeln!(out, "  ]{}", if more { "," } else { "" });
}

/// A value as one line of JSON.
fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("plan values serialise")
}

#[cfg(test)]
mod tests {
    use super::Plan;

    /// A plan as `lease-sim shrink` wrote it before the idle backoff was bounded: one worker that,
    /// after an empty acquire, waits `u64::MAX` microseconds.
    const UNBOUNDED: &str = r#"{
  "plan_version": 1,
  "scenario": "swarm",
  "seed": 0,
  "world": {"jobs":0,"workers":1,"reclaimers":1,"lease_ttl_us":688000,"capacity":56,"batch_max":2,"attempts_max":1,"heartbeat_us":172000,"drift_margin_us":86000,"worker_request_timeout_us":114666,"idle_backoff_us":18446744073709551615,"acquire_wait_us":86000,"scan_every_us":98285,"reclaimer_request_timeout_us":114666,"reclaimer_retries_max":3,"dependency_latency_us":[2000,12234],"network_latency_us":[1000,19033],"arrival_mean_us":18871,"fault_phase_us":3000000,"liveness_budget_us":30000000},
  "arrivals": [],
  "faults": []
}"#;

    // Proves an old plan whose idle backoff is u64::MAX is still read, that it is read as the
    // longest backoff that means anything (the run's length: the worker never asks again), and
    // that the plan recorded from it says so instead of 18446744073709551615.
    #[test]
    fn an_unbounded_idle_backoff_is_read_as_the_run_length() {
        let plan = Plan::parse(UNBOUNDED).expect("an old plan is still readable");
        assert_eq!(plan.world.idle_backoff_us, 33_000_000, "the run's length: 3 s of faults, 30 s of liveness");
        assert_eq!(plan.world.idle_backoff_us, plan.world.idle_backoff_max_us());
        let json = plan.to_json();
        assert!(!json.contains(&u64::MAX.to_string()), "{json}");
        assert!(json.contains("\"idle_backoff_us\":33000000"), "{json}");
        assert_eq!(Plan::parse(&json).expect("the recorded plan reads back"), plan);
    }

    // Proves a plan's enqueue batch is read (absent: one at a time), written back only when set,
    // and refused past `batch_max`, which the table would refuse at every offer.
    #[test]
    fn an_enqueue_batch_past_batch_max_is_refused() {
        let plan = Plan::parse(UNBOUNDED).expect("a plan without enqueue_batch reads");
        assert_eq!(plan.world.enqueue_batch, 0, "absent: one at a time");
        assert!(!plan.to_json().contains("enqueue_batch"), "0 is not written");
        let batched = UNBOUNDED.replace("\"batch_max\":2,", "\"batch_max\":2,\"enqueue_batch\":2,");
        let plan = Plan::parse(&batched).expect("an enqueue batch of batch_max reads");
        assert_eq!(plan.world.enqueue_batch, 2);
        assert_eq!(Plan::parse(&plan.to_json()).expect("and reads back"), plan);
        let past = UNBOUNDED.replace("\"batch_max\":2,", "\"batch_max\":2,\"enqueue_batch\":3,");
        let error = Plan::parse(&past).expect_err("past batch_max");
        assert!(error.to_string().contains("enqueue_batch 3 is past batch_max 2"), "{error}");
    }
}
