//! `lease-sim check`: a history file against every invariant, as an outside checker would.

use super::{coverage_line, BadInput, EXIT_LIVENESS, EXIT_SAFETY};
use crate::check::check_history;
use crate::history::parse_jsonl;
use std::path::Path;

pub(super) fn check(file: &Path) -> Result<u8, BadInput> {
    let text =
        std::fs::read_to_string(file).map_err(|error| BadInput(format!("cannot read {}: {error}", file.display())))?;
    let entries = parse_jsonl(&text).map_err(|error| BadInput(format!("{}: {error}", file.display())))?;
    match check_history(&entries) {
        Ok(coverage) => {
            println!("{}: {} lines, every invariant held", file.display(), entries.len());
            println!("sometimes: {}", coverage_line(&coverage));
            Ok(0)
        }
        Err(violation) => {
            println!("{}: {violation}", file.display());
            for &line in &violation.lines {
                if let Some(entry) = entries.get(line.wrapping_sub(1)) {
                    println!("  line {line}: {}", entry.to_json());
                }
            }
            Ok(if violation.invariant.is_safety() { EXIT_SAFETY } else { EXIT_LIVENESS })
        }
    }
}
