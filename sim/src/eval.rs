//! `lease-sim diagnose --eval`: how often the report names the right cause. Each labelled
//! scenario's seeds run, each history is reported on, and the cause named for the fault is
//! compared with the scenario's label; over `swarm` seeds, each incident's cause is compared with
//! the fault kinds the seed had switched on during it.

use crate::runner::Target;
use crate::scenarios::truth::{fault_causes, TrueFault};
use crate::scenarios::Scenario;
use crate::shard::{SeedPlan, Shard};
use lease_check::report::{Cause, Report};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

/// What the report said about one labelled seed's fault.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// `arrivals`, `workers`, `dependency`, `mixed`, `unknown`, or `none` (no incident overlapped
    /// the fault).
    pub reported: String,
    /// The causes named by the incidents that overlapped the fault.
    pub causes: Vec<Cause>,
    /// Whether that is the label: the single cause, `mixed` naming both causes, or no incident at
    /// all on a calm seed.
    pub correct: bool,
    /// Incidents outside the fault window (every incident, on a calm seed).
    pub false_incidents: usize,
    /// From the fault's start to the first correct label while the incident grew, µs.
    pub first_correct_us: Option<u64>,
    /// Whether every invariant held.
    pub held: bool,
}

/// One labelled scenario's seeds.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The scenario.
    pub scenario: String,
    /// Its label: `calm`, a cause, or `mixed (a + b)`.
    pub truth: String,
    /// Its causes.
    pub causes: Vec<Cause>,
    /// How many seeds reported each label (`arrivals`, `workers`, `dependency`, `mixed`,
    /// `unknown`, `none`).
    pub reported: BTreeMap<String, u64>,
    /// Seeds whose report was right.
    pub correct: u64,
    /// Seeds run.
    pub seeds: u64,
    /// Seeds with an incident outside the fault.
    pub seeds_with_false_incidents: u64,
    /// Median time from the fault's start to the first correct label, µs.
    pub median_first_correct_us: Option<u64>,
    /// Seeds where an invariant failed (expected 0).
    pub failed: u64,
}

/// Each cause's recall (over the scenarios labelled with it alone) and precision (over every
/// labelled seed the report put down to it alone).
#[derive(Debug, Clone, Serialize)]
pub struct Score {
    /// The cause.
    pub cause: Cause,
    /// Right / seeds of its scenarios.
    pub recall: f64,
    /// Right / seeds reported as it.
    pub precision: f64,
}

/// Over swarm seeds: how often each incident's causes were among the fault kinds switched on
/// during it.
#[derive(Debug, Clone, Serialize)]
pub struct Swarm {
    /// Seeds run.
    pub seeds: u64,
    /// Incidents that named at least one cause.
    pub incidents: u64,
    /// Of those, the ones whose every cause was switched on during the incident.
    pub agreeing: u64,
    /// `agreeing / incidents`.
    pub rate: f64,
    /// Incidents put down to `unknown`.
    pub unknown: u64,
    /// Disagreements by (reported, switched on), for the curious.
    pub disagreements: BTreeMap<String, u64>,
}

/// The whole evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct Eval {
    /// Seeds per labelled scenario.
    pub seeds: u64,
    /// One row per labelled scenario.
    pub rows: Vec<Row>,
    /// Recall and precision per cause.
    pub scores: Vec<Score>,
    /// Calm seeds with any incident, over calm seeds.
    pub calm_false_rate: f64,
    /// Mixed seeds reported `mixed` with both causes, over mixed seeds.
    pub mixed_rate: f64,
    /// Median, over every correct labelled seed with a fault, of the time to the first correct
    /// label, µs.
    pub median_first_correct_us: Option<u64>,
    /// The swarm's agreement.
    pub swarm: Swarm,
}

/// What a labelled seed's report can say about its fault: the confusion matrix's columns.
const REPORTED: [&str; 6] = ["arrivals", "workers", "dependency", "mixed", "unknown", "none"];

/// The targets (issue 12): recall at least this for every single cause...
pub const RECALL_MIN: f64 = 0.9;
/// ...false incidents on at most this share of calm seeds...
pub const CALM_FALSE_MAX: f64 = 0.05;
/// ...and every mixed scenario reported mixed (or both causes) on at least this share of seeds.
pub const MIXED_MIN: f64 = 0.9;

