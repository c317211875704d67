//! `lease-sim hunt`: every planted bug, and how fast the default sweep catches it.

use crate::runner;
use crate::scenario::Scenario;
use lease_core::Bug;
use std::sync::atomic::AtomicBool;

/// Exit status of `hunt`: 0 when every bug was caught within the budget, 1 when one escaped.
pub(super) fn hunt(scenario: Scenario, from: u64, budget: u64, threads: usize, json: bool) -> u8 {
    let stop = AtomicBool::new(false);
    let mut catches = Vec::new();
    if !json {
        println!(
            "hunt: scenario={} from seed {from}, budget {budget} seeds per bug, {threads} threads",
            scenario.name()
        );
        println!("{:<30} {:<22} {:>10} {:>8} {:>9}", "bug", "caught by", "first seed", "seeds", "wall ms");
    }
    for bug in Bug::ALL {
        let catch = runner::hunt(scenario, bug, from, budget, threads, &stop);
        if !json {
            let invariant = catch.invariant.map_or("ESCAPED".to_string(), |invariant| invariant.to_string());
            let first = catch.first_failing_seed.map_or("-".to_string(), |seed| seed.to_string());
            println!(
                "{:<30} {:<22} {:>10} {:>8} {:>9}",
                catch.bug, invariant, first, catch.seeds_to_failure, catch.wall_ms
            );
        }
        catches.push(catch);
    }
    let escaped = catches.iter().filter(|catch| catch.invariant.is_none()).count();
    if json {
        println!("{}", serde_json::to_string(&catches).expect("catches serialise"));
    } else {
        let mut seeds: Vec<u64> = catches.iter().map(|catch| catch.seeds_to_failure).collect();
        seeds.sort_unstable();
        println!("median seeds to failure: {}; escaped: {escaped}", seeds[seeds.len() / 2]);
    }
    u8::from(escaped > 0)
}
