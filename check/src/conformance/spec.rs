//! The specification of the lease table and the effect ledger: a small sequential model, in the
//! checker's own terms, written apart from `lease-core`.
//!
//! Every table or ledger line of a history is one request and its answer. [`read_table`] and
//! [`read_ledger`] take both off the line; [`Table::answer`] and [`Ledger::answer`] give the answer
//! the rules give to the same request from the model's state, and the two must be equal. Then
//! [`Table::take`] and [`Ledger::take`] fold in the answer the line shows, so that after a
//! mismatch the model follows what the implementation did and judges the next line on its own.
//!
//! The rules, as a table (`t` is the line's time, the table's clock; `ttl`, `capacity`,
//! `attempts_max` and `batch_max` come from the `run` line):
//!
//! | request | answer |
//! | --- | --- |
//! | enqueue | known: `duplicate`; backlog = capacity: `rejected`; else `arrived`, backlog + 1 |
//! | acquire (workers only) | oldest queued job: `granted`, epoch + 1, expiry t + ttl, attempt + 1; none: `acquire_empty` |
//! | retried acquire | the owner's live lease on the job, unchanged: `regranted` |
//! | copy of an acquire whose grant is spent | the owner's last grant, no longer its live lease (used, or t >= expiry): `acquire_spent`; still live: `regranted` |
//! | renew | stale epoch, not leased, terminal, expired (t >= expiry), in that order: `refused`; else `renewed` to t + ttl |
//! | complete | stale epoch: refused; completed with it: `already_completed`, with another: refused `conflict`; other terminal, queued: refused; leased (expired or not): completed |
//! | requeue | stale epoch, queued, terminal: refused; attempts >= attempts_max: dead-lettered; else `requeued` to the back of the queue |
//! | release | stale epoch, queued, terminal: refused; else `released` to the head of the queue, attempts - 1 (the grant undone) |
//! | quarantine | two different outputs only; stale epoch, queued, terminal: refused; else quarantined |
//! | list | the live leases with expiry <= t, by (expiry, job), the first `batch_max` |
//! | fence | not leased or another epoch: `lost_race` with the current epoch; t < expiry: `not_expired`; else `reclaimed`, epoch + 1, expiry t + ttl, owned by the reclaimer |
//! | lookup | fence := max(fence, epoch); the recorded output and its rival |
//! | apply | epoch < fence: `fenced`; else fence := epoch, and nothing recorded: applied; the same: `already_applied`; another: `conflict`, kept as the rival if none |

use lease_core::{Epoch, JobId, OpId, OutputId};
use lease_history::{EffectRejectReason, Event, Listing, Node, OutcomeKind, RefuseReason, RefusedRequest};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// The run's limits, from its `run` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    /// The most leases one listing may show.
    pub batch_max: usize,
    /// The most accepted, non-terminal jobs.
    pub capacity: usize,
    /// How long a grant, renewal or reclaim holds a lease.
    pub lease_ttl_us: u64,
    /// Worker grants before a requeue dead-letters the job.
    pub attempts_max: u32,
}

/// A request to the table, as read off the line that answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TableRequest {
    /// Accept a job.
    Enqueue { job: JobId },
    /// Grant the oldest queued job to a worker.
    Acquire { owner: Node },
    /// A retried copy of an acquire whose grant of `job` still stands.
    Reacquire { owner: Node, job: JobId },
    /// A copy of the acquire that got the owner's last grant, `job` under `epoch`, answered once
    /// that grant no longer stands.
    SpentCopy { owner: Node, job: JobId, epoch: Epoch },
    /// Extend a lease.
    Renew { job: JobId, epoch: Epoch },
    /// Complete a job; the output is not on a refusal's line.
    Complete { job: JobId, epoch: Epoch, output: Option<OutputId> },
    /// Hand a leased job back to the queue.
    Requeue { job: JobId, epoch: Epoch },
    /// Undo a grant its worker never took.
    Release { job: JobId, epoch: Epoch },
    /// End a leased job dead-lettered now, its dependency having refused it for good.
    DeadLetter { job: JobId, epoch: Epoch },
    /// Quarantine a job; the identities are not on a refusal's line.
    Quarantine { job: JobId, epoch: Epoch, identities: Option<[OutputId; 2]> },
    /// List expired leases.
    List,
    /// Fence a listed lease for a reclaimer.
    Fence { job: JobId, expected: Epoch, reclaimer: Node },
}

