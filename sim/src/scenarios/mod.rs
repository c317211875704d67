//! The scenarios: each is one [`Definition`] in its own file (its name, the sentence it proves,
//! the situations a sweep of it must reach, and how it draws its world from the seed), and
//! [`Scenario::ALL`] is the registry that lists them, `swarm` first.
//!
//! Every parameter of a run comes from the seed, through the scenario's own stream, so a seed
//! replays exactly: [`Scenario::params`] draws the base world every scenario shares
//! (`draw::base`), then the scenario's own faults over it. The proofs (scripted seeds, sweeps
//! with coverage, trace snapshots) live in the `lease-scenarios` crate, one module per scenario,
//! and the scenario table of docs/scenarios.md is tested against this registry there.
//!
//! Adding a scenario: a file here with its `DEFINITION`, and its line in each of the three lists
//! below (the module, the constant and [`Scenario::ALL`], and [`Scenario::LABELLED`] when it is
//! labelled); then its proof module and snapshot in `lease-scenarios`, and its row in
//! docs/scenarios.md.
//!
//! A *labelled* scenario knows the cause of its incident by construction ([`Scenario::label`]),
//! and [`truth::fault_causes`] says which faults a seed switched on, and when: what a diagnosis
//! read from the history alone is measured against.

mod draw;
pub mod truth;

mod arrival_bursts;
mod arrival_surge;
mod calm;
mod clock_drift;
mod conflicting_outputs;
mod crash_after_effect;
mod crash_loop;
mod cut_from_ledger;
mod cut_from_table;
mod dependency_outage;
mod dependency_slowdown;
mod failing_dependency;
mod fleet_cut_off;
mod large_batches;
mod ledger_restart;
mod mass_expiry;
mod paused_worker;
mod reclaimer_race;
mod service_handlers;
mod slow_dependency;
mod slowdown_and_cut_off;
mod surge;
mod surge_and_crash_loop;
mod swarm;

use crate::world::Params;
use lease_check::report::Cause;
use lease_core::Bug;
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// One scenario, as data.
pub struct Definition {
    /// The command-line name (`lease-sim run --scenario NAME`), in kebab case.
    pub name: &'static str,
    /// One line on what it shows: `lease-sim scenarios` prints it, and the table of
    /// docs/scenarios.md repeats it word for word.
    pub about: &'static str,
    /// The interesting situations (coverage names) a sweep of it must reach.
    pub situations: &'static [&'static str],
    /// The causes of its incidents, known by construction, for measuring a report's diagnosis:
    /// `None` for a scenario that is not labelled, `Some(&[])` for a labelled world with no
    /// fault, one cause, or several (a mixed incident).
    pub label: Option<&'static [Cause]>,
    /// Draws the scenario's world over the base one, from the seed's stream. The order of its
    /// draws is part of every seed's world: a change to it changes every seed.
    pub draw: fn(&mut Params, &mut Xoshiro256PlusPlus),
}

