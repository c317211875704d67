//! The effect ledger: the dependency's output store, keyed by operation.
//!
//! It holds at most one output per operation and a fence, the highest epoch it has seen for that
//! operation. It never overwrites a recorded output: a different output for the same operation is
//! kept aside as a *rival* and reported as a conflict by every later lookup, so that the reclaimer
//! can quarantine the job. One ledger belongs to one simulated world; there is no global.

use crate::bug::{Bug, Bugs};
use crate::ids::{Epoch, OpId, OutputId};
use std::collections::BTreeMap;

/// The answer to [`EffectLedger::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Lookup {
    /// No output is recorded: the effect has not happened.
    Empty,
    /// This output is recorded: adopt it instead of repeating the effect.
    Recorded(OutputId),
    /// Two different outputs claim the operation: stop and quarantine.
    Conflict {
        /// The output recorded first.
        recorded: OutputId,
        /// The different output that claimed the operation later.
        rival: OutputId,
    },
}

/// The answer to [`EffectLedger::apply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Apply {
    /// The output is recorded now.
    Applied,
    /// The same output was recorded before: a no-op.
    AlreadyApplied,
    /// The epoch is below the operation's fence: refused, a stale writer.
    Fenced {
        /// The operation's fence.
        fence: Epoch,
    },
    /// A different output is recorded: refused, never overwritten.
    Conflict {
        /// The output that stays recorded.
        recorded: OutputId,
    },
}

/// Everything the ledger keeps about one operation. Its rules are pure functions over it
/// ([`OpRecord::lookup`], [`OpRecord::apply`]), so a store on a database decides as this ledger
/// does, over a row it read inside its transaction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpRecord {
    /// The highest epoch seen for the operation.
    pub fence: Epoch,
    /// The output recorded first, never overwritten.
    pub recorded: Option<OutputId>,
    /// A different output that claimed the operation later, kept aside.
    pub rival: Option<OutputId>,
}

impl OpRecord {
    /// A lookup under `epoch`: the answer, and the record with its fence raised to `epoch`.
    pub fn lookup(&self, epoch: Epoch, bugs: Bugs) -> (Lookup, OpRecord) {
        let mut record = *self;
        let skip = bugs.on(Bug::LookupFencesOnlyWhenFound) && record.recorded.is_none();
        if !bugs.on(Bug::LedgerWithoutFence) && !skip {
            record.fence = record.fence.max(epoch);
        }
        let answer = match (record.recorded, record.rival) {
            (None, rival) => {
                assert!(rival.is_none(), "a rival without a recorded output");
                Lookup::Empty
            }
            (Some(output), None) => Lookup::Recorded(output),
            (Some(recorded), Some(rival)) => Lookup::Conflict { recorded, rival },
        };
        (answer, record)
    }

    /// An apply of `output` under `epoch`: the answer, and the record after it. A stale epoch
    /// changes nothing; a different output is kept as the rival, never written over the recorded.
    pub fn apply(&self, epoch: Epoch, output: OutputId, bugs: Bugs) -> (Apply, OpRecord) {
        let mut record = *self;
        if epoch < record.fence && !bugs.on(Bug::LedgerWithoutFence) {
            return (Apply::Fenced { fence: record.fence }, record);
        }
        if !bugs.on(Bug::LedgerWithoutFence) {
            record.fence = epoch;
        }
        let answer = match record.recorded {
            None => {
                record.recorded = Some(output);
                Apply::Applied
            }
            Some(recorded) if recorded == output => Apply::AlreadyApplied,
            Some(recorded) => {
                record.rival.get_or_insert(output);
                Apply::Conflict { recorded }
            }
        };
        (answer, record)
    }
}

/// The effect ledger. See the module doc.
#[derive(Debug, Clone, Default)]
pub struct EffectLedger {
    bugs: Bugs,
    ops: BTreeMap<OpId, OpRecord>,
}

impl EffectLedger {
    /// An empty ledger.
    pub fn new() -> EffectLedger {
        EffectLedger::default()
    }

    /// An empty ledger with a planted bug (see [`crate::bug`]).
    pub fn with_bugs(bugs: Bugs) -> EffectLedger {
        EffectLedger { bugs, ops: BTreeMap::new() }
    }

    /// The planted bug in force, if any.
    pub fn bugs(&self) -> Bugs {
        self.bugs
    }

    /// Raises the fence of `op` to `epoch` and reports what is recorded.
    pub fn lookup(&mut self, op: OpId, epoch: Epoch) -> Lookup {
        let record = self.ops.entry(op).or_default();
        let (answer, after) = record.lookup(epoch, self.bugs);
        *record = after;
        answer
    }

    /// Records `output` for `op` under `epoch`, unless the epoch is fenced or another output is
    /// recorded. A different output is kept as the rival, never written over the recorded one.
    pub fn apply(&mut self, op: OpId, epoch: Epoch, output: OutputId) -> Apply {
        let record = self.ops.entry(op).or_default();
        let (answer, after) = record.apply(epoch, output, self.bugs);
        *record = after;
        answer
    }

    /// Looks many operations up at once, each raising its own fence (as that many calls of
    /// [`EffectLedger::lookup`], in the order named): a worker holding a batch of grants asks
    /// the ledger once.
    pub fn lookup_batch(&mut self, ops: &[(OpId, Epoch)]) -> Vec<Lookup> {
        ops.iter().map(|&(op, epoch)| self.lookup(op, epoch)).collect()
    }

    /// Records many outputs at once, each judged on its own operation's fence and record (as
    /// that many calls of [`EffectLedger::apply`], in the order named): one fenced epoch among
    /// many is refused alone.
    pub fn apply_batch(&mut self, outputs: &[(OpId, Epoch, OutputId)]) -> Vec<Apply> {
        outputs.iter().map(|&(op, epoch, output)| self.apply(op, epoch, output)).collect()
    }

    /// Everything recorded for `op`, without touching the fence (for checks and tests).
    pub fn op(&self, op: OpId) -> OpRecord {
        self.ops.get(&op).copied().unwrap_or_default()
    }

    /// The output recorded for `op`, without touching the fence (for checks and tests).
    pub fn recorded(&self, op: OpId) -> Option<OutputId> {
        self.ops.get(&op)?.recorded
    }

    /// The fence of `op`: the highest epoch seen for it.
    pub fn fence(&self, op: OpId) -> Epoch {
        self.ops.get(&op).map(|record| record.fence).unwrap_or_default()
    }
}