impl TableRequest {
    /// The job the request names, if one.
    pub fn job(self) -> Option<JobId> {
        match self {
            TableRequest::Enqueue { job }
            | TableRequest::Reacquire { job, .. }
            | TableRequest::SpentCopy { job, .. }
            | TableRequest::Renew { job, .. }
            | TableRequest::Complete { job, .. }
            | TableRequest::Requeue { job, .. }
            | TableRequest::Release { job, .. }
            | TableRequest::DeadLetter { job, .. }
            | TableRequest::Quarantine { job, .. }
            | TableRequest::Fence { job, .. } => Some(job),
            TableRequest::Acquire { .. } | TableRequest::List => None,
        }
    }
}

impl fmt::Display for TableRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableRequest::Enqueue { job } => write!(f, "enqueue {job}"),
            TableRequest::Acquire { owner } => write!(f, "acquire by {owner}"),
            TableRequest::Reacquire { owner, job } => write!(f, "retried acquire by {owner} holding {job}"),
            TableRequest::SpentCopy { owner, job, epoch } => {
                write!(f, "copy of {owner}'s acquire that got {job} {epoch}")
            }
            TableRequest::Renew { job, epoch } => write!(f, "renew {job} {epoch}"),
            TableRequest::Complete { job, epoch, output: Some(output) } => write!(f, "complete {job} {epoch} {output}"),
            TableRequest::Complete { job, epoch, output: None } => write!(f, "complete {job} {epoch}"),
            TableRequest::Requeue { job, epoch } => write!(f, "requeue {job} {epoch}"),
            TableRequest::Release { job, epoch } => write!(f, "release {job} {epoch}"),
            TableRequest::DeadLetter { job, epoch } => write!(f, "dead-letter {job} {epoch}"),
            TableRequest::Quarantine { job, epoch, .. } => write!(f, "quarantine {job} {epoch}"),
            TableRequest::List => f.write_str("list expired leases"),
            TableRequest::Fence { job, expected, reclaimer } => write!(f, "fence {job} {expected} for {reclaimer}"),
        }
    }
}

/// The table's answer to one request: the one a line shows, or the one the rules give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TableAnswer {
    /// `arrived`, with the backlog after it.
    Arrived { backlog: usize },
    /// `rejected` queue_full.
    Rejected,
    /// `duplicate`: the job was known.
    Duplicate,
    /// `granted`: a new lease on `job`.
    Granted { job: JobId, epoch: Epoch, expires_at_us: u64, attempt: u32 },
    /// `acquire_empty`: nothing queued.
    AcquireEmpty,
    /// `regranted`: the owner's lease, unchanged.
    Regranted { epoch: Epoch, expires_at_us: u64, attempt: u32 },
    /// A retried acquire whose owner holds no live lease on the job: there is nothing to regrant.
    NotHeld,
    /// `acquire_spent`: nothing, to a copy of an acquire whose grant no longer stands.
    Spent,
    /// `renewed` until the new expiry.
    Renewed { expires_at_us: u64 },
    /// `refused`, for this reason.
    Refused(RefuseReason),
    /// `terminal` completed.
    Completed,
    /// `already_completed`: the same output again.
    AlreadyCompleted,
    /// `requeued` after `attempts` worker grants.
    Requeued { attempts: u32 },
    /// `released`, `attempts` worker grants left counted.
    Released { attempts: u32 },
    /// `terminal` dead_lettered after `attempts` worker grants.
    DeadLettered { attempts: Option<u32> },
    /// `terminal` quarantined.
    Quarantined,
    /// `listed`: these leases.
    Listed(Vec<Listing>),
    /// `reclaimed`: the displaced lease, and the reclaimer's.
    Reclaimed { epoch: Epoch, expires_at_us: u64, new_epoch: Epoch, new_expires_at_us: u64 },
    /// `lost_race`: the job is at `current` now.
    LostRace { current: Epoch },
    /// `not_expired`: the lease runs until then.
    NotExpired { expires_at_us: u64 },
    /// The request is misuse, which the table answers with an error and no line at all.
    Misuse(&'static str),
}

