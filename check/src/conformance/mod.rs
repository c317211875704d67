//! `always` conformance: every decision in the history is the one a small, plain, sequential
//! specification makes from the same inputs.
//!
//! The checker replays the history through its own model of the table and the ledger
//! (`spec`) and through the decision rules of workers and reclaimers (`decisions`), and
//! fails at the first line where the implementation decided otherwise. It reads the history
//! only, and the model is written apart from `lease-core`: it never calls the table, the ledger,
//! the worker or the reclaimer, only their plain ids.
//!
//! Each line is judged in this order:
//!
//! 1. a decision of a node (a request it sent, or an action it took) must be justified by an
//!    answer it got earlier; a request no answer called for is the root cause, so it is judged
//!    before the answer to it;
//! 2. a table or ledger line must show the answer the rules give to the request it answers, from
//!    the model's state before the line.
//!
//! Then the model takes in the answer the line shows, so it follows the implementation even past
//! a violation, and the evidence absorbs the line.
//!
//! A violation names its [`Rule`] first (`renew_answer: ...`), then what the rules expected and
//! what the history shows; [`Rule::of`] reads the rule back. Until the `run` line gives the
//! limits, nothing is judged.
//!
//! Cost: each line touches a few `BTreeMap` entries; a listing reads at most `batch_max + 1`
//! expiries. Everything is ordered, so a history is judged the same way every time.

mod decisions;
mod spec;
#[cfg(test)]
mod tests;

use super::{Invariant, Violation};
use lease_history::{Entry, Event};
use std::fmt;

/// A rule of the specification, by its stable snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// The table's answer to an enqueue: `arrived` with the backlog, `rejected` at capacity, or
    /// `duplicate` for a known job.
    ArrivalAnswer,
    /// The table's answer to an acquire: the oldest queued job under the next epoch, or
    /// `acquire_empty` when none is queued.
    GrantOldestQueued,
    /// `regranted` only repeats the owner's live lease, unchanged; `acquire_spent` names the
    /// owner's last grant, once it no longer stands.
    RegrantAnswer,
    /// The table's answer to a renewal.
    RenewAnswer,
    /// The table's answer to a completion.
    CompleteAnswer,
    /// The table's answer to a requeue: requeued, or dead-lettered out of attempts.
    RequeueAnswer,
    /// The table's answer to a release: the grant undone, the job at the head of the queue.
    ReleaseAnswer,
    /// The table's answer to a worker's dead-letter: the job ended with the attempts it spent,
    /// if the worker's epoch holds its live lease; refused otherwise.
    DeadLetterAnswer,
    /// The table's answer to a quarantine.
    QuarantineAnswer,
    /// A listing shows exactly the first `batch_max` expired leases, earliest first.
    ListingAnswer,
    /// The table's answer to a reclaimer's fence.
    FenceAnswer,
    /// The ledger's answer to a lookup.
    LedgerLookupAnswer,
    /// The ledger's answer to an apply.
    LedgerApplyAnswer,
    /// The dependency fails only a call the worker executed.
    DependencyAnswersAnExecute,
    /// A worker asks about, and executes, only a lease it was granted.
    WorkerActsOnItsGrant,
    /// A worker executes on a first attempt, or after a lookup that found nothing.
    WorkerExecutesFreshOrAfterEmptyLookup,
    /// A worker adopts only an output its lookup found alone.
    WorkerAdoptsWhatItFound,
    /// A worker completes only with an output the ledger took from it, or that it adopted.
    WorkerCompletesWithItsOutput,
    /// A worker requeues only after its dependency failed.
    WorkerRequeuesOnlyAfterDependencyFailed,
    /// A worker dead-letters a job only after its dependency refused it for good.
    WorkerDeadLettersOnlyAfterPermanentFailure,
    /// A worker releases only a grant it declined, or one it gave up (at shutdown, or a
    /// buffered job whose lease its machine gave up while it waited) before it executed under
    /// it: a release undoes the grant's attempt.
    WorkerReleasesOnlyWhatItDeclined,
    /// A worker abandons a lease only for the reason an answer gave it.
    WorkerAbandonsForItsReason,
    /// After a worker abandons a lease, it never executes or adopts for it again.
    WorkerStaysAwayAfterAbandon,
    /// A reclaimer fences only a lease its batch's listing showed.
    ReclaimerFencesWhatWasListed,
    /// A reclaimer looks up only a job it reclaimed, in that batch, under the new epoch.
    ReclaimerLooksUpWhatItReclaimed,
    /// A reclaimer requeues (or dead-letters) only after a lookup that found nothing.
    ReclaimerRequeuesOnlyOnEmptyLookup,
    /// A reclaimer adopts and completes only with an output its lookup found alone.
    ReclaimerCompletesWithWhatItFound,
    /// A reclaimer quarantines only the two outputs its lookup showed.
    ReclaimerQuarantinesWhatItFound,
    /// A reclaimer stops a batch only on the conflict it quarantined, once answered.
    ReclaimerStopsAfterQuarantine,
}