impl Eval {
    /// The targets this evaluation misses, in words (empty: every one met).
    pub fn missed(&self) -> Vec<String> {
        let mut missed = Vec::new();
        for score in &self.scores {
            if score.recall < RECALL_MIN {
                missed.push(format!("recall of {} is {:.3}, under {RECALL_MIN}", score.cause, score.recall));
            }
        }
        if self.calm_false_rate > CALM_FALSE_MAX {
            missed.push(format!("{:.3} of calm seeds had an incident, over {CALM_FALSE_MAX}", self.calm_false_rate));
        }
        if self.mixed_rate < MIXED_MIN {
            missed.push(format!(
                "mixed scenarios reported both causes on {:.3} of seeds, under {MIXED_MIN}",
                self.mixed_rate
            ));
        }
        missed
    }
}

/// The label a set of causes reads as.
pub fn label_of(causes: &[Cause]) -> String {
    match causes {
        [] => "calm".to_string(),
        [one] => one.name().to_string(),
        many => format!("mixed ({})", many.iter().map(|c| c.name()).collect::<Vec<_>>().join(" + ")),
    }
}

/// Runs `seeds` seeds of every labelled scenario and `swarm_seeds` swarm seeds on `threads`
/// threads, and scores the reports.
pub fn evaluate(seeds: u64, swarm_seeds: u64, threads: usize, on_done: &(dyn Fn() + Sync)) -> Eval {
    let mut rows = Vec::new();
    for &scenario in Scenario::LABELLED {
        let mut label: Vec<Cause> = scenario.label().expect("a labelled scenario has a label").to_vec();
        label.sort();
        let outcomes = run_seeds(scenario, seeds, threads, on_done, &|report, params_faults, held, seed| {
            judge(report, &label, params_faults, held, seed)
        });
        rows.push(row(scenario, &label, outcomes));
    }
    let swarm = swarm(swarm_seeds, threads, on_done);
    let scores = Cause::ALL
        .iter()
        .map(|&cause| {
            let own: Vec<&Row> = rows.iter().filter(|row| row.causes == [cause]).collect();
            let right: u64 = own.iter().map(|row| row.correct).sum();
            let seeds: u64 = own.iter().map(|row| row.seeds).sum();
            let named: u64 = rows.iter().map(|row| row.reported.get(cause.name()).copied().unwrap_or(0)).sum();
            Score {
                cause,
                recall: right as f64 / seeds.max(1) as f64,
                precision: if named == 0 { 0.0 } else { right as f64 / named as f64 },
            }
        })
        .collect();
    let share = |pick: &dyn Fn(&Row) -> bool, count: &dyn Fn(&Row) -> u64| {
        let picked: Vec<&Row> = rows.iter().filter(|row| pick(row)).collect();
        picked.iter().map(|row| count(row)).sum::<u64>() as f64
            / picked.iter().map(|row| row.seeds).sum::<u64>().max(1) as f64
    };
    let calm_false_rate = share(&|row| row.causes.is_empty(), &|row| row.seeds_with_false_incidents);
    let mixed_rate = share(&|row| row.causes.len() > 1, &|row| row.correct);
    let mut firsts: Vec<u64> = rows.iter().filter_map(|row| row.median_first_correct_us).collect();
    firsts.sort_unstable();
    Eval {
        seeds,
        median_first_correct_us: firsts.get(firsts.len() / 2).copied(),
        rows,
        scores,
        calm_false_rate,
        mixed_rate,
        swarm,
    }
}

type Judge<'a, T> = dyn Fn(&Report, &[TrueFault], bool, u64) -> T + Sync + 'a;

/// Runs seeds `0..seeds` of `scenario`, reports on each history and judges it.
fn run_seeds<T: Send + Ord>(
    scenario: Scenario,
    seeds: u64,
    threads: usize,
    on_done: &(dyn Fn() + Sync),
    judge: &Judge<'_, T>,
) -> Vec<T> {
    let target = Target::new(scenario);
    let plan = SeedPlan { base: 0, end: Some(seeds), shard: Shard::WHOLE };
    let results = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    crate::runner::sweep_plan(target, &plan, threads, &stop, &|run, result| {
        let report = Report::of(&run.history, None).expect("a simulated history always reports");
        let faults = fault_causes(&run.params);
        let judged = judge(&report, &faults, result.failure.is_none(), result.seed);
        results.lock().expect("no eval thread panics holding the results").push(judged);
        on_done();
    });
    let mut results = results.into_inner().expect("eval threads finished");
    results.sort();
    results
}

