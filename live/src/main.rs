//! `lease-live`: real worker, reclaimer, arrival and dependency processes on SQLite or
//! PostgreSQL, killed and paused by real signals, then checked and reported on by lease-check.
//!
//! Exit status: 0 the run held; 1 a safety invariant failed, or every invariant held but the
//! ground truth (the stub's own count of calls and effects) disagrees with the history; 2 a
//! liveness check failed; 3 bad input or a harness error (a process that outlived the run, or a
//! store log out of time order, included); 130 interrupted.

use clap::Parser;
use lease_live::cli::{ChildArgs, LiveArgs};
use std::process::ExitCode;

/// Live runs of lease recovery (docs/live-runs.md).
#[derive(Parser, Debug)]
#[command(name = "lease-live", version = lease_check::provenance::VERSION, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    live: LiveArgs,
}

/// One process of a live run: the orchestrator re-executes this binary as `lease-live
/// live-child ...` (hidden from `--help`).
#[derive(Parser, Debug)]
#[command(name = "lease-live live-child")]
struct ChildCli {
    #[command(flatten)]
    child: ChildArgs,
}

fn main() -> ExitCode {
    let child = std::env::args_os().nth(1).is_some_and(|first| first == "live-child");
    let parsed = if child {
        ChildCli::try_parse_from(std::env::args_os().skip(1)).map(|cli| lease_live::cli::child(&cli.child))
    } else {
        Cli::try_parse().map(|cli| lease_live::cli::live(&cli.live))
    };
    let result = match parsed {
        Ok(result) => result,
        Err(error) => return lease_check::cli::unparsed(&error),
    };
    lease_check::cli::exit("lease-live", result)
}
