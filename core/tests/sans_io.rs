//! The core is sans-IO: its manifest names no simulator, async runtime or randomness.
//!
//! DESIGN.md: "It has no async, no madsim, no tokio, no clock reads, no randomness, no threads."
//! This reads core/Cargo.toml itself (no TOML crate: the core's dev-dependencies stay as they are)
//! and checks every section of normal dependencies, target-specific ones included.

/// Crates the core must never depend on, and their families (`tokio-util`, `rand_core`, ...).
const FORBIDDEN: [&str; 5] = ["madsim", "tokio", "rand", "futures", "async-std"];

/// The crates named in a manifest's normal dependency sections: `[dependencies]` and
/// `[target.'...'.dependencies]`, as keys, dotted keys or `package = "..."` renames.
fn normal_dependencies(manifest: &str) -> Vec<String> {
    let mut names = vec![];
    let mut in_section = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            let header = line.trim_matches(|c| c == '[' || c == ']').trim();
            in_section =
                header == "dependencies" || (header.starts_with("target.") && header.ends_with(".dependencies"));
            // A table header such as [dependencies.tokio] names the crate itself.
            if let Some(name) = header.strip_prefix("dependencies.") {
                names.push(name.trim_matches('"').to_string());
            }
            continue;
        }
        if !in_section || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let key = key.trim().split('.').next().unwrap_or_default().trim_matches('"');
        names.push(key.to_string());
        if let Some(renamed) = value.split("package").nth(1).and_then(|rest| rest.split('"').nth(1)) {
            names.push(renamed.to_string());
        }
    }
    names
}

fn forbidden(name: &str) -> bool {
    FORBIDDEN.iter().any(|bad| {
        name == *bad || name.strip_prefix(bad).is_some_and(|rest| rest.starts_with('-') || rest.starts_with('_'))
    })
}

#[test]
fn the_core_manifest_depends_on_no_simulator_runtime_or_randomness() {
    // Proves the layout rule: lease-core's normal dependencies name none of madsim, tokio, rand,
    // futures or async-std (nor their families), so the core can sit behind any IO unchanged.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let manifest = std::fs::read_to_string(path).expect("core/Cargo.toml is readable");
    let names = normal_dependencies(&manifest);
    assert!(!names.is_empty(), "found no [dependencies] in {path}: the parser is broken");
    assert!(names.iter().any(|name| name == "thiserror"), "expected thiserror among {names:?}");
    let bad: Vec<&String> = names.iter().filter(|name| forbidden(name)).collect();
    assert!(bad.is_empty(), "lease-core must stay sans-IO, but depends on {bad:?}");
}

#[test]
fn the_manifest_check_catches_a_forbidden_dependency_in_every_form() {
    // Proves the check can fail: plain keys, dotted keys, table headers, renames and
    // target-specific sections are all read; dev-dependencies are not normal dependencies.
    let manifest = r#"
[package]
name = "x"

[dependencies]
serde = { version = "1" }
tokio-util = "0.7"
rng = { package = "rand", version = "0.8" }
futures.workspace = true

[dependencies.madsim]
version = "0.2"

[target.'cfg(unix)'.dependencies]
async-std = "1"

[dev-dependencies]
rand_xoshiro = "0.6"
"#;
    let names = normal_dependencies(manifest);
    let bad: Vec<&str> = names.iter().map(String::as_str).filter(|name| forbidden(name)).collect();
    assert_eq!(bad, vec!["tokio-util", "rand", "futures", "madsim", "async-std"]);
    assert!(!names.iter().any(|name| name == "rand_xoshiro"), "dev-dependencies were read: {names:?}");
    assert!(!forbidden("serde") && !forbidden("randomish") && !forbidden("thiserror"));
}
