//! Invariant checkers.
