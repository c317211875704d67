//! # lease-sim: a deterministic simulation harness for lease-core
//!
//! One simulated world per seed, on madsim: a lease table, an effect ledger behind a slow and
//! failing dependency, workers, reclaimers and an arrival generator, talking only over madsim's
//! network. Faults are chosen per seed (swarm testing). Every run records a JSONL history
//! ([`lease_history`]), which one checker per invariant reads as it grows ([`lease_check`]). A run has a
//! fault phase (safety) and a heal (liveness). Every failure prints the command that replays it.
//!
//! Determinism is the product: all randomness comes from the seed, there is no wall clock, no
//! thread and no OS randomness inside a world, and nothing iterates a std `HashMap` where the
//! order could reach a decision or the history.

#[cfg(not(madsim))]
compile_error!(
    "lease-sim needs `--cfg madsim`. It is set in .cargo/config.toml; a RUSTFLAGS environment \
     variable replaces it silently. Unset RUSTFLAGS, or add `--cfg madsim` to it."
);

pub mod bench;
pub mod cli;
pub mod clock;
pub mod eval;
pub mod explore;
pub mod faults;
pub mod logs;
pub mod net;
pub mod nightly;
mod node;
pub mod panics;
pub mod runner;
pub mod scenarios;
pub mod shard;
pub mod world;
