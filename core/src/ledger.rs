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

#[derive(Debug, Clone, Copy, Default)]
struct OpRecord {
    fence: Epoch,
    recorded: Option<OutputId>,
    rival: Option<OutputId>,
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

    /// Raises the fence of `op` to `epoch` and reports what is recorded.
    pub fn lookup(&mut self, op: OpId, epoch: Epoch) -> Lookup {
        let record = self.ops.entry(op).or_default();
        let skip = self.bugs.on(Bug::LookupFencesOnlyWhenFound) && record.recorded.is_none();
        if !self.bugs.on(Bug::LedgerWithoutFence) && !skip {
            record.fence = record.fence.max(epoch);
        }
        match (record.recorded, record.rival) {
            (None, rival) => {
                assert!(rival.is_none(), "a rival without a recorded output");
                Lookup::Empty
            }
            (Some(output), None) => Lookup::Recorded(output),
            (Some(recorded), Some(rival)) => Lookup::Conflict { recorded, rival },
        }
    }

    /// Records `output` for `op` under `epoch`, unless the epoch is fenced or another output is
    /// recorded. A different output is kept as the rival, never written over the recorded one.
    pub fn apply(&mut self, op: OpId, epoch: Epoch, output: OutputId) -> Apply {
        let record = self.ops.entry(op).or_default();
        if epoch < record.fence && !self.bugs.on(Bug::LedgerWithoutFence) {
            return Apply::Fenced { fence: record.fence };
        }
        if !self.bugs.on(Bug::LedgerWithoutFence) {
            record.fence = epoch;
        }
        match record.recorded {
            None => {
                record.recorded = Some(output);
                Apply::Applied
            }
            Some(recorded) if recorded == output => Apply::AlreadyApplied,
            Some(recorded) => {
                record.rival.get_or_insert(output);
                Apply::Conflict { recorded }
            }
        }
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
