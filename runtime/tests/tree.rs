//! lease-runtime's dependency tree is a promise: the simulator links it, so its loop must not
//! pull in an async runtime of its own, a simulator or randomness. This asks cargo itself for the
//! tree (from Cargo.lock, offline): without the `store` feature, the runtime's normal
//! dependencies hold no tokio, madsim or rand; with it (the default), still no madsim (rand
//! arrives there with the PostgreSQL driver, for its authentication).

use std::process::Command;

/// Every crate name in lease-runtime's normal dependency tree, itself included, with `features`.
fn tree(features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let output = Command::new(cargo)
        .current_dir(workspace)
        .args(["tree", "--offline", "--locked", "-p", "lease-runtime", "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}"])
        .args(features)
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().filter_map(|line| line.split_whitespace().next()).map(str::to_string).collect()
}

/// Whether `name` is of the family `family` (the crate itself, or `family-…`, `family_…`).
fn of(name: &str, family: &str) -> bool {
    name == family || name.strip_prefix(family).is_some_and(|rest| rest.starts_with('-') || rest.starts_with('_'))
}

fn families_in<'a>(names: &'a [String], families: &[&str]) -> Vec<&'a String> {
    names.iter().filter(|name| families.iter().any(|family| of(name, family))).collect()
}

// Proves the runtime's core is executor-agnostic by construction: without the store feature its
// tree holds futures and no tokio, madsim or rand; with the store feature, tokio (for the host
// clock and the store) but still no madsim. Fails if a dependency drags one in.
#[test]
fn the_runtime_depends_on_no_runtime_simulator_or_randomness() {
    let core = tree(&["--no-default-features"]);
    assert!(core.iter().any(|name| name == "futures"), "the loop runs on futures: {core:?}");
    let bad = families_in(&core, &["tokio", "madsim", "rand"]);
    assert!(bad.is_empty(), "lease-runtime without `store` must not depend on {bad:?}");
    let service = tree(&[]);
    assert!(service.iter().any(|name| name == "lease-store"), "the default has the store client: {service:?}");
    let bad = families_in(&service, &["madsim"]);
    assert!(bad.is_empty(), "lease-runtime must not depend on {bad:?}");
}
