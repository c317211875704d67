//! # lease-scenarios: the named scenarios, and what each proves
//!
//! One module per scenario, named as the sentence it proves. Each opens with one comment saying
//! what it proves and how, and has two parts:
//!
//! - a **scripted** part: the exact situation, struck at fixed jobs (the scenario's `script`), on
//!   a fixed seed, with assertions on the history that show the situation happened and ended well;
//! - a **swept** part: the same scenario over many seeds, with random faults around the script,
//!   checked against every invariant, and required to reach the scenario's interesting situations
//!   (coverage: a sweep that never reaches the dangerous situation proves nothing).
//!
//! Each scenario is defined once, in its own file of `sim/src/scenarios/` (its name, its
//! sentence, its required situations and how it draws its world from the seed), so that the
//! command line can run it (`lease-sim run --scenario NAME`); `lease_sim::scenarios::Scenario::ALL`
//! lists them. The proof lives here.
//!
//! `LEASE_SEEDS=N` sweeps N seeds per scenario instead of the default; `LEASE_SEED=S` runs one.

use lease_sim::scenarios::Scenario;

/// Declares the proof modules, one per scenario, and [`PROOFS`], which pairs each module's name
/// with the scenario its `SCENARIO` names: what docs/scenarios.md's table shows beside the
/// registry.
macro_rules! proofs {
    ($($module:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every proof module's name, with the scenario it proves.
        pub const PROOFS: &[(&str, Scenario)] = &[$((stringify!($module), $module::SCENARIO)),*];
    };
}

proofs! {
    swarm_holds_every_invariant,
    service_handlers_record_once_and_dead_letter_what_is_refused,
    large_batches_judge_each_job_of_a_batch_on_its_own,
    crash_after_effect_is_adopted_not_repeated,
    two_reclaimers_race_and_exactly_one_wins,
    paused_worker_wakes_to_find_every_write_fenced,
    fast_and_slow_clocks_never_reclaim_an_unexpired_lease,
    conflicting_outputs_stop_the_batch_and_quarantine_the_job,
    mass_expiry_is_reclaimed_in_bounded_batches,
    workers_cut_off_from_the_table_keep_every_invariant,
    workers_cut_off_from_the_ledger_keep_every_invariant,
    slow_dependency_never_duplicates_an_effect,
    failing_dependency_counts_attempts_and_dead_letters,
    arrival_surge_past_capacity_is_rejected_visibly_and_nothing_accepted_is_lost,
    arrival_bursts_are_judged_job_by_job_and_nothing_accepted_is_lost,
    ledger_restart_answers_every_call_in_flight_and_duplicates_nothing,
    a_calm_labelled_world_has_no_incident,
    an_arrival_surge_alone_grows_the_backlog_until_it_passes,
    workers_in_a_crash_loop_grow_the_backlog_until_they_stay_up,
    a_fleet_cut_off_from_the_table_grows_the_backlog_until_it_is_back,
    a_dependency_slowdown_alone_grows_the_backlog_until_it_is_fast,
    a_dependency_outage_alone_grows_the_backlog_until_it_answers,
    a_surge_over_a_crash_loop_is_two_causes_at_once,
    a_slowdown_over_a_cut_off_is_two_causes_at_once,
}

pub mod unworkable_parameters_are_refused_not_run;

pub mod prove;
pub mod readme;
pub mod regressions;