impl Rule {
    /// Every rule, table and ledger answers first, then the decisions of nodes.
    pub const ALL: [Rule; 29] = [
        Rule::ArrivalAnswer,
        Rule::GrantOldestQueued,
        Rule::RegrantAnswer,
        Rule::RenewAnswer,
        Rule::CompleteAnswer,
        Rule::RequeueAnswer,
        Rule::ReleaseAnswer,
        Rule::DeadLetterAnswer,
        Rule::QuarantineAnswer,
        Rule::ListingAnswer,
        Rule::FenceAnswer,
        Rule::LedgerLookupAnswer,
        Rule::LedgerApplyAnswer,
        Rule::DependencyAnswersAnExecute,
        Rule::WorkerActsOnItsGrant,
        Rule::WorkerExecutesFreshOrAfterEmptyLookup,
        Rule::WorkerAdoptsWhatItFound,
        Rule::WorkerCompletesWithItsOutput,
        Rule::WorkerRequeuesOnlyAfterDependencyFailed,
        Rule::WorkerDeadLettersOnlyAfterPermanentFailure,
        Rule::WorkerReleasesOnlyWhatItDeclined,
        Rule::WorkerAbandonsForItsReason,
        Rule::WorkerStaysAwayAfterAbandon,
        Rule::ReclaimerFencesWhatWasListed,
        Rule::ReclaimerLooksUpWhatItReclaimed,
        Rule::ReclaimerRequeuesOnlyOnEmptyLookup,
        Rule::ReclaimerCompletesWithWhatItFound,
        Rule::ReclaimerQuarantinesWhatItFound,
        Rule::ReclaimerStopsAfterQuarantine,
    ];

