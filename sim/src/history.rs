//! The history: every protocol event of a run, one JSON object per line.
//!
//! This is the contract for outside checkers (Jepsen-style), so it is kept stable. Every line has
//! `t_us` (simulation time, which is the table's clock, in microseconds), `node` and `kind`; each
//! kind carries its own fields, listed on [`Event`]. Times and expiries are the exact values the
//! table used. Optional fields are omitted when absent.

use lease_core::{BatchId, Epoch, JobId, OpId, OutputId};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Where an event happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    /// The lease table.
    Table,
    /// The effect ledger and the dependency in front of it.
    Ledger,
    /// Worker number `n`.
    Worker(u32),
    /// Reclaimer number `n`.
    Reclaimer(u32),
    /// The arrival generator.
    Arrivals,
    /// The simulator itself: faults and phases.
    World,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Table => f.write_str("table"),
            Node::Ledger => f.write_str("ledger"),
            Node::Worker(n) => write!(f, "w{n}"),
            Node::Reclaimer(n) => write!(f, "r{n}"),
            Node::Arrivals => f.write_str("arrivals"),
            Node::World => f.write_str("world"),
        }
    }
}

impl FromStr for Node {
    type Err = String;
    fn from_str(s: &str) -> Result<Node, String> {
        let numbered = |prefix: &str| s.strip_prefix(prefix).and_then(|n| n.parse::<u32>().ok());
        match s {
            "table" => Ok(Node::Table),
            "ledger" => Ok(Node::Ledger),
            "arrivals" => Ok(Node::Arrivals),
            "world" => Ok(Node::World),
            _ => numbered("w")
                .map(Node::Worker)
                .or_else(|| numbered("r").map(Node::Reclaimer))
                .ok_or_else(|| format!("unknown node {s:?}")),
        }
    }
}

impl Serialize for Node {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How a job ended, as the history spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// `completed`, with `output`.
    Completed,
    /// `dead_lettered`, with `attempts`.
    DeadLettered,
    /// `quarantined`, with `recorded` and `rival`.
    Quarantined,
}

