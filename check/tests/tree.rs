//! lease-check's dependency tree is a promise: a team with its own queue runs the checker without
//! a simulator, an async runtime or a random number generator in its build. This asks cargo
//! itself for the tree (normal, build and dev dependencies, from Cargo.lock, offline) and fails on
//! any crate of those families; lease-history is held to the same.

use std::process::Command;

/// Crate families the verdict must never pull in.
const FORBIDDEN: [&str; 4] = ["madsim", "tokio", "rand", "futures"];

/// Every crate name in `package`'s dependency tree, itself included.
fn tree(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let output = Command::new(cargo)
        .current_dir(workspace)
        .args(["tree", "--offline", "--locked", "-p", package, "-e", "normal,build,dev", "--prefix", "none"])
        .args(["--format", "{p}"])
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "cargo tree -p {package}: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().filter_map(|line| line.split_whitespace().next()).map(str::to_string).collect()
}

fn forbidden(name: &str) -> bool {
    FORBIDDEN.iter().any(|bad| {
        name == *bad || name.strip_prefix(bad).is_some_and(|rest| rest.starts_with('-') || rest.starts_with('_'))
    })
}

// Proves the layout rule: neither lease-check nor lease-history depends, even for its tests, on
// madsim, tokio, rand or futures (nor their families, e.g. rand_core, tokio-util).
#[test]
fn the_verdict_depends_on_no_simulator_runtime_or_randomness() {
    for package in ["lease-check", "lease-history"] {
        let names = tree(package);
        assert!(names.iter().any(|name| name == "serde"), "{package}'s tree without serde? {names:?}");
        let bad: Vec<&String> = names.iter().filter(|name| forbidden(name)).collect();
        assert!(bad.is_empty(), "{package} must not depend on {bad:?}");
    }
}

// Proves the check can fail: the simulator's tree holds madsim and rand.
#[test]
fn the_simulator_tree_is_caught() {
    let names = tree("lease-sim");
    assert!(names.iter().any(|name| forbidden(name) && name == "madsim"), "{names:?}");
    assert!(names.iter().any(|name| name == "rand_core"), "{names:?}");
}
