//! Invariant checkers: they read a run's history one entry at a time and name the first broken
//! rule.
//!
//! The checkers read the history only (the contract in [`lease_history`]), never core
//! internals, so they judge the implementation from outside, as a Jepsen checker would. Each
//! property has its own module and is marked:
//!
//! - `always` (safety, checked on every entry): [`one_terminal`], [`no_unexpired_reclaim`],
//!   [`no_duplicate_effect`], [`adopt_before_repeat`], [`fencing`], [`consistency`],
//!   [`bounded_batch`], [`bounded_queue`], [`self_fencing`], [`conformance`];
//! - `eventually` (liveness, judged after the faults heal): [`liveness`], the three that say
//!   no work was lost, [`useful_grants`], [`honest_dead_letters`] and [`heartbeats`] (a worker
//!   that stays up and connected keeps its leases, judged in the fault phase too), and
//!   [`back_off`] (a reclaimer that gave a batch up waits before it scans again). These four
//!   follow the history line by line like the safety checkers, but a failure of theirs does not
//!   stop the world: it is kept, and the liveness check reports it (exit status 2);
//! - `sometimes` (coverage, counted so a sweep shows the interesting situations happened):
//!   [`coverage`].
//!
//! How one entry is observed ([`Checkers::observe`]):
//!
//! 1. every safety checker judges the entry against the facts of the history *before* it, in a
//!    fixed order, and the first violation is returned. The order puts root causes before their
//!    consequences: `one_terminal`, `no_unexpired_reclaim`, `fencing`, `self_fencing`,
//!    `bounded_batch`, `no_duplicate_effect`, `adopt_before_repeat`, `consistency`,
//!    `bounded_queue`, and last `conformance`, which replays every decision through a plain
//!    specification: the other invariants name the harm, conformance the first divergence
//!    from the spec that no other invariant saw. So a stale worker that executes is reported as `self_fencing`, and a
//!    reclaimer that completes a conflicting job as `bounded_batch`, not as the `consistency`
//!    failure that follows from it;
//! 2. the coverage counters look at the entry, and the lost-work checkers fold it in;
//! 3. the facts the history has established (each job's epoch and lease expiries, each
//!    operation's fence and applied output; module `facts`) and each checker's own memory absorb
//!    the entry, whether or not it broke a rule, so the checkers stay coherent if the caller goes
//!    on.
//!
//! Cost: each entry touches a handful of `BTreeMap` entries, O(log n); nothing is cloned and no
//! string is formatted unless a violation is found. Everything is ordered (`BTreeMap`,
//! `BTreeSet`), so a history is judged the same way every time.
//!
//! The `run` line must come first: it sets `batch_max` and `capacity`. Until it is seen both are
//! unbounded (`usize::MAX`). The runner always feeds it first, and [`lease_history::parse_jsonl`]
//! refuses a history without it.

pub mod adopt_before_repeat;
pub mod back_off;
pub mod bounded_batch;
pub mod bounded_queue;
pub mod conformance;
pub mod consistency;
pub mod coverage;
mod facts;
pub mod fencing;
pub mod heartbeats;
pub mod honest_dead_letters;
pub mod liveness;
pub mod no_duplicate_effect;
pub mod no_unexpired_reclaim;
pub mod one_terminal;
pub mod self_fencing;
mod strikes;
pub mod useful_grants;
pub mod windows;

pub mod cli;
pub mod explain;
pub mod figures;
pub mod provenance;
pub mod report;

#[cfg(test)]
pub(crate) mod fixtures;

pub use coverage::Coverage;

use lease_core::JobId;
use lease_history::{Entry, Event, OutcomeKind};
use std::fmt;
use std::str::FromStr;