/// One history line's payload. `kind` is the variant's snake_case name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The first line: the seed and every limit and parameter of the run.
    Run {
        /// The seed.
        seed: u64,
        /// The scenario's name.
        scenario: String,
        /// The most leases one reclaim batch may take.
        batch_max: usize,
        /// The queue's capacity (accepted, non-terminal jobs).
        capacity: usize,
        /// The lease ttl, by the table's clock.
        lease_ttl_us: u64,
        /// Worker grants before a job is dead-lettered.
        attempts_max: u32,
        /// The planted bug in force, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bug: Option<String>,
        /// Every parameter the seed chose, as `name=value` pairs.
        params: String,
    },
    /// The table accepted a job; `backlog` counts accepted, non-terminal jobs after it.
    Arrived {
        /// The job.
        job: JobId,
        /// Accepted, non-terminal jobs, this one included.
        backlog: usize,
    },
    /// The table turned a job away.
    Rejected {
        /// The job.
        job: JobId,
        /// Why, e.g. `queue_full`.
        reason: String,
    },
    /// The table granted a worker a lease.
    Granted {
        /// The job.
        job: JobId,
        /// The new epoch.
        epoch: Epoch,
        /// The worker, e.g. `w3`.
        owner: Node,
        /// The lease's expiry by the table's clock.
        expires_at_us: u64,
        /// Which worker grant of the job this is, from 1.
        attempt: u32,
    },
    /// The table extended a lease.
    Renewed {
        /// The job.
        job: JobId,
        /// The epoch the request carried.
        epoch: Epoch,
        /// The new expiry.
        expires_at_us: u64,
    },
    /// The table handed an expired lease to a reclaimer under `new_epoch`.
    Reclaimed {
        /// The job.
        job: JobId,
        /// The epoch of the lease that expired.
        epoch: Epoch,
        /// That lease's expiry, which the table compared with its clock (`t_us`).
        expires_at_us: u64,
        /// The reclaimer's epoch.
        new_epoch: Epoch,
        /// The reclaimer's lease expiry.
        new_expires_at_us: u64,
        /// The reclaimer.
        reclaimer: Node,
        /// The reclaim batch.
        batch: BatchId,
    },
    /// A reclaimer lost the race for a lease it had listed (node: the reclaimer).
    LostRace {
        /// The job.
        job: JobId,
        /// The epoch it expected.
        expected: Epoch,
        /// The batch.
        batch: BatchId,
    },
    /// The ledger answered a lookup and raised its fence to `epoch`.
    LookedUp {
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The epoch of the lookup.
        epoch: Epoch,
        /// The recorded output, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        found: Option<OutputId>,
        /// A conflicting second output, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rival: Option<OutputId>,
        /// The reclaim batch, when a reclaimer asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// A worker starts the effect: it calls the dependency (node: the worker).
    Executing {
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The worker's epoch.
        epoch: Epoch,
    },
    /// The dependency failed before producing anything (node: the ledger).
    DependencyFailed {
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The caller's epoch.
        epoch: Epoch,
    },
    /// The ledger recorded an output: the effect happened.
    EffectApplied {
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The epoch it was applied under.
        epoch: Epoch,
        /// The output.
        output: OutputId,
    },
    /// The ledger did not record an output: `fenced`, `conflict` or `already_applied`.
    EffectRejected {
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The epoch offered.
        epoch: Epoch,
        /// The output offered.
        output: OutputId,
        /// Why.
        reason: String,
    },
    /// A worker or reclaimer found an output in the ledger and completes with it.
    Adopted {
        /// The job.
        job: JobId,
        /// The operation.
        op: OpId,
        /// The adopted output.
        output: OutputId,
        /// The adopter's epoch.
        epoch: Epoch,
    },
    /// A job reached its terminal outcome (node: the table).
    Terminal {
        /// The job.
        job: JobId,
        /// `completed`, `dead_lettered` or `quarantined`.
        outcome: OutcomeKind,
        /// The output, when completed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<OutputId>,
        /// The epoch of the request that ended it.
        epoch: Epoch,
        /// Worker grants spent, when dead-lettered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempts: Option<u32>,
        /// The two outputs, when quarantined.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identities: Option<[OutputId; 2]>,
        /// The reclaim batch, when a reclaimer ended it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// The table answered a completion of an already completed job, with the same output, as an
    /// idempotent success: no second terminal outcome.
    AlreadyCompleted {
        /// The job.
        job: JobId,
        /// The epoch the request carried.
        epoch: Epoch,
        /// The output it offered, the same as the recorded one.
        output: OutputId,
    },
    /// The table put a leased job back in the queue.
    Requeued {
        /// The job.
        job: JobId,
        /// The epoch of the request.
        epoch: Epoch,
        /// Worker grants spent so far.
        attempts: u32,
        /// The reclaim batch, when a reclaimer asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<BatchId>,
    },
    /// The table refused a request: `request` is what was asked, `reason` why.
    Refused {
        /// The job.
        job: JobId,
        /// The epoch the request carried.
        epoch: Epoch,
        /// `renew`, `complete`, `requeue` or `quarantine`.
        request: String,
        /// `stale_epoch`, `expired`, `not_leased`, `already_terminal` or `conflict`.
        reason: String,
    },
    /// A worker stopped acting on its lease (node: the worker).
    Abandoned {
        /// The job.
        job: JobId,
        /// Its epoch.
        epoch: Epoch,
        /// `self_fenced`, `lease_lost`, `effect_fenced` or `conflict`.
        why: String,
    },
    /// A reclaimer stopped a batch on conflicting outputs: the operator alert (node: the reclaimer).
    BatchStopped {
        /// The batch.
        batch: BatchId,
        /// The quarantined job.
        job: JobId,
        /// The two outputs.
        identities: [OutputId; 2],
        /// Listed leases left untouched.
        untouched: usize,
    },
    /// A node crashed (node: world; `target` names it; `point` is the protocol point).
    Crashed {
        /// The crashed node.
        target: Node,
        /// Where in the protocol: `before_effect`, `after_effect`, `during_ack`, `mid_reclaim`
        /// or `at_random`.
        point: String,
        /// The job the node was working on, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<JobId>,
    },
    /// A node restarted with its durable state only.
    Restarted {
        /// The node.
        target: Node,
    },
    /// A node's process paused.
    Paused {
        /// The node.
        target: Node,
    },
    /// A paused node resumed.
    Resumed {
        /// The node.
        target: Node,
    },
    /// Messages between `target` and `peer` (or everyone, when absent) are dropped.
    Partitioned {
        /// One side.
        target: Node,
        /// The other side, for a single link.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<Node>,
    },
    /// A partition ended.
    Healed {
        /// One side.
        target: Node,
        /// The other side, for a single link.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<Node>,
    },
    /// The fault phase ended: everything healed, and the system must now converge.
    FaultsHealed {},
}

/// One history line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Entry {
    /// Simulation time in microseconds: the table's clock.
    pub t_us: u64,
    /// Where it happened.
    pub node: Node,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

impl Entry {
    /// The entry as one JSON line, without the newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("history entries always serialise")
    }

    /// The job this entry is about, if any.
    pub fn job(&self) -> Option<JobId> {
        match &self.event {
            Event::Arrived { job, .. }
            | Event::Rejected { job, .. }
            | Event::Granted { job, .. }
            | Event::Renewed { job, .. }
            | Event::Reclaimed { job, .. }
            | Event::LostRace { job, .. }
            | Event::LookedUp { job, .. }
            | Event::Executing { job, .. }
            | Event::DependencyFailed { job, .. }
            | Event::EffectApplied { job, .. }
            | Event::EffectRejected { job, .. }
            | Event::Adopted { job, .. }
            | Event::Terminal { job, .. }
            | Event::Requeued { job, .. }
            | Event::AlreadyCompleted { job, .. }
            | Event::Refused { job, .. }
            | Event::Abandoned { job, .. }
            | Event::BatchStopped { job, .. } => Some(*job),
            Event::Run { .. }
            | Event::Crashed { .. }
            | Event::Restarted { .. }
            | Event::Paused { .. }
            | Event::Resumed { .. }
            | Event::Partitioned { .. }
            | Event::Healed { .. }
            | Event::FaultsHealed {} => None,
        }
    }
}

