//! Tests of the conformance checker.
