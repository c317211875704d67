//! `sweep --failures-dir DIR`: every failing seed's files, kept for a person to replay.
//!
//! For a failing seed `S` it writes, each atomically (a temporary file renamed into place):
//! - `seed-S.jsonl`: the history, which `lease-sim check` reads back;
//! - `seed-S.trace`: the rendered history, then the outcome;
//! - `seed-S.reproduce`: a shell script (`sh seed-S.reproduce`, from any directory) that replays
//!   the seed with the binary that found it, by its absolute path, or with cargo from a checkout
//!   if that binary is gone; then a comment naming the commit and toolchain that found it (a seed
//!   replays byte for byte on that build). Its first line is the command, which takes more flags
//!   (`$(head -n1 seed-S.reproduce) --trace`); see [`crate::runner::reproduce_file`];
//! - `seed-S.plan.json`: the run's fault plan, which `lease-sim run --plan` replays and `lease-sim
//!   shrink --plan` shrinks, and which outlives changes to the generators.
//!
//! The files are written on the worker thread that ran the seed, from the report it holds at
//! that moment. A sweep keeps no history (it folds each seed into a tally), so this is the one
//! moment a history exists; writing then costs no second run, and a sweep killed later (a CI
//! timeout) has already kept every failure it found.

use super::super::BadInput;
use crate::runner::{self, Finding, SeedResult, Target};
use crate::world::{RunReport, Verdict};
use lease_history::atomic::{self, AtomicFile};
use lease_history::to_jsonl;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// At most this many failing seeds get files: a planted bug can fail every seed of a night, and
/// the first hundred replay it as well as all of them. The summary still lists every failure.
pub const FAILURES_WRITTEN_MAX: u64 = 100;

/// The directory failing seeds are written to.
pub struct FailuresDir {
    dir: PathBuf,
    /// Seeds given a slot so far, written or not; a slot is taken before writing, so that
    /// concurrent threads never pass [`FAILURES_WRITTEN_MAX`].
    claimed: AtomicU64,
    /// Seeds whose four files were all written.
    written: AtomicU64,
}

impl FailuresDir {
    /// Creates `dir` if missing and proves it writable, before any seed runs.
    pub fn open(dir: &Path) -> Result<FailuresDir, BadInput> {
        let unwritable = |error: std::io::Error| BadInput(format!("cannot write to {}: {error}", dir.display()));
        std::fs::create_dir_all(dir).map_err(unwritable)?;
        // Opening a temporary file is the write test; dropping it uncommitted removes it.
        drop(AtomicFile::create(&dir.join("seed-probe")).map_err(unwritable)?);
        Ok(FailuresDir { dir: dir.to_path_buf(), claimed: AtomicU64::new(0), written: AtomicU64::new(0) })
    }

    /// Writes the files of `report`'s seed if it failed, up to [`FAILURES_WRITTEN_MAX`] seeds.
    /// A write error is reported on stderr and leaves that seed without files: the sweep and its
    /// summary go on, and the seed's reproduce command is in the summary all the same.
    pub fn keep(&self, target: Target, report: &RunReport, result: &SeedResult) {
        let Some(failure) = &result.failure else { return };
        assert_eq!(report.params.seed, result.seed, "a seed result comes from its own report");
        if self.claimed.fetch_add(1, Ordering::Relaxed) >= FAILURES_WRITTEN_MAX {
            return;
        }
        let outcome = match &report.verdict {
            // A seed that held can fail only by not repeating its history when run again.
            _ if failure.invariant == Finding::Nondeterministic => format!("NONDETERMINISTIC: {}", failure.message),
            Verdict::Held => unreachable!("seed {} failed, so its verdict is a violation", result.seed),
            Verdict::Safety(violation) => format!("SAFETY VIOLATION: {violation}"),
            Verdict::Liveness(violation) => format!("LIVENESS FAILURE: {violation}"),
            Verdict::Crash(crash) => format!("CRASH: {crash}"),
        };
        let trace = format!("{}outcome: {outcome}\n", lease_history::render::render(&report.history));
        debug_assert_eq!(target.reproduce(result.seed), failure.reproduce);
        let found_by = format!("found by lease-sim {}", lease_check::provenance::line());
        let reproduce = runner::reproduce_file(&target.replay_args(result.seed), &[found_by]);
        let mut plan = report.plan.clone();
        plan.comment = Some(format!("recorded from: {}", failure.reproduce));
        // What the plan replays to: the first run's verdict (a recheck's finding is about two runs).
        plan.expect = Some(crate::faults::shrink::finding(report).map_or("held", |finding| finding.name()).to_string());
        let files = [
            ("jsonl", to_jsonl(&report.history)),
            ("trace", trace),
            ("reproduce", reproduce),
            ("plan.json", plan.to_json()),
        ];
        for (extension, text) in files {
            let path = self.dir.join(format!("seed-{}.{extension}", result.seed));
            if let Err(error) = atomic::write(&path, text.as_bytes()) {
                eprintln!("lease-sim: cannot write {}: {error}", path.display());
                return;
            }
        }
        self.written.fetch_add(1, Ordering::Relaxed);
    }

    /// Failing seeds whose files were all written.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
}
