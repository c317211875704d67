//! Where the world asks its fault decisions ([`crate::faults::decide`]): at each protocol point a
//! node passes, each dependency call and each message, the world's context visits the site, asks
//! the question, and draws the answer from the seed's streams (aimed by what the table holds) or
//! looks it up in the plan.

use super::ctx::{Ctx, State};
use crate::faults::decide::{Dealt, Drawn, Keyed, Question, Site, Visit};
use crate::faults::{Point, Strike, WindowFaults};
use lease_core::{Epoch, JobId};
use lease_history::{Event, MessageKind, Node};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// What a draw sees: the table (aimed holds read its leases), the streams, the time, and whether
/// the dependency's faulty window is open.
pub(crate) struct Draw<'a> {
    table: &'a mut super::durable::Durable,
    drawn: &'a mut Drawn,
    now: u64,
    degraded: bool,
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
        // A point a world that deals no line stalls never visits: a seed drawn before them keeps
        // its visits, and so its faults.
        if point == Point::BeforeLine
            && self.params.windows.line_stall_rate <= 0.0
            && self.state().decisions.drawn.is_some()
        {
            return None;
        }
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
                (Point::MidReclaim, Some(job)) => ctx.storm_stall_us(&mut draw, job),
                (Point::BeforeLine, Some(job)) => ctx.line_stall_us(&mut draw, job),
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
            Point::BeforeRenew
            | Point::BeforeRenewReply
            | Point::AfterListing
            | Point::BeforeListing
            | Point::AtRandom
            | Point::Buffered
            | Point::BeforeLine => 0.0,
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
            Point::AfterEffect | Point::BeforeListing | Point::AtRandom | Point::Buffered | Point::BeforeLine => {
                (0.0, false)
            }
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

    /// A reclaimer's stall right after it fenced `job`, in a reclaim storm (see
    /// [`WindowFaults::reclaim_storm_rate`]): the first to fence stalls past its fence's lease
    /// and a scan interval; the next, while the first still sleeps, until the first has woken and
    /// had four round trips. The storm is spent then.
    fn storm_stall_us(&self, draw: &mut Draw<'_>, job: JobId) -> Option<u64> {
        let lease_us = self.params.table.lease_ttl.as_us();
        let Drawn { storm, storms, .. } = &mut *draw.drawn;
        match *storms.get(&job)? {
            None => {
                let scan_us = self.params.reclaimer.scan_every.as_us();
                let len_us = WindowFaults::draw_storm_stall_us(lease_us, scan_us, storm);
                storms.insert(job, Some(draw.now + len_us));
                Some(len_us)
            }
            Some(wakes_us) => {
                storms.remove(&job);
                let round_trips_us = 8 * self.params.latency_us.1.max(1);
                WindowFaults::draw_storm_hold_us(draw.now, wakes_us, round_trips_us, lease_us, storm)
            }
        }
    }

    /// A stall of a worker process whose `executing` lines (the first for `job`) are on their way
    /// to the store, at the seed's rate ([`WindowFaults::line_stall_rate`], from a stream of its
    /// own): the lines land within a drift margin before the lease's expiry, or up to a reclaim
    /// scan after it.
    fn line_stall_us(&self, draw: &mut Draw<'_>, job: JobId) -> Option<u64> {
        let Drawn { line_stalls, .. } = &mut *draw.drawn;
        if !chance(line_stalls, self.params.windows.line_stall_rate) {
            return None;
        }
        let margin = self.params.worker.drift_margin.as_us().max(2);
        let scan_us = self.params.reclaimer.scan_every.as_us().max(2);
        let offset = line_stalls.gen_range(0..margin + scan_us);
        let lands_at = (draw.table.lease(job)?.expires_at.0 + offset).checked_sub(margin)?;
        lands_at.checked_sub(draw.now).filter(|&len_us| len_us > 0)
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
            Some(Dealt::Slow { factor }) => (visit, crate::faults::slowed(base, factor)),
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
            let Drawn { rng, rival_jobs, storm, storms, .. } = &mut *draw.drawn;
            let (dealt, rate) = match question {
                Question::FailBefore => (Dealt::Fail { after_effect: false }, dependency.fail_rate),
                Question::LostReply => (Dealt::Fail { after_effect: true }, dependency.lost_reply_rate),
                Question::Rival if job.is_some_and(|job| rival_jobs.remove(&job)) => return Some(Dealt::Rival),
                Question::Rival => (Dealt::Rival, dependency.rival_rate),
                other => unreachable!("{other:?} is not asked of a dependency call"),
            };
            if chance(rng, rate) && draw.degraded {
                return Some(dealt);
            }
            // A reclaim storm opens with a rival, whether or not the dependency's window is open:
            // it is aimed at the reclaim, not drawn with the dependency's faults.
            let job =
                job.filter(|_| question == Question::Rival && chance(storm, ctx.params.windows.reclaim_storm_rate))?;
            storms.entry(job).or_insert(None);
            Some(Dealt::Rival)
        })
        .is_some()
    }

    /// Whether the write of an `executing` line for `job` under `epoch`, now, fails: not at
    /// all (`None`), before it commits (`Some(false)`: the `line` message lost), or after
    /// (`Some(true)`: its answer lost). A world that deals no such faults visits nothing. Nothing
    /// is written: [`Ctx::line_lost`] says it, in its place among the lines.
    pub(crate) fn line_fate(&self, job: JobId, epoch: Epoch) -> Option<bool> {
        let rate = self.params.windows.line_loss_rate;
        if self.state().decisions.drawn.is_some() && rate <= 0.0 {
            return None;
        }
        let lose = |reply: bool| {
            let site =
                Site::Message { ends: None, message: MessageKind::Line, reply, job: Some(job), epoch: Some(epoch) };
            let visit = self.visit(site);
            self.ask(visit, Question::Lose, |_, draw| chance(&mut draw.drawn.lines, rate).then_some(Dealt::Lose))
                .is_some()
        };
        if lose(false) {
            Some(false)
        } else {
            lose(true).then_some(true)
        }
    }

    /// Says on the history that `node`'s write of its `executing` line for `job` failed: before
    /// it committed, or after (its answer lost).
    pub(crate) fn line_lost(&self, node: Node, job: JobId, committed: bool) {
        // As any message lost: its sender, then its receiver (the store's answer comes from the
        // table).
        let (target, peer) = if committed { (Node::Table, node) } else { (node, Node::Table) };
        let (message, reply, job) = (MessageKind::Line, committed, Some(job));
        self.record(Node::World, Event::Lost { target, peer, message, reply, job });
    }

    /// What the network does to one message sent now: lost, held back, doubled. A hand-back or
    /// acknowledgement of a job (`hand_back`) may also get a late copy. Nothing during the heal.
    pub(crate) fn message_fate(&self, site: Site, hand_back: bool) -> Fate {
        let windows = self.params.windows;
        let rates = [
            self.params.loss_rate,
            windows.delay_rate,
            windows.duplicate_rate,
            windows.hand_back_copy,
            windows.past_lease_rate,
        ];
        if self.state().decisions.drawn.is_some() && rates.iter().all(|&rate| rate <= 0.0) {
            return Fate::default();
        }
        let visit = self.visit(site);
        let job = site.job();
        let lost = self.ask(visit, Question::Lose, |ctx, draw| {
            chance(&mut draw.drawn.wire, ctx.params.loss_rate).then_some(Dealt::Lose)
        });
        let lease_us = self.params.table.lease_ttl.as_us();
        let delay = self.ask(visit, Question::Delay, |_, draw| {
            let wire = &mut draw.drawn.wire;
            let held = chance(wire, windows.delay_rate).then(|| windows.draw_len_us(wire));
            // Past a lease: from its own stream, after the window's hold, added to it.
            let late = &mut draw.drawn.late;
            let past = chance(late, windows.past_lease_rate).then(|| WindowFaults::draw_past_lease_us(lease_us, late));
            match (held, past) {
                (None, None) => None,
                (held, past) => Some(Dealt::Delay { len_us: held.unwrap_or(0) + past.unwrap_or(0) }),
            }
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
