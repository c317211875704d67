//! `lease-check`: the verdict on any lease-recovery history, from the simulator, a live run, a
//! store's own log, or a queue that is not this project's.
//!
//! Exit status: 0 every invariant held (or the report was written); 1 a safety invariant failed;
//! 2 a liveness check failed; 3 the input cannot be read, with a message saying why.

use clap::{Parser, Subcommand};
use lease_check::cli::{self, BadInput, EXIT_BAD_INPUT};
use std::path::PathBuf;
use std::process::ExitCode;

/// Judges a JSONL lease-recovery history (docs/history.md): every invariant, and an
/// operator's report of its incidents.
#[derive(Parser, Debug)]
#[command(name = "lease-check", version = lease_check::provenance::VERSION, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check a history file against every invariant.
    Check {
        /// The JSONL history.
        file: PathBuf,
    },
    /// Read a history as the operator on call would: windows, incidents, their cause, the
    /// customers' delay and the recovery. Prints report.txt; with --out, writes report.txt,
    /// report.json and timeline.svg there.
    Report {
        /// The JSONL history.
        file: PathBuf,
        /// Where to write report.txt, report.json and timeline.svg.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// The window length, e.g. 400ms, 1s or 5m (default: the lease ttl).
        #[arg(long, value_parser = cli::parse_duration)]
        window: Option<u64>,
    },
    /// Name the cause of each incident of a history, one line each.
    Diagnose {
        /// The JSONL history.
        file: PathBuf,
        /// The window length, e.g. 400ms (default: the lease ttl).
        #[arg(long, value_parser = cli::parse_duration)]
        window: Option<u64>,
    },
}

fn main() -> ExitCode {
    let parsed = match Cli::try_parse() {
        Ok(parsed) => parsed,
        Err(error) => {
            let code = if error.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    let result = match parsed.command {
        Command::Check { file } => cli::check(&file),
        Command::Report { file, out, window } => cli::read_history(&file)
            .and_then(|entries| cli::report(&entries, &file.display().to_string(), window, out.as_deref())),
        Command::Diagnose { file, window } => cli::diagnose(&file, window),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(BadInput(message)) => {
            eprintln!("lease-check: {message}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}