impl fmt::Display for TableAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableAnswer::Arrived { backlog } => write!(f, "arrived, backlog {backlog}"),
            TableAnswer::Rejected => f.write_str("rejected queue_full"),
            TableAnswer::Duplicate => f.write_str("duplicate"),
            TableAnswer::Granted { job, epoch, expires_at_us, attempt } => {
                write!(f, "granted {job} {epoch}, expires {expires_at_us}us (attempt {attempt})")
            }
            TableAnswer::AcquireEmpty => f.write_str("acquire_empty"),
            TableAnswer::Regranted { epoch, expires_at_us, attempt } => {
                write!(f, "regranted {epoch}, expires {expires_at_us}us (attempt {attempt})")
            }
            TableAnswer::NotHeld => f.write_str("no live lease of the owner to regrant"),
            TableAnswer::Spent => f.write_str("acquire_spent"),
            TableAnswer::Renewed { expires_at_us } => write!(f, "renewed to {expires_at_us}us"),
            TableAnswer::Refused(reason) => write!(f, "refused {reason}"),
            TableAnswer::Completed => f.write_str("terminal completed"),
            TableAnswer::AlreadyCompleted => f.write_str("already_completed"),
            TableAnswer::Requeued { attempts } => write!(f, "requeued after {attempts} attempts"),
            TableAnswer::Released { attempts } => write!(f, "released, {attempts} attempts counted"),
            TableAnswer::DeadLettered { attempts: Some(attempts) } => {
                write!(f, "terminal dead_lettered after {attempts} attempts")
            }
            TableAnswer::DeadLettered { attempts: None } => f.write_str("terminal dead_lettered"),
            TableAnswer::Quarantined => f.write_str("terminal quarantined"),
            TableAnswer::Listed(leases) => {
                f.write_str("listed [")?;
                for (index, lease) in leases.iter().enumerate() {
                    let sep = if index == 0 { "" } else { ", " };
                    write!(f, "{sep}{} {} expires {}us", lease.job, lease.epoch, lease.expires_at_us)?;
                }
                f.write_str("]")
            }
            TableAnswer::Reclaimed { epoch, expires_at_us, new_epoch, new_expires_at_us } => {
                write!(f, "reclaimed {epoch} (expired {expires_at_us}us) as {new_epoch}, expires {new_expires_at_us}us")
            }
            TableAnswer::LostRace { current } => write!(f, "lost_race, current {current}"),
            TableAnswer::NotExpired { expires_at_us } => write!(f, "not_expired, expires {expires_at_us}us"),
            TableAnswer::Misuse(why) => write!(f, "no answer ({why})"),
        }
    }
}