    /// The stable snake_case name, which opens every conformance violation's message.
    pub fn name(self) -> &'static str {
        match self {
            Rule::ArrivalAnswer => "arrival_answer",
            Rule::GrantOldestQueued => "grant_oldest_queued",
            Rule::RegrantAnswer => "regrant_answer",
            Rule::RenewAnswer => "renew_answer",
            Rule::CompleteAnswer => "complete_answer",
            Rule::RequeueAnswer => "requeue_answer",
            Rule::ReleaseAnswer => "release_answer",
            Rule::DeadLetterAnswer => "dead_letter_answer",
            Rule::QuarantineAnswer => "quarantine_answer",
            Rule::ListingAnswer => "listing_answer",
            Rule::FenceAnswer => "fence_answer",
            Rule::LedgerLookupAnswer => "ledger_lookup_answer",
            Rule::LedgerApplyAnswer => "ledger_apply_answer",
            Rule::DependencyAnswersAnExecute => "dependency_answers_an_execute",
            Rule::WorkerActsOnItsGrant => "worker_acts_on_its_grant",
            Rule::WorkerExecutesFreshOrAfterEmptyLookup => "worker_executes_fresh_or_after_empty_lookup",
            Rule::WorkerAdoptsWhatItFound => "worker_adopts_what_it_found",
            Rule::WorkerCompletesWithItsOutput => "worker_completes_with_its_output",
            Rule::WorkerRequeuesOnlyAfterDependencyFailed => "worker_requeues_only_after_dependency_failed",
            Rule::WorkerDeadLettersOnlyAfterPermanentFailure => "worker_dead_letters_only_after_permanent_failure",
            Rule::WorkerReleasesOnlyWhatItDeclined => "worker_releases_only_what_it_declined",
            Rule::WorkerAbandonsForItsReason => "worker_abandons_for_its_reason",
            Rule::WorkerStaysAwayAfterAbandon => "worker_stays_away_after_abandon",
            Rule::ReclaimerFencesWhatWasListed => "reclaimer_fences_what_was_listed",
            Rule::ReclaimerLooksUpWhatItReclaimed => "reclaimer_looks_up_what_it_reclaimed",
            Rule::ReclaimerRequeuesOnlyOnEmptyLookup => "reclaimer_requeues_only_on_empty_lookup",
            Rule::ReclaimerCompletesWithWhatItFound => "reclaimer_completes_with_what_it_found",
            Rule::ReclaimerQuarantinesWhatItFound => "reclaimer_quarantines_what_it_found",
            Rule::ReclaimerStopsAfterQuarantine => "reclaimer_stops_after_quarantine",
        }
    }

    /// The rule a conformance violation names, or `None` for another invariant's violation.
    pub fn of(violation: &Violation) -> Option<Rule> {
        if violation.invariant != Invariant::Conformance {
            return None;
        }
        let (name, _) = violation.message.split_once(':')?;
        Rule::ALL.into_iter().find(|rule| rule.name() == name)
    }

    /// The rule that judges the table's answer to `request`.
    fn of_table(request: spec::TableRequest) -> Rule {
        use spec::TableRequest as R;
        match request {
            R::Enqueue { .. } => Rule::ArrivalAnswer,
            R::Acquire { .. } => Rule::GrantOldestQueued,
            R::Reacquire { .. } | R::SpentCopy { .. } => Rule::RegrantAnswer,
            R::Renew { .. } => Rule::RenewAnswer,
            R::Complete { .. } => Rule::CompleteAnswer,
            R::Requeue { .. } => Rule::RequeueAnswer,
            R::Release { .. } => Rule::ReleaseAnswer,
            R::DeadLetter { .. } => Rule::DeadLetterAnswer,
            R::Quarantine { .. } => Rule::QuarantineAnswer,
            R::List => Rule::ListingAnswer,
            R::Fence { .. } => Rule::FenceAnswer,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The conformance checker: the model, the evidence, and the run's limits. See the module doc.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conformance {
    limits: Option<spec::Limits>,
    /// The history was pruned of ended jobs (its run line's `pruned_before_us`): an arrival's
    /// backlog, and a rejection for a full queue, count jobs the history no longer holds, and are
    /// judged as bounds (whether the job was known is judged as ever).
    pruned: bool,
    table: spec::Table,
    ledger: spec::Ledger,
    decisions: decisions::Decisions,
}

impl Conformance {
    /// Judges the entry at `line` against the model and the evidence before it.
    pub(crate) fn check(&self, line: usize, entry: &Entry) -> Result<(), Violation> {
        let Some(limits) = &self.limits else { return Ok(()) };
        let job = entry.job();
        if let Err(unjustified) = self.decisions.check(entry) {
            let message = format!("{}: {}", unjustified.rule, unjustified.message);
            return Err(Violation::at(Invariant::Conformance, job, &unjustified.earlier, line, message));
        }
        if let Some((request, shown)) = spec::read_table(&entry.event) {
            let (expected, because) = self.table.answer(limits, entry.t_us, request);
            // Pruned jobs were unfinished once: an arrival may count more than the history holds,
            // or find the queue full of them. Whether the job was known is judged as ever.
            let counts_the_pruned = self.pruned
                && match (&expected, &shown) {
                    (spec::TableAnswer::Arrived { backlog: held }, spec::TableAnswer::Arrived { backlog }) => {
                        backlog >= held
                    }
                    (spec::TableAnswer::Arrived { .. }, spec::TableAnswer::Rejected) => true,
                    _ => false,
                };
            if expected != shown && !counts_the_pruned {
                let rule = Rule::of_table(request);
                let message = format!(
                    "{rule}: to {request} at {t}us the table should answer {expected}; the history shows {shown}",
                    t = entry.t_us
                );
                let mut earlier = vec![because];
                // A listing rests on every lease either side shows: point at what set each one.
                for listing in [&expected, &shown] {
                    if let spec::TableAnswer::Listed(leases) = listing {
                        earlier.extend(leases.iter().map(|lease| self.table.line_of(lease.job)));
                    }
                }
                return Err(Violation::at(Invariant::Conformance, request.job().or(job), &earlier, line, message));
            }
        }
        if let Some((request, shown)) = spec::read_ledger(&entry.event) {
            let (expected, because) = self.ledger.answer(request);
            if expected != shown {
                let rule = match request {
                    spec::LedgerRequest::Lookup { .. } => Rule::LedgerLookupAnswer,
                    spec::LedgerRequest::Apply { .. } => Rule::LedgerApplyAnswer,
                };
                let message =
                    format!("{rule}: to {request} the ledger should answer {expected}; the history shows {shown}");
                return Err(Violation::at(Invariant::Conformance, job, &[because], line, message));
            }
        }
        Ok(())
    }

    /// Folds the entry at `line` into the model and the evidence, whether or not it broke a rule.
    pub(crate) fn absorb(&mut self, line: usize, entry: &Entry) {
        if let Event::Run { batch_max, capacity, lease_ttl_us, attempts_max, pruned_before_us, .. } = &entry.event {
            self.pruned = pruned_before_us.is_some();
            let limits = spec::Limits {
                batch_max: *batch_max,
                capacity: *capacity,
                lease_ttl_us: *lease_ttl_us,
                attempts_max: *attempts_max,
            };
            self.limits = Some(limits);
        }
        if let Some((request, shown)) = spec::read_table(&entry.event) {
            self.table.take(line, request, &shown);
        }
        if let Some((request, shown)) = spec::read_ledger(&entry.event) {
            self.ledger.take(line, request, shown);
        }
        self.decisions.absorb(line, entry);
    }
}
