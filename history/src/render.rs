//! A stable, readable text rendering of a history: one line per event, in fixed columns.
//!
//! ```text
//!     time_ms  node      event           details
//!      12.345  table     granted         j3 e1 to w0, expires 212.345
//! ```
//! `time_ms` is the table's clock in milliseconds with microsecond precision; `node` is where the
//! event happened; `details` names the job (`j3`), epoch (`e1`), output (`o…`) and batch
//! (`r0#5`: reclaimer 0's sixth batch). Expiries are in milliseconds on the same clock.

use crate::{Entry, Event, MessageKind, Node, OutcomeKind};
use lease_core::{BatchId, OutputId};
use std::fmt::Write;

/// The column header of a rendered history.
pub const HEADER: &str = "    time_ms  node      event           details";

/// Renders a whole history, with a header line. Answers that changed nothing and say nothing
/// about a job (an empty listing, an empty acquire, a duplicate enqueue) are left out, and
/// counted on a last line: idle workers and scanning reclaimers would bury the story. The JSONL
/// history keeps every one.
pub fn render(entries: &[Entry]) -> String {
    let mut out = String::with_capacity(entries.len() * 64);
    out.push_str(HEADER);
    out.push('\n');
    let mut quiet = 0usize;
    for entry in entries {
        if is_quiet(&entry.event) {
            quiet += 1;
            continue;
        }
        let _ = writeln!(out, "{}", render_line(entry));
    }
    if quiet > 0 {
        let _ = writeln!(out, "({quiet} empty answers not shown: empty listings and acquires, duplicate enqueues)");
    }
    out
}

/// An answer that changed nothing: left out of [`render`].
pub fn is_quiet(event: &Event) -> bool {
    match event {
        Event::Listed { leases, .. } => leases.is_empty(),
        Event::AcquireEmpty { .. } | Event::Duplicate { .. } => true,
        _ => false,
    }
}

/// Renders one history entry.
pub fn render_line(entry: &Entry) -> String {
    let time = format!("{}.{:03}", entry.t_us / 1_000, entry.t_us % 1_000);
    format!("{time:>11}  {:<8}  {:<14}  {}", entry.node.to_string(), kind(&entry.event), details(&entry.event))
        .trim_end()
        .to_string()
}

/// An event's kind as a trace spells it (`acquire_empty`, `dep_failed`).
pub fn kind(event: &Event) -> &'static str {
    match event {
        Event::Run { .. } => "run",
        Event::Arrived { .. } => "arrived",
        Event::Rejected { .. } => "rejected",
        Event::Duplicate { .. } => "duplicate",
        Event::Regranted { .. } => "regranted",
        Event::AcquireEmpty { .. } => "acquire_empty",
        Event::AcquireSpent { .. } => "acquire_spent",
        Event::Listed { .. } => "listed",
        Event::NotExpired { .. } => "not_expired",
        Event::Granted { .. } => "granted",
        Event::Renewed { .. } => "renewed",
        Event::Reclaimed { .. } => "reclaimed",
        Event::LostRace { .. } => "lost_race",
        Event::LookedUp { .. } => "looked_up",
        Event::Executing { .. } => "executing",
        Event::DependencyFailed { .. } => "dep_failed",
        Event::EffectApplied { .. } => "effect_applied",
        Event::EffectRejected { .. } => "effect_rejected",
        Event::Adopted { .. } => "adopted",
        Event::Terminal { .. } => "terminal",
        Event::Requeued { .. } => "requeued",
        Event::Released { .. } => "released",
        Event::AlreadyCompleted { .. } => "completed_again",
        Event::Refused { .. } => "refused",
        Event::Abandoned { .. } => "abandoned",
        Event::BatchStopped { .. } => "BATCH_STOPPED",
        Event::GaveUp { .. } => "gave_up",
        Event::Crashed { .. } => "crashed",
        Event::Stopping { .. } => "stopping",
        Event::Stopped { .. } => "stopped",
        Event::Restarted { .. } => "restarted",
        Event::Paused { .. } => "paused",
        Event::Resumed { .. } => "resumed",
        Event::Partitioned { .. } => "partitioned",
        Event::Healed { .. } => "healed",
        Event::Delayed { .. } => "delayed",
        Event::Lost { .. } => "lost",
        Event::Duplicated { .. } => "duplicated",
        Event::DependencyDegraded { .. } => "dep_degraded",
        Event::DependencyRestored {} => "dep_restored",
        Event::SurgeStarted { .. } => "surge_started",
        Event::SurgeEnded {} => "surge_ended",
        Event::FaultsHealed {} => "faults_healed",
    }
}

fn ms(us: u64) -> String {
    format!("{}.{:03}", us / 1_000, us % 1_000)
}

fn batch(batch: &BatchId) -> String {
    format!("r{}#{}", batch.reclaimer.0, batch.seq)
}

