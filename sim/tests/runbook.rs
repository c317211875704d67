//! RUNBOOK.md's commands, run as written: every line of every `sh` block, in order, in one
//! directory holding the histories the runbook names, with `lease-sim` on the PATH. A line ending
//! in `# exits N` must exit N; every other line must exit 0.

use lease_history::to_jsonl;
use lease_sim::runner::Target;
use lease_sim::scenarios::Scenario;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The runbook's commands, with the line each starts on and the exit status expected.
fn commands(text: &str) -> Vec<(usize, String, i32)> {
    let mut commands = Vec::new();
    let mut in_block = false;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_block = !in_block && trimmed == "```sh";
            continue;
        }
        if !in_block || trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (command, expected) = match trimmed.rsplit_once("# exits ") {
            Some((command, code)) => (command.trim(), code.trim().parse().expect("`# exits N` takes a number")),
            None => (trimmed, 0),
        };
        commands.push((index + 1, command.to_string(), expected));
    }
    commands
}

fn write_history(dir: &Path, name: &str, scenario: Scenario, seed: u64) {
    let run = Target::new(scenario).run(seed);
    std::fs::write(dir.join(name), to_jsonl(&run.history)).unwrap();
}

// Proves every command of RUNBOOK.md runs as written and exits as it says, against histories
// this test makes, and that what the runbook promises about them is there: the practice
// incident is put down to workers, and the quarantine's two outputs are found.
#[test]
fn every_runbook_command_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join("RUNBOOK.md")).expect("RUNBOOK.md at the repository's root");
    let commands = commands(&text);
    assert!(commands.len() >= 20, "only {} commands found in RUNBOOK.md", commands.len());
    let dir = std::env::temp_dir().join(format!("lease-sim-runbook-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    write_history(&dir, "history.jsonl", Scenario::from_name("crash-loop").unwrap(), 3);
    write_history(&dir, "quarantine.jsonl", Scenario::CONFLICTING_OUTPUTS, 1);
    let bin: PathBuf = PathBuf::from(env!("CARGO_BIN_EXE_lease-sim")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut outputs = String::new();
    for (line, command, expected) in &commands {
        let output =
            Command::new("sh").arg("-c").arg(command).current_dir(&dir).env("PATH", &path).output().expect("sh runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(*expected),
            "RUNBOOK.md line {line}: `{command}` exited {:?}, not {expected}\n{stdout}{stderr}",
            output.status.code()
        );
        assert!(!stderr.contains("panicked"), "RUNBOOK.md line {line}: `{command}` panicked: {stderr}");
        outputs.push_str(&stdout);
    }
    assert!(outputs.contains("cause WORKERS"), "the practice incident is not put down to workers:\n{outputs}");
    assert!(outputs.contains("both claim its operation"), "the quarantine's outputs were not found:\n{outputs}");
    for report in ["incident", "surge", "slowdown", "outage", "mass"] {
        assert!(dir.join(report).join("timeline.svg").exists(), "{report}/timeline.svg");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

// Proves the extraction reads `sh` blocks only, skips comments, and takes `# exits N`.
#[test]
fn commands_are_read_from_sh_blocks_only() {
    let text =
        "```sh\nlease-sim a\n# a comment\n\nlease-sim b  # exits 1\n```\n```\nnot a command\n```\n```json\n{}\n```\n";
    let found = commands(text);
    assert_eq!(found, vec![(2, "lease-sim a".to_string(), 0), (5, "lease-sim b".to_string(), 1)]);
}
