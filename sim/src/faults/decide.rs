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

use super::{Point, Scripted, Strike};
use crate::world::ctx::{Ctx, State};
use lease_core::{Epoch, JobId};
use lease_history::{MessageKind, Node};
use rand::{Rng, SeedableRng};
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
    /// Strikes the scenario scripts, each fired once.
    script: Vec<Scripted>,
    /// Jobs whose first call writes a rival output.
    rival_jobs: BTreeSet<JobId>,
}

/// What a draw sees: the table (aimed holds read its leases), the streams, the time, and whether
/// the dependency's faulty window is open.
pub(crate) struct Draw<'a> {
    table: &'a mut crate::world::durable::Durable,
    drawn: &'a mut Drawn,
    now: u64,
    degraded: bool,
}

/// Every fault decision of a world: the source, the visit counts, and what was dealt.
pub(crate) struct Decisions {
    /// Drawn from the seed's streams; `None` when a plan answers.
    drawn: Option<Drawn>,
    /// A plan's faults, by visit and question.
    planned: BTreeMap<(Visit, Question), Dealt>,
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

    fn visit(&mut self, site: Site) -> Visit {
        let count = self.occurrences.entry(site).or_insert(0);
        *count += 1;
        Visit { site, occurrence: *count }
    }
}

/// What the network does to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Fate {
    /// It is lost.
    pub lost: bool,
    /// It is held back this long.
    pub delay_us: Option<u64>,
    /// A copy follows it, this long after.
    pub copy_gap_us: Option<u64>,
}

impl Ctx {
    /// Visits `site` now: `None` once the faults have healed, when nothing strikes.
    fn visit(&self, site: Site) -> Option<Visit> {
        let mut state = self.state();
        state.faults_on.then(|| state.decisions.visit(site))
    }

