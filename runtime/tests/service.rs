//! The `service` example's logic (`lease_runtime::service::run`) on real stores: worker and
//! reclaimer runtimes on the host's clock, two workers crashing right after their effect and one
//! dependency answer lost. It proves that every job ends exactly once, completed with the one
//! output its ledger recorded; that each crash is recovered by a reclaim and an adoption, and the
//! lost answer by a worker's adoption, with no effect applied twice; and that the store's log is
//! JSON lines telling that story, on SQLite in clock order. On a SQLite file, and on PostgreSQL
//! where a server answers (see `common::pg`).

// The store tests' scratch files and schemas, shared rather than copied.
#[path = "../../store/tests/common/mod.rs"]
mod common;

use common::{pg, TempFile};
use lease_core::Span;
use lease_runtime::service::{self, Options, ServiceError, Summary};
use lease_store::Place;
use serde_json::Value;
use std::time::Duration;

/// A small run, contended enough that threads race for the store: well under a second. The lease
/// is long beside the effect, so a loaded machine does not expire leases the test did not crash.
fn options() -> Options {
    Options {
        jobs: 40,
        workers: 4,
        reclaimers: 2,
        lease_ttl: Span::from_ms(300),
        effect_latency: Span::from_ms(2),
        crash_after_effect: 2,
        lost_reply: 1,
        batch_max: 4,
        attempts_max: 3,
        time_limit: Duration::from_secs(20),
    }
}

/// Runs the service on a tokio runtime of its own, as the example does.
fn run(backend: &Place, options: &Options) -> Result<Summary, ServiceError> {
    let tokio = tokio::runtime::Runtime::new().expect("a tokio runtime");
    tokio.block_on(service::run(backend, options))
}

/// The store's log, each line parsed.
fn log(backend: &Place) -> Vec<Value> {
    let mut store = lease_store::open(backend, options().table()).expect("reopen the store");
    let lines = store.events().expect("read the log");
    lines.iter().map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}"))).collect()
}

/// The kinds of `job`'s lines, in commit order, with who asked where the line names it; a fence
/// that lost the race to another reclaimer is left out (two reclaimers may list one lease).
fn story(log: &[Value], job: u64) -> Vec<String> {
    log.iter()
        .filter(|line| line["job"] == job && line["kind"] != "lost_race")
        .map(|line| {
            let who = line["from"].as_str().or(line["owner"].as_str()).or(line["reclaimer"].as_str());
            format!("{} {}", line["kind"].as_str().expect("every line has a kind"), who.unwrap_or("-"))
        })
        .collect()
}

/// What every store must show after the run.
fn assert_recovered(summary: &Summary, log: &[Value]) {
    let options = options();
    assert!(summary.held(), "{summary}");
    assert_eq!(summary.log.completed, options.jobs, "{summary}");
    assert_eq!(summary.log.effects_applied, options.jobs, "one applied effect per job: {summary}");
    assert!(summary.tally.effects_run >= options.jobs, "{summary}");
    assert_eq!(summary.tally.crashes, options.crash_after_effect, "{summary}");
    assert_eq!(summary.tally.lost_replies, options.lost_reply, "{summary}");
    // Each crash left a lease to expire: a reclaimer fenced it and adopted the recorded output.
    // (At least: a machine loaded enough to stall a worker past its lease makes more.)
    assert!(summary.log.reclaimed >= options.crash_after_effect, "{summary}");
    assert!(summary.tally.reclaimer_adoptions >= options.crash_after_effect, "{summary}");
    // The lost answer made its worker requeue; the next worker found the output and adopted it.
    assert!(summary.tally.worker_adoptions >= options.lost_reply, "{summary}");
    assert_eq!(summary.tally.alerts, 0, "{summary}");

    assert_eq!(log.len() as u64, summary.log.lines);
    for line in log {
        assert!(line["t_us"].is_u64() && line["node"].is_string() && line["kind"].is_string(), "{line}");
    }
    // Job 0 crashed after its effect: granted, the worker's `executing`, effect applied, the
    // worker's `crashed`, then a reclaimer's fence, lookup (which found the output), its `adopted`
    // line and completion. No second effect, no worker completion.
    let job0 = story(log, 0);
    let kinds: Vec<&str> = job0.iter().map(|line| line.split(' ').next().unwrap_or("")).collect();
    let expected = [
        "arrived",
        "granted",
        "executing",
        "effect_applied",
        "crashed",
        "reclaimed",
        "looked_up",
        "adopted",
        "terminal",
    ];
    assert_eq!(kinds, expected, "{job0:?}");
    assert!(job0[1].contains(" w") && job0[3].contains(" w") && job0[8].contains(" r"), "{job0:?}");
    let crashed = log.iter().find(|line| line["kind"] == "crashed" && line["job"] == 0).expect("a crash");
    let granted = log.iter().find(|line| line["kind"] == "granted" && line["job"] == 0).expect("a grant");
    assert_eq!(crashed["target"], granted["owner"], "the worker that held the lease crashed: {crashed}");
    assert_eq!(crashed["point"], "after_effect", "{crashed}");
    // The fence came from a listing of the expired lease, after the effect.
    let at = |kind: &str| log.iter().position(|line| line["kind"] == kind && line["job"] == 0).expect(kind);
    let listed = log.iter().position(|line| {
        line["kind"] == "listed" && line["leases"].as_array().is_some_and(|leases| leases.iter().any(|l| l["job"] == 0))
    });
    assert!(listed.is_some_and(|listed| at("effect_applied") < listed && listed < at("reclaimed")), "{listed:?}");
    let found = log.iter().find(|line| line["kind"] == "looked_up" && line["job"] == 0).expect("a lookup");
    let applied = log.iter().find(|line| line["kind"] == "effect_applied" && line["job"] == 0).expect("an effect");
    assert_eq!(found["found"], applied["output"], "the reclaimer adopted the output the worker applied");
    // Job 2 lost its dependency's answer: its worker requeued it, and a worker adopted the output.
    let job2 = story(log, 2);
    let requeued = job2.iter().position(|line| line.starts_with("requeued w")).expect("requeued by its worker");
    let rest = &job2[requeued..];
    assert!(rest.iter().any(|line| line.starts_with("looked_up w")), "{job2:?}");
    assert!(rest.last().is_some_and(|line| line.starts_with("terminal w")), "{job2:?}");
    assert_eq!(job2.iter().filter(|line| line.starts_with("effect_applied")).count(), 1, "{job2:?}");
}