/// A property of every run, by its stable snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Invariant {
    /// `always`: no job reaches a terminal outcome twice.
    OneTerminal,
    /// `always`: a lease is reclaimed only at or after its current expiry, renewals included.
    NoUnexpiredReclaim,
    /// `always`: at most one applied output per operation.
    NoDuplicateEffect,
    /// `always`: no effect is executed for an operation whose output was, or should have been,
    /// adopted.
    AdoptBeforeRepeat,
    /// `always`: no renewal, completion, requeue, dead-letter, quarantine, reclaim or applied
    /// effect is accepted with a stale epoch, or (for a requeue or terminal outcome) without the
    /// live lease.
    Fencing,
    /// `always`: a completed job's output is the output the ledger holds for its operation.
    Consistency,
    /// `always`: no batch takes more than `batch_max` leases, or touches anything after a conflict.
    BoundedBatch,
    /// `always`: accepted, non-terminal jobs never exceed `capacity`.
    BoundedQueue,
    /// `always`: no worker starts an effect after its lease expired by the table's clock.
    SelfFencing,
    /// `always`: every answer of the table and the ledger, and every decision of a worker or a
    /// reclaimer, is the one a plain sequential specification makes from the same inputs.
    Conformance,
    /// `eventually`: after the faults heal, every accepted job reaches a terminal outcome.
    Liveness,
    /// `eventually`: every grant is acted on before its lease expires, unless a fault named in the
    /// history lost it.
    UsefulGrants,
    /// `eventually`: a job dead-letters only with evidence that each of its attempts was genuine.
    HonestDeadLetters,
    /// `eventually`: a worker that stays up, unpaused and connected keeps every lease it holds by
    /// its heartbeats, fault phase included.
    HeartbeatsKeepLeases,
    /// `eventually`: a reclaimer that gave a batch up waits before it lists again.
    GiveUpBacksOff,
}

impl Invariant {
    /// The safety (`always`) invariants, in declaration order.
    pub const SAFETY: [Invariant; 10] = [
        Invariant::OneTerminal,
        Invariant::NoUnexpiredReclaim,
        Invariant::NoDuplicateEffect,
        Invariant::AdoptBeforeRepeat,
        Invariant::Fencing,
        Invariant::Consistency,
        Invariant::BoundedBatch,
        Invariant::BoundedQueue,
        Invariant::SelfFencing,
        Invariant::Conformance,
    ];

    /// Every invariant, safety first.
    pub const ALL: [Invariant; 15] = [
        Invariant::OneTerminal,
        Invariant::NoUnexpiredReclaim,
        Invariant::NoDuplicateEffect,
        Invariant::AdoptBeforeRepeat,
        Invariant::Fencing,
        Invariant::Consistency,
        Invariant::BoundedBatch,
        Invariant::BoundedQueue,
        Invariant::SelfFencing,
        Invariant::Conformance,
        Invariant::Liveness,
        Invariant::UsefulGrants,
        Invariant::HonestDeadLetters,
        Invariant::HeartbeatsKeepLeases,
        Invariant::GiveUpBacksOff,
    ];

    /// The stable snake_case name, as in histories, reports and the command line.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::OneTerminal => "one_terminal",
            Invariant::NoUnexpiredReclaim => "no_unexpired_reclaim",
            Invariant::NoDuplicateEffect => "no_duplicate_effect",
            Invariant::AdoptBeforeRepeat => "adopt_before_repeat",
            Invariant::Fencing => "fencing",
            Invariant::Consistency => "consistency",
            Invariant::BoundedBatch => "bounded_batch",
            Invariant::BoundedQueue => "bounded_queue",
            Invariant::SelfFencing => "self_fencing",
            Invariant::Conformance => "conformance",
            Invariant::Liveness => "liveness",
            Invariant::UsefulGrants => "useful_grants",
            Invariant::HonestDeadLetters => "honest_dead_letters",
            Invariant::HeartbeatsKeepLeases => "heartbeats_keep_leases",
            Invariant::GiveUpBacksOff => "give_up_backs_off",
        }
    }

    /// Whether this is a safety (`always`) invariant rather than liveness (`eventually`).
    pub fn is_safety(self) -> bool {
        !matches!(
            self,
            Invariant::Liveness
                | Invariant::UsefulGrants
                | Invariant::HonestDeadLetters
                | Invariant::HeartbeatsKeepLeases
                | Invariant::GiveUpBacksOff
        )
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown invariant name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown invariant {0:?}; known invariants: {known}", known = Invariant::ALL.map(Invariant::name).join(", "))]
pub struct UnknownInvariant(pub String);

impl FromStr for Invariant {
    type Err = UnknownInvariant;
    fn from_str(s: &str) -> Result<Invariant, UnknownInvariant> {
        Invariant::ALL
            .into_iter()
            .find(|invariant| invariant.name() == s)
            .ok_or_else(|| UnknownInvariant(s.to_string()))
    }
}

/// A broken invariant, with the history lines that show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// The invariant that broke.
    pub invariant: Invariant,
    /// The job it broke for, if one.
    pub job: Option<JobId>,
    /// What happened, for a person.
    pub message: String,
    /// 1-based history line numbers that show it, ascending, the violating line last.
    pub lines: Vec<usize>,
}