/// ` by w1`: who asked, when no batch already says so.
fn by(from: &Node, b: &Option<BatchId>) -> String {
    match b {
        Some(b) => format!(" in {}", batch(b)),
        None => format!(" by {from}"),
    }
}

fn output(output: &Option<OutputId>) -> String {
    output.map(|o| o.to_string()).unwrap_or_else(|| "nothing".to_string())
}

/// `renew` or `renew reply`.
fn what(message: MessageKind, reply: bool) -> String {
    if reply {
        format!("{message} reply")
    } else {
        message.to_string()
    }
}

/// ` j4`, when the message names a job.
fn about(job: &Option<lease_core::JobId>) -> String {
    job.map(|job| format!(" {job}")).unwrap_or_default()
}

fn details(event: &Event) -> String {
    match event {
        Event::Run { seed, scenario, batch_max, capacity, lease_ttl_us, attempts_max, bug, .. } => {
            let bug = bug.as_ref().map(|bug| format!(" bug={bug}")).unwrap_or_default();
            format!(
                "seed={seed} scenario={scenario} batch_max={batch_max} capacity={capacity} \
                 lease_ttl={} attempts_max={attempts_max}{bug}",
                ms(*lease_ttl_us)
            )
        }
        Event::Arrived { job, backlog } => format!("{job} backlog={backlog}"),
        Event::Rejected { job, reason } => format!("{job} {reason}"),
        Event::Duplicate { job } => format!("{job} known already"),
        Event::Regranted { job, epoch, owner, expires_at_us, attempt } => {
            format!("{job} {epoch} to {owner} again, expires {} (attempt {attempt})", ms(*expires_at_us))
        }
        Event::AcquireEmpty { owner } => format!("nothing for {owner}"),
        Event::AcquireSpent { owner, job, epoch } => {
            format!("nothing for {owner}: a copy of the acquire that got {job} {epoch}, which is spent")
        }
        Event::Listed { batch: b, leases, .. } => {
            let mut out = format!("{}:", batch(b));
            if leases.is_empty() {
                out.push_str(" nothing expired");
            }
            for lease in leases {
                let _ = write!(out, " {} {} (expired {})", lease.job, lease.epoch, ms(lease.expires_at_us));
            }
            out
        }
        Event::NotExpired { job, expected, expires_at_us, batch: b } => {
            format!("{job} {expected} renewed, expires {} in {}", ms(*expires_at_us), batch(b))
        }
        Event::Granted { job, epoch, owner, expires_at_us, attempt } => {
            format!("{job} {epoch} to {owner}, expires {} (attempt {attempt})", ms(*expires_at_us))
        }
        Event::Renewed { from, job, epoch, expires_at_us } => {
            format!("{job} {epoch} expires {} by {from}", ms(*expires_at_us))
        }
        Event::Reclaimed { job, epoch, expires_at_us, new_epoch, new_expires_at_us, reclaimer, batch: b } => format!(
            "{job} {epoch} (expired {}) -> {new_epoch} to {reclaimer} in {}, expires {}",
            ms(*expires_at_us),
            batch(b),
            ms(*new_expires_at_us)
        ),
        Event::LostRace { job, expected, current, batch: b } => {
            format!("{job} expected {expected}, now {current} in {}", batch(b))
        }
        Event::LookedUp { from, job, epoch, found, rival, batch: b, .. } => {
            let rival = rival.map(|rival| format!(" CONFLICT with {rival}")).unwrap_or_default();
            format!("{job} {epoch} found {}{rival}{}", output(found), by(from, b))
        }
        Event::Executing { job, epoch, .. } => format!("{job} {epoch}"),
        Event::DependencyFailed { from, job, epoch, after_effect, permanent, .. } => {
            let when = if *after_effect { " after its effect" } else { "" };
            let good = if *permanent { " for good" } else { "" };
            format!("{job} {epoch}{when}{good} by {from}")
        }
        Event::EffectApplied { from, job, epoch, output, .. } => format!("{job} {epoch} {output} by {from}"),
        Event::EffectRejected { from, job, epoch, output, reason, .. } => {
            format!("{job} {epoch} {output} {reason} by {from}")
        }
        Event::Adopted { job, epoch, output, .. } => format!("{job} {epoch} {output}"),
        Event::Terminal { from, job, outcome, output, epoch, attempts, identities, batch: b, permanent } => {
            let what = match outcome {
                OutcomeKind::Completed => format!("completed {}", self::output(output)),
                OutcomeKind::DeadLettered if *permanent => {
                    format!("dead_lettered at once, refused for good, after {} attempts", attempts.unwrap_or(0))
                }
                OutcomeKind::DeadLettered => format!("dead_lettered after {} attempts", attempts.unwrap_or(0)),
                OutcomeKind::Quarantined => {
                    let [a, b] = identities.unwrap_or([OutputId(0), OutputId(0)]);
                    format!("QUARANTINED {a} vs {b}")
                }
            };
            format!("{job} {epoch} {what}{}", by(from, b))
        }
        Event::Requeued { from, job, epoch, attempts, batch: b } => {
            format!("{job} {epoch} after {attempts} attempts{}", by(from, b))
        }
        Event::Released { from, job, epoch, attempts } => {
            format!("{job} {epoch} back at the head of the queue, grant undone ({attempts} attempts) by {from}")
        }
        Event::AlreadyCompleted { from, job, epoch, output } => {
            format!("{job} {epoch} {output}: idempotent, nothing recorded, by {from}")
        }
        Event::Refused { from, job, epoch, request, reason, batch: b } => {
            format!("{job} {epoch} {request}: {reason}{}", by(from, b))
        }
        Event::Abandoned { job, epoch, why } => format!("{job} {epoch} {why}"),
        Event::BatchStopped { batch: b, job, identities: [x, y], untouched } => {
            format!("{} on {job}: {x} vs {y}, {untouched} leases untouched; ALERT", batch(b))
        }
        Event::GaveUp { batch: b, job } => {
            format!("{} on {job}: no answer through its retries, the rest waits for the next scan", batch(b))
        }
        Event::Crashed { target, point, job } => {
            let job = job.map(|job| format!(" holding {job}")).unwrap_or_default();
            format!("{target} at {point}{job}")
        }
        Event::Paused { target, point: Some(point), job } => {
            let job = job.map(|job| format!(" holding {job}")).unwrap_or_default();
            format!("{target} stalls at {point}{job}")
        }
        Event::Stopping { target, .. } => format!("{target} told to stop: it drains, then exits"),
        Event::Stopped { target } => format!("{target} exited"),
        Event::Restarted { target } | Event::Paused { target, .. } | Event::Resumed { target } => target.to_string(),
        Event::Delayed { target, peer, message, reply, job, len_us } => {
            format!("{}{} {target} -> {peer} held back {}ms", what(*message, *reply), about(job), ms(*len_us))
        }
        Event::Lost { target, peer, message, reply, job } => {
            format!("{}{} {target} -> {peer} never arrives", what(*message, *reply), about(job))
        }
        Event::Duplicated { target, peer, message, reply, job, gap_us } => {
            format!("{}{} {target} -> {peer} sent again {}ms later", what(*message, *reply), about(job), ms(*gap_us))
        }
        Event::Partitioned { target, peer } | Event::Healed { target, peer } => match peer {
            Some(peer) => format!("{target} <-> {peer}"),
            None => format!("{target} <-> everyone"),
        },
        Event::DependencyDegraded { slow_rate, slow_factor, fail_rate, lost_reply_rate, rival_rate } => format!(
            "calls slow {:.3} (x{slow_factor}), failing {:.3}, failing after the effect {:.3}, rival {:.3}",
            slow_rate.0, fail_rate.0, lost_reply_rate.0, rival_rate.0
        ),
        Event::DependencyRestored {} => "calls fast and reliable again".to_string(),
        Event::SurgeStarted { factor, len_us } => format!("arrivals x{factor} for {}ms", ms(*len_us)),
        Event::SurgeEnded {} => "arrivals back to their rate".to_string(),
        Event::FaultsHealed {} => "faults off; the system must now converge".to_string(),
    }
}

