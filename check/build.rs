//! Provenance: the commit and the toolchain these binaries were built from, for `lease-sim`'s run
//! header, sweep summaries and the nightly's reproduce files, `lease-live`'s header and every
//! binary's `--version` (see `src/provenance.rs`).
//!
//! - `LEASE_COMMIT`: `git rev-parse --short=12 HEAD`, with `-dirty` when `git status
//!   --porcelain` lists anything; `unknown` when there is no git, or the workspace is not the top
//!   of a git work tree (a source tarball, perhaps unpacked inside some other repository).
//! - `LEASE_TOOLCHAIN`: `$RUSTC --version`, the compiler cargo builds this crate with.
//!
//! The script reruns when HEAD moves (a commit, a checkout, a rebase) and when a source of the
//! binary changes, so that `-dirty` follows edits. An edit elsewhere (the README, `scenarios/`)
//! changes no byte of the binary and does not rebuild it; its `-dirty` catches up on the next
//! rebuild.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let check = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = check.parent().expect("check/ sits in the workspace").to_path_buf();
    let own = is_own_repository(&workspace);
    println!("cargo:rustc-env=LEASE_COMMIT={}", commit(&workspace, own));
    println!("cargo:rustc-env=LEASE_TOOLCHAIN={}", toolchain());
    println!("cargo:rerun-if-changed=build.rs");
    for path in watched(&workspace, own) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Runs git in `dir` and returns its trimmed output, or `None` if git is missing or fails. Git
/// must not take the index lock: a build may run beside another git command.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git").current_dir(dir).env("GIT_OPTIONAL_LOCKS", "0").args(args).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Whether `workspace` is the top of its git work tree: if not, the repository git finds is
/// someone else's, and its commit says nothing about these sources.
fn is_own_repository(workspace: &Path) -> bool {
    let Some(top) = git(workspace, &["rev-parse", "--show-toplevel"]) else { return false };
    let canonical = |path: &Path| std::fs::canonicalize(path).ok();
    canonical(Path::new(&top)).is_some() && canonical(Path::new(&top)) == canonical(workspace)
}

fn commit(workspace: &Path, own: bool) -> String {
    if !own {
        return "unknown".to_string();
    }
    let Some(head) = git(workspace, &["rev-parse", "--short=12", "HEAD"]).filter(|head| !head.is_empty()) else {
        return "unknown".to_string();
    };
    match git(workspace, &["status", "--porcelain"]) {
        Some(changes) if changes.is_empty() => head,
        Some(_) => format!("{head}-dirty"),
        // A commit whose cleanliness is unknown is not claimed clean.
        None => format!("{head}-dirty"),
    }
}

fn toolchain() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(rustc).arg("--version").output();
    match output {
        Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout).trim().to_string(),
        _ => "unknown".to_string(),
    }
}

/// What the commit and the dirty mark depend on: git's HEAD and the ref it points to (found by
/// git itself, so that a worktree, whose `.git` is a file, works too), and the sources of the
/// binary. Only paths that exist: cargo reruns the script on every build for a missing one.
fn watched(workspace: &Path, own: bool) -> Vec<PathBuf> {
    let sources = ["core", "history", "check", "store", "sim/src", "live/src", "Cargo.toml", "Cargo.lock", ".cargo"];
    let mut paths: Vec<PathBuf> = sources.iter().map(|path| workspace.join(path)).collect();
    if own {
        // Relative to the directory git ran in, unless absolute (`join` keeps those whole).
        let git_path =
            |path: &str| git(workspace, &["rev-parse", "--git-path", path]).map(|found| workspace.join(found));
        paths.extend(git_path("HEAD"));
        paths.extend(git_path("packed-refs"));
        // Detached HEAD (a rebase, a CI checkout) has no branch: HEAD itself holds the commit.
        let branch = git(workspace, &["symbolic-ref", "-q", "HEAD"]).and_then(|branch| git_path(&branch));
        if let Some(branch) = branch {
            // A packed ref (a fresh clone's) has no file yet: the first commit writes one, into
            // the nearest directory that exists.
            if !branch.exists() {
                paths.extend(branch.ancestors().skip(1).find(|dir| dir.is_dir()).map(Path::to_path_buf));
            }
            paths.push(branch);
        }
    }
    paths.retain(|path| path.exists());
    paths
}
