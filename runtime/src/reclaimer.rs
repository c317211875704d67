//! The reclaimer runtime: one [`lease_core::Reclaimer`] machine driven on the same seams as the
//! workers. The machine scans on its cadence, takes bounded batches a wave at a time, and adopts,
//! requeues, dead-letters or quarantines; the runtime carries each step's requests to the
//! [`crate::Client`] as one call ([`crate::Client::reclaimer_batch`]: a store serves a wave's
//! fences, lookups or finishes in one transaction), writes its lines (`adopted`,
//! `batch_stopped`, `gave_up`) and passes its protocol points.
//! On the shutdown signal it stops at once: a lease it fenced and had not finished with expires,
//! and is reclaimed again.

use crate::metrics::Count;
use crate::seam::Point;
use crate::{OptionsError, Runtime};
use futures::future::{BoxFuture, Fuse, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use lease_core::{
    Fencing, ReclaimAction, ReclaimReply, ReclaimRequest, Reclaimer, ReclaimerConfig, ReclaimerId, RequestId, Span,
};
use lease_history::{Event, Node};
use std::future::Future;

/// The leases a reclaimer works on together by default ([`ReclaimerConfig::wave`]): a wave's
/// fences, lookups and finishes are each one call, so a mass expiry drains this many times faster
/// than one lease at a time, and one transaction stays short.
pub const WAVE: u32 = 32;

/// What a reclaimer runtime runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReclaimerOptions {
    /// The reclaimer.
    pub id: ReclaimerId,
    /// Its timing.
    pub reclaimer: ReclaimerConfig,
    /// The number of its first batch: a reclaimer that restarts numbers its batches past those of
    /// its previous lives, or two batches would share one id.
    pub first_batch: u64,
    /// Planted bugs in the machine: none, and only the simulator and the live runner can plant
    /// one ([`crate::Planted`]).
    pub planted: crate::Planted,
}

impl ReclaimerOptions {
    /// Reclaimer `id` on `reclaimer`'s timing, its batches numbered from 0, no planted bug.
    pub fn new(id: ReclaimerId, reclaimer: ReclaimerConfig) -> ReclaimerOptions {
        ReclaimerOptions { id, reclaimer, first_batch: 0, planted: crate::Planted::NONE }
    }

    /// The same options with `bugs` planted in the machine (feature `planted-bugs`: for the
    /// simulator and the live runner).
    #[cfg(feature = "planted-bugs")]
    pub fn planting(self, bugs: lease_core::Bugs) -> ReclaimerOptions {
        ReclaimerOptions { planted: crate::Planted(bugs), ..self }
    }

    /// Reclaimer `id` timed as fractions of the table's `lease_ttl`: a scan every quarter of it,
    /// requests timing out after a fifth, sent again up to three times, and waves of [`WAVE`]
    /// leases.
    pub fn with_ttl(id: ReclaimerId, lease_ttl: Span) -> ReclaimerOptions {
        let reclaimer =
            ReclaimerConfig { scan_every: lease_ttl / 4, request_timeout: lease_ttl / 5, retries_max: 3, wave: WAVE };
        ReclaimerOptions::new(id, reclaimer)
    }
}

/// What a reclaimer runtime did, counted as it happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimTally {
    /// Scans sent.
    pub scans: u64,
    /// Fences won: leases taken over.
    pub fenced: u64,
    /// Outputs adopted.
    pub adopted: u64,
    /// Batches stopped on two outputs for one operation: each an alert for an operator.
    pub stopped: u64,
    /// Fences lost to another reclaimer or worker.
    pub lost_races: u64,
    /// Requests given up after their retries.
    pub gave_up: u64,
}

/// What woke the loop.
enum Wake {
    Answer(RequestId, ReclaimRequest, Option<ReclaimReply>),
    Shutdown,
    Timeout,
}