/// A scenario of the registry: a handle on its [`Definition`]. Two scenarios are the same when
/// they have the same name; they order and hash by name.
#[derive(Clone, Copy)]
pub struct Scenario(&'static Definition);

impl Scenario {
    /// Every scenario, `swarm` first: what `lease-sim scenarios` lists, in this order.
    pub const ALL: &'static [Scenario] = &[
        Scenario::SWARM,
        Scenario::SERVICE_HANDLERS,
        Scenario::LARGE_BATCHES,
        Scenario::CRASH_AFTER_EFFECT,
        Scenario::RECLAIMER_RACE,
        Scenario::PAUSED_WORKER,
        Scenario::CLOCK_DRIFT,
        Scenario::CONFLICTING_OUTPUTS,
        Scenario::MASS_EXPIRY,
        Scenario::CUT_FROM_TABLE,
        Scenario::CUT_FROM_LEDGER,
        Scenario::SLOW_DEPENDENCY,
        Scenario::FAILING_DEPENDENCY,
        Scenario::ARRIVAL_SURGE,
        Scenario::ARRIVAL_BURSTS,
        Scenario::CALM,
        Scenario::LEDGER_RESTART,
        Scenario::SURGE,
        Scenario::CRASH_LOOP,
        Scenario::FLEET_CUT_OFF,
        Scenario::DEPENDENCY_SLOWDOWN,
        Scenario::DEPENDENCY_OUTAGE,
        Scenario::SURGE_AND_CRASH_LOOP,
        Scenario::SLOWDOWN_AND_CUT_OFF,
    ];

    /// The labelled scenarios (those with a [`label`](Scenario::label)), in a fixed order: the
    /// calm world first, then one cause each, then the mixed ones. They share one world (a calm
    /// lead-in, the fault's window ending at the heal, a calm tail), drawn by `draw::labelled_world`.
    pub const LABELLED: &'static [Scenario] = &[
        Scenario::CALM,
        Scenario::SURGE,
        Scenario::CRASH_LOOP,
        Scenario::FLEET_CUT_OFF,
        Scenario::DEPENDENCY_SLOWDOWN,
        Scenario::DEPENDENCY_OUTAGE,
        Scenario::SURGE_AND_CRASH_LOOP,
        Scenario::SLOWDOWN_AND_CUT_OFF,
    ];

    /// `swarm`: every fault kind on, each seed its own mix (`swarm.rs`). The default.
    pub const SWARM: Scenario = Scenario(&swarm::DEFINITION);
    /// `service-handlers`: the swarm's faults, recording handlers and poison jobs
    /// (`service_handlers.rs`).
    pub const SERVICE_HANDLERS: Scenario = Scenario(&service_handlers::DEFINITION);
    /// `large-batches`: processes of 8 to 16 slots that batch, stalled and crashed mid-batch
    /// (`large_batches.rs`).
    pub const LARGE_BATCHES: Scenario = Scenario(&large_batches::DEFINITION);
    /// `crash-after-effect` (`crash_after_effect.rs`).
    pub const CRASH_AFTER_EFFECT: Scenario = Scenario(&crash_after_effect::DEFINITION);
    /// `reclaimer-race` (`reclaimer_race.rs`).
    pub const RECLAIMER_RACE: Scenario = Scenario(&reclaimer_race::DEFINITION);
    /// `paused-worker` (`paused_worker.rs`).
    pub const PAUSED_WORKER: Scenario = Scenario(&paused_worker::DEFINITION);
    /// `clock-drift` (`clock_drift.rs`).
    pub const CLOCK_DRIFT: Scenario = Scenario(&clock_drift::DEFINITION);
    /// `conflicting-outputs` (`conflicting_outputs.rs`).
    pub const CONFLICTING_OUTPUTS: Scenario = Scenario(&conflicting_outputs::DEFINITION);
    /// `mass-expiry` (`mass_expiry.rs`).
    pub const MASS_EXPIRY: Scenario = Scenario(&mass_expiry::DEFINITION);
    /// `cut-from-table` (`cut_from_table.rs`).
    pub const CUT_FROM_TABLE: Scenario = Scenario(&cut_from_table::DEFINITION);
    /// `cut-from-ledger` (`cut_from_ledger.rs`).
    pub const CUT_FROM_LEDGER: Scenario = Scenario(&cut_from_ledger::DEFINITION);
    /// `slow-dependency` (`slow_dependency.rs`).
    pub const SLOW_DEPENDENCY: Scenario = Scenario(&slow_dependency::DEFINITION);
    /// `failing-dependency` (`failing_dependency.rs`).
    pub const FAILING_DEPENDENCY: Scenario = Scenario(&failing_dependency::DEFINITION);
    /// `arrival-surge` (`arrival_surge.rs`).
    pub const ARRIVAL_SURGE: Scenario = Scenario(&arrival_surge::DEFINITION);
    /// `arrival-bursts`: arrivals offered in batches past capacity (`arrival_bursts.rs`).
    pub const ARRIVAL_BURSTS: Scenario = Scenario(&arrival_bursts::DEFINITION);
    /// `calm`: no faults, the baseline; labelled with no cause (`calm.rs`).
    pub const CALM: Scenario = Scenario(&calm::DEFINITION);
    /// `ledger-restart` (`ledger_restart.rs`).
    pub const LEDGER_RESTART: Scenario = Scenario(&ledger_restart::DEFINITION);
    /// `surge`: labelled arrivals (`surge.rs`).
    pub const SURGE: Scenario = Scenario(&surge::DEFINITION);
    /// `crash-loop`: labelled workers (`crash_loop.rs`).
    pub const CRASH_LOOP: Scenario = Scenario(&crash_loop::DEFINITION);
    /// `fleet-cut-off`: labelled workers (`fleet_cut_off.rs`).
    pub const FLEET_CUT_OFF: Scenario = Scenario(&fleet_cut_off::DEFINITION);
    /// `dependency-slowdown`: labelled dependency (`dependency_slowdown.rs`).
    pub const DEPENDENCY_SLOWDOWN: Scenario = Scenario(&dependency_slowdown::DEFINITION);
    /// `dependency-outage`: labelled dependency (`dependency_outage.rs`).
    pub const DEPENDENCY_OUTAGE: Scenario = Scenario(&dependency_outage::DEFINITION);
    /// `surge-and-crash-loop`: labelled arrivals and workers (`surge_and_crash_loop.rs`).
    pub const SURGE_AND_CRASH_LOOP: Scenario = Scenario(&surge_and_crash_loop::DEFINITION);
    /// `slowdown-and-cut-off`: labelled dependency and workers (`slowdown_and_cut_off.rs`).
    pub const SLOWDOWN_AND_CUT_OFF: Scenario = Scenario(&slowdown_and_cut_off::DEFINITION);

    /// The command-line name.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// One line on what it shows.
    pub fn about(self) -> &'static str {
        self.0.about
    }

    /// The interesting situations a sweep of this scenario must reach (coverage names).
    pub fn situations(self) -> &'static [&'static str] {
        self.0.situations
    }

    /// The causes of its incidents, known by construction: `None` when it is not labelled,
    /// `Some(&[])` for the calm labelled world, else the causes its fault window switches on.
    pub fn label(self) -> Option<&'static [Cause]> {
        self.0.label
    }

    /// Looks a scenario up by name.
    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.iter().copied().find(|scenario| scenario.name() == name)
    }

    /// The parameters this scenario chooses for `seed`: the base world, then the scenario's own
    /// draws, on one stream.
    pub fn params(self, seed: u64, bug: Option<Bug>) -> Params {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5eed_1ea5e);
        let mut params = draw::base(self.name(), seed, bug, &mut rng);
        (self.0.draw)(&mut params, &mut rng);
        params.schedule_windows();
        params.schedule.sort_by_key(|&(at, _)| at);
        params
    }
}