impl Violation {
    /// A violation revealed at `line`; `earlier` are the lines that set up the broken fact (absent
    /// ones are skipped). Only called once a rule broke, so the allocation is off the hot path.
    pub(crate) fn at(
        invariant: Invariant,
        job: Option<JobId>,
        earlier: &[Option<usize>],
        line: usize,
        message: String,
    ) -> Violation {
        let mut lines = earlier.iter().flatten().copied().filter(|&earlier| earlier < line).collect::<Vec<_>>();
        lines.sort_unstable();
        lines.dedup();
        lines.push(line);
        Violation { invariant, job, message, lines }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated", self.invariant)?;
        if let Some(job) = self.job {
            write!(f, " for {job}")?;
        }
        write!(f, ": {}", self.message)?;
        let mut lines = self.lines.iter();
        if let Some(first) = lines.next() {
            write!(f, " (history lines {first}")?;
            for line in lines {
                write!(f, ", {line}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// The snake_case name of an outcome, as the history spells it.
pub(crate) fn outcome_name(outcome: OutcomeKind) -> &'static str {
    match outcome {
        OutcomeKind::Completed => "completed",
        OutcomeKind::DeadLettered => "dead_lettered",
        OutcomeKind::Quarantined => "quarantined",
    }
}

/// Every checker of a run, fed the history as it grows. See the module doc for the order.
#[derive(Debug, Clone)]
pub struct Checkers {
    facts: facts::Facts,
    lookups: adopt_before_repeat::Lookups,
    batches: bounded_batch::Batches,
    conformance: conformance::Conformance,
    situations: coverage::Situations,
    useful_grants: useful_grants::UsefulGrants,
    dead_letters: honest_dead_letters::DeadLetters,
    heartbeats: heartbeats::Heartbeats,
    back_off: back_off::BackOff,
    last_line: usize,
}

impl Default for Checkers {
    fn default() -> Checkers {
        Checkers::new()
    }
}

impl Checkers {
    /// Checkers that have seen nothing yet; limits are unbounded until the `run` line.
    pub fn new() -> Checkers {
        Checkers {
            facts: facts::Facts::new(),
            lookups: adopt_before_repeat::Lookups::default(),
            batches: bounded_batch::Batches::default(),
            conformance: conformance::Conformance::default(),
            situations: coverage::Situations::default(),
            useful_grants: useful_grants::UsefulGrants::default(),
            dead_letters: honest_dead_letters::DeadLetters::default(),
            heartbeats: heartbeats::Heartbeats::default(),
            back_off: back_off::BackOff::default(),
            last_line: 0,
        }
    }

    /// Feeds the entry at 1-based history line `line`; returns the first safety violation it
    /// reveals. Lines must strictly increase. O(log n) per entry; see the module doc.
    pub fn observe(&mut self, line: usize, entry: &Entry) -> Result<(), Violation> {
        assert!(line > self.last_line, "history line {line} fed after line {}", self.last_line);
        self.last_line = line;
        let verdict = self.judge(line, entry);
        self.situations.observe(&self.facts, entry);
        self.useful_grants.absorb(line, entry);
        self.dead_letters.absorb(line, entry);
        self.heartbeats.absorb(line, entry);
        self.back_off.absorb(line, entry);
        self.lookups.absorb(line, entry);
        self.batches.absorb(&self.facts, line, entry);
        self.conformance.absorb(line, entry);
        self.facts.absorb(line, entry);
        verdict
    }

    fn judge(&self, line: usize, entry: &Entry) -> Result<(), Violation> {
        let facts = &self.facts;
        one_terminal::check(facts, line, entry)?;
        no_unexpired_reclaim::check(facts, line, entry)?;
        fencing::check(facts, line, entry)?;
        self_fencing::check(facts, line, entry)?;
        self.batches.check(facts, line, entry)?;
        no_duplicate_effect::check(facts, line, entry)?;
        self.lookups.check(facts, line, entry)?;
        consistency::check(facts, line, entry)?;
        bounded_queue::check(facts, line, entry)?;
        self.conformance.check(line, entry)
    }

    /// Liveness, after the faults healed, at `now_us`. Lost work is reported first, as the
    /// cause of what follows: the earliest of an unused grant no fault excuses
    /// ([`useful_grants`]) and a dead-letter without evidence ([`honest_dead_letters`]) found so
    /// far; then a grant no fault excuses whose lease expired unused by `now_us`; then
    /// [`liveness`]: every accepted (`arrived`) job has a `terminal` entry (the message lists up
    /// to 5 unfinished jobs and says how many there are).
    pub fn check_liveness(&self, now_us: u64) -> Result<(), Violation> {
        let lost = [self.useful_grants.first(), self.dead_letters.check().err()];
        if let Some(first) = lost.into_iter().flatten().min_by_key(|violation| violation.lines.last().copied()) {
            return Err(first);
        }
        // A lease its worker's heartbeats did not keep, after the work it cost: a grant unused or
        // a dead-letter without evidence says what the customer lost, this says why.
        if let Some(first) = self.heartbeats.first() {
            return Err(first);
        }
        // A reclaimer that scanned again at once after it gave up: nothing lost, but a fleet of
        // them storms the table through an outage.
        if let Some(first) = self.back_off.first() {
            return Err(first);
        }
        self.useful_grants.check(now_us)?;
        self.heartbeats.check(now_us)?;
        liveness::check(&self.facts, now_us)
    }

    /// Grants that expired unused (the `wasted_grants` figures), counted as the history was
    /// observed, with those whose lease had expired by `end_us`: over the whole run, and among
    /// those granted after the heal. The same as [`useful_grants::wasted`] of the history.
    pub fn wasted_grants(&self, end_us: u64) -> (u64, u64) {
        self.useful_grants.wasted_by(end_us)
    }

    /// Accepted jobs without a terminal outcome yet.
    pub fn unfinished(&self) -> usize {
        self.facts.backlog()
    }

    /// Coverage counts so far.
    pub fn coverage(&self) -> &Coverage {
        self.situations.coverage()
    }
}

/// Checks a whole history (e.g. one read from a file): all safety invariants line by line, then
/// liveness, at the time of the last entry, if the history contains a `faults_healed` entry.
/// Returns the coverage on success. Line numbers are positions in `entries`, from 1 (a file's own
/// line numbers, unless it has blank lines, which [`lease_history::parse_jsonl`] skips).
pub fn check_history(entries: &[Entry]) -> Result<Coverage, Violation> {
    let mut checkers = Checkers::new();
    let mut healed = false;
    for (index, entry) in entries.iter().enumerate() {
        checkers.observe(index + 1, entry)?;
        healed |= matches!(entry.event, Event::FaultsHealed {});
    }
    if healed {
        let now_us = entries.last().map_or(0, |entry| entry.t_us);
        checkers.check_liveness(now_us)?;
    }
    Ok(checkers.coverage().clone())
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use lease_history::{parse_jsonl, to_jsonl};

    // Every invariant's name parses back to it, prints as itself, and matches its serde name.
    #[test]
    fn invariant_names_round_trip() {
        for invariant in Invariant::ALL {
            assert_eq!(invariant.name().parse::<Invariant>(), Ok(invariant));
            assert_eq!(invariant.to_string(), invariant.name());
            let json = serde_json::to_string(&invariant).unwrap();
            assert_eq!(json, format!("\"{}\"", invariant.name()));
        }
        assert!("no_such_rule".parse::<Invariant>().is_err());
    }

    // SAFETY holds exactly the ten `always` invariants, and only liveness is not safety.
    #[test]
    fn safety_lists_every_always_invariant() {
        assert_eq!(Invariant::SAFETY.len(), 10);
        assert!(Invariant::SAFETY.contains(&Invariant::Conformance));
        assert!(Invariant::SAFETY.iter().all(|invariant| invariant.is_safety()));
        let eventually = [
            Invariant::Liveness,
            Invariant::UsefulGrants,
            Invariant::HonestDeadLetters,
            Invariant::HeartbeatsKeepLeases,
            Invariant::GiveUpBacksOff,
        ];
        for invariant in Invariant::ALL {
            assert_eq!(invariant.is_safety(), !eventually.contains(&invariant), "{invariant}");
            assert_eq!(Invariant::SAFETY.contains(&invariant), invariant.is_safety(), "{invariant}");
        }
    }

    // A violation prints its invariant, job, message and lines on one line.
    #[test]
    fn violation_display_names_everything() {
        let violation = Violation::at(Invariant::Fencing, Some(J1), &[Some(9), None, Some(3)], 12, "x".into());
        assert_eq!(violation.lines, vec![3, 9, 12]);
        assert_eq!(violation.to_string(), "fencing violated for j1: x (history lines 3, 9, 12)");
    }

    // The crash-after-effect story passes every safety check, and liveness once healed.
    #[test]
    fn correct_story_passes() {
        let mut story = crash_after_effect_story();
        story.at(2_000).faults_healed();
        let coverage = check_history(&story.entries).expect("a correct history");
        assert_eq!(coverage.get("crash_after_effect_adopted"), 1);
    }

    // A history survives a JSONL round trip with the same verdict, for a pass and for a failure.
    #[test]
    fn json_round_trip_keeps_the_verdict() {
        let mut story = crash_after_effect_story();
        story.at(2_000).faults_healed();
        let mut broken = crash_after_effect_story();
        broken.at(1_100).dead_lettered(J1, E2, 1, None);
        for history in [story.entries, broken.entries] {
            let parsed = parse_jsonl(&to_jsonl(&history)).expect("own output parses");
            assert_eq!(parsed, history);
            assert_eq!(check_history(&parsed), check_history(&history));
        }
    }

    // Checkers fed one entry at a time agree with check_history, and count unfinished jobs.
    #[test]
    fn incremental_observation_tracks_unfinished_jobs() {
        let story = crash_after_effect_story();
        let mut checkers = Checkers::new();
        for (index, entry) in story.entries.iter().enumerate() {
            checkers.observe(index + 1, entry).expect("a correct history");
            let expected = if index + 1 >= 2 && index + 1 < STORY_TERMINAL { 1 } else { 0 };
            assert_eq!(checkers.unfinished(), expected, "after line {}", index + 1);
        }
        assert_eq!(checkers.check_liveness(5_000), Ok(()));
    }

    // Feeding lines out of order is the caller's bug, and it is caught.
    #[test]
    #[should_panic(expected = "fed after line")]
    fn lines_must_increase() {
        let story = crash_after_effect_story();
        let mut checkers = Checkers::new();
        checkers.observe(2, &story.entries[0]).unwrap();
        checkers.observe(2, &story.entries[1]).unwrap();
    }
}