/// The request and the answer a table line shows, or `None` for a line that is not the table's.
pub(super) fn read_table(event: &Event) -> Option<(TableRequest, TableAnswer)> {
    use TableAnswer as A;
    use TableRequest as R;
    Some(match event {
        Event::Arrived { job, backlog } => (R::Enqueue { job: *job }, A::Arrived { backlog: *backlog }),
        Event::Rejected { job, .. } => (R::Enqueue { job: *job }, A::Rejected),
        Event::Duplicate { job } => (R::Enqueue { job: *job }, A::Duplicate),
        Event::Granted { job, epoch, owner, expires_at_us, attempt } => (
            R::Acquire { owner: *owner },
            A::Granted { job: *job, epoch: *epoch, expires_at_us: *expires_at_us, attempt: *attempt },
        ),
        Event::AcquireEmpty { owner } => (R::Acquire { owner: *owner }, A::AcquireEmpty),
        Event::AcquireSpent { owner, job, epoch } => {
            (R::SpentCopy { owner: *owner, job: *job, epoch: *epoch }, A::Spent)
        }
        Event::Regranted { job, epoch, owner, expires_at_us, attempt } => (
            R::Reacquire { owner: *owner, job: *job },
            A::Regranted { epoch: *epoch, expires_at_us: *expires_at_us, attempt: *attempt },
        ),
        Event::Renewed { job, epoch, expires_at_us, .. } => {
            (R::Renew { job: *job, epoch: *epoch }, A::Renewed { expires_at_us: *expires_at_us })
        }
        Event::Refused { job, epoch, request, reason, .. } => {
            let (job, epoch) = (*job, *epoch);
            let request = match request {
                RefusedRequest::Renew => R::Renew { job, epoch },
                RefusedRequest::Complete => R::Complete { job, epoch, output: None },
                RefusedRequest::Requeue => R::Requeue { job, epoch },
                RefusedRequest::Release => R::Release { job, epoch },
                RefusedRequest::DeadLetter => R::DeadLetter { job, epoch },
                RefusedRequest::Quarantine => R::Quarantine { job, epoch, identities: None },
            };
            (request, A::Refused(*reason))
        }
        Event::Terminal { job, outcome, output, epoch, attempts, identities, permanent, .. } => {
            let (job, epoch) = (*job, *epoch);
            match outcome {
                OutcomeKind::Completed => (R::Complete { job, epoch, output: *output }, A::Completed),
                OutcomeKind::DeadLettered if *permanent => {
                    (R::DeadLetter { job, epoch }, A::DeadLettered { attempts: *attempts })
                }
                OutcomeKind::DeadLettered => (R::Requeue { job, epoch }, A::DeadLettered { attempts: *attempts }),
                OutcomeKind::Quarantined => (R::Quarantine { job, epoch, identities: *identities }, A::Quarantined),
            }
        }
        Event::AlreadyCompleted { job, epoch, output, .. } => {
            (R::Complete { job: *job, epoch: *epoch, output: Some(*output) }, A::AlreadyCompleted)
        }
        Event::Released { job, epoch, attempts, .. } => {
            (R::Release { job: *job, epoch: *epoch }, A::Released { attempts: *attempts })
        }
        Event::Requeued { job, epoch, attempts, .. } => {
            (R::Requeue { job: *job, epoch: *epoch }, A::Requeued { attempts: *attempts })
        }
        Event::Listed { leases, .. } => (R::List, A::Listed(leases.clone())),
        Event::Reclaimed { job, epoch, expires_at_us, new_epoch, new_expires_at_us, reclaimer, .. } => (
            R::Fence { job: *job, expected: *epoch, reclaimer: *reclaimer },
            A::Reclaimed {
                epoch: *epoch,
                expires_at_us: *expires_at_us,
                new_epoch: *new_epoch,
                new_expires_at_us: *new_expires_at_us,
            },
        ),
        Event::LostRace { job, expected, current, batch } => (
            R::Fence { job: *job, expected: *expected, reclaimer: Node::Reclaimer(batch.reclaimer.0) },
            A::LostRace { current: *current },
        ),
        Event::NotExpired { job, expected, expires_at_us, batch } => (
            R::Fence { job: *job, expected: *expected, reclaimer: Node::Reclaimer(batch.reclaimer.0) },
            A::NotExpired { expires_at_us: *expires_at_us },
        ),
        _ => return None,
    })
}

/// A lease in the model: who holds the job, under which epoch, until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    owner: Node,
    epoch: Epoch,
    expires_at_us: u64,
}

/// Where a job stands in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Queued,
    Leased(Lease),
    /// Terminal: completed with this output, or (`None`) dead-lettered or quarantined.
    Ended(Option<OutputId>),
}

/// One accepted job in the model.
#[derive(Debug, Clone, Copy)]
struct Job {
    standing: Standing,
    /// 0 before the first grant; every grant and reclaim adds one.
    epoch: Epoch,
    /// Worker grants so far; a reclaim is not an attempt.
    attempts: u32,
    /// The line that last changed the job.
    line: usize,
}

/// The table of the model. See the module doc.
#[derive(Debug, Clone, Default)]
pub(super) struct Table {
    jobs: BTreeMap<JobId, Job>,
    /// Queued jobs in the order they became queued (arrival or requeue).
    queue: VecDeque<JobId>,
    /// Every live lease by (expiry, job), the order a listing shows them in.
    expiries: BTreeSet<(u64, JobId)>,
    /// Accepted, non-terminal jobs.
    backlog: usize,
    /// Each worker's last grant, the one a copy of its acquire may name as spent.
    last_grants: BTreeMap<Node, (JobId, Epoch)>,
}

