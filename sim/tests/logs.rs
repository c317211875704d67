//! Logs end to end, through the real `lease-sim` binary: `run --log` and `RUST_LOG` print every
//! history line with the simulated time and its node's span, and change nothing about the run.

use std::path::PathBuf;
use std::process::Command;

/// Runs `lease-sim` with `RUST_LOG` set to `rust_log` (removed when `None`): status, stdout, stderr.
fn lease_sim(args: &[&str], rust_log: Option<&str>) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease-sim"));
    match rust_log {
        Some(value) => command.env("RUST_LOG", value),
        None => command.env_remove("RUST_LOG"),
    };
    let output = command.args(args).output().expect("lease-sim runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A history file for one run of this test process, removed when dropped.
struct HistoryFile(PathBuf);

impl HistoryFile {
    fn new(name: &str) -> HistoryFile {
        HistoryFile(std::env::temp_dir().join(format!("lease-sim-logs-{name}-{}.jsonl", std::process::id())))
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }

    fn read(&self) -> String {
        std::fs::read_to_string(&self.0).expect("the history was written")
    }
}

impl Drop for HistoryFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The value of `key=` in a log line, up to the next space.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(key)? + key.len();
    line[start..].split(' ').next()
}

// Proves logging changes nothing about a run: for a few seeds (one of them a world that panics),
// the history and stdout are byte for byte the same with no logs, with --log, and with every
// trace event on (RUST_LOG=trace, madsim's own events too). And proves what --log prints: one
// line per history line, in order, each stamped with exactly the history's t_us and inside the
// span of a node and its life, or of the world.
#[test]
fn logs_show_every_history_line_at_its_time_and_change_nothing() {
    let runs: &[&[&str]] = &[
        &["--scenario", "swarm", "--seed", "3"],
        &["--scenario", "swarm", "--seed", "8"], // the table crashes and restarts
        &["--scenario", "mass-expiry", "--seed", "5"],
        &["--scenario", "swarm", "--seed", "8", "--bug", "requeue-keeps-expiry"],
    ];
    let mut checked_restarts = 0;
    for &run in runs {
        let (plain, logged, traced) = (HistoryFile::new("plain"), HistoryFile::new("log"), HistoryFile::new("trace"));
        let args = |file: &HistoryFile, extra: &[&'static str]| -> Vec<String> {
            let mut args: Vec<String> = ["run"].iter().chain(run).map(|arg| arg.to_string()).collect();
            args.extend(["--history".to_string(), file.path().to_string()]);
            args.extend(extra.iter().map(|arg| arg.to_string()));
            args
        };
        let call =
            |args: Vec<String>, rust_log| lease_sim(&args.iter().map(String::as_str).collect::<Vec<_>>(), rust_log);
        let (code, stdout, stderr) = call(args(&plain, &[]), None);
        assert!(!stderr.contains("t_us="), "{run:?}: no logs unless asked for:\n{stderr}");
        let (log_code, log_stdout, log) = call(args(&logged, &["--log"]), None);
        let (trace_code, trace_stdout, trace) = call(args(&traced, &[]), Some("trace"));
        let history = plain.read();
        assert_eq!(logged.read(), history, "{run:?}: --log changed the history");
        assert_eq!(traced.read(), history, "{run:?}: RUST_LOG=trace changed the history");
        let same_stdout = |other: &str| other.replace(logged.path(), "").replace(traced.path(), "");
        assert_eq!(same_stdout(&log_stdout), stdout.replace(plain.path(), ""), "{run:?}: --log changed stdout");
        assert_eq!(same_stdout(&trace_stdout), stdout.replace(plain.path(), ""), "{run:?}: RUST_LOG changed stdout");
        assert_eq!((log_code, trace_code), (code, code), "{run:?}");
        assert!(trace.contains("request sent") && trace.contains("reply taken"), "{run:?}: trace shows messages");

        let history: Vec<serde_json::Value> =
            history.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect();
        let logged: Vec<&str> = log.lines().filter(|line| line.contains(" kind=")).collect();
        assert_eq!(logged.len(), history.len(), "{run:?}: one log line per history line:\n{log}");
        for (index, (line, entry)) in logged.iter().zip(&history).enumerate() {
            assert_eq!(field(line, " line="), Some((index + 1).to_string().as_str()), "{line}");
            let t_us = line.strip_prefix("t_us=").and_then(|rest| rest.split(' ').next());
            assert_eq!(t_us, Some(entry["t_us"].to_string().as_str()), "{run:?} line {}: {line}", index + 1);
            assert_eq!(field(line, " kind="), entry["kind"].as_str(), "{line}");
            let spanned = line.contains(" DEBUG world: ") || line.contains(" DEBUG node{node=");
            assert!(spanned, "{run:?}: every line sits in a node's span or the world's: {line}");
        }
        // A node restarted once and heard from again (a line of its own after the restart) logs
        // that line in its second life's span.
        let mut restarts = 0;
        // A worker slot's id `n + k × workers` logs in its process's span, `wn`.
        let workers: u32 = history[0]["params"]
            .as_str()
            .and_then(|params| params.split(' ').find_map(|pair| pair.strip_prefix("workers=")?.parse().ok()))
            .expect("the run line names its workers");
        let process = |node: &str| match node.strip_prefix('w').and_then(|n| n.parse::<u32>().ok()) {
            Some(id) => format!("w{}", id % workers),
            None => node.to_string(),
        };
        for (at, entry) in history.iter().enumerate().filter(|(_, entry)| entry["kind"] == "restarted") {
            let node = entry["target"].as_str().expect("a restart names its node");
            let restarted_once =
                history.iter().filter(|e| e["kind"] == "restarted" && e["target"] == node).count() == 1;
            let heard_again = history[at..].iter().any(|e| e["node"] == node);
            if restarted_once && heard_again {
                restarts += 1;
                let second = format!("node{{node={} life=2}}", process(node));
                assert!(log.contains(&second), "{run:?}: restarted, {node} logs in its second life");
            }
        }
        checked_restarts += restarts;
    }
    assert!(checked_restarts >= 3, "only {checked_restarts} restarted nodes were heard from again");
}

// Proves a RUST_LOG that is no filter is bad input: exit 3 and a message naming it, before any
// world runs, never a panic.
#[test]
fn a_bad_rust_log_exits_3_with_a_clear_message() {
    let (code, stdout, stderr) = lease_sim(&["run", "--seed", "1"], Some("lease_sim=loud"));
    assert_eq!(code, Some(3), "{stdout}{stderr}");
    assert!(stderr.contains("RUST_LOG=\"lease_sim=loud\""), "{stderr}");
    assert!(!stderr.contains("panicked") && !stdout.contains("lease-sim run:"), "{stdout}{stderr}");
}
