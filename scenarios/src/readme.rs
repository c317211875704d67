//! The scenario table of docs/scenarios.md, generated from the registry
//! (`lease_sim::scenarios::Scenario::ALL`) and the proof modules ([`crate::PROOFS`]): a test holds
//! docs/scenarios.md to it, word for word.

use crate::PROOFS;
use lease_sim::scenarios::Scenario;

/// The scenario table as docs/scenarios.md shows it: one row per scenario in the registry's order,
/// with its name, its proof module (empty when it has none) and its sentence.
pub fn scenario_table() -> String {
    let mut table = String::from("| name | module | what it shows |\n| --- | --- | --- |\n");
    for &scenario in Scenario::ALL {
        let module = proof_of(scenario).map_or(" ".to_string(), |module| format!(" `{module}` "));
        table += &format!("| `{}` |{module}| {} |\n", scenario.name(), scenario.about());
    }
    table
}

/// The proof module of `scenario`, if it has one.
pub fn proof_of(scenario: Scenario) -> Option<&'static str> {
    let mut proofs = PROOFS.iter().filter(|(_, proved)| *proved == scenario).map(|(module, _)| *module);
    let proof = proofs.next();
    assert!(proofs.next().is_none(), "{} has two proof modules", scenario.name());
    proof
}

#[cfg(test)]
mod tests {
    use super::scenario_table;
    use crate::PROOFS;
    use lease_sim::scenarios::Scenario;

    // Proves docs/scenarios.md's scenario table is the registry's: it contains, word for word and
    // with no row more, the table generated from `Scenario::ALL` (names and sentences, in order)
    // and the proof modules. On a difference it prints the table to paste in.
    #[test]
    fn the_readme_scenario_table_is_the_registry() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios.md");
        let readme = std::fs::read_to_string(path).expect("docs/scenarios.md in the repository");
        let table = scenario_table();
        // Blank lines around it: no stale row before or after the registry's.
        assert!(
            readme.contains(&format!("\n\n{table}\n")),
            "docs/scenarios.md's scenario table differs from the registry; it should be:\n\n{table}"
        );
    }

    // Proves every proof module proves a registered scenario (one of `Scenario::ALL`, not a
    // constant left out of it).
    #[test]
    fn every_proof_module_proves_a_registered_scenario() {
        for (module, scenario) in PROOFS {
            assert!(Scenario::ALL.contains(scenario), "{module} proves {scenario:?}, which is not registered");
        }
    }
}