impl Table {
    /// The answer the rules give to `request` at time `t_us`, and the line that set the state it
    /// rests on, if any.
    pub fn answer(&self, limits: &Limits, t_us: u64, request: TableRequest) -> (TableAnswer, Option<usize>) {
        use TableAnswer as A;
        let job_of = |job: JobId| self.jobs.get(&job);
        match request {
            TableRequest::Enqueue { job } => match job_of(job) {
                Some(known) => (A::Duplicate, Some(known.line)),
                None if self.backlog >= limits.capacity => (A::Rejected, None),
                None => (A::Arrived { backlog: self.backlog.saturating_add(1) }, None),
            },
            TableRequest::Acquire { owner }
            | TableRequest::Reacquire { owner, .. }
            | TableRequest::SpentCopy { owner, .. }
                if !matches!(owner, Node::Worker(_)) =>
            {
                (A::Misuse("only workers acquire leases"), None)
            }
            TableRequest::Acquire { .. } => {
                let Some(&job) = self.queue.front() else { return (A::AcquireEmpty, None) };
                let queued = self.jobs[&job];
                let granted = A::Granted {
                    job,
                    epoch: queued.epoch.next(),
                    expires_at_us: t_us.saturating_add(limits.lease_ttl_us),
                    attempt: queued.attempts.saturating_add(1),
                };
                (granted, Some(queued.line))
            }
            TableRequest::Reacquire { owner, job } => {
                let Some(known) = job_of(job) else { return (A::Misuse("an unknown job"), None) };
                match known.standing {
                    Standing::Leased(lease) if lease.owner == owner => {
                        let (epoch, expires_at_us) = (lease.epoch, lease.expires_at_us);
                        (A::Regranted { epoch, expires_at_us, attempt: known.attempts }, Some(known.line))
                    }
                    _ => (A::NotHeld, Some(known.line)),
                }
            }
            TableRequest::SpentCopy { owner, job, epoch } => {
                let Some(known) = job_of(job) else { return (A::Misuse("an unknown job"), None) };
                if self.last_grants.get(&owner) != Some(&(job, epoch)) {
                    return (A::Misuse("not the owner's last grant"), Some(known.line));
                }
                match known.standing {
                    Standing::Leased(lease)
                        if lease.owner == owner && lease.epoch == epoch && t_us < lease.expires_at_us =>
                    {
                        let (epoch, expires_at_us) = (lease.epoch, lease.expires_at_us);
                        (A::Regranted { epoch, expires_at_us, attempt: known.attempts }, Some(known.line))
                    }
                    _ => (A::Spent, Some(known.line)),
                }
            }
            TableRequest::Renew { job, epoch } => {
                let Some(known) = job_of(job) else { return (A::Misuse("an unknown job"), None) };
                let answer = match leased(known, epoch) {
                    Err(reason) => A::Refused(reason),
                    Ok(lease) if t_us >= lease.expires_at_us => A::Refused(RefuseReason::Expired),
                    Ok(_) => A::Renewed { expires_at_us: t_us.saturating_add(limits.lease_ttl_us) },
                };
                (answer, Some(known.line))
            }
            TableRequest::Complete { job, epoch, output } => {
                let Some(known) = job_of(job) else { return (A::Misuse("an unknown job"), None) };
                let answer = if known.epoch != epoch {
                    A::Refused(RefuseReason::StaleEpoch)
                } else {
                    match known.standing {
                        // Completion is fenced by the epoch only: an expired lease still completes.
                        Standing::Leased(_) => A::Completed,
                        Standing::Queued => A::Refused(RefuseReason::NotLeased),
                        Standing::Ended(Some(recorded)) if output == Some(recorded) => A::AlreadyCompleted,
                        Standing::Ended(Some(_)) => A::Refused(RefuseReason::Conflict),
                        Standing::Ended(None) => A::Refused(RefuseReason::AlreadyTerminal),
                    }
                };
                (answer, Some(known.line))
            }
            TableRequest::Requeue { job, epoch } => {
                let Some(known) = job_of(job) else { return (A::Misuse("an unknown job"), None) };
                let answer = match leased(known, epoch) {
                    Err(reason) => A::Refused(reason),
                    Ok(_) if known.attempts >= limits.attempts_max => {
                        A::DeadLettered { attempts: Some(known.attempts) }
                    }
                    Ok(_) => A::Requeued { attempts: known.attempts },
                };
                (answer, Some(known.line))
            }
            TableRequest::DeadLetter { job, epoch } => {
                let Some(known) = job_of(job) else { return (A::Misuse("an unknown job"), None) };
                // At the worker's word, whatever the attempts: the job ends with those it spent.
                let answer = match leased(known, epoch) {
                    Err(reason) => A::Refused(reason),
                    Ok(_) => A::DeadLettered { attempts: Some(known.attempts) },
                };
                (answer, Some(known.line))
            }
            TableRequest::Release { job, epoch } => {
                let Some(known) = job_of(job) else { return (A::Misuse("an unknown job"), None) };
                let answer = match leased(known, epoch) {
                    Err(reason) => A::Refused(reason),
                    Ok(_) => A::Released { attempts: known.attempts.saturating_sub(1) },
                };
                (answer, Some(known.line))
            }
            TableRequest::Quarantine { job, epoch, identities } => {
                let Some(known) = job_of(job) else { return (A::Misuse("an unknown job"), None) };
                if identities.is_some_and(|[recorded, rival]| recorded == rival) {
                    return (A::Misuse("one output named twice is no conflict"), Some(known.line));
                }
                let answer = match leased(known, epoch) {
                    Err(reason) => A::Refused(reason),
                    Ok(_) => A::Quarantined,
                };
                (answer, Some(known.line))
            }
            TableRequest::List => {
                let leases = self
                    .expiries
                    .iter()
                    .take_while(|&&(expires_at_us, _)| expires_at_us <= t_us)
                    .take(limits.batch_max)
                    .map(|&(expires_at_us, job)| Listing { job, epoch: self.jobs[&job].epoch, expires_at_us })
                    .collect();
                (A::Listed(leases), None)
            }
            TableRequest::Fence { job, expected, .. } => {
                let Some(known) = job_of(job) else { return (A::Misuse("an unknown job"), None) };
                let answer = match known.standing {
                    Standing::Leased(lease) if lease.epoch != expected => A::LostRace { current: known.epoch },
                    Standing::Leased(lease) if t_us < lease.expires_at_us => {
                        A::NotExpired { expires_at_us: lease.expires_at_us }
                    }
                    Standing::Leased(lease) => A::Reclaimed {
                        epoch: lease.epoch,
                        expires_at_us: lease.expires_at_us,
                        new_epoch: lease.epoch.next(),
                        new_expires_at_us: t_us.saturating_add(limits.lease_ttl_us),
                    },
                    Standing::Queued | Standing::Ended(_) => A::LostRace { current: known.epoch },
                };
                (answer, Some(known.line))
            }
        }
    }

