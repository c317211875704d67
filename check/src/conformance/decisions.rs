//! The decision rules of workers and reclaimers: every action a node takes is justified by an
//! answer it got earlier.
//!
//! Messages are lost, duplicated and reordered, and a node acts on the first answer that reaches
//! it, so the rules never say a node *must* have acted; they say that whatever it did, some earlier
//! answer to it called for. The evidence is kept per holder: a node, a job and an epoch, which
//! names one grant (or one reclaim) exactly, since every grant and reclaim moves the epoch.
//!
//! A worker W holding (job, epoch):
//!
//! | action | justified by |
//! | --- | --- |
//! | any request about it (renew, lookup) | a `granted` or `regranted` of (job, epoch) to W |
//! | `executing` | that grant, with attempt 1, or an empty lookup from W; and no abandon before |
//! | `adopted` O | a lookup from W that found O and no rival; and no abandon before |
//! | complete with O | O applied (or already applied) from W, or adopted by W |
//! | requeue | a `dependency_failed` from W |
//! | dead-letter | a `dependency_failed` from W that refused the job for good (`permanent`) |
//! | release | W's `abandoned` `declined` of the grant, or its `abandoned` `shutdown` of a grant it never executed under |
//! | `abandoned` | `effect_fenced`: an apply from W fenced; `lease_lost`: a renewal of W refused; `conflict`: a rival shown to W; `self_fenced`, `declined`, `shutdown`: the grant |
//!
//! A reclaimer R in batch B:
//!
//! | action | justified by |
//! | --- | --- |
//! | fence of (job, expected) | a `listed` of B that shows (job, expected) (any copy of it: a retried listing may be answered twice) |
//! | lookup of (job, epoch) | a `reclaimed` of the job in B to `epoch` |
//! | requeue (or dead-letter) | a lookup in B that found nothing |
//! | complete with O, `adopted` O | a lookup in B that found O and no rival |
//! | quarantine of [O, P] | a lookup in B that found O with rival P |
//! | `batch_stopped` | the quarantine of that job in B, answered, and a lookup in B showing those outputs |
//!
//! A `reclaimed` line names the epoch the table displaced, not the one the reclaimer expected.
//! When B's listing showed the job under another epoch, the reclaimer fenced what it was shown
//! and the table displaced a lease it should not have: that is the table's `fence_answer`.
//!
//! The dependency fails only a call a worker made: a `dependency_failed` from W follows an
//! `executing` of W for that job and epoch. (What the ledger answers an apply is the model's to
//! judge, whoever offered it.)

use super::Rule;
use lease_core::{BatchId, Epoch, JobId, OutputId};
use lease_history::{AbandonReason, EffectRejectReason, Entry, Event, Listing, Node, OutcomeKind, RefusedRequest};
use std::collections::BTreeMap;

/// A decision that no earlier answer justifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unjustified {
    /// The rule broken.
    pub rule: Rule,
    /// What the rule asks for, and what the history shows instead.
    pub message: String,
    /// Lines that show the context (the grant, a lookup), if any.
    pub earlier: Vec<Option<usize>>,
}

/// One answer to a lookup, as a holder got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Looked {
    line: usize,
    found: Option<OutputId>,
    rival: Option<OutputId>,
    batch: Option<BatchId>,
}

/// The evidence one holder (node, job, epoch) has gathered.
#[derive(Debug, Clone, Default)]
struct Holding {
    /// The first `granted` or `regranted` line, and the grant's attempt.
    granted: Option<(usize, u32)>,
    /// The `reclaimed` line, and its batch.
    reclaimed: Option<(usize, BatchId)>,
    /// Every lookup answered to the holder, in order.
    looked: Vec<Looked>,
    /// The first `executing` line.
    executing: Option<usize>,
    /// Outputs the ledger took from the holder (applied or already applied), with the line.
    effects: BTreeMap<OutputId, usize>,
    /// Outputs the holder adopted, with the line.
    adopted: BTreeMap<OutputId, usize>,
    /// The first `dependency_failed` line.
    dependency_failed: Option<usize>,
    /// The first `dependency_failed` line that refused the job for good.
    refused_for_good: Option<usize>,
    /// The first `effect_rejected` fenced line.
    effect_fenced: Option<usize>,
    /// The first `effect_rejected` conflict line.
    effect_conflict: Option<usize>,
    /// The first refused renewal.
    renew_refused: Option<usize>,
    /// The first `abandoned` line.
    abandoned: Option<usize>,
    /// The first `abandoned` line whose why is `declined`.
    declined: Option<usize>,
}

