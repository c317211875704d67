//! lease-sim: the deterministic madsim harness for lease-core.

#[cfg(not(madsim))]
compile_error!(
    "lease-sim needs `--cfg madsim`. It is set in .cargo/config.toml; a RUSTFLAGS environment \
     variable replaces it silently. Unset RUSTFLAGS, or add `--cfg madsim` to it."
);

pub mod check;
pub mod history;
