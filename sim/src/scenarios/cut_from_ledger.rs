//! `cut-from-ledger`: workers are cut off from the ledger while the table stays reachable, so a
//! worker can keep renewing a lease it cannot act on.

use super::draw::{cut_workers_from, lossy};
use super::{Definition, Params};
use lease_history::Node;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "cut-from-ledger",
    about: "workers cut off from the ledger, table reachable: every invariant holds",
    situations: &["reclaimed", "self_fenced"],
    label: None,
    draw,
};

/// Two to four worker-ledger links cut, with packet loss and latency.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    cut_workers_from(params, rng, Node::Ledger);
    lossy(params, rng);
}