impl Holding {
    fn grant_line(&self) -> Option<usize> {
        self.granted.map(|(line, _)| line).or(self.reclaimed.map(|(line, _)| line))
    }

    fn empty_lookup(&self, batch: Option<BatchId>) -> Option<&Looked> {
        self.looked.iter().find(|looked| looked.found.is_none() && looked.rival.is_none() && looked.batch == batch)
    }

    /// A lookup in `batch` (any, when `None` is not asked for) that found `output` (or any
    /// output, when unknown) and no rival.
    fn found(&self, output: Option<OutputId>, batch: Option<Option<BatchId>>) -> Option<&Looked> {
        self.looked.iter().find(|looked| {
            looked.rival.is_none()
                && looked.found.is_some()
                && output.is_none_or(|output| looked.found == Some(output))
                && batch.is_none_or(|batch| looked.batch == batch)
        })
    }

    fn conflict(&self, identities: Option<[OutputId; 2]>, batch: Option<BatchId>) -> Option<&Looked> {
        self.looked.iter().find(|looked| {
            looked.batch == batch
                && looked.rival.is_some()
                && identities.is_none_or(|[found, rival]| looked.found == Some(found) && looked.rival == Some(rival))
        })
    }
}

/// What one reclaim batch met, per job.
#[derive(Debug, Clone, Default)]
struct BatchJob {
    /// The line answering the quarantine of the job in the batch.
    quarantine_answered: Option<usize>,
}

/// The evidence every node has gathered so far. See the module doc.
#[derive(Debug, Clone, Default)]
pub(super) struct Decisions {
    holdings: BTreeMap<(Node, JobId, Epoch), Holding>,
    /// Every `listed` line of each batch, with its leases.
    listings: BTreeMap<BatchId, Vec<(usize, Vec<Listing>)>>,
    batch_jobs: BTreeMap<(BatchId, JobId), BatchJob>,
}

/// What a table line asked, in the terms of the decision rules.
enum Asked {
    Renew,
    Complete(Option<OutputId>),
    Requeue,
    DeadLetter,
    Release,
    Quarantine(Option<[OutputId; 2]>),
    /// A fence of (job, epoch) in the batch. A `reclaimed` line names the epoch it displaced, not
    /// the one the reclaimer expected: `displaced` says which.
    Fence {
        epoch: Epoch,
        batch: BatchId,
        displaced: bool,
    },
}

