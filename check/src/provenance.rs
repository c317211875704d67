//! Where a binary came from: the commit and the toolchain it was built with, captured by
//! `check/build.rs`. A seed names a run only for one build of the simulator: the same seed on
//! another commit may run another world. So every output a person keeps to replay a run later (the
//! `run` header, the sweep summary, the nightly's summary and reproduce files) names the build.
//!
//! Never written into a history: a history is a function of the seed and the code's behaviour,
//! and must stay byte-identical across commits that do not change that behaviour.

/// The commit: 12 hex digits of `HEAD`, `-dirty` when the work tree had changes, or `unknown`
/// when built outside a git checkout (a source tarball).
pub const COMMIT: &str = env!("LEASE_COMMIT");

/// The compiler: `rustc --version` of the toolchain cargo built with, e.g.
/// `rustc 1.95.0 (59807616e 2026-04-14)`.
pub const TOOLCHAIN: &str = env!("LEASE_TOOLCHAIN");

/// What `lease-sim --version`, `lease-check --version` and `lease-live --version` print after
/// the name.
pub const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit=", env!("LEASE_COMMIT"), " toolchain=", env!("LEASE_TOOLCHAIN"), ")");

/// `commit=abc123def456 toolchain=rustc 1.95.0 (59807616e 2026-04-14)`: one line for a header.
pub fn line() -> String {
    format!("commit={COMMIT} toolchain={TOOLCHAIN}")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the build script ran and captured something a person can use: a commit that is hex
    // (perhaps dirty) or says it is unknown, and a toolchain that names rustc.
    #[test]
    fn the_build_names_its_commit_and_toolchain() {
        let hex = COMMIT.trim_end_matches("-dirty");
        assert!(COMMIT == "unknown" || (hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit())), "{COMMIT}");
        assert!(TOOLCHAIN.starts_with("rustc ") || TOOLCHAIN == "unknown", "{TOOLCHAIN}");
        assert_eq!(line(), format!("commit={COMMIT} toolchain={TOOLCHAIN}"));
        assert!(VERSION.contains(COMMIT) && VERSION.contains(TOOLCHAIN));
    }
}
