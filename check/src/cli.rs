//! The verdict's commands, shared by the `lease-check` binary and `lease-sim`'s subcommands of
//! the same names: `check`, `report` and `diagnose` on a history file.
//!
//! Exit status: 0 every invariant held (or the report was written); 1 a safety invariant failed;
//! 2 a liveness check failed; 3 the input cannot be read (a message says why, never a panic).

use crate::check_history;
use crate::report::Report;
use lease_history::{parse_jsonl, Entry};
use std::path::Path;

/// A safety invariant failed.
pub const EXIT_SAFETY: u8 = 1;
/// A liveness check failed.
pub const EXIT_LIVENESS: u8 = 2;
/// Bad input: a file, a line or an option that cannot be used, with a message.
pub const EXIT_BAD_INPUT: u8 = 3;

/// Bad input: a message for a person, and exit status 3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The exit status of a command's result: its own, or [`EXIT_BAD_INPUT`] with the message on
/// stderr after the program's name. Every binary of the project (`lease-check`, `lease-sim`,
/// `lease-live`) ends through it.
pub fn exit(program: &str, result: Result<u8, BadInput>) -> std::process::ExitCode {
    match result {
        Ok(code) => std::process::ExitCode::from(code),
        Err(BadInput(message)) => {
            eprintln!("{program}: {message}");
            std::process::ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// The exit status of a command line clap could not read: 0 for `--help` and `--version`
/// (printed on stdout), [`EXIT_BAD_INPUT`] for an error (on stderr).
pub fn unparsed(error: &clap::Error) -> std::process::ExitCode {
    let _ = error.print();
    std::process::ExitCode::from(if error.use_stderr() { EXIT_BAD_INPUT } else { 0 })
}

/// `report`'s arguments, the same in `lease-check report` and `lease-sim report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The JSONL history (any history in the contract, simulated or not).
    pub file: std::path::PathBuf,
    /// Where to write report.txt, report.json and timeline.svg.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// The window length, e.g. 400ms, 1s or 5m (default: the lease ttl).
    #[arg(long, value_parser = parse_duration)]
    pub window: Option<u64>,
}

impl ReportArgs {
    /// Reads the file and reports on it.
    pub fn run(&self) -> Result<u8, BadInput> {
        let entries = read_history(&self.file)?;
        report(&entries, &self.file.display().to_string(), self.window, self.out.as_deref())
    }
}

/// The `sometimes` counts on one line: `name=count ...`.
pub fn coverage_line(coverage: &crate::Coverage) -> String {
    coverage.0.iter().map(|(name, count)| format!("{name}={count}")).collect::<Vec<_>>().join(" ")
}

/// `check FILE`: the history against every invariant, as an outside checker would. Prints the
/// verdict; returns the exit status.
pub fn check(file: &Path) -> Result<u8, BadInput> {
    let entries = read_history(file)?;
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

/// Parses a duration: a number with `us`, `ms`, `s`, `m` or `h` (`400ms`, `1.5s`, `250000us`,
/// `3m`).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1e6)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60e6)
    } else if let Some(n) = text.strip_suffix('h') {
        (n, 3_600e6)
    } else {
        return Err(format!("{text:?}: give a unit, e.g. 400ms, 1.5s, 3m or 250000us"));
    };
    let value: f64 = number.trim().parse().map_err(|_| format!("{text:?} is not a duration (e.g. 400ms)"))?;
    let us = value * scale;
    if !(1.0..=1e15).contains(&us) {
        return Err(format!("{text:?}: a window is from 1us to years long"));
    }
    Ok(us.round() as u64)
}

/// Reads a history file.
pub fn read_history(file: &Path) -> Result<Vec<Entry>, BadInput> {
    let text =
        std::fs::read_to_string(file).map_err(|error| BadInput(format!("cannot read {}: {error}", file.display())))?;
    parse_jsonl(&text).map_err(|error| BadInput(format!("{}: {error}", file.display())))
}

/// Reports on `entries`: prints report.txt, and writes the three files to `out` when given.
pub fn report(entries: &[Entry], source: &str, window_us: Option<u64>, out: Option<&Path>) -> Result<u8, BadInput> {
    let report = Report::of(entries, window_us).map_err(|error| BadInput(format!("{source}: {error}")))?;
    let text = crate::report::text::render(&report);
    print!("{text}");
    if let Some(dir) = out {
        write_all(dir, &report, &text)?;
        println!("report: report.txt, report.json and timeline.svg written to {}", dir.display());
    }
    Ok(0)
}

/// Writes report.txt, report.json and timeline.svg into `dir`, each atomically.
pub fn write_all(dir: &Path, report: &Report, text: &str) -> Result<(), BadInput> {
    std::fs::create_dir_all(dir).map_err(|error| BadInput(format!("cannot create {}: {error}", dir.display())))?;
    let files = [
        ("report.txt", text.to_string()),
        ("report.json", report.to_json()),
        ("timeline.svg", crate::report::svg::render(report)),
    ];
    for (name, contents) in files {
        let path = dir.join(name);
        lease_history::atomic::write(&path, contents.as_bytes())
            .map_err(|error| BadInput(format!("cannot write {}: {error}", path.display())))?;
    }
    Ok(())
}

/// Prints one line per incident of `file`.
pub fn diagnose(file: &Path, window_us: Option<u64>) -> Result<u8, BadInput> {
    let entries = read_history(file)?;
    let report = Report::of(&entries, window_us).map_err(|error| BadInput(format!("{}: {error}", file.display())))?;
    if report.incidents.is_empty() {
        println!("{}: no incident", file.display());
    }
    for incident in &report.incidents {
        println!(
            "{:.3} s to {:.3} s: {} (arrivals {:+.2}, workers {:+.2}, dependency {:+.2}; load {:.2})",
            incident.from_us as f64 / 1e6,
            incident.to_us as f64 / 1e6,
            incident.verdict.cause,
            incident.verdict.terms.arrivals,
            incident.verdict.terms.workers,
            incident.verdict.terms.dependency,
            incident.verdict.load
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    // Proves durations need a unit and a sane size, and read each unit right.
    #[test]
    fn durations_read_each_unit_and_refuse_the_rest() {
        assert_eq!(parse_duration("400ms"), Ok(400_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000));
        assert_eq!(parse_duration("250us"), Ok(250));
        assert_eq!(parse_duration("3m"), Ok(180_000_000)); // the nightly's live run: `--duration 3m`
        assert_eq!(parse_duration("0.5h"), Ok(1_800_000_000));
        for bad in ["400", "ms", "-1s", "0ms", "nan s", "1e30s", "4 hours", "3 min", "m", "h"] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
    }
}