/// What one labelled seed's report said about its fault.
fn judge(report: &Report, label: &[Cause], faults: &[TrueFault], held: bool, seed: u64) -> Outcome {
    let window = faults.iter().map(|f| f.from_us).min().zip(faults.iter().map(|f| f.to_us).max());
    let overlaps = |from: u64, to: u64| window.is_some_and(|(start, end)| from < end && to > start);
    let (during, outside): (Vec<_>, Vec<_>) =
        report.incidents.iter().partition(|incident| overlaps(incident.from_us, incident.to_us));
    let mut causes: Vec<Cause> = during.iter().flat_map(|incident| incident.verdict.causes.iter().copied()).collect();
    causes.sort();
    causes.dedup();
    let reported = match (during.is_empty(), causes.as_slice()) {
        (true, _) => "none".to_string(),
        (false, []) => "unknown".to_string(),
        (false, [one]) => one.name().to_string(),
        (false, _) => "mixed".to_string(),
    };
    let correct = match label {
        [] => report.incidents.is_empty(),
        _ => causes == label,
    };
    let wanted = match label {
        [] => None,
        [one] => Some(one.name().to_string()),
        _ => Some("mixed".to_string()),
    };
    let first_correct_us = wanted.and_then(|wanted| {
        let start = window?.0;
        during
            .iter()
            .flat_map(|incident| incident.labels.iter())
            .filter(|l| l.cause == wanted)
            .map(|l| l.at_us.saturating_sub(start))
            .min()
    });
    Outcome {
        seed,
        reported,
        causes,
        correct,
        false_incidents: if label.is_empty() { report.incidents.len() } else { outside.len() },
        first_correct_us: if correct { first_correct_us } else { None },
        held,
    }
}

fn row(scenario: Scenario, label: &[Cause], outcomes: Vec<Outcome>) -> Row {
    let mut reported = BTreeMap::new();
    for name in REPORTED {
        reported.insert(name.to_string(), 0);
    }
    for outcome in &outcomes {
        *reported.entry(outcome.reported.clone()).or_default() += 1;
    }
    let mut firsts: Vec<u64> = outcomes.iter().filter_map(|o| o.first_correct_us).collect();
    firsts.sort_unstable();
    Row {
        scenario: scenario.name().to_string(),
        truth: label_of(label),
        causes: label.to_vec(),
        reported,
        correct: outcomes.iter().filter(|o| o.correct).count() as u64,
        seeds: outcomes.len() as u64,
        seeds_with_false_incidents: outcomes.iter().filter(|o| o.false_incidents > 0).count() as u64,
        median_first_correct_us: firsts.get(firsts.len() / 2).copied(),
        failed: outcomes.iter().filter(|o| !o.held).count() as u64,
    }
}

/// One swarm incident: its causes, and the causes switched on during it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SwarmIncident {
    seed: u64,
    reported: Vec<Cause>,
    on: Vec<Cause>,
}

fn swarm(seeds: u64, threads: usize, on_done: &(dyn Fn() + Sync)) -> Swarm {
    let incidents: Vec<Vec<SwarmIncident>> =
        run_seeds(Scenario::SWARM, seeds, threads, on_done, &|report, faults, _, seed| {
            report
                .incidents
                .iter()
                .map(|incident| {
                    let from = incident.from_us.saturating_sub(report.window_us);
                    let mut on: Vec<Cause> = faults
                        .iter()
                        .filter(|fault| fault.from_us < incident.to_us && fault.to_us > from)
                        .map(|fault| fault.cause)
                        .collect();
                    on.sort();
                    on.dedup();
                    SwarmIncident { seed, reported: incident.verdict.causes.clone(), on }
                })
                .collect()
        });
    let all: Vec<SwarmIncident> = incidents.into_iter().flatten().collect();
    let named: Vec<&SwarmIncident> = all.iter().filter(|i| !i.reported.is_empty()).collect();
    let (agree, disagree): (Vec<&SwarmIncident>, Vec<&SwarmIncident>) =
        named.iter().partition(|i| i.reported.iter().all(|cause| i.on.contains(cause)));
    let agreeing = agree.len() as u64;
    let mut disagreements = BTreeMap::new();
    for incident in disagree {
        let key = format!("reported {} with {} on", label_of(&incident.reported), label_of(&incident.on));
        *disagreements.entry(key).or_default() += 1;
    }
    Swarm {
        seeds,
        incidents: named.len() as u64,
        agreeing,
        rate: agreeing as f64 / (named.len().max(1)) as f64,
        unknown: all.iter().filter(|i| i.reported.is_empty()).count() as u64,
        disagreements,
    }
}

