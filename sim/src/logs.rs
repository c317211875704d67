//! Logs: `tracing` events from inside a world, each line stamped with the simulated time.
//!
//! Off unless asked for: `lease-sim run --log` logs at [`LOG_FILTER`], and `RUST_LOG` (for any
//! command) sets the filter itself, e.g. `RUST_LOG=lease_sim=trace`. With neither, no subscriber
//! is installed, and each `tracing` macro in the harness costs a load and a compare (`lease-sim
//! bench` measures it). Logs go to stderr; stdout keeps the summary and the trace.
//!
//! What is logged:
//! - `debug`: every history line as it is recorded: its number, its kind, and the line rendered
//!   as `--trace` shows it;
//! - `trace`: every request a node sends, and every request or reply a node takes.
//!
//! Every event sits in a span that names its node and life, `node{node=w1 life=2}` (a life is
//! one start or restart of the node), or in the span `world` for the supervisor and the world's
//! own tasks that record history (restarts, repairs).
//!
//! Logging never changes a run. Events only read the world: they draw from none of its streams,
//! and the timer reads madsim's clock without moving it. A history is byte-identical with logs on
//! or off (a harness test holds this).

use std::fmt;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::EnvFilter;

/// What `--log` logs when `RUST_LOG` says nothing: the harness's debug events, every history line.
pub const LOG_FILTER: &str = "lease_sim=debug";

/// Why logging could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// `RUST_LOG` holds no filter `tracing` can read.
    #[error("RUST_LOG={value:?} is not a log filter ({reason}); write e.g. RUST_LOG=lease_sim=debug")]
    BadFilter {
        /// The variable's value.
        value: String,
        /// What the filter parser said.
        reason: String,
    },
    /// `RUST_LOG` is not UTF-8.
    #[error("RUST_LOG is not UTF-8; write e.g. RUST_LOG=lease_sim=debug")]
    NotUnicode,
}

/// The filter to log with: `rust_log` when it is set and not empty; else [`LOG_FILTER`] if
/// `log` (the `--log` flag) asks for logs; else none, and nothing is installed.
pub fn filter(rust_log: Option<&str>, log: bool) -> Result<Option<EnvFilter>, LogError> {
    let directives = match rust_log.map(str::trim).filter(|value| !value.is_empty()) {
        Some(value) => value,
        None if log => LOG_FILTER,
        None => return Ok(None),
    };
    let parsed = EnvFilter::builder().parse(directives);
    let filter =
        parsed.map_err(|error| LogError::BadFilter { value: directives.to_string(), reason: error.to_string() })?;
    Ok(Some(filter))
}

/// Reads `RUST_LOG` and, if it or `log` asks for logs, installs the subscriber for the process.
/// Returns whether one was installed.
pub fn start(log: bool) -> Result<bool, LogError> {
    let rust_log = match std::env::var("RUST_LOG") {
        Ok(value) => Some(value),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => return Err(LogError::NotUnicode),
    };
    let Some(filter) = filter(rust_log.as_deref(), log)? else { return Ok(false) };
    // Only fails if a subscriber is already installed, which then logs in its place.
    let _ = tracing::subscriber::set_global_default(subscriber(filter, std::io::stderr));
    Ok(true)
}

/// The subscriber `start` installs, writing to `writer`: plain text (no colours, for files and
/// grep), the simulated time first on every line.
pub fn subscriber<W>(filter: EnvFilter, writer: W) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'writer> tracing_subscriber::fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    tracing_subscriber::fmt().with_env_filter(filter).with_timer(SimTime).with_ansi(false).with_writer(writer).finish()
}

/// The span of the supervisor and of the world's own tasks that record history: restarts and
/// repairs. A root: a restart is the world's doing, not the crashed node's, whichever
/// task dealt the crash.
pub(crate) fn world_span() -> tracing::Span {
    tracing::debug_span!(parent: None, "world")
}

/// The time on every log line: the running world's simulated time in microseconds, the clock of
/// the history's `t_us` (`t_us=1234567`), or `t_us=-` outside a world.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimTime;

impl FormatTime for SimTime {
    fn format_time(&self, writer: &mut Writer<'_>) -> fmt::Result {
        match now_us() {
            Some(us) => write!(writer, "t_us={us}"),
            None => writer.write_str("t_us=-"),
        }
    }
}

/// The simulated time of the world running on this thread, if one is.
fn now_us() -> Option<u64> {
    crate::world::ctx::SELF
        .try_with(|cell| cell.try_borrow().ok().and_then(|ctx| ctx.as_ref().map(|ctx| ctx.now().0)))
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves logging is off unless asked for, that RUST_LOG wins over --log's default, and that a
    // filter tracing cannot read is an error naming the variable, not a panic or silence.
    #[test]
    fn logs_start_only_when_asked_and_a_bad_filter_is_an_error() {
        assert!(filter(None, false).unwrap().is_none());
        assert!(filter(Some(""), false).unwrap().is_none());
        assert!(filter(Some("  "), false).unwrap().is_none());
        assert_eq!(filter(None, true).unwrap().unwrap().to_string(), LOG_FILTER);
        assert_eq!(filter(Some(""), true).unwrap().unwrap().to_string(), LOG_FILTER);
        assert_eq!(filter(Some("lease_sim=trace"), false).unwrap().unwrap().to_string(), "lease_sim=trace");
        assert_eq!(filter(Some("lease_sim=trace"), true).unwrap().unwrap().to_string(), "lease_sim=trace");
        let error = filter(Some("lease_sim=loud"), true).unwrap_err();
        assert!(matches!(&error, LogError::BadFilter { value, .. } if value == "lease_sim=loud"), "{error:?}");
        assert!(error.to_string().contains("RUST_LOG=\"lease_sim=loud\""), "{error}");
    }

    // Proves the timer claims no time outside a world (inside one, a harness test holds every
    // logged history line's time equal to its t_us).
    #[test]
    fn outside_a_world_the_timer_prints_a_dash() {
        let mut line = String::new();
        SimTime.format_time(&mut Writer::new(&mut line)).unwrap();
        assert_eq!(line, "t_us=-");
    }
}