/// A history file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be read.
    #[error("cannot read history {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not a history entry.
    #[error("history line {line}: {message}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The first line is not the `run` line.
    #[error("history line 1 must be the `run` line")]
    NoRunLine,
    /// The file holds no entry at all.
    #[error("the history is empty: it has no `run` line")]
    Empty,
}

/// Parses a JSONL history, line by line, with the line number of the first bad line.
pub fn parse_jsonl(text: &str) -> Result<Vec<Entry>, HistoryError> {
    let entries = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str::<Entry>(line)
                .map_err(|error| HistoryError::BadLine { line: index + 1, message: error.to_string() })
        })
        .collect::<Result<Vec<_>, _>>()?;
    match entries.first() {
        Some(Entry { event: Event::Run { .. }, .. }) => Ok(entries),
        Some(_) => Err(HistoryError::NoRunLine),
        None => Err(HistoryError::Empty),
    }
}

/// Renders entries as JSONL, one line each, newline-terminated.
pub fn to_jsonl(entries: &[Entry]) -> String {
    let mut out = String::with_capacity(entries.len() * 96);
    for entry in entries {
        out.push_str(&entry.to_json());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a history file that is not a history is refused with a message naming what is wrong.
    #[test]
    fn bad_history_files_are_refused_with_a_reason() {
        assert!(matches!(parse_jsonl(""), Err(HistoryError::Empty)));
        assert!(matches!(parse_jsonl("\n\n"), Err(HistoryError::Empty)));
        let arrived = r#"{"t_us":0,"node":"table","kind":"arrived","job":1,"backlog":1}"#;
        assert!(matches!(parse_jsonl(arrived), Err(HistoryError::NoRunLine)));
        let bad_node = r#"{"t_us":0,"node":"x9","kind":"faults_healed"}"#;
        assert!(matches!(parse_jsonl(bad_node), Err(HistoryError::BadLine { line: 1, .. })));
        let run = r#"{"t_us":0,"node":"world","kind":"run","seed":1,"scenario":"s","batch_max":1,"capacity":1,"lease_ttl_us":1,"attempts_max":1,"params":""}"#;
        let text = format!("{run}\n{arrived}\nnot json\n");
        assert!(matches!(parse_jsonl(&text), Err(HistoryError::BadLine { line: 3, .. })));
        assert_eq!(parse_jsonl(&format!("{run}\n{arrived}\n")).unwrap().len(), 2);
    }
}