/// The evaluation as a person reads it: the confusion matrix, the scores and the swarm.
pub fn render(eval: &Eval) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let columns = REPORTED;
    let _ = writeln!(
        out,
        "confusion over {} seeds per labelled scenario (rows: the truth; columns: the cause reported)",
        eval.seeds
    );
    let _ = write!(out, "{:<24} {:<30}", "scenario", "truth");
    for column in columns {
        let _ = write!(out, " {column:>10}");
    }
    let _ = writeln!(out, " {:>8} {:>7} {:>10}", "correct", "false", "to label");
    for row in &eval.rows {
        let _ = write!(out, "{:<24} {:<30}", row.scenario, row.truth);
        for column in columns {
            let _ = write!(out, " {:>10}", row.reported.get(column).copied().unwrap_or(0));
        }
        let _ = writeln!(
            out,
            " {:>8} {:>7} {:>10}{}",
            format!("{}/{}", row.correct, row.seeds),
            row.seeds_with_false_incidents,
            row.median_first_correct_us.map_or("-".to_string(), |us| format!("{:.0} ms", us as f64 / 1e3)),
            if row.failed > 0 { format!("  ({} seeds FAILED an invariant)", row.failed) } else { String::new() }
        );
    }
    let _ = writeln!(out);
    for score in &eval.scores {
        let _ =
            writeln!(out, "{:<10} recall {:.3}  precision {:.3}", score.cause.name(), score.recall, score.precision);
    }
    let _ = writeln!(out, "calm seeds with a false incident: {:.3}", eval.calm_false_rate);
    let _ = writeln!(out, "mixed seeds reported mixed with both causes: {:.3}", eval.mixed_rate);
    if let Some(us) = eval.median_first_correct_us {
        let _ =
            writeln!(out, "median time from the fault's start to the first correct label: {:.0} ms", us as f64 / 1e3);
    }
    let s = &eval.swarm;
    let _ = writeln!(
        out,
        "swarm ({} seeds): {} of {} incidents ({:.3}) named causes that were switched on during them; {} unknown",
        s.seeds, s.agreeing, s.incidents, s.rate, s.unknown
    );
    for (key, count) in &s.disagreements {
        let _ = writeln!(out, "  {count} {key}");
    }
    let missed = eval.missed();
    if missed.is_empty() {
        let _ = writeln!(
            out,
            "targets: met (recall >= {RECALL_MIN} each, calm false <= {CALM_FALSE_MAX}, mixed >= {MIXED_MIN})"
        );
    } else {
        let _ = writeln!(out, "targets MISSED: {}", missed.join("; "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Eval, Score, Swarm};
    use lease_check::report::Cause;
    use std::collections::BTreeMap;

    fn eval(recall: f64, calm_false_rate: f64, mixed_rate: f64) -> Eval {
        Eval {
            seeds: 1,
            rows: Vec::new(),
            scores: Cause::ALL.iter().map(|&cause| Score { cause, recall, precision: 1.0 }).collect(),
            calm_false_rate,
            mixed_rate,
            median_first_correct_us: None,
            swarm: Swarm { seeds: 0, incidents: 0, agreeing: 0, rate: 0.0, unknown: 0, disagreements: BTreeMap::new() },
        }
    }

    // Proves each target bites on its own: a recall under 0.9, false incidents on more than 5% of
    // calm seeds, mixed scenarios named on under 90% of seeds; and that all met is no miss.
    #[test]
    fn each_missed_target_is_named() {
        assert!(eval(0.95, 0.0, 0.95).missed().is_empty());
        for (broken, word) in
            [(eval(0.85, 0.0, 0.95), "recall"), (eval(0.95, 0.06, 0.95), "calm"), (eval(0.95, 0.0, 0.85), "mixed")]
        {
            let missed = broken.missed();
            assert!(!missed.is_empty() && missed.iter().all(|m| m.contains(word)), "{missed:?}");
        }
    }
}
