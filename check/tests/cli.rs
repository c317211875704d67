//! `lease-check` as a user runs it: a history that cannot be judged is exit 3 with a message that
//! says why, never a panic or an abort; one that can is judged, whatever its times start at.

use std::path::PathBuf;
use std::process::{Command, Output};

fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lease-check-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("a scratch file");
    path
}

fn lease_check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lease-check")).args(args).output().expect("lease-check runs")
}

const RUN: &str = r#"{"t_us":1700000000000000,"node":"table","kind":"run","history_version":6,"batch_max":4,"capacity":10,"lease_ttl_us":300000,"attempts_max":3}"#;

/// A small store-shaped history stamped in microseconds since 1970: one job granted, its effect
/// recorded and completed.
fn story() -> String {
    let t = 1_700_000_000_000_000u64;
    let lines = [
        RUN.to_string(),
        format!(r#"{{"t_us":{t},"node":"table","kind":"arrived","job":1,"backlog":1}}"#),
        format!(
            r#"{{"t_us":{},"node":"table","kind":"granted","job":1,"epoch":1,"owner":"w0","expires_at_us":{},"attempt":1}}"#,
            t + 10,
            t + 300_010
        ),
        format!(
            r#"{{"t_us":{},"node":"ledger","kind":"looked_up","from":"w0","job":1,"op":{{"job":1,"step":0}},"epoch":1}}"#,
            t + 20
        ),
        format!(r#"{{"t_us":{},"node":"w0","kind":"executing","job":1,"op":{{"job":1,"step":0}},"epoch":1}}"#, t + 30),
        format!(
            r#"{{"t_us":{},"node":"ledger","kind":"effect_applied","from":"w0","job":1,"op":{{"job":1,"step":0}},"epoch":1,"output":7}}"#,
            t + 40
        ),
        format!(
            r#"{{"t_us":{},"node":"table","kind":"terminal","from":"w0","job":1,"outcome":"completed","output":7,"epoch":1}}"#,
            t + 50
        ),
    ];
    lines.join("\n") + "\n"
}

// Proves a history whose times are microseconds since 1970 is checked and reported on, its
// report's windows laid out from its first line (so it finishes at once, in little memory).
#[test]
fn a_history_stamped_in_real_time_is_checked_and_reported() {
    let file = scratch("real-time.jsonl", &story());
    let checked = lease_check(&["check", file.to_str().unwrap()]);
    assert_eq!(checked.status.code(), Some(0), "{}", String::from_utf8_lossy(&checked.stdout));
    let out = file.with_extension("report");
    let reported = lease_check(&["report", file.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(reported.status.code(), Some(0), "{}", String::from_utf8_lossy(&reported.stderr));
    let json = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    assert!(json.contains("\"origin_us\": 1700000000000000"), "{json}");
    assert!(out.join("timeline.svg").exists() && out.join("report.txt").exists());
}

// Proves every kind of bad input is exit 3 with a message naming the problem: a missing file, an
// empty one, no run line, a bad line, an unknown version, a second run line, lines out of time
// order, a window too short for the span, and a bad --window.
#[test]
fn bad_input_is_exit_3_with_a_message() {
    let story = story();
    let mut lines: Vec<&str> = story.lines().collect();
    let no_run = lines[1..].join("\n");
    let bad_line = format!("{RUN}\n{{\"t_us\":1,\"node\":\"x9\",\"kind\":\"healed\"}}\n");
    let version = RUN.replace("\"history_version\":6", "\"history_version\":99");
    let twice = format!("{story}{RUN}\n");
    lines.swap(2, 3);
    let late = lines.join("\n");
    let cases: Vec<(&str, String, &str)> = vec![
        ("empty.jsonl", String::new(), "empty"),
        ("no-run.jsonl", no_run, "run"),
        ("bad-line.jsonl", bad_line, "line 2"),
        ("version.jsonl", version, "history_version 99"),
        ("twice.jsonl", twice, "second `run` line"),
    ];
    for (name, text, says) in cases {
        let file = scratch(name, &text);
        for command in ["check", "report", "diagnose"] {
            let output = lease_check(&[command, file.to_str().unwrap()]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(3), "{command} {name}: {stderr}");
            assert!(stderr.contains(says), "{command} {name}: {stderr:?} does not say {says:?}");
        }
    }
    let late = scratch("late.jsonl", &late);
    let output = lease_check(&["report", late.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&output.stderr).contains("time order"));
    let long = scratch("long.jsonl", &story);
    let output = lease_check(&["report", long.to_str().unwrap(), "--window", "1us"]);
    assert_eq!(output.status.code(), Some(0), "50 us of history is 51 windows of 1 us");
    let spread = story.replace("\"t_us\":1700000000000050", "\"t_us\":1700000900000000");
    let spread = scratch("spread.jsonl", &spread);
    let output = lease_check(&["report", spread.to_str().unwrap(), "--window", "1ms"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("--window"), "{stderr}");
    let missing = lease_check(&["check", "/no/such/history.jsonl"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
    for window in ["0ms", "x", "1e30s"] {
        let output = lease_check(&["report", long.to_str().unwrap(), "--window", window]);
        assert_eq!(output.status.code(), Some(3), "--window {window}");
    }
}
