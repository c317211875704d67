//! The arrival generator: offers `jobs` synthetic documents with Poisson arrivals, faster during
//! a surge. Each offer is retried until the table answers, which is safe because enqueueing a
//! known job id is idempotent. A rejected job is not offered again: that is customer impact.

use super::{bind, send, Inbox};
use crate::faults::plan::Arrival;
use crate::net::{table_addr, Reply, Request};
use crate::world::ctx::Ctx;
use lease_core::JobId;
use rand::Rng;
use std::sync::Arc;

/// How long the generator waits for the table before offering a job again.
const OFFER_TIMEOUT_US: u64 = 100_000;

pub(super) async fn main(ctx: Arc<Ctx>) {
    let Some(endpoint) = bind(crate::net::arrivals_addr()).await else { return };
    let mut inbox = Inbox::new(&endpoint);
    let mut offers = 0u64;
    let offered = ctx.params.arrivals.as_ref().map_or(ctx.params.jobs as usize, Vec::len);
    let most = ctx.params.enqueue_batch.min(ctx.params.table.batch_max);
    // With batches, the schedule runs on from the last job's time, not from the last answer: the
    // jobs that fall due while an offer waits for its answer go together in the next.
    let mut scheduled_us = ctx.now().0;
    let mut pending: Option<Arrival> = None;
    let mut index = 0;
    while index < offered || pending.is_some() {
        let first = match pending.take() {
            Some(arrival) => arrival,
            None => {
                let arrival = arrival(&ctx, index, most, &mut scheduled_us);
                index += 1;
                arrival
            }
        };
        ctx.sleep_us(first.at_us.saturating_sub(ctx.now().0)).await;
        let mut jobs = vec![JobId(first.job)];
        while most > 1 && jobs.len() < most && index < offered {
            let next = arrival(&ctx, index, most, &mut scheduled_us);
            index += 1;
            if next.at_us > ctx.now().0 {
                pending = Some(next);
                break;
            }
            jobs.push(JobId(next.job));
        }
        let request = Request::Enqueue(jobs);
        'offer: loop {
            offers += 1;
            send(&ctx, &endpoint, table_addr(), offers, request.clone()).await;
            // A late answer to an earlier offer is skipped, and the wait for this one goes on: a
            // new offer per stray answer would feed itself, one stray answer per offer, forever.
            let deadline = ctx.now().0 + OFFER_TIMEOUT_US;
            loop {
                let wait_us = deadline.saturating_sub(ctx.now().0);
                if wait_us == 0 {
                    continue 'offer;
                }
                match inbox.receive(&ctx, wait_us).await {
                    Err(()) => return,
                    Ok(Some(envelope)) if envelope.id == offers => {
                        let Reply::Enqueued = envelope.body else { panic!("arrivals got {:?}", envelope.body) };
                        break 'offer;
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => continue 'offer,
                }
            }
        }
    }
    ctx.state().arrivals_done = true;
}

/// Arrival `index`: from the plan, or drawn, and recorded for the plan. One at a time (`most` 0
/// or 1), a drawn job's gap runs from now, after the last offer's answer; in batches, from the
/// last job's time (`scheduled_us`). The time recorded is the one slept to, not the one woken at:
/// madsim moves its clock on by some nanoseconds per task it runs, and a replay must sleep
/// exactly as long.
fn arrival(ctx: &Ctx, index: usize, most: usize, scheduled_us: &mut u64) -> Arrival {
    let now = ctx.now().0;
    let (job, at_us) = match &ctx.params.arrivals {
        // In batches, a job's time may have passed when it is reached: it is recorded as
        // planned, so that a replay's plan is its plan's.
        Some(arrivals) if most > 1 => (arrivals[index].job, arrivals[index].at_us),
        Some(arrivals) => (arrivals[index].job, arrivals[index].at_us.max(now)),
        None if most > 1 => {
            *scheduled_us += gap_us(ctx, *scheduled_us);
            (index as u64, *scheduled_us)
        }
        None => (index as u64, now + gap_us(ctx, now)),
    };
    let arrival = Arrival { job, at_us };
    ctx.state().arrivals.push(arrival);
    arrival
}

/// The wait before the next arrival: exponential, so arrivals are a Poisson process.
fn gap_us(ctx: &Ctx, now: u64) -> u64 {
    let surging = ctx.params.surge.filter(|surge| now >= surge.at_us && now < surge.at_us + surge.len_us);
    let mean = ctx.params.arrival_mean_us / surging.map_or(1, |surge| surge.factor);
    let uniform: f64 = ctx.state().decisions.arrivals.gen_range(0.0..1.0);
    (-(1.0 - uniform).ln() * mean as f64) as u64
}
