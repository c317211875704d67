//! What the command-line tests share: running the `lease-sim` binary as a user would.

use std::process::Command;

/// Runs `lease-sim` with `args`: its exit status, stdout and stderr.
pub fn lease_sim(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_lease-sim")).args(args).output().expect("lease-sim runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
