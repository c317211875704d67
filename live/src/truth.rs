//! The ground truth: what the dependency stub performed, against what the history says.
//!
//! The stub counts, per operation, the effects it performed (the output it produced) and the calls
//! it took. The history must agree: every output the ledger took (`effect_applied`, or taken as
//! `already_applied`) and every completed job's output is the one the stub produced for that
//! operation (no output recorded without its effect); no operation was performed twice with
//! different outputs; every failure the stub dealt is on the history as `dependency_failed`; and
//! no call reached the stub without an `executing` line before it.

use super::stub::Truth;
use lease_history::{EffectRejectReason, Entry, Event, Node, OutcomeKind};
use std::collections::BTreeMap;

/// How the history and the stub's counts compare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Agreement {
    /// Operations the stub was called for.
    pub ops: usize,
    /// Effects it performed.
    pub effects: u64,
    /// Calls it took.
    pub calls: u64,
    /// Calls it failed.
    pub failed: u64,
    /// Effects performed whose output no ledger line took (a stale caller's, fenced; the next
    /// holder's call then records the same output, as the stub is idempotent).
    pub unrecorded: u64,
    /// Every disagreement, for a person.
    pub problems: Vec<String>,
}

impl Agreement {
    /// Whether the history agrees with the stub.
    pub fn holds(&self) -> bool {
        self.problems.is_empty()
    }
}

#[derive(Default)]
struct Seen {
    executing: u64,
    failed: u64,
    outputs: Vec<u64>,
}

/// Compares `entries` with `truth`.
pub fn compare(entries: &[Entry], truth: &Truth) -> Agreement {
    let mut seen: BTreeMap<(u64, u32), Seen> = BTreeMap::new();
    for entry in entries {
        match &entry.event {
            Event::Executing { op, .. } => seen.entry((op.job.0, op.step)).or_default().executing += 1,
            Event::DependencyFailed { op, .. } => seen.entry((op.job.0, op.step)).or_default().failed += 1,
            Event::EffectApplied { from, op, output, .. } if *from != Node::Ledger => {
                seen.entry((op.job.0, op.step)).or_default().outputs.push(output.0)
            }
            Event::EffectRejected { op, output, reason: EffectRejectReason::AlreadyApplied, .. } => {
                seen.entry((op.job.0, op.step)).or_default().outputs.push(output.0)
            }
            Event::Terminal { job, outcome: OutcomeKind::Completed, output: Some(output), .. } => {
                seen.entry((job.0, 0)).or_default().outputs.push(output.0)
            }
            _ => {}
        }
    }
    let mut agreement = Agreement { ops: truth.ops.len(), ..Agreement::default() };
    let counts: BTreeMap<(u64, u32), _> = truth.ops.iter().map(|count| ((count.job, count.step), count)).collect();
    for count in &truth.ops {
        let op = format!("j{}/{}", count.job, count.step);
        agreement.effects += u64::from(count.effects);
        agreement.calls += u64::from(count.calls);
        agreement.failed += u64::from(count.failed);
        if count.effects > 1 {
            agreement.problems.push(format!("{op}: the stub performed {} effects", count.effects));
        }
        let history = seen.get(&(count.job, count.step));
        let executing = history.map_or(0, |seen| seen.executing);
        if u64::from(count.calls) > executing {
            agreement.problems.push(format!(
                "{op}: the stub took {} calls, but the history has {executing} executing lines",
                count.calls
            ));
        }
        let failed = history.map_or(0, |seen| seen.failed);
        if u64::from(count.failed) != failed {
            agreement.problems.push(format!(
                "{op}: the stub failed {} calls, the history shows {failed} dependency_failed lines",
                count.failed
            ));
        }
        if count.effects == 1 && history.is_none_or(|seen| seen.outputs.is_empty()) {
            agreement.unrecorded += 1;
        }
    }
    for (&(job, step), history) in &seen {
        let performed = counts.get(&(job, step)).and_then(|count| count.output);
        for &output in &history.outputs {
            if performed != Some(output) {
                let truth = performed.map_or("no effect at all".to_string(), |output| format!("o{output:x}"));
                agreement.problems.push(format!(
                    "j{job}/{step}: the history records output o{output:x}, but the stub performed {truth}"
                ));
            }
        }
    }
    agreement
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stub::OpCount;
    use lease_core::{Epoch, JobId, OpId, OutputId};

    fn entry(event: Event) -> Entry {
        Entry { t_us: 0, node: Node::Ledger, event }
    }

    fn count(job: u64, output: Option<u64>, effects: u32, calls: u32) -> OpCount {
        OpCount { job, step: 0, output, effects, calls, failed: 0 }
    }

    // Proves the comparison holds for a history that agrees with the stub, and catches each kind
    // of disagreement alone: an output recorded without its effect, a completion with another
    // output, an effect performed twice, and a call without an executing line.
    #[test]
    fn agreement_holds_and_each_disagreement_is_caught() {
        let (job, op, epoch) = (JobId(1), OpId::for_job(JobId(1)), Epoch(1));
        let w0 = Node::Worker(0);
        let agreeing = vec![
            entry(Event::Executing { job, op, epoch }),
            entry(Event::EffectApplied { from: w0, job, op, epoch, output: OutputId(9) }),
            entry(Event::Terminal {
                from: w0,
                job,
                outcome: OutcomeKind::Completed,
                output: Some(OutputId(9)),
                epoch,
                attempts: None,
                identities: None,
                batch: None,
                permanent: false,
            }),
        ];
        let truth = Truth { ops: vec![count(1, Some(9), 1, 1)] };
        assert!(compare(&agreeing, &truth).holds());
        let cases = [
            ("no effect", Truth { ops: vec![count(1, None, 0, 1)] }),
            ("another output", Truth { ops: vec![count(1, Some(8), 1, 1)] }),
            ("twice", Truth { ops: vec![count(1, Some(9), 2, 1)] }),
            ("no executing", Truth { ops: vec![count(1, Some(9), 1, 2)] }),
        ];
        for (case, truth) in cases {
            assert!(!compare(&agreeing, &truth).holds(), "{case} not caught");
        }
    }
}