    /// Asks `question` at `visit`: the plan's answer, or one drawn by `draw`. A fault dealt is
    /// recorded.
    fn ask(
        &self,
        visit: Option<Visit>,
        question: Question,
        draw: impl FnOnce(&Ctx, Draw<'_>) -> Option<Dealt>,
    ) -> Option<Dealt> {
        let visit = visit?;
        let now = self.now().0;
        let mut guard = self.state();
        let state: &mut State = &mut guard;
        if !state.faults_on {
            return None;
        }
        let dealt = match &mut state.decisions.drawn {
            Some(drawn) => {
                draw(self, Draw { table: &mut state.durable, drawn, now, degraded: state.dependency_degraded })
            }
            None => state.decisions.planned.get(&(visit, question)).copied(),
        };
        if let Some(dealt) = dealt {
            debug_assert_eq!(dealt.question(), question);
            state.decisions.recorded.push(Keyed { fired_us: now, visit, dealt });
        }
        dealt
    }

    /// What strikes `node` passing `point` for `job`: a crash or a stall, or nothing. Drawn: a
    /// scripted strike first (each fires once, at the first node to pass), else a crash or a stall
    /// at the scenario's rates, else a hold aimed at the expiry boundary where the seed aims one.
    pub(crate) fn at_point(&self, node: Node, point: Point, job: Option<JobId>) -> Option<Dealt> {
        let visit = self.visit(Site::Point { node, point, job });
        self.ask(visit, Question::Strike, |ctx, mut draw| {
            if let Some(job) = job {
                if let Some(strike) = ctx.draw_strike(&mut draw, point, job) {
                    return Some(strike);
                }
            }
            let windows = &ctx.params.windows;
            let hold = match (point, job) {
                (Point::BeforeEffect, Some(job)) => ctx.past_expiry_hold_us(&mut draw, job, windows.effect_at_boundary),
                (Point::DuringAck, Some(job)) => ctx.past_expiry_hold_us(&mut draw, job, windows.complete_at_boundary),
                (Point::BeforeRenew, Some(job)) => ctx.renew_hold_us(&mut draw, job),
                (Point::BeforeListing, None) => ctx.listing_hold_us(&mut draw),
                _ => None,
            };
            hold.map(|len_us| Dealt::Stall { len_us })
        })
    }

    /// A scripted strike, or a crash or stall drawn at the scenario's rates.
    fn draw_strike(&self, draw: &mut Draw<'_>, point: Point, job: JobId) -> Option<Dealt> {
        let restart_after_us = self.params.restart_delay_us;
        let Drawn { rng, script, .. } = &mut *draw.drawn;
        if let Some(index) = script.iter().position(|s| s.job == job && s.point == point) {
            return Some(match script.remove(index).strike {
                Strike::Crash => Dealt::Crash { restart_after_us },
                Strike::Stall(len_us) => Dealt::Stall { len_us },
            });
        }
        let crash = &self.params.crash;
        let crash_rate = match point {
            Point::BeforeEffect => crash.before_effect,
            Point::AfterEffect => crash.after_effect,
            Point::DuringAck => crash.during_ack,
            Point::MidReclaim => crash.mid_reclaim,
            Point::BeforeRenew | Point::BeforeRenewReply | Point::AfterListing | Point::BeforeListing => 0.0,
        };
        if chance(rng, crash_rate) {
            return Some(Dealt::Crash { restart_after_us });
        }
        let stall = &self.params.stall;
        let windows = &self.params.windows;
        let (stall_rate, short) = match point {
            Point::BeforeEffect => (stall.before_effect, false),
            Point::DuringAck => (stall.before_ack, false),
            Point::BeforeRenew => (stall.before_renew, false),
            Point::BeforeRenewReply => (windows.before_renew_reply, true),
            Point::AfterListing => (windows.after_listing, true),
            Point::MidReclaim => (windows.after_fence, true),
            Point::AfterEffect | Point::BeforeListing => (0.0, false),
        };
        if !chance(rng, stall_rate) {
            return None;
        }
        let len_us = match short {
            true => windows.draw_len_us(rng),
            false => rng.gen_range(stall.len_us.0..=stall.len_us.1.max(stall.len_us.0)),
        };
        Some(Dealt::Stall { len_us })
    }

    /// A hold of a heartbeat just decided on for `job`, so that the renewal lands within a drift
    /// margin of the lease's expiry (either side), when the seed aims one there.
    fn renew_hold_us(&self, draw: &mut Draw<'_>, job: JobId) -> Option<u64> {
        let margin = self.params.worker.drift_margin.as_us().max(2);
        if !chance(&mut draw.drawn.rng, self.params.windows.renew_at_boundary) {
            return None;
        }
        let expires_at = draw.table.lease(job)?.expires_at.0;
        let lands_at = (expires_at + margin / 2).checked_sub(draw.drawn.rng.gen_range(0..margin))?;
        self.hold_until(draw.now, lands_at)
    }

    /// With chance `rate`, a hold that makes a message sent now about `job` land after its lease
    /// expires, within one reclaim scan of the expiry.
    fn past_expiry_hold_us(&self, draw: &mut Draw<'_>, job: JobId, rate: f64) -> Option<u64> {
        let scan_us = self.params.reclaimer.scan_every.as_us().max(2);
        if !chance(&mut draw.drawn.rng, rate) {
            return None;
        }
        let lands_at = draw.table.lease(job)?.expires_at.0 + draw.drawn.rng.gen_range(0..scan_us);
        self.hold_until(draw.now, lands_at)
    }

    /// A hold of a scan just decided on, so that the listing lands just after the earliest expiry
    /// (within half a drift margin), when the seed aims one there and that expiry comes before
    /// the next scan.
    fn listing_hold_us(&self, draw: &mut Draw<'_>) -> Option<u64> {
        let margin = self.params.worker.drift_margin.as_us().max(2);
        if !chance(&mut draw.drawn.rng, self.params.windows.reclaim_at_boundary) {
            return None;
        }
        let lands_at = draw.table.poll_timeout()?.0 + draw.drawn.rng.gen_range(0..margin / 2);
        self.hold_until(draw.now, lands_at).filter(|&hold| hold <= self.params.reclaimer.scan_every.as_us())
    }

    /// How long to hold a message sent at `now` so that it lands at `lands_at`; `None` when that
    /// time is too close.
    fn hold_until(&self, now: u64, lands_at: u64) -> Option<u64> {
        lands_at.checked_sub(now + self.one_way_us()).filter(|&hold| hold > 0)
    }

    /// A call to the dependency for `job` under `epoch`, sent under wire id `id`, begins: its
    /// visit, and its latency (the ordinary latency, a function of the call like the network's,
    /// times the slow factor when the call is slow).
    ///
    /// A drawn run draws the dependency's faults at every call of the fault phase, and deals them
    /// only while the dependency's window is open (`Fault::Degrade`): a call outside it draws and
    /// throws the draw away, so a window moves no other fault's draw.
    pub(crate) fn call(&self, job: JobId, epoch: Epoch, id: u64) -> (Option<Visit>, u64) {
        let dependency = self.params.dependency;
        let (min, max) = (dependency.latency_min_us, dependency.latency_max_us.max(dependency.latency_min_us));
        let base = min + crate::world::ctx::mix(self.params.seed, &("dependency", job, epoch, id)) % (max - min + 1);
        let visit = self.visit(Site::Call { job, epoch });
        let slow = self.ask(visit, Question::Slow, |_, draw| {
            let slow = chance(&mut draw.drawn.rng, dependency.slow_rate);
            (slow && draw.degraded).then_some(Dealt::Slow { factor: dependency.slow_factor })
        });
        match slow {
            Some(Dealt::Slow { factor }) => (visit, super::verbs::slow(base, factor)),
            _ => (visit, base),
        }
    }

    /// Asks `question` (fail before, rival, lost reply) of a dependency call: dealt only while
    /// the dependency's window is open, like a slow call, except a scripted rival, which is the
    /// scenario's own situation and strikes whenever its job's call comes.
    pub(crate) fn call_fault(&self, visit: Option<Visit>, question: Question) -> bool {
        let job = visit.and_then(|visit| visit.site.job());
        self.ask(visit, question, |ctx, draw| {
            let dependency = &ctx.params.dependency;
            let Drawn { rng, rival_jobs, .. } = &mut *draw.drawn;
            let (dealt, rate) = match question {
                Question::FailBefore => (Dealt::Fail { after_effect: false }, dependency.fail_rate),
                Question::LostReply => (Dealt::Fail { after_effect: true }, dependency.lost_reply_rate),
                Question::Rival if job.is_some_and(|job| rival_jobs.remove(&job)) => return Some(Dealt::Rival),
                Question::Rival => (Dealt::Rival, dependency.rival_rate),
                other => unreachable!("{other:?} is not asked of a dependency call"),
            };
            (chance(rng, rate) && draw.degraded).then_some(dealt)
        })
        .is_some()
    }

    /// What the network does to one message sent now: lost, held back, doubled. A hand-back or
    /// acknowledgement of a job (`hand_back`) may also get a late copy. Nothing during the heal.
    pub(crate) fn message_fate(&self, site: Site, hand_back: bool) -> Fate {
        let windows = self.params.windows;
        let rates = [self.params.loss_rate, windows.delay_rate, windows.duplicate_rate, windows.hand_back_copy];
        if self.state().decisions.drawn.is_some() && rates.iter().all(|&rate| rate <= 0.0) {
            return Fate::default();
        }
        let visit = self.visit(site);
        let job = site.job();
        let lost = self.ask(visit, Question::Lose, |ctx, draw| {
            chance(&mut draw.drawn.wire, ctx.params.loss_rate).then_some(Dealt::Lose)
        });
        let delay = self.ask(visit, Question::Delay, |_, draw| {
            let wire = &mut draw.drawn.wire;
            chance(wire, windows.delay_rate).then(|| Dealt::Delay { len_us: windows.draw_len_us(wire) })
        });
        let copy = self.ask(visit, Question::Duplicate, |ctx, draw| {
            // A hand-back of a job out of attempts is a dead-letter on its way: whenever the seed
            // deals late copies at all, it gets one, for dead-letters are few and their copies are
            // the window.
            let attempts = job.and_then(|job| draw.table.attempts(job));
            let out_of_attempts = attempts.is_some_and(|n| n >= ctx.params.table.attempts_max);
            let copy_rate = match hand_back {
                true if windows.hand_back_copy > 0.0 && out_of_attempts => 1.0,
                true => windows.hand_back_copy,
                false => 0.0,
            };
            let wire = &mut draw.drawn.wire;
            let mut copy = chance(wire, windows.duplicate_rate).then(|| windows.draw_len_us(wire));
            if copy.is_none() && chance(wire, copy_rate) {
                copy = Some(windows.draw_late_gap_us(wire));
            }
            copy.map(|gap_us| Dealt::Duplicate { gap_us })
        });
        let delay_us = match delay {
            Some(Dealt::Delay { len_us }) => Some(len_us),
            _ => None,
        };
        let copy_gap_us = match copy {
            Some(Dealt::Duplicate { gap_us }) => Some(gap_us),
            _ => None,
        };
        Fate { lost: lost.is_some(), delay_us, copy_gap_us }
    }
}

/// Draws whether something with probability `rate` happens; draws nothing when the rate is zero.
fn chance(rng: &mut Xoshiro256PlusPlus, rate: f64) -> bool {
    rate > 0.0 && rng.gen_bool(rate.min(1.0))
}