/// The node, job, epoch and batch a table line answers, and what it asked.
fn asked(event: &Event) -> Option<(Node, JobId, Epoch, Option<BatchId>, Asked)> {
    Some(match event {
        Event::Renewed { from, job, epoch, .. } => (*from, *job, *epoch, None, Asked::Renew),
        Event::Refused { from, job, epoch, request, batch, .. } => {
            let asked = match request {
                RefusedRequest::Renew => Asked::Renew,
                RefusedRequest::Complete => Asked::Complete(None),
                RefusedRequest::Requeue => Asked::Requeue,
                RefusedRequest::Release => Asked::Release,
                RefusedRequest::DeadLetter => Asked::DeadLetter,
                RefusedRequest::Quarantine => Asked::Quarantine(None),
            };
            (*from, *job, *epoch, *batch, asked)
        }
        Event::Terminal { from, job, outcome, output, epoch, identities, batch, permanent, .. } => {
            let asked = match outcome {
                OutcomeKind::Completed => Asked::Complete(*output),
                OutcomeKind::DeadLettered if *permanent => Asked::DeadLetter,
                OutcomeKind::DeadLettered => Asked::Requeue,
                OutcomeKind::Quarantined => Asked::Quarantine(*identities),
            };
            (*from, *job, *epoch, *batch, asked)
        }
        Event::AlreadyCompleted { from, job, epoch, output } => {
            (*from, *job, *epoch, None, Asked::Complete(Some(*output)))
        }
        Event::Requeued { from, job, epoch, batch, .. } => (*from, *job, *epoch, *batch, Asked::Requeue),
        Event::Released { from, job, epoch, .. } => (*from, *job, *epoch, None, Asked::Release),
        Event::Reclaimed { job, epoch, reclaimer, batch, .. } => {
            let fence = Asked::Fence { epoch: *epoch, batch: *batch, displaced: true };
            (*reclaimer, *job, *epoch, Some(*batch), fence)
        }
        Event::LostRace { job, expected, batch, .. } | Event::NotExpired { job, expected, batch, .. } => {
            let reclaimer = Node::Reclaimer(batch.reclaimer.0);
            let fence = Asked::Fence { epoch: *expected, batch: *batch, displaced: false };
            (reclaimer, *job, *expected, Some(*batch), fence)
        }
        _ => return None,
    })
}

fn unjustified(rule: Rule, earlier: &[Option<usize>], message: String) -> Result<(), Unjustified> {
    Err(Unjustified { rule, message, earlier: earlier.to_vec() })
}

impl Decisions {
    fn holding(&self, node: Node, job: JobId, epoch: Epoch) -> Option<&Holding> {
        self.holdings.get(&(node, job, epoch))
    }

    /// Judges the decision the entry shows, if any, against the evidence before it.
    pub fn check(&self, entry: &Entry) -> Result<(), Unjustified> {
        let node = entry.node;
        match &entry.event {
            Event::Executing { job, epoch, .. } => self.executing(node, *job, *epoch),
            Event::Adopted { job, output, epoch, .. } => self.adopted(node, *job, *epoch, *output),
            Event::Abandoned { job, epoch, why } => self.abandoned(node, *job, *epoch, *why),
            Event::LookedUp { from, job, epoch, batch, .. } => self.looked_up(*from, *job, *epoch, *batch),
            Event::DependencyFailed { from, job, epoch, .. } => self.dependency(*from, *job, *epoch),
            Event::BatchStopped { batch, job, identities, .. } => self.batch_stopped(*batch, *job, *identities),
            event => {
                let Some((from, job, epoch, batch, asked)) = asked(event) else { return Ok(()) };
                match from {
                    Node::Worker(_) => self.worker_asked(from, job, epoch, asked),
                    _ => self.reclaimer_asked(from, job, epoch, batch, asked),
                }
            }
        }
    }

    fn executing(&self, worker: Node, job: JobId, epoch: Epoch) -> Result<(), Unjustified> {
        let holding = self.holding(worker, job, epoch);
        let Some((granted, attempt)) = holding.and_then(|holding| holding.granted) else {
            let message = format!("{worker} executed {job} {epoch} without a grant of it");
            return unjustified(Rule::WorkerActsOnItsGrant, &[], message);
        };
        let holding = holding.expect("granted");
        if let Some(abandoned) = holding.abandoned {
            let message = format!("{worker} executed {job} {epoch} after it abandoned it");
            return unjustified(Rule::WorkerStaysAwayAfterAbandon, &[Some(abandoned)], message);
        }
        if attempt == 1 || holding.empty_lookup(None).is_some() {
            return Ok(());
        }
        let message = format!(
            "{worker} executed {job} {epoch} on attempt {attempt} without a lookup that found nothing; \
             only a first attempt may skip the lookup"
        );
        unjustified(Rule::WorkerExecutesFreshOrAfterEmptyLookup, &[Some(granted)], message)
    }