/// The nodes a line names: its own, and any in its fields (from, owner, target, peer, reclaimer).
pub fn named_nodes(entry: &Entry) -> Vec<Node> {
    let mut nodes = vec![entry.node];
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(entry) {
        for key in ["from", "owner", "target", "peer", "reclaimer"] {
            if let Some(node) = fields.get(key).and_then(serde_json::Value::as_str).and_then(|s| s.parse().ok()) {
                nodes.push(node);
            }
        }
    }
    nodes
}

/// Whether a line is a fault on a node, or the heal: what `run` shows beside a job's story.
pub fn is_fault(event: &Event) -> bool {
    matches!(
        event,
        Event::Crashed { .. }
            | Event::Stopping { .. }
            | Event::Stopped { .. }
            | Event::Restarted { .. }
            | Event::Paused { .. }
            | Event::Resumed { .. }
            | Event::Partitioned { .. }
            | Event::Healed { .. }
            | Event::DependencyDegraded { .. }
            | Event::DependencyRestored {}
            | Event::SurgeStarted { .. }
            | Event::SurgeEnded {}
            | Event::FaultsHealed {}
    )
}

/// Whether a line is a fault the world dealt: on a node, or on a single message.
pub fn is_fault_line(event: &Event) -> bool {
    let message = matches!(event, Event::Delayed { .. } | Event::Duplicated { .. } | Event::Lost { .. });
    message || (is_fault(event) && !matches!(event, Event::FaultsHealed {}))
}
