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
    for index in 0..offered {
        // A plan lists each job and when it is offered; a seeded run draws the gaps, and records
        // what it offered when, for the plan.
        // The time recorded is the one slept to, not the one woken at: madsim moves its clock on
        // by some nanoseconds per task it runs, and a replay must sleep exactly as long.
        let now = ctx.now().0;
        let (job, at_us) = match &ctx.params.arrivals {
            Some(arrivals) => (arrivals[index].job, arrivals[index].at_us.max(now)),
            None => (index as u64, now + gap_us(&ctx)),
        };
        ctx.state().arrivals.push(Arrival { job, at_us });
        ctx.sleep_us(at_us - now).await;
        let job = JobId(job);
        'offer: loop {
            offers += 1;
            send(&ctx, &endpoint, table_addr(), offers, Request::Enqueue(job)).await;
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
                        let Reply::Enqueued(_) = envelope.body else { panic!("arrivals got {:?}", envelope.body) };
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

/// The wait before the next arrival: exponential, so arrivals are a Poisson process.
fn gap_us(ctx: &Ctx) -> u64 {
    let now = ctx.now().0;
    let surging = ctx.params.surge.filter(|surge| now >= surge.at_us && now < surge.at_us + surge.len_us);
    let mean = ctx.params.arrival_mean_us / surging.map_or(1, |surge| surge.factor);
    let uniform: f64 = ctx.state().decisions.arrivals.gen_range(0.0..1.0);
    (-(1.0 - uniform).ln() * mean as f64) as u64
}
