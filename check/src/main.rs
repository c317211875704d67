//! `lease-check`: the verdict on any lease-recovery history, from the simulator, a live run, a
//! store's own log, or a queue that is not this project's.
//!
//! Exit status: 0 every invariant held (or the report was written); 1 a safety invariant failed;
//! 2 a liveness check failed; 3 the input cannot be read, with a message saying why.

use clap::{Parser, Subcommand};
use lease_check::cli;
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
    Report(cli::ReportArgs),
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
        Err(error) => return cli::unparsed(&error),
    };
    let result = match parsed.command {
        Command::Check { file } => cli::check(&file),
        Command::Report(args) => args.run(),
        Command::Diagnose { file, window } => cli::diagnose(&file, window),
    };
    cli::exit("lease-check", result)
}
