//! `lease-sim`: run one seed, sweep many, hunt planted bugs, or check a history file. See
//! [`lease_sim::cli`].

fn main() -> std::process::ExitCode {
    lease_sim::cli::main()
}