    /// The line that last changed `job`, if it is known.
    pub fn line_of(&self, job: JobId) -> Option<usize> {
        self.jobs.get(&job).map(|known| known.line)
    }

    /// Folds in the answer a line shows, at `line`.
    pub fn take(&mut self, line: usize, request: TableRequest, answer: &TableAnswer) {
        use TableAnswer as A;
        match (request, answer) {
            (TableRequest::Enqueue { job }, A::Arrived { .. }) => {
                if self.jobs.contains_key(&job) {
                    return; // A second arrival of a known job, reported already.
                }
                self.jobs.insert(job, Job { standing: Standing::Queued, epoch: Epoch(0), attempts: 0, line });
                self.queue.push_back(job);
                self.backlog += 1;
            }
            (TableRequest::Acquire { owner }, &A::Granted { job, epoch, expires_at_us, attempt }) => {
                self.last_grants.insert(owner, (job, epoch));
                self.lease(line, job, Lease { owner, epoch, expires_at_us });
                if let Some(granted) = self.jobs.get_mut(&job) {
                    granted.attempts = attempt;
                }
            }
            (TableRequest::Renew { job, .. }, &A::Renewed { expires_at_us }) => {
                let Some(Standing::Leased(lease)) = self.jobs.get(&job).map(|known| known.standing) else { return };
                self.lease(line, job, Lease { expires_at_us, ..lease });
            }
            (TableRequest::Fence { job, reclaimer, .. }, &A::Reclaimed { new_epoch, new_expires_at_us, .. }) => {
                self.lease(line, job, Lease { owner: reclaimer, epoch: new_epoch, expires_at_us: new_expires_at_us });
            }
            (TableRequest::Requeue { job, .. }, A::Requeued { .. }) => {
                let Some(known) = self.jobs.get_mut(&job) else { return };
                if let Standing::Leased(lease) = known.standing {
                    self.expiries.remove(&(lease.expires_at_us, job));
                }
                known.standing = Standing::Queued;
                known.line = line;
                self.queue.retain(|&queued| queued != job);
                self.queue.push_back(job);
            }
            (TableRequest::Release { job, .. }, &A::Released { attempts }) => {
                let Some(known) = self.jobs.get_mut(&job) else { return };
                if let Standing::Leased(lease) = known.standing {
                    self.expiries.remove(&(lease.expires_at_us, job));
                }
                known.standing = Standing::Queued;
                known.attempts = attempts;
                known.line = line;
                self.queue.retain(|&queued| queued != job);
                self.queue.push_front(job);
            }
            (TableRequest::Complete { job, output, .. }, A::Completed) => self.end(line, job, output),
            (TableRequest::Requeue { job, .. } | TableRequest::DeadLetter { job, .. }, A::DeadLettered { .. })
            | (TableRequest::Quarantine { job, .. }, A::Quarantined) => self.end(line, job, None),
            _ => {}
        }
    }