    fn adopted(&self, node: Node, job: JobId, epoch: Epoch, output: OutputId) -> Result<(), Unjustified> {
        let holding = self.holding(node, job, epoch);
        let rule = match node {
            Node::Worker(_) => Rule::WorkerAdoptsWhatItFound,
            _ => Rule::ReclaimerCompletesWithWhatItFound,
        };
        if let Some(abandoned) = holding.and_then(|holding| holding.abandoned) {
            let message = format!("{node} adopted {output} for {job} {epoch} after it abandoned it");
            return unjustified(Rule::WorkerStaysAwayAfterAbandon, &[Some(abandoned)], message);
        }
        if holding.is_some_and(|holding| holding.found(Some(output), None).is_some()) {
            return Ok(());
        }
        let message = format!("{node} adopted {output} for {job} {epoch}, but no lookup of its found {output} alone");
        unjustified(rule, &lookup_lines(holding), message)
    }

    fn abandoned(&self, worker: Node, job: JobId, epoch: Epoch, why: AbandonReason) -> Result<(), Unjustified> {
        let holding = self.holding(worker, job, epoch);
        let reason = holding.and_then(|holding| match why {
            AbandonReason::SelfFenced | AbandonReason::Declined | AbandonReason::Shutdown => {
                holding.granted.map(|(line, _)| line)
            }
            AbandonReason::LeaseLost => holding.renew_refused,
            AbandonReason::EffectFenced => holding.effect_fenced,
            AbandonReason::Conflict => holding
                .looked
                .iter()
                .find(|looked| looked.rival.is_some())
                .map(|looked| looked.line)
                .or(holding.effect_conflict),
        });
        if reason.is_some() {
            return Ok(());
        }
        let needs = match why {
            AbandonReason::SelfFenced | AbandonReason::Declined | AbandonReason::Shutdown => "a grant of it",
            AbandonReason::LeaseLost => "a refused renewal",
            AbandonReason::EffectFenced => "a fenced apply",
            AbandonReason::Conflict => "a lookup showing a rival, or an apply refused as a conflict",
        };
        let grant = holding.and_then(Holding::grant_line);
        let message = format!("{worker} abandoned {job} {epoch} as {why} without {needs}");
        unjustified(Rule::WorkerAbandonsForItsReason, &[grant], message)
    }

    fn looked_up(&self, from: Node, job: JobId, epoch: Epoch, batch: Option<BatchId>) -> Result<(), Unjustified> {
        let holding = self.holding(from, job, epoch);
        match (from, batch) {
            (Node::Worker(_), None) => {
                if holding.is_some_and(|holding| holding.granted.is_some()) {
                    return Ok(());
                }
                let message = format!("{from} looked up {job} {epoch} without a grant of it");
                unjustified(Rule::WorkerActsOnItsGrant, &[], message)
            }
            (_, Some(batch)) => {
                let reclaimed = holding.and_then(|holding| holding.reclaimed);
                if reclaimed.is_some_and(|(_, reclaimed_in)| reclaimed_in == batch) {
                    return Ok(());
                }
                let message = format!("{from} looked up {job} {epoch} in {} without reclaiming it there", show(batch));
                unjustified(Rule::ReclaimerLooksUpWhatItReclaimed, &[reclaimed.map(|(line, _)| line)], message)
            }
            (_, None) => {
                let message = format!("{from} looked up {job} {epoch} outside any batch");
                unjustified(Rule::ReclaimerLooksUpWhatItReclaimed, &[], message)
            }
        }
    }

    fn dependency(&self, from: Node, job: JobId, epoch: Epoch) -> Result<(), Unjustified> {
        if self.holding(from, job, epoch).is_some_and(|holding| holding.executing.is_some()) {
            return Ok(());
        }
        let message = format!("the dependency failed a call of {from} for {job} {epoch}, which {from} never executed");
        unjustified(Rule::DependencyAnswersAnExecute, &[], message)
    }