impl Runtime {
    /// Runs the reclaimer until `shutdown` resolves. Fails only on unworkable options.
    pub fn reclaim(
        &self,
        options: ReclaimerOptions,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = Result<ReclaimTally, OptionsError>> + Send + 'static {
        let seams = self.clone();
        async move {
            let now = seams.clock.now();
            let mut machine = Reclaimer::numbering_batches_from(
                options.id,
                options.reclaimer,
                options.planted.0,
                now,
                options.first_batch,
            )?;
            let mut tally = ReclaimTally::default();
            let mut shutdown = shutdown.boxed().fuse();
            // The calls awaited: every copy of the step's requests, each answer taken as it comes.
            let mut calls: FuturesUnordered<BoxFuture<'static, Wake>> = FuturesUnordered::new();
            // The loop's timer, kept while the machine's timeout stays the same.
            let mut timer: Option<(lease_core::Time, BoxFuture<'static, ()>)> = None;
            loop {
                // A turn's lines (`adopted`, `batch_stopped`, then `gave_up`), written together
                // before its requests leave: one transaction, where each alone waited its turn at
                // the store (a wave of 32 adoptions took 375 ms on a busy PostgreSQL).
                let (mut sends, mut lines, mut given_up) = (Vec::new(), Vec::new(), Vec::new());
                while let Some(action) = machine.poll() {
                    if let ReclaimAction::GaveUp { batch, job } = action {
                        tally.gave_up += 1;
                        tracing::warn!(
                            reclaimer = options.id.0,
                            batch = batch.seq,
                            job = job.0,
                            "gave up a batch: no answer"
                        );
                        given_up.push((Node::Reclaimer(options.id.0), Event::GaveUp { batch, job }));
                    } else if let Some(send) = seams.reclaim_action(&options, &mut tally, &mut lines, action).await {
                        sends.push(send);
                    }
                }
                // The give-ups together, after the turn's other lines, as they were always
                // written: a late copy of a request given up lands before or after them all.
                lines.append(&mut given_up);
                if !lines.is_empty() {
                    seams.client.lines(lines).await;
                }
                if !machine.awaits_any() {
                    // Nothing the machine still waits for: the answers of calls it gave up on are
                    // ignored, so they are dropped.
                    calls = FuturesUnordered::new();
                }
                if !sends.is_empty() {
                    // One step's requests (or its copies sent again) as one call.
                    let answers = seams.client.reclaimer_batch(options.id, sends.clone());
                    for ((id, request), answer) in sends.into_iter().zip(answers) {
                        calls.push(Box::pin(answer.map(move |reply| Wake::Answer(id, request, reply))));
                    }
                }
                let wake_at = machine.poll_timeout();
                if timer.as_ref().map(|(at, _)| *at) != Some(wake_at) {
                    timer = Some((wake_at, seams.clock.sleep_until(wake_at)));
                }
                match seams.wait(&mut calls, &mut shutdown, &mut timer).await {
                    Wake::Answer(id, request, reply) => {
                        let Some(reply) = reply else { continue };
                        seams.pass_point(&machine, options.id, id, request, &reply, &mut tally).await;
                        machine.handle_reply(seams.clock.now(), id, reply);
                    }
                    Wake::Shutdown => return Ok(tally),
                    Wake::Timeout => {
                        timer = None; // Polled no more once it fired.
                        let now = seams.clock.now();
                        machine.handle_timeout(now);
                        // Else the loop would wake at once, forever, and never yield.
                        assert!(machine.poll_timeout() > now, "{} is due at {now} after taking the time", options.id);
                    }
                }
            }
        }
    }

    /// Acts on one of the machine's actions; a request becomes the call returned.
    /// Its line joins `lines`, written at the end of the turn with the others, before the turn's
    /// requests leave (a crash at a listing's point, earlier in the turn, loses both).
    async fn reclaim_action(
        &self,
        options: &ReclaimerOptions,
        tally: &mut ReclaimTally,
        lines: &mut Vec<(Node, Event)>,
        action: ReclaimAction,
    ) -> Option<(RequestId, ReclaimRequest)> {
        let node = Node::Reclaimer(options.id.0);
        match action {
            ReclaimAction::Send(id, request) => {
                if let ReclaimRequest::ListExpired { .. } = request {
                    tally.scans += 1;
                    self.hook.at(node, Point::BeforeListing, None).await;
                }
                // Unbounded: the machine times it out itself, and its answer is ignored once the
                // machine no longer waits for it.
                return Some((id, request));
            }
            ReclaimAction::Adopted { job, op, output, epoch, .. } => {
                tally.adopted += 1;
                self.metrics.count(Count::Adoption);
                lines.push((node, Event::Adopted { job, op, output, epoch }));
            }
            ReclaimAction::BatchStopped { batch, job, recorded, rival, untouched } => {
                tally.stopped += 1;
                self.metrics.count(Count::Quarantine);
                // The alert an operator must see: the job is quarantined, and which effect stands
                // is a person's call.
                tracing::error!(
                    reclaimer = options.id.0,
                    batch = batch.seq,
                    job = job.0,
                    recorded = recorded.0,
                    rival = rival.0,
                    untouched,
                    "two different outputs claim one operation: job {job} quarantined (recorded output \
                     {:#018x}, rival {:#018x}); batch {} stopped, {untouched} job(s) left untouched",
                    recorded.0,
                    rival.0,
                    batch.seq,
                );
                let stopped = Event::BatchStopped { batch, job, identities: [recorded, rival], untouched };
                lines.push((node, stopped));
            }
            ReclaimAction::LostRace { .. } => tally.lost_races += 1,
            ReclaimAction::GaveUp { .. } => unreachable!("the loop writes the lines of a give-up together"),
        }
        None
    }

    /// Waits for a call's answer, the machine's timeout, or the shutdown signal.
    async fn wait(
        &self,
        calls: &mut FuturesUnordered<BoxFuture<'static, Wake>>,
        shutdown: &mut Fuse<BoxFuture<'static, ()>>,
        timer: &mut Option<(lease_core::Time, BoxFuture<'static, ()>)>,
    ) -> Wake {
        let answer = async move {
            match calls.next().await {
                Some(wake) => wake,
                None => futures::future::pending().await,
            }
        };
        let timeout = async move {
            match timer {
                Some((_, timer)) => timer.await,
                None => futures::future::pending().await,
            }
        };
        let (answer, timeout) = (answer.fuse(), timeout.fuse());
        futures::pin_mut!(answer, timeout);
        let mut shutdown = &mut *shutdown;
        futures::select_biased! {
            wake = answer => wake,
            () = shutdown => Wake::Shutdown,
            () = timeout => Wake::Timeout,
        }
    }

    /// The points an answer passes before the machine takes it: a listing that found expired
    /// leases (`after_listing`), a fence won (`mid_reclaim`); only for the request awaited.
    async fn pass_point(
        &self,
        machine: &Reclaimer,
        reclaimer: ReclaimerId,
        id: RequestId,
        request: ReclaimRequest,
        reply: &ReclaimReply,
        tally: &mut ReclaimTally,
    ) {
        if machine.awaiting(id) != Some(request) {
            return;
        }
        if let ReclaimReply::Requeued(lease_core::Requeue::DeadLettered(_)) = reply {
            self.metrics.count(Count::DeadLetter);
        }
        let point = match (request, reply) {
            (ReclaimRequest::ListExpired { .. }, ReclaimReply::Listed(leases)) => {
                leases.first().map(|lease| (Point::AfterListing, lease.job))
            }
            (ReclaimRequest::Fence { lease, .. }, ReclaimReply::Fenced(Fencing::Won { lease: ours, .. }))
                if lease.job == ours.job =>
            {
                tally.fenced += 1;
                self.metrics.count(Count::Reclaim);
                Some((Point::MidReclaim, ours.job))
            }
            _ => None,
        };
        if let Some((point, job)) = point {
            self.hook.at(Node::Reclaimer(reclaimer.0), point, Some(job)).await;
        }
    }
}
