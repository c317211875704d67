//! Fault decisions: "does a fault strike here?", asked at every site a fault can strike, and
//! answered from the seed's streams or from a plan.
//!
//! A *site* is a place in a run: a node passing a protocol point for a job, a call to the
//! dependency, a message on its way. Each visit of a site gets the next *occurrence* number, so
//! `(site, occurrence)` names one visit, in a seeded run and in its replay alike. At a visit the
//! world asks one or more *questions* (strike? fail? lose the message?). Every answer that dealt a
//! fault is recorded with its visit: that list, with the scheduled faults, the clocks and the
//! arrivals, is the run's [`Plan`](super::plan::Plan).
//!
//! Two sources answer:
//! - **Drawn**: from the seed's fault streams, at the scenario's rates. They are the world's own
//!   streams, never madsim's, so an answer never shifts madsim's scheduler.
//! - **Planned**: looked up in a plan by visit and question. Nothing is drawn: a visit the plan
//!   does not name gets no fault.
//!
//! Recording a drawn run and replaying its plan asks the same questions at the same visits, so the
//! replay deals the same faults and its history is the same, byte for byte.

use super::{Point, Scripted};
use lease_core::{Epoch, JobId};
use lease_history::{MessageKind, Node};
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::{BTreeMap, BTreeSet};

/// A place in a run where a fault can strike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Site {
    /// `node` passes protocol point `point`, working on `job` (none for a scan).
    Point {
        /// The node.
        node: Node,
        /// The point.
        point: Point,
        /// The job, when the point is about one.
        job: Option<JobId>,
    },
    /// A call to the dependency for `job` under `epoch`.
    Call {
        /// The job.
        job: JobId,
        /// The lease epoch the call was made under.
        epoch: Epoch,
    },
    /// A message on its way. One about a lease is named by its job and epoch, whoever holds the
    /// lease; any other by its sender and receiver (`ends`).
    Message {
        /// The sender and the receiver, for a message about no lease.
        ends: Option<(Node, Node)>,
        /// The request it makes or answers.
        message: MessageKind,
        /// Whether it is the answer.
        reply: bool,
        /// The job it names, if any.
        job: Option<JobId>,
        /// The lease epoch it acts under, if any.
        epoch: Option<Epoch>,
    },
}

impl Site {
    /// The nodes it names.
    pub fn nodes(&self) -> Vec<Node> {
        match *self {
            Site::Point { node, .. } => vec![node],
            Site::Call { .. } => vec![Node::Ledger],
            Site::Message { ends, .. } => ends.map_or_else(Vec::new, |(from, to)| vec![from, to]),
        }
    }

    /// The job it names, if any.
    pub fn job(&self) -> Option<JobId> {
        match *self {
            Site::Point { job, .. } | Site::Message { job, .. } => job,
            Site::Call { job, .. } => Some(job),
        }
    }
}

/// One visit of a site: the `occurrence`-th, counting from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Visit {
    /// The site.
    pub site: Site,
    /// Which visit of it.
    pub occurrence: u32,
}

/// What the world asks at a visit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Question {
    /// Does a crash or a stall strike the node here?
    Strike,
    /// Is this dependency call slow?
    Slow,
    /// Does the call fail before producing anything?
    FailBefore,
    /// Does the dependency also write a rival output?
    Rival,
    /// Does the call answer "failed" after its effect happened (a lost reply)?
    LostReply,
    /// Is the message lost?
    Lose,
    /// Is the message held back?
    Delay,
    /// Is the message delivered twice?
    Duplicate,
}

/// A fault dealt at a visit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dealt {
    /// The node crashes, and restarts after `restart_after_us`.
    Crash {
        /// How long it stays down.
        restart_after_us: u64,
    },
    /// The node stalls (does nothing at all) for `len_us`, then carries on.
    Stall {
        /// How long.
        len_us: u64,
    },
    /// The dependency call takes `factor` times its latency.
    Slow {
        /// How many times slower.
        factor: u64,
    },
    /// The dependency call fails: before producing anything, or after its effect (the answer is
    /// lost, and the caller hears "failed").
    Fail {
        /// Whether the effect happened first.
        after_effect: bool,
    },
    /// The dependency writes a second, different output for the operation.
    Rival,
    /// The message is lost.
    Lose,
    /// The message is held back `len_us`.
    Delay {
        /// How long.
        len_us: u64,
    },
    /// A copy of the message follows it, `gap_us` later.
    Duplicate {
        /// The gap.
        gap_us: u64,
    },
}

impl Dealt {
    /// The question it answers.
    pub fn question(self) -> Question {
        match self {
            Dealt::Crash { .. } | Dealt::Stall { .. } => Question::Strike,
            Dealt::Slow { .. } => Question::Slow,
            Dealt::Fail { after_effect: false } => Question::FailBefore,
            Dealt::Fail { after_effect: true } => Question::LostReply,
            Dealt::Rival => Question::Rival,
            Dealt::Lose => Question::Lose,
            Dealt::Delay { .. } => Question::Delay,
            Dealt::Duplicate { .. } => Question::Duplicate,
        }
    }