    fn worker_asked(&self, worker: Node, job: JobId, epoch: Epoch, asked: Asked) -> Result<(), Unjustified> {
        let Some(holding) = self.holding(worker, job, epoch).filter(|holding| holding.granted.is_some()) else {
            let message = format!("{worker} asked the table about {job} {epoch} without a grant of it");
            return unjustified(Rule::WorkerActsOnItsGrant, &[], message);
        };
        let grant = holding.grant_line();
        match asked {
            Asked::Renew => Ok(()),
            Asked::Complete(output) => {
                let own = match output {
                    Some(output) => holding.effects.contains_key(&output) || holding.adopted.contains_key(&output),
                    None => !holding.effects.is_empty() || !holding.adopted.is_empty(),
                };
                if own {
                    return Ok(());
                }
                let output = output.map_or("an output".to_string(), |output| output.to_string());
                let message = format!(
                    "{worker} completed {job} {epoch} with {output}, which the ledger neither took from it nor \
                     did it adopt"
                );
                unjustified(Rule::WorkerCompletesWithItsOutput, &[grant], message)
            }
            Asked::Requeue => {
                if holding.dependency_failed.is_some() {
                    return Ok(());
                }
                let message = format!("{worker} requeued {job} {epoch} though its dependency never failed");
                unjustified(Rule::WorkerRequeuesOnlyAfterDependencyFailed, &[grant], message)
            }
            Asked::DeadLetter => {
                if holding.refused_for_good.is_some() {
                    return Ok(());
                }
                let message =
                    format!("{worker} dead-lettered {job} {epoch} though its dependency never refused it for good");
                unjustified(
                    Rule::WorkerDeadLettersOnlyAfterPermanentFailure,
                    &[grant, holding.dependency_failed],
                    message,
                )
            }
            Asked::Release => {
                // A release undoes the grant's attempt: only a grant under which nothing ran may
                // be handed back, or the next grant (a first attempt again) would skip the lookup
                // and run the effect a second time. It is handed back once given up: declined, at
                // shutdown, or (a buffered job the runtime never started) self-fenced or lost.
                if holding.declined.is_some() || (holding.abandoned.is_some() && holding.executing.is_none()) {
                    return Ok(());
                }
                let message = match (holding.abandoned, holding.executing) {
                    (Some(_), Some(_)) => {
                        format!("{worker} released {job} {epoch} after it had executed under it")
                    }
                    _ => format!("{worker} released {job} {epoch}, a grant it had not given up"),
                };
                unjustified(Rule::WorkerReleasesOnlyWhatItDeclined, &[grant, holding.executing], message)
            }
            Asked::Quarantine(_) => {
                let message = format!("{worker} asked to quarantine {job} {epoch}: only reclaimers quarantine");
                unjustified(Rule::ReclaimerQuarantinesWhatItFound, &[grant], message)
            }
            Asked::Fence { .. } => unreachable!("fences are a reclaimer's"),
        }
    }