    /// `job` is leased as `lease` from `line` on: the epoch moves to the lease's.
    fn lease(&mut self, line: usize, job: JobId, lease: Lease) {
        let Some(known) = self.jobs.get_mut(&job) else { return };
        match known.standing {
            Standing::Leased(old) => {
                self.expiries.remove(&(old.expires_at_us, job));
            }
            Standing::Queued => {
                // The oldest queued job, unless the line was wrong, reported already.
                if self.queue.front() == Some(&job) {
                    self.queue.pop_front();
                } else {
                    self.queue.retain(|&queued| queued != job);
                }
            }
            Standing::Ended(_) => {}
        }
        known.standing = Standing::Leased(lease);
        known.epoch = lease.epoch;
        known.line = line;
        self.expiries.insert((lease.expires_at_us, job));
    }

    fn end(&mut self, line: usize, job: JobId, output: Option<OutputId>) {
        let Some(known) = self.jobs.get_mut(&job) else { return };
        match known.standing {
            Standing::Ended(_) => return, // A second ending, reported already.
            Standing::Leased(lease) => {
                self.expiries.remove(&(lease.expires_at_us, job));
            }
            Standing::Queued => self.queue.retain(|&queued| queued != job),
        }
        known.standing = Standing::Ended(output);
        known.line = line;
        self.backlog = self.backlog.saturating_sub(1);
    }
}

/// The live lease of `job` at `epoch`, or why a request at that epoch is refused, in the rules'
/// order: a stale epoch first, then a queued job, then a terminal one.
fn leased(job: &Job, epoch: Epoch) -> Result<Lease, RefuseReason> {
    if job.epoch != epoch {
        return Err(RefuseReason::StaleEpoch);
    }
    match job.standing {
        Standing::Leased(lease) => Ok(lease),
        Standing::Queued => Err(RefuseReason::NotLeased),
        Standing::Ended(_) => Err(RefuseReason::AlreadyTerminal),
    }
}

/// A request to the ledger, as read off the line that answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LedgerRequest {
    /// What is recorded for the operation; raises its fence.
    Lookup { op: OpId, epoch: Epoch },
    /// Record an output for the operation.
    Apply { op: OpId, epoch: Epoch, output: OutputId },
}

impl fmt::Display for LedgerRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerRequest::Lookup { op, epoch } => write!(f, "lookup {op} {epoch}"),
            LedgerRequest::Apply { op, epoch, output } => write!(f, "apply {op} {epoch} {output}"),
        }
    }
}

/// The ledger's answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LedgerAnswer {
    /// `looked_up`: the recorded output and its rival.
    Found { found: Option<OutputId>, rival: Option<OutputId> },
    /// `effect_applied`.
    Applied,
    /// `effect_rejected`, for this reason.
    Rejected(EffectRejectReason),
}

