//! `lease-sim hunt`: every planted bug, and how fast the default sweep catches it, from several
//! starting seeds: the median says how loud a bug is, the worst how long a night must run.

use crate::runner::Target;
use crate::runner::{self, Hunted};
use crate::scenarios::Scenario;
use crate::world::durable::StoreKind;
use lease_core::Bug;
use std::sync::atomic::AtomicBool;

/// How far apart the starting seeds are: further than any budget, so that no two starts share a
/// seed.
pub const START_SPACING: u64 = 100_000;

/// The starting seeds of a hunt: `starts` of them from `from`, [`START_SPACING`] apart.
pub fn starts(from: u64, starts: u64) -> Vec<u64> {
    (0..starts).map(|k| from + k * START_SPACING).collect()
}

/// Exit status of `hunt`: 0 when every bug was caught within the budget from every start, 1 when
/// one escaped.
#[allow(clippy::too_many_arguments)]
pub(super) fn hunt(
    scenario: Scenario,
    store: StoreKind,
    bugs: &[Bug],
    from: u64,
    starts: &[u64],
    budget: u64,
    threads: usize,
    json: bool,
) -> u8 {
    let stop = AtomicBool::new(false);
    let mut hunts: Vec<Hunted> = Vec::new();
    if !json {
        println!(
            "hunt: scenario={} store={store} from {} starting seeds ({from}, {}, ...), budget {budget} seeds per start, \
             {threads} threads",
            scenario.name(),
            starts.len(),
            from + START_SPACING,
        );
        println!("{:<30} {:<34} {:>7} {:>7} {:>8} {:>9}", "bug", "caught by", "median", "worst", "escaped", "wall ms");
    }
    for &bug in bugs {
        let target = Target::planted(scenario, Some(bug)).on(store);
        let hunted = runner::hunt_from(target, starts, budget, threads, &stop);
        if !json {
            let caught_by = hunted.caught_by().iter().map(|finding| finding.name()).collect::<Vec<_>>().join(",");
            let caught_by = if caught_by.is_empty() { "ESCAPED".to_string() } else { caught_by };
            let wall_ms: u64 = hunted.catches.iter().map(|catch| catch.wall_ms).sum();
            println!(
                "{:<30} {:<34} {:>7} {:>7} {:>6}/{} {:>9}",
                hunted.bug,
                caught_by,
                hunted.median_seeds,
                hunted.worst_seeds,
                hunted.escaped,
                starts.len(),
                wall_ms
            );
        }
        hunts.push(hunted);
    }
    let escaped = hunts.iter().filter(|hunted| hunted.escaped > 0).count();
    if json {
        println!("{}", serde_json::to_string(&hunts).expect("hunts serialise"));
    } else {
        let mut medians: Vec<u64> = hunts.iter().map(|hunted| hunted.median_seeds).collect();
        medians.sort_unstable();
        println!(
            "median of the medians: {} seeds; bugs that escaped from some start: {escaped}",
            medians[medians.len() / 2]
        );
        for hunted in &hunts {
            if let Some(first) = hunted.catches.iter().find_map(|catch| catch.reproduce.as_ref()) {
                println!("  {}: {first}", hunted.bug);
            }
        }
    }
    u8::from(escaped > 0)
}