    fn reclaimer_asked(
        &self,
        from: Node,
        job: JobId,
        epoch: Epoch,
        batch: Option<BatchId>,
        asked: Asked,
    ) -> Result<(), Unjustified> {
        if let Asked::Fence { epoch, batch, displaced } = asked {
            return self.fenced(from, job, epoch, batch, displaced);
        }
        let holding = self.holding(from, job, epoch);
        let lookups = || lookup_lines(holding);
        match asked {
            Asked::Renew => {
                let message = format!("{from} renewed {job} {epoch}: only a worker's grant is renewed");
                unjustified(Rule::WorkerActsOnItsGrant, &[], message)
            }
            Asked::Release => {
                let message = format!("{from} released {job} {epoch}: only a worker releases a grant");
                unjustified(Rule::WorkerReleasesOnlyWhatItDeclined, &[], message)
            }
            Asked::DeadLetter => {
                let message = format!("{from} dead-lettered {job} {epoch} at once: only a worker's dependency refuses");
                unjustified(Rule::WorkerDeadLettersOnlyAfterPermanentFailure, &[], message)
            }
            Asked::Requeue => {
                if holding.is_some_and(|holding| holding.empty_lookup(batch).is_some()) {
                    return Ok(());
                }
                let message =
                    format!("{from} requeued {job} {epoch}{} without a lookup there that found nothing", within(batch));
                unjustified(Rule::ReclaimerRequeuesOnlyOnEmptyLookup, &lookups(), message)
            }
            Asked::Complete(output) => {
                // `already_completed` names no batch: any lookup of this reclaim will do.
                let in_batch = batch.map(Some);
                if holding.is_some_and(|holding| holding.found(output, in_batch).is_some()) {
                    return Ok(());
                }
                let output = output.map_or("an output".to_string(), |output| output.to_string());
                let message = format!(
                    "{from} completed {job} {epoch}{} with {output}, but no lookup there found {output} alone",
                    within(batch)
                );
                unjustified(Rule::ReclaimerCompletesWithWhatItFound, &lookups(), message)
            }
            Asked::Quarantine(identities) => {
                if holding.is_some_and(|holding| holding.conflict(identities, batch).is_some()) {
                    return Ok(());
                }
                let named = identities.map_or(String::new(), |[found, rival]| format!(" as [{found}, {rival}]"));
                let message = format!(
                    "{from} quarantined {job} {epoch}{named}{} without a lookup there showing those outputs",
                    within(batch)
                );
                unjustified(Rule::ReclaimerQuarantinesWhatItFound, &lookups(), message)
            }
            Asked::Fence { .. } => unreachable!("handled above"),
        }
    }

    /// A fence of `job` at `epoch` in `batch`: the epoch the reclaimer expected, or, when
    /// `displaced`, the one the table says it displaced.
    fn fenced(&self, from: Node, job: JobId, epoch: Epoch, batch: BatchId, displaced: bool) -> Result<(), Unjustified> {
        let listings = self.listings.get(&batch).map(Vec::as_slice).unwrap_or_default();
        let listed = |epoch: Option<Epoch>| {
            listings.iter().find_map(|(line, leases)| {
                let shown = leases.iter().find(|lease| lease.job == job && epoch.is_none_or(|e| lease.epoch == e))?;
                Some((*line, shown.epoch))
            })
        };
        if listed(Some(epoch)).is_some() {
            return Ok(());
        }
        if let Some((line, expected)) = listed(None).filter(|_| displaced) {
            // The reclaimer fenced what it was shown; the table displaced another lease.
            let message = format!(
                "{from} fenced {job} {expected} as listed in {}, and the table displaced {epoch}: it should \
                 answer lost_race",
                show(batch)
            );
            return unjustified(Rule::FenceAnswer, &[Some(line)], message);
        }
        let earlier = listings.iter().map(|(line, _)| Some(*line)).collect::<Vec<_>>();
        let message = format!("{from} fenced {job} {epoch} in {}, whose listing did not show it", show(batch));
        unjustified(Rule::ReclaimerFencesWhatWasListed, &earlier, message)
    }

    fn batch_stopped(&self, batch: BatchId, job: JobId, identities: [OutputId; 2]) -> Result<(), Unjustified> {
        let answered = self.batch_jobs.get(&(batch, job)).and_then(|batch_job| batch_job.quarantine_answered);
        let reclaimer = Node::Reclaimer(batch.reclaimer.0);
        let shown = self
            .holdings
            .range((reclaimer, job, Epoch(0))..=(reclaimer, job, Epoch(u64::MAX)))
            .find_map(|(_, holding)| holding.conflict(Some(identities), Some(batch)));
        if answered.is_some() && shown.is_some() {
            return Ok(());
        }
        let [found, rival] = identities;
        let message = format!(
            "{} stopped for {job} on [{found}, {rival}] without {}",
            show(batch),
            if shown.is_none() { "a lookup there showing those outputs" } else { "an answer to its quarantine" }
        );
        unjustified(Rule::ReclaimerStopsAfterQuarantine, &[answered, shown.map(|looked| looked.line)], message)
    }