    /// The verb a plan spells it with.
    pub fn verb(self) -> &'static str {
        match self {
            Dealt::Crash { .. } => "crash",
            Dealt::Stall { .. } => "stall",
            Dealt::Slow { .. } => "slow",
            Dealt::Fail { .. } => "fail",
            Dealt::Rival => "rival",
            Dealt::Lose => "lose",
            Dealt::Delay { .. } => "delay",
            Dealt::Duplicate { .. } => "duplicate",
        }
    }

    /// How long it lasts from its visit: a crash until the restart, a stall or a hold its length,
    /// a copy its gap; 0 for a fault of an instant.
    pub fn len_us(self) -> u64 {
        match self {
            Dealt::Crash { restart_after_us: len_us }
            | Dealt::Stall { len_us }
            | Dealt::Delay { len_us }
            | Dealt::Duplicate { gap_us: len_us } => len_us,
            Dealt::Slow { .. } | Dealt::Fail { .. } | Dealt::Rival | Dealt::Lose => 0,
        }
    }

    /// The same fault, smaller (half as long, or half as slow), as the shrinker tries it; `None`
    /// when it cannot shrink.
    pub fn shrunk(self) -> Option<Dealt> {
        let half = |us: u64| (us > 1).then_some(us / 2);
        Some(match self {
            Dealt::Crash { restart_after_us } => Dealt::Crash { restart_after_us: half(restart_after_us)? },
            Dealt::Stall { len_us } => Dealt::Stall { len_us: half(len_us)? },
            Dealt::Delay { len_us } => Dealt::Delay { len_us: half(len_us)? },
            Dealt::Duplicate { gap_us } => Dealt::Duplicate { gap_us: half(gap_us)? },
            Dealt::Slow { factor } if factor > 2 => Dealt::Slow { factor: factor / 2 },
            Dealt::Slow { .. } | Dealt::Fail { .. } | Dealt::Rival | Dealt::Lose => return None,
        })
    }

    /// Whether a length or a factor it needs is 0: a plan refuses it.
    pub fn is_void(self) -> bool {
        match self {
            Dealt::Stall { len_us } | Dealt::Delay { len_us } => len_us == 0,
            Dealt::Slow { factor } => factor == 0,
            Dealt::Crash { .. } | Dealt::Duplicate { .. } | Dealt::Fail { .. } | Dealt::Rival | Dealt::Lose => false,
        }
    }
}

/// A fault dealt at a visit, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Keyed {
    /// When it was dealt, in the run it was recorded from. A keyed fault strikes at its visit,
    /// whenever that comes; the time is there to read, and to order the plan by.
    pub fired_us: u64,
    /// The visit.
    pub visit: Visit,
    /// What it dealt.
    pub dealt: Dealt,
}

/// The seed's streams and the scenario's scripted faults: where a drawn run's answers come from.
pub(crate) struct Drawn {
    /// Strikes, dependency faults and aimed holds.
    pub rng: Xoshiro256PlusPlus,
    /// Faults on single messages: kept apart, so that holding a message back never shifts a
    /// crash or a dependency draw.
    pub wire: Xoshiro256PlusPlus,
    /// Messages held past a lease: a stream of its own, drawn only in a world that deals them,
    /// so that a seed drawn before they existed keeps every other message's fate.
    pub late: Xoshiro256PlusPlus,
    /// Reclaim storms: a stream of its own, drawn only in a world that opens them.
    pub storm: Xoshiro256PlusPlus,
    /// Failed writes of a runtime's `executing` lines: a stream of its own, drawn only in a
    /// world that deals them.
    pub lines: Xoshiro256PlusPlus,
    /// Stalls with `executing` lines on their way (`before_line`): a stream of its own, drawn
    /// only in a world that deals them.
    pub line_stalls: Xoshiro256PlusPlus,
    /// Jobs whose reclaim a storm awaits: `None` until the first reclaimer fences one and stalls
    /// past its lease, then when that reclaimer wakes, for the next fence to stall past.
    pub storms: BTreeMap<JobId, Option<u64>>,
    /// Strikes the scenario scripts, each fired once.
    pub script: Vec<Scripted>,
    /// Jobs whose first call writes a rival output.
    pub rival_jobs: BTreeSet<JobId>,
}

/// Every fault decision of a world: the source, the visit counts, and what was dealt.
pub(crate) struct Decisions {
    /// Drawn from the seed's streams; `None` when a plan answers.
    pub drawn: Option<Drawn>,
    /// A plan's faults, by visit and question.
    pub planned: BTreeMap<(Visit, Question), Dealt>,
    /// The gaps between arrivals of a seeded run (a plan lists its arrivals).
    pub arrivals: Xoshiro256PlusPlus,
    occurrences: BTreeMap<Site, u32>,
    /// What was dealt, in the order dealt.
    pub recorded: Vec<Keyed>,
}

impl Decisions {
    /// Decisions drawn from `seed`'s streams, with the scenario's scripted strikes and rivals.
    pub fn drawn(seed: u64, script: &[Scripted], rival_jobs: &[JobId]) -> Decisions {
        let drawn = Drawn {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x0c4a_05e5),
            wire: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x3e55_a9e5),
            late: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x1a7e_1ea5),
            storm: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5702_3a11),
            lines: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x11e5_0a17),
            line_stalls: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x57a1_11e5),
            storms: BTreeMap::new(),
            script: script.to_vec(),
            rival_jobs: rival_jobs.iter().copied().collect(),
        };
        Decisions::with(seed, Some(drawn), BTreeMap::new())
    }

    /// Decisions looked up in a plan's keyed faults.
    pub fn planned(seed: u64, keyed: &[Keyed]) -> Decisions {
        let map = keyed.iter().map(|k| ((k.visit, k.dealt.question()), k.dealt)).collect();
        Decisions::with(seed, None, map)
    }

    fn with(seed: u64, drawn: Option<Drawn>, planned: BTreeMap<(Visit, Question), Dealt>) -> Decisions {
        let arrivals = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xa221_7a15);
        Decisions { drawn, planned, arrivals, occurrences: BTreeMap::new(), recorded: Vec::new() }
    }

    /// The next visit of `site`.
    pub fn visit(&mut self, site: Site) -> Visit {
        let count = self.occurrences.entry(site).or_insert(0);
        *count += 1;
        Visit { site, occurrence: *count }
    }
}