impl PartialEq for Scenario {
    fn eq(&self, other: &Scenario) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Scenario {}

impl PartialOrd for Scenario {
    fn partial_cmp(&self, other: &Scenario) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scenario {
    fn cmp(&self, other: &Scenario) -> std::cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl std::hash::Hash for Scenario {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Scenario").field(&self.name()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Scenario;
    use std::collections::BTreeSet;

    // Proves the registry is whole and unambiguous: names are unique and kebab case, `swarm` comes
    // first, every name finds its scenario, and every definition file in this directory is
    // listed in `Scenario::ALL` under its own name (a file added but never registered would be a
    // scenario no command can run).
    #[test]
    fn every_definition_is_registered_once_under_its_own_name() {
        assert_eq!(Scenario::ALL[0], Scenario::SWARM, "swarm first: the default");
        let names: BTreeSet<&str> = Scenario::ALL.iter().map(|scenario| scenario.name()).collect();
        assert_eq!(names.len(), Scenario::ALL.len(), "a name registered twice");
        for &scenario in Scenario::ALL {
            let name = scenario.name();
            assert!(name.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{name}: kebab case");
            assert_eq!(Scenario::from_name(name), Some(scenario));
            assert!(!scenario.about().is_empty() && !scenario.about().contains('\n'), "{name}: one line");
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scenarios");
        let mut files = BTreeSet::new();
        for entry in std::fs::read_dir(&dir).expect("the scenarios directory") {
            let file = entry.expect("a directory entry").file_name().into_string().expect("a UTF-8 name");
            let Some(module) = file.strip_suffix(".rs") else { continue };
            if !["mod", "params", "draw", "truth"].contains(&module) {
                files.insert(module.replace('_', "-"));
            }
        }
        let names: BTreeSet<String> = names.into_iter().map(str::to_string).collect();
        assert_eq!(files, names, "definition files (left) and registered names (right) differ");
    }

    // Proves the labelled list is the registry's labelled scenarios, each once, calm first, and
    // that a single-cause label names one cause and a mixed one distinct causes.
    #[test]
    fn the_labelled_list_is_every_labelled_scenario() {
        let labelled: BTreeSet<Scenario> = Scenario::ALL.iter().copied().filter(|s| s.label().is_some()).collect();
        let listed: BTreeSet<Scenario> = Scenario::LABELLED.iter().copied().collect();
        assert_eq!(listed.len(), Scenario::LABELLED.len(), "a labelled scenario listed twice");
        assert_eq!(labelled, listed);
        assert_eq!(Scenario::LABELLED[0], Scenario::CALM);
        assert_eq!(Scenario::CALM.label(), Some(&[][..]));
        for scenario in Scenario::LABELLED {
            let causes = scenario.label().expect("labelled");
            let distinct: BTreeSet<_> = causes.iter().collect();
            assert_eq!(distinct.len(), causes.len(), "{scenario:?}: a cause twice");
        }
        assert_eq!(Scenario::SWARM.label(), None);
    }

    // Proves a scenario is one stream: the same seed gives the same parameters, and another
    // seed other ones, for every scenario.
    #[test]
    fn a_seed_draws_the_same_world_every_time() {
        for &scenario in Scenario::ALL {
            assert_eq!(scenario.params(11, None), scenario.params(11, None), "{scenario:?}");
            assert_ne!(scenario.params(11, None), scenario.params(12, None), "{scenario:?}");
        }
    }
}
