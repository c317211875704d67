//! Who is asking: the history names the requester of every answer (`from`, `owner`,
//! `reclaimer`) and the reclaim `batch`, which are the caller's facts, not the store's.

use lease_core::{BatchId, Owner};
use lease_history::answers::Asker;
use lease_history::Node;

/// Who is asking, as the history names it: the handle's worker or reclaimer and, for a
/// reclaimer, its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caller {
    /// The requesting worker or reclaimer; `None`: unnamed (the table's own lines name `table`,
    /// the ledger's `ledger`).
    pub from: Option<Owner>,
    /// The reclaim batch the request belongs to, if any.
    pub batch: Option<BatchId>,
}

impl Caller {
    /// The asker of a table request.
    pub fn asker(&self) -> Asker {
        Asker { from: self.from.map_or(Node::Table, Node::from), batch: self.batch }
    }

    /// The asker of a ledger request: an unnamed caller is the dependency writing on its own.
    pub fn ledger_asker(&self) -> Asker {
        Asker { from: self.from.map_or(Node::Ledger, Node::from), batch: self.batch }
    }
}