    /// Folds the entry at `line` into the evidence.
    pub fn absorb(&mut self, line: usize, entry: &Entry) {
        let node = entry.node;
        match &entry.event {
            Event::Granted { job, epoch, owner, attempt, .. } | Event::Regranted { job, epoch, owner, attempt, .. } => {
                self.at(*owner, *job, *epoch).granted.get_or_insert((line, *attempt));
            }
            Event::Reclaimed { job, new_epoch, reclaimer, batch, .. } => {
                self.at(*reclaimer, *job, *new_epoch).reclaimed.get_or_insert((line, *batch));
            }
            Event::Listed { batch, leases, .. } => {
                self.listings.entry(*batch).or_default().push((line, leases.clone()));
            }
            Event::LookedUp { from, job, epoch, found, rival, batch, .. } => {
                let looked = Looked { line, found: *found, rival: *rival, batch: *batch };
                self.at(*from, *job, *epoch).looked.push(looked);
            }
            Event::Executing { job, epoch, .. } => {
                self.at(node, *job, *epoch).executing.get_or_insert(line);
            }
            Event::DependencyFailed { from, job, epoch, permanent, .. } => {
                let holding = self.at(*from, *job, *epoch);
                holding.dependency_failed.get_or_insert(line);
                if *permanent {
                    holding.refused_for_good.get_or_insert(line);
                }
            }
            Event::EffectApplied { from, job, epoch, output, .. } => {
                self.at(*from, *job, *epoch).effects.entry(*output).or_insert(line);
            }
            Event::EffectRejected { from, job, epoch, output, reason, .. } => {
                let holding = self.at(*from, *job, *epoch);
                match reason {
                    EffectRejectReason::AlreadyApplied => {
                        holding.effects.entry(*output).or_insert(line);
                    }
                    EffectRejectReason::Fenced => {
                        holding.effect_fenced.get_or_insert(line);
                    }
                    EffectRejectReason::Conflict => {
                        holding.effect_conflict.get_or_insert(line);
                    }
                }
            }
            Event::Adopted { job, output, epoch, .. } => {
                self.at(node, *job, *epoch).adopted.entry(*output).or_insert(line);
            }
            Event::Refused { from, job, epoch, request: RefusedRequest::Renew, .. } => {
                self.at(*from, *job, *epoch).renew_refused.get_or_insert(line);
            }
            Event::Refused { job, request: RefusedRequest::Quarantine, batch: Some(batch), .. }
            | Event::Terminal { job, outcome: OutcomeKind::Quarantined, batch: Some(batch), .. } => {
                self.batch_jobs.entry((*batch, *job)).or_default().quarantine_answered.get_or_insert(line);
            }
            Event::Abandoned { job, epoch, why } => {
                let holding = self.at(node, *job, *epoch);
                holding.abandoned.get_or_insert(line);
                if *why == AbandonReason::Declined {
                    holding.declined.get_or_insert(line);
                }
            }
            _ => {}
        }
    }

    fn at(&mut self, node: Node, job: JobId, epoch: Epoch) -> &mut Holding {
        self.holdings.entry((node, job, epoch)).or_default()
    }
}

/// The lines of every lookup the holder got, to show beside a decision they do not justify.
fn lookup_lines(holding: Option<&Holding>) -> Vec<Option<usize>> {
    holding.map_or_else(Vec::new, |holding| holding.looked.iter().map(|looked| Some(looked.line)).collect())
}

fn show(batch: BatchId) -> String {
    format!("r{}#{}", batch.reclaimer.0, batch.seq)
}

fn within(batch: Option<BatchId>) -> String {
    batch.map_or(String::new(), |batch| format!(" in {}", show(batch)))
}
