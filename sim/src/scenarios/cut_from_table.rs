//! `cut-from-table`: workers are cut off from the table while the ledger stays reachable, so a
//! worker can still write effects after it lost the authority over its lease.

use super::draw::{cut_workers_from, lossy};
use super::{Definition, Params};
use lease_history::Node;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "cut-from-table",
    about: "workers cut off from the table, ledger reachable: every invariant holds",
    situations: &["reclaimed", "adopted_by_reclaimer", "self_fenced"],
    label: None,
    draw,
};

/// Two to four worker-table links cut, with packet loss and latency.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    cut_workers_from(params, rng, Node::Table);
    lossy(params, rng);
}