#[test]
fn a_service_on_sqlite_recovers_crashes_and_lost_answers_and_ends_every_job_exactly_once() {
    let file = TempFile::new("service");
    let backend = Place::Sqlite { path: file.path().to_path_buf() };
    let summary = run(&backend, &options()).expect("the service runs");
    let log = log(&backend);
    assert_recovered(&summary, &log);
    // Every part of the service shares one handle, whose thread reads the table's time right
    // before each call: the log, in commit order, is in time order too.
    let times: Vec<u64> = log.iter().map(|line| line["t_us"].as_u64().expect("t_us")).collect();
    if let Some(at) = times.windows(2).position(|pair| pair[1] < pair[0]) {
        panic!("the log steps back in time at line {}: {} then {}", at + 2, times[at], times[at + 1]);
    }
}

#[test]
fn a_service_on_postgres_recovers_crashes_and_lost_answers_and_ends_every_job_exactly_once() {
    let Some(scratch) = pg::scratch("service") else { return };
    let url = pg::url();
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}options=-csynchronous_commit%3Doff");
    let backend = Place::Postgres { url, schema: scratch.name.clone() };
    let summary = run(&backend, &options()).expect("the service runs");
    assert_recovered(&summary, &log(&backend));
    // No claim on the order of `t_us` here: PostgreSQL reads its clock at a transaction's start
    // and numbers the log at its end, so a transaction that waited for a lock can commit a line
    // stamped earlier than the one before it (docs/stores.md, "The store API").
}

#[test]
fn a_service_refuses_a_store_that_already_holds_its_jobs() {
    let file = TempFile::new("service_twice");
    let backend = Place::Sqlite { path: file.path().to_path_buf() };
    let small = Options { jobs: 3, crash_after_effect: 0, lost_reply: 0, ..options() };
    assert!(run(&backend, &small).expect("the first run").held());
    let error = run(&backend, &small).expect_err("the jobs are there already");
    assert!(matches!(error, ServiceError::NotFresh { job: lease_core::JobId(0), .. }), "{error:?}");
    assert!(error.to_string().contains("fresh file or schema"), "{error}");
}

#[test]
fn a_service_refuses_options_that_cannot_work_and_says_why() {
    let cases: [(Options, &str); 5] = [
        (Options { jobs: 0, ..options() }, "jobs must be"),
        (Options { workers: 0, ..options() }, "workers and reclaimers"),
        (Options { crash_after_effect: 40, ..options() }, "need as many jobs"),
        (Options { effect_latency: Span::from_ms(100), ..options() }, "under a quarter of the lease"),
        (Options { lost_reply: 1, attempts_max: 1, ..options() }, "second attempt"),
    ];
    for (bad, says) in cases {
        let error = bad.validate().expect_err("refused");
        assert!(error.to_string().contains(says), "{error} should say {says:?}");
        let nowhere = Place::Sqlite { path: "/nonexistent/dir/never.sqlite".into() };
        assert!(matches!(run(&nowhere, &bad), Err(ServiceError::Options(_))), "refused before any store");
    }
    assert!(options().validate().is_ok());
}

#[test]
fn an_output_names_its_job_and_epoch_so_a_repeat_cannot_pass_for_the_first() {
    let op = lease_core::OpId::for_job(lease_core::JobId(7));
    let (first, repeat) =
        (service::output_bytes(op, lease_core::Epoch(1)), service::output_bytes(op, lease_core::Epoch(2)));
    assert_eq!(String::from_utf8_lossy(&repeat), format!("the output of {op} under {}", lease_core::Epoch(2)));
    assert_ne!(lease_runtime::output_id(&first), lease_runtime::output_id(&repeat));
}