impl fmt::Display for LedgerAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerAnswer::Found { found: None, rival: None } => f.write_str("found nothing"),
            LedgerAnswer::Found { found: None, rival: Some(rival) } => write!(f, "found nothing but rival {rival}"),
            LedgerAnswer::Found { found: Some(found), rival: None } => write!(f, "found {found}"),
            LedgerAnswer::Found { found: Some(found), rival: Some(rival) } => {
                write!(f, "found {found} and rival {rival}")
            }
            LedgerAnswer::Applied => f.write_str("effect_applied"),
            LedgerAnswer::Rejected(reason) => write!(f, "effect_rejected {reason}"),
        }
    }
}

/// The request and the answer a ledger line shows, or `None` for a line that is not the ledger's
/// answer to a request (a `dependency_failed` is the dependency's, not the ledger's).
pub(super) fn read_ledger(event: &Event) -> Option<(LedgerRequest, LedgerAnswer)> {
    Some(match event {
        Event::LookedUp { op, epoch, found, rival, .. } => {
            (LedgerRequest::Lookup { op: *op, epoch: *epoch }, LedgerAnswer::Found { found: *found, rival: *rival })
        }
        Event::EffectApplied { op, epoch, output, .. } => {
            (LedgerRequest::Apply { op: *op, epoch: *epoch, output: *output }, LedgerAnswer::Applied)
        }
        Event::EffectRejected { op, epoch, output, reason, .. } => {
            (LedgerRequest::Apply { op: *op, epoch: *epoch, output: *output }, LedgerAnswer::Rejected(*reason))
        }
        _ => return None,
    })
}

/// One operation in the ledger model.
#[derive(Debug, Clone, Copy, Default)]
struct Op {
    fence: Epoch,
    recorded: Option<OutputId>,
    rival: Option<OutputId>,
    /// The line that last changed the operation.
    line: Option<usize>,
}

/// The ledger of the model. See the module doc.
#[derive(Debug, Clone, Default)]
pub(super) struct Ledger {
    ops: BTreeMap<OpId, Op>,
}

impl Ledger {
    /// The answer the rules give to `request`, and the line that set the state it rests on.
    pub fn answer(&self, request: LedgerRequest) -> (LedgerAnswer, Option<usize>) {
        match request {
            LedgerRequest::Lookup { op, .. } => {
                let known = self.ops.get(&op).copied().unwrap_or_default();
                (LedgerAnswer::Found { found: known.recorded, rival: known.rival }, known.line)
            }
            LedgerRequest::Apply { op, epoch, output } => {
                let known = self.ops.get(&op).copied().unwrap_or_default();
                let answer = match known.recorded {
                    _ if epoch < known.fence => LedgerAnswer::Rejected(EffectRejectReason::Fenced),
                    None => LedgerAnswer::Applied,
                    Some(recorded) if recorded == output => LedgerAnswer::Rejected(EffectRejectReason::AlreadyApplied),
                    Some(_) => LedgerAnswer::Rejected(EffectRejectReason::Conflict),
                };
                (answer, known.line)
            }
        }
    }

    /// Folds in the answer a line shows, at `line`.
    pub fn take(&mut self, line: usize, request: LedgerRequest, answer: LedgerAnswer) {
        match (request, answer) {
            (LedgerRequest::Lookup { op, epoch }, _) => {
                let known = self.ops.entry(op).or_default();
                if epoch > known.fence {
                    known.fence = epoch;
                    known.line = Some(line);
                }
            }
            (LedgerRequest::Apply { .. }, LedgerAnswer::Rejected(EffectRejectReason::Fenced)) => {}
            (LedgerRequest::Apply { op, epoch, output }, answer) => {
                let known = self.ops.entry(op).or_default();
                known.fence = epoch;
                known.line = Some(line);
                match answer {
                    LedgerAnswer::Applied => known.recorded = Some(output),
                    LedgerAnswer::Rejected(EffectRejectReason::Conflict) => {
                        known.rival.get_or_insert(output);
                    }
                    _ => {}
                }
            }
        }
    }
}
