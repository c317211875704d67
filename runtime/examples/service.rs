//! A service on a real store: worker and reclaimer runtimes (`lease-runtime`), on a real clock,
//! with workers that crash after their effect and dependency answers that are lost, and a check
//! at the end that every job ended exactly once.
//!
//! ```sh
//! cargo run --release -p lease-runtime --example service                       # SQLite, a file in a temp dir
//! cargo run --release -p lease-runtime --example service -- --store postgres   # PostgreSQL, LEASE_PG_URL or local
//! cargo run --release -p lease-runtime --example service -- --help             # every flag and its default
//! ```
//!
//! The logic is `lease_runtime::service` (tested in `runtime/tests/service.rs`); this is its
//! command line. It prints the run's parameters, the summary, and the history lines of job 0,
//! whose first worker crashes after its effect: the reclaimer fences the expired lease, finds the
//! output in the ledger, adopts it and completes the job.
//!
//! Exit status: 0 every job ended exactly once; 1 a job ended twice, or its effect was applied
//! twice, or it completed with another output than the ledger's; 2 a job had not ended by the time
//! limit; 3 bad arguments, or the store could not be opened or failed.

use clap::Parser;
use lease_runtime::service::{self, Options, Summary};
use lease_store::{Clock, PostgresStore, StoreError};
use lease_store::{Place, StoreKind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `println!`, except that a closed stdout (`| head`) ends the output quietly instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

const EXIT_SAFETY: u8 = 1;
const EXIT_LIVENESS: u8 = 2;
const EXIT_BAD_INPUT: u8 = 3;

/// Runs lease-core's worker and reclaimer against SQLite or PostgreSQL, with failures injected.
#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// The store.
    #[arg(long, value_parser = parse_store, default_value_t = StoreKind::Sqlite)]
    store: StoreKind,
    /// SQLite: the database file (default: a new file in a temporary directory, removed after).
    #[arg(long)]
    path: Option<PathBuf>,
    /// PostgreSQL: the server (default: LEASE_PG_URL, else postgres://postgres@127.0.0.1:5432/test).
    #[arg(long)]
    url: Option<String>,
    /// PostgreSQL: the schema (default: a new lease_service_<pid>, dropped after).
    #[arg(long)]
    schema: Option<String>,
    /// Keep the temporary file or schema, to read it afterwards.
    #[arg(long)]
    keep: bool,
    /// Write the store's log as a history to this file, for `lease-check check FILE` and
    /// `lease-check report FILE`.
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// Jobs enqueued at the start.
    #[arg(long, default_value_t = Options::default().jobs)]
    jobs: u64,
    /// Workers (each a runtime of one slot).
    #[arg(long, default_value_t = Options::default().workers)]
    workers: u32,
    /// Reclaimers.
    #[arg(long, default_value_t = Options::default().reclaimers)]
    reclaimers: u32,
    /// The lease ttl, in milliseconds.
    #[arg(long, default_value_t = Options::default().lease_ttl.as_us() / 1_000)]
    lease_ttl_ms: u64,
    /// How long the mock dependency takes, in milliseconds.
    #[arg(long, default_value_t = Options::default().effect_latency.as_us() / 1_000)]
    effect_ms: u64,
    /// Jobs whose first worker crashes right after its effect (jobs 0..N).
    #[arg(long, default_value_t = Options::default().crash_after_effect)]
    crash_after_effect: u64,
    /// Jobs whose dependency answer is lost on their first attempt (the next N jobs).
    #[arg(long, default_value_t = Options::default().lost_reply)]
    lost_reply: u64,
    /// The most expired leases one reclaim batch takes.
    #[arg(long, default_value_t = Options::default().batch_max)]
    batch_max: usize,
    /// The most worker grants a job gets before it is dead-lettered.
    #[arg(long, default_value_t = Options::default().attempts_max)]
    attempts_max: u32,
    /// When every runtime stops, done or not, in seconds.
    #[arg(long, default_value_t = Options::default().time_limit.as_secs())]
    time_limit_s: u64,
}

/// `--store`: `sqlite` or `postgres` (a service keeps its jobs on a database, not in memory).
fn parse_store(text: &str) -> Result<StoreKind, String> {
    StoreKind::parse_among(text, &[StoreKind::Sqlite, StoreKind::Postgres])
}

impl Args {
    fn options(&self) -> Result<Options, String> {
        let ms = |value: u64, flag: &str| {
            value.checked_mul(1_000).map(lease_core::Span).ok_or_else(|| format!("--{flag} {value} is too long"))
        };
        Ok(Options {
            jobs: self.jobs,
            workers: self.workers,
            reclaimers: self.reclaimers,
            lease_ttl: ms(self.lease_ttl_ms, "lease-ttl-ms")?,
            effect_latency: ms(self.effect_ms, "effect-ms")?,
            crash_after_effect: self.crash_after_effect,
            lost_reply: self.lost_reply,
            batch_max: self.batch_max,
            attempts_max: self.attempts_max,
            time_limit: Duration::from_secs(self.time_limit_s),
        })
    }
}

/// The backend, and what to remove afterwards: only what this run made up itself.
struct Site {
    backend: Place,
    scratch: Option<Scratch>,
}

enum Scratch {
    Dir(PathBuf),
    Schema { url: String, name: String },
}

