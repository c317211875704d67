//! `lease-sim`: run one seed, sweep many, hunt planted bugs, or check a history file. See
//! [`lease_sim::cli`].

fn main() -> std::process::ExitCode {
    quiet_on_a_closed_pipe();
    lease_sim::cli::main()
}

/// Restores the default action of SIGPIPE, which Rust's runtime ignores: then a write to a closed
/// pipe (`lease-sim run … | head`) ends the process quietly, as it does `cat` or `grep`, instead of
/// failing the write and panicking in `println!`. Every file the tool writes is written atomically
/// (a temporary file renamed into place), so an end here leaves no half-written file behind.
fn quiet_on_a_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in `main`, before any thread exists; `signal` with `SIG_DFL`
    // only restores the default disposition of one signal.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
