//! Proves that no seed that once failed fails again unseen: every seed of
//! `scenarios/regressions.txt` runs on every `cargo test`. How: parse the list (a bad line is a
//! test failure naming it), run each seed, and demand what its line says.
//!
//! One entry a line, `scenario seed [bug]  # why it is here`:
//! - without a bug, the seed must hold every invariant: it once failed (a protocol bug, a false
//!   alarm, a harness bug), and the fix must stay fixed;
//! - with a planted bug (a name from `lease-sim bugs`), the seed must FAIL: it pins a seed that
//!   catches that bug, so a checker that loses its teeth fails here.
//!
//! The `#` comment is required: a seed nobody can explain gets deleted, not kept. Blank lines and
//! lines that are only a comment are skipped. A nightly failure, once fixed, is added from its
//! `seed-S.reproduce` file (its `--scenario`, `--seed`, and `--bug` if any).

use lease_core::Bug;
use lease_sim::runner::Target;
use lease_sim::scenario::Scenario;
use lease_sim::world::Verdict;

/// The list, as compiled in.
pub const REGRESSIONS: &str = include_str!("../regressions.txt");

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regression {
    /// The line it is on, from 1.
    pub line: usize,
    /// The scenario, and the planted bug if any.
    pub target: Target,
    /// The seed.
    pub seed: u64,
    /// Why it is there: the line's comment.
    pub why: String,
}

impl Regression {
    /// Runs the seed; `Err` says how the outcome differs from what the line demands.
    pub fn check(&self) -> Result<(), String> {
        let report = self.target.run(self.seed);
        let reproduce = self.target.reproduce(self.seed);
        match (&report.verdict, self.target.bug) {
            (Verdict::Held, None) => Ok(()),
            (Verdict::Safety(_) | Verdict::Liveness(_) | Verdict::Crash(_), Some(_)) => Ok(()),
            (Verdict::Crash(crash), None) => Err(format!("line {}: {crash}\n  reproduce: {reproduce}", self.line)),
            (Verdict::Safety(violation) | Verdict::Liveness(violation), None) => {
                Err(format!("line {}: failed again: {violation}\n  reproduce: {reproduce}", self.line))
            }
            (Verdict::Held, Some(bug)) => Err(format!(
                "line {}: the planted bug {bug} escaped: every invariant held\n  reproduce: {reproduce}",
                self.line
            )),
        }
    }
}

/// Parses the list; the error names the first bad line and says what is wrong with it.
pub fn parse(text: &str) -> Result<Vec<Regression>, String> {
    let mut regressions = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let bad = |why: String| format!("regressions.txt line {line}: {why}: {raw:?}");
        let (entry, why) = raw.split_once('#').map_or((raw, None), |(entry, why)| (entry, Some(why.trim())));
        let words: Vec<&str> = entry.split_whitespace().collect();
        if words.is_empty() {
            continue; // blank, or only a comment
        }
        let why = why.filter(|why| !why.is_empty()).ok_or_else(|| bad("no `# why` comment".to_string()))?;
        let [scenario, seed, bug @ ..] = words.as_slice() else {
            return Err(bad("write `scenario seed [bug]  # why`".to_string()));
        };
        let scenario = Scenario::from_name(scenario).ok_or_else(|| bad(format!("unknown scenario {scenario:?}")))?;
        let seed = seed.parse::<u64>().map_err(|_| bad(format!("{seed:?} is not a seed")))?;
        let bug = match bug {
            [] => None,
            [bug] => Some(bug.parse::<Bug>().map_err(|error| bad(error.to_string()))?),
            _ => return Err(bad("more than one bug".to_string())),
        };
        regressions.push(Regression { line, target: Target { scenario, bug }, seed, why: why.to_string() });
    }
    Ok(regressions)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every listed seed does what its line demands: holds, or with a planted bug, fails.
    #[test]
    fn every_regression_seed_behaves_as_listed() {
        let regressions = parse(REGRESSIONS).unwrap_or_else(|error| panic!("{error}"));
        let wrong: Vec<String> = regressions.iter().filter_map(|regression| regression.check().err()).collect();
        assert!(wrong.is_empty(), "{} of {} regression seeds:\n{}", wrong.len(), regressions.len(), wrong.join("\n"));
    }

    // The list holds the seeds that failed in this project's history, and at least one planted bug.
    #[test]
    fn the_list_keeps_the_historical_failures_and_a_planted_bug() {
        let regressions = parse(REGRESSIONS).unwrap_or_else(|error| panic!("{error}"));
        let listed = |scenario: Scenario, seed: u64| {
            regressions.iter().any(|r| r.target == Target::new(scenario) && r.seed == seed)
        };
        for (scenario, seed) in [
            (Scenario::Swarm, 100),
            (Scenario::ClockDrift, 42),
            (Scenario::ClockDrift, 60),
            (Scenario::MassExpiry, 133),
            (Scenario::Swarm, 936),
            (Scenario::Swarm, 1966),
        ] {
            assert!(listed(scenario, seed), "{} {seed} is missing from regressions.txt", scenario.name());
        }
        assert!(regressions.iter().any(|r| r.target.bug.is_some()), "no line with a planted bug");
    }

    // A bad line is refused with its number and what is wrong with it.
    #[test]
    fn a_bad_line_is_refused_naming_it() {
        let refused = |text: &str| parse(text).expect_err(text);
        assert_eq!(parse("\n# a comment\n   \nswarm 7  # why\n").unwrap()[0].line, 4);
        assert!(refused("swarm 7").contains("line 1: no `# why` comment"));
        assert!(refused("swarm 7 #  ").contains("no `# why` comment"));
        assert!(refused("\nswarm  # why").contains("line 2: write `scenario seed [bug]"));
        assert!(refused("weather 7  # why").contains("unknown scenario \"weather\""));
        assert!(refused("swarm seven  # why").contains("\"seven\" is not a seed"));
        assert!(refused("swarm -7  # why").contains("is not a seed"));
        assert!(refused("swarm 7 gremlins  # why").contains("line 1:"));
        assert!(refused("swarm 7 canary canary  # why").contains("more than one bug"));
    }
}