fn place(args: &Args) -> Result<Site, String> {
    match args.store {
        StoreKind::Memory => Err("a service keeps its jobs on sqlite or postgres".into()),
        StoreKind::Sqlite => {
            if args.url.is_some() || args.schema.is_some() {
                return Err("--url and --schema are for --store postgres; SQLite takes --path".into());
            }
            if let Some(path) = &args.path {
                return Ok(Site { backend: Place::Sqlite { path: path.clone() }, scratch: None });
            }
            let dir = std::env::temp_dir().join(format!("lease_service_{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
            let backend = Place::Sqlite { path: dir.join("lease.sqlite") };
            Ok(Site { backend, scratch: Some(Scratch::Dir(dir)) })
        }
        StoreKind::Postgres => {
            if args.path.is_some() {
                return Err("--path is for --store sqlite; PostgreSQL takes --url and --schema".into());
            }
            let url = args.url.clone().or_else(|| std::env::var("LEASE_PG_URL").ok());
            let url = url.unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
            let (name, made_up) = match &args.schema {
                Some(name) => (name.clone(), false),
                None => (format!("lease_service_{}", std::process::id()), true),
            };
            let valid = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_';
            if name.is_empty() || !name.bytes().all(valid) {
                return Err(format!("--schema {name:?}: a schema name is lowercase letters, digits and underscores"));
            }
            let scratch = made_up.then(|| Scratch::Schema { url: url.clone(), name: name.clone() });
            Ok(Site { backend: Place::Postgres { url, schema: name }, scratch })
        }
    }
}

impl Site {
    /// Removes what this run made up, unless asked to keep it.
    fn clean(self, keep: bool) -> Result<(), String> {
        match self.scratch {
            Some(_) if keep => say!("kept       {}", self.backend),
            Some(Scratch::Dir(dir)) => {
                std::fs::remove_dir_all(&dir).map_err(|error| format!("could not remove {}: {error}", dir.display()))?
            }
            Some(Scratch::Schema { url, name }) => postgres::Client::connect(&url, postgres::NoTls)
                .and_then(|mut admin| admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE")))
                .map_err(|error| format!("could not drop the scratch schema {name}: {}", chain(&error)))?,
            None => {}
        }
        Ok(())
    }
}

/// The store's log, read back: the history lines about `job`, and the whole log as a history.
fn history_of(backend: &Place, options: &Options, job: u64) -> Result<(Vec<String>, String), StoreError> {
    let mut store = match backend {
        // Read-only use: the clock does not matter, but a handle needs one.
        Place::Postgres { url, schema } => {
            Box::new(PostgresStore::open(url, Some(schema), options.table(), Clock::Caller)?)
        }
        sqlite => lease_store::open(sqlite, options.table())?,
    };
    let needles = [format!(r#""job":{job},"#), format!(r#""job":{job}}}"#)];
    let lines = store.events()?.into_iter().filter(|line| needles.iter().any(|needle| line.contains(needle))).collect();
    Ok((lines, store.history()?))
}

fn report(summary: &Summary, backend: &Place, history: Option<&std::path::Path>) {
    say!("{summary}");
    let read = history_of(backend, &summary.options, 0);
    if let Some(path) = history {
        match &read {
            Ok((_, text)) => match lease_history::atomic::write(path, text.as_bytes()) {
                Ok(()) => say!("history    written to {} (lease-check check {})", path.display(), path.display()),
                Err(error) => say!("history    could not be written to {}: {error}", path.display()),
            },
            Err(error) => say!("history    could not read the log: {error}"),
        }
    }
    if summary.options.crash_after_effect == 0 {
        return;
    }
    say!("job 0's history (its first worker crashed after the effect):");
    match read {
        Ok((lines, _)) => lines.iter().for_each(|line| say!("  {line}")),
        Err(error) => say!("  could not read the log: {error}"),
    }
}

/// An error and its causes, on one line: "postgres: error connecting to server: Connection refused".
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { EXIT_BAD_INPUT } else { 0 });
        }
    };
    // The options first: a bad one leaves nothing behind (no temporary directory yet).
    let checked =
        args.options().and_then(|options| options.validate().map_err(|error| error.to_string()).map(|()| options));
    let (options, place) = match checked.and_then(|options| Ok((options, place(&args)?))) {
        Ok(both) => both,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    say!(
        "service    {}: {} jobs, {} workers, {} reclaimer(s), lease {}, effect {}, {} crash(es) after the effect, \
         {} lost answer(s), batch_max {}, attempts_max {}, time limit {}s",
        place.backend,
        options.jobs,
        options.workers,
        options.reclaimers,
        options.lease_ttl,
        options.effect_latency,
        options.crash_after_effect,
        options.lost_reply,
        options.batch_max,
        options.attempts_max,
        options.time_limit.as_secs(),
    );
    // The runtimes run on tokio; the rest of this command (PostgreSQL's synchronous clients
    // included, which run runtimes of their own) stays outside it.
    let summary = match tokio::runtime::Runtime::new() {
        Ok(tokio) => tokio.block_on(service::run(&place.backend, &options)),
        Err(error) => Err(service::ServiceError::Store(lease_store::StoreError::Io(error))),
    };
    if let Ok(summary) = &summary {
        report(summary, &place.backend, args.history.as_deref());
    }
    let cleaned = place.clean(args.keep);
    match summary {
        Err(error) => {
            eprintln!("error: {}", chain(&error));
            ExitCode::from(EXIT_BAD_INPUT)
        }
        Ok(summary) if !summary.safety.is_empty() => ExitCode::from(EXIT_SAFETY),
        Ok(summary) if !summary.liveness.is_empty() => ExitCode::from(EXIT_LIVENESS),
        Ok(_) => {
            if let Err(message) = cleaned {
                eprintln!("warning: {message}");
            }
            ExitCode::SUCCESS
        }
    }
}
