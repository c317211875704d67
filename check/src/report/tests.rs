//! The report on hand-made histories: a checker's fixture, corrupted copies of it, and a small
//! queue whose arrivals, workers and dependency each misbehave in turn.

use super::{Cause, Report};
use crate::fixtures::crash_after_effect_story;
use lease_core::{BatchId, Epoch, JobId, OpId, OutputId, ReclaimerId};
use lease_history::{Entry, Event, Node, OutcomeKind, Point};

/// A queue served first come, first served by `workers`, for the synthetic histories: jobs arrive
/// at `arrivals`; a job takes 2 ms of overhead plus `latency(t)` at the dependency; a worker is
/// down during its `down` windows (a crash and its restart on the history).
struct Queue {
    workers: u32,
    arrivals: Vec<u64>,
    latency: fn(u64) -> u64,
    down: Vec<(u32, u64, u64)>,
}

const TTL_US: u64 = 200_000;

impl Queue {
    fn history(&self) -> Vec<Entry> {
        let mut lines: Vec<(u64, u64, Node, Event)> = Vec::new();
        let mut seq = 0;
        let mut push = |t: u64, node: Node, event: Event| {
            seq += 1;
            lines.push((t, seq, node, event));
        };
        let mut free_at = vec![0u64; self.workers as usize];
        let is_down =
            |w: u32, t: u64| self.down.iter().any(|&(worker, from, to)| worker == w && (from..to).contains(&t));
        for &(worker, from, to) in &self.down {
            push(from, Node::World, Event::Crashed { target: Node::Worker(worker), point: Point::AtRandom, job: None });
            push(to, Node::World, Event::Restarted { target: Node::Worker(worker) });
        }
        for (index, &arrived) in self.arrivals.iter().enumerate() {
            let job = JobId(index as u64);
            push(arrived, Node::Table, Event::Arrived { job, backlog: 0 });
            // The earliest moment some live worker is free.
            let (worker, start) = (0..self.workers)
                .map(|w| {
                    let mut t = free_at[w as usize].max(arrived);
                    while is_down(w, t) {
                        t += 1_000;
                    }
                    (w, t)
                })
                .min_by_key(|&(w, t)| (t, w))
                .unwrap();
            let latency = (self.latency)(start);
            let op = OpId { job, step: 0 };
            let epoch = Epoch(1);
            let owner = Node::Worker(worker);
            push(start, Node::Table, Event::Granted { job, epoch, owner, expires_at_us: start + TTL_US, attempt: 1 });
            push(start + 1_000, owner, Event::Executing { job, op, epoch });
            let applied = start + 1_000 + latency;
            push(
                applied,
                Node::Ledger,
                Event::EffectApplied { from: owner, job, op, epoch, output: OutputId(index as u64) },
            );
            let done = applied + 1_000;
            push(
                done,
                Node::Table,
                Event::Terminal {
                    from: owner,
                    job,
                    outcome: OutcomeKind::Completed,
                    output: Some(OutputId(index as u64)),
                    epoch,
                    attempts: None,
                    identities: None,
                    batch: None,
                    permanent: false,
                },
            );
            free_at[worker as usize] = done;
        }
        lines.sort_by_key(|&(t, seq, ..)| (t, seq));
        let mut backlog = 0;
        let mut entries = vec![run_line()];
        for (t_us, _, node, mut event) in lines {
            match &mut event {
                Event::Arrived { backlog: b, .. } => {
                    backlog += 1;
                    *b = backlog;
                }
                Event::Terminal { .. } => backlog -= 1,
                _ => {}
            }
            entries.push(Entry { t_us, node, event });
        }
        entries
    }
}

fn run_line() -> Entry {
    Entry {
        t_us: 0,
        node: Node::World,
        event: Event::Run {
            history_version: lease_history::HISTORY_VERSION,
            seed: 0,
            scenario: "synthetic".to_string(),
            batch_max: 4,
            capacity: 10_000,
            lease_ttl_us: TTL_US,
            attempts_max: 3,
            bug: None,
            store: None,
            drift_margin_us: None,
            latency_us: None,
            latency_calm_us: None,
            pruned_before_us: None,
            worker_processes: None,
            scan_every_us: None,
            params: String::new(),
        },
    }
}

/// Arrivals every `gap_us` over `[from, to)`, jittered a little so windows are not all alike.
fn every(gap_us: u64, from: u64, to: u64) -> Vec<u64> {
    (0..).map(|k| from + k * gap_us + (k * 7_919 % 5) * 300).take_while(|&t| t < to).collect()
}

/// 4 workers, 20 ms of dependency, a job every 12.5 ms: the fleet is 45% busy.
fn calm() -> Queue {
    Queue { workers: 4, arrivals: every(12_500, 0, 6_000_000), latency: |_| 20_000, down: Vec::new() }
}

const FAULT: std::ops::Range<u64> = 2_000_000..3_200_000;

fn causes(report: &Report) -> Vec<Vec<Cause>> {
    report.incidents.iter().map(|incident| incident.verdict.causes.clone()).collect()
}

// Proves a calm queue has no incident, that its baseline is its own figures, and that Little's
// law and the bookkeeping hold on it.
#[test]
fn a_calm_queue_has_no_incident_and_little_holds() {
    let report = Report::of(&calm().history(), None).unwrap();
    assert!(report.incidents.is_empty(), "{:?}", report.incidents);
    assert!(report.baseline.calm);
    assert!((report.baseline.arrival_rate - 80.0).abs() < 8.0, "{:?}", report.baseline);
    assert!((report.baseline.dependency_mean_us - 20_000.0).abs() < 1_000.0, "{:?}", report.baseline);
    assert_eq!(report.little.holds, Some(true), "{:?}", report.little);
    assert!(report.little.integral_matches);
    assert_eq!(report.little.backlog_mismatches, 0);
    assert_eq!(report.integrity.completed, report.windows.iter().map(|w| w.terminals).sum::<u64>());
}

// Proves each factor is named when it alone changes: four times the arrivals, three of four
// workers down, a dependency ten times slower; and both when two change at once.
#[test]
fn each_factor_alone_is_named_and_two_together_are_mixed() {
    let mut surge = calm();
    surge.arrivals = every(12_500, 0, FAULT.start);
    surge.arrivals.extend(every(3_000, FAULT.start, FAULT.end));
    surge.arrivals.extend(every(12_500, FAULT.end, 6_000_000));
    let mut crashes = calm();
    crashes.down = (1..4).map(|w| (w, FAULT.start, FAULT.end)).collect();
    let mut slow = calm();
    slow.latency = |t| if FAULT.contains(&t) { 200_000 } else { 20_000 };
    let mut both = calm();
    both.arrivals = surge.arrivals.clone();
    both.down = crashes.down.clone();
    for (queue, cause) in [
        (&surge, vec![Cause::Arrivals]),
        (&crashes, vec![Cause::Workers]),
        (&slow, vec![Cause::Dependency]),
        (&both, vec![Cause::Arrivals, Cause::Workers]),
    ] {
        let report = Report::of(&queue.history(), None).unwrap();
        assert_eq!(causes(&report), vec![cause.clone()], "{}", super::text::render(&report));
        let incident = &report.incidents[0];
        assert!(incident.from_us <= FAULT.start + 2 * TTL_US && incident.to_us > FAULT.start, "{incident:?}");
        assert!(incident.recovered && incident.recovery_us.is_some(), "{incident:?}");
        assert!(report.little.integral_matches && report.little.backlog_mismatches == 0);
    }
}

// Proves the report reads a checker's own fixture history: its crash window, adoption and
// outcome, with the bookkeeping agreeing.
#[test]
fn a_checker_fixture_reads() {
    let story = crash_after_effect_story();
    let report = Report::of(&story.entries, None).unwrap();
    assert_eq!(report.integrity.adoptions, 1);
    assert_eq!(report.integrity.duplicate_effects, 0);
    assert_eq!(report.integrity.completed, 1);
    assert!(report.faults.iter().any(|fault| fault.kind == "crash"), "{:?}", report.faults);
    assert!(report.little.integral_matches);
    assert_eq!(report.little.backlog_mismatches, 0);
}

// Proves the bookkeeping check bites: a history whose table backlog disagrees with its own lines
// is flagged, and so is an effect applied twice for one operation.
#[test]
fn a_wrong_backlog_and_a_duplicate_effect_are_caught() {
    let mut entries = crash_after_effect_story().entries;
    let arrived = entries.iter_mut().find(|e| matches!(e.event, Event::Arrived { .. })).unwrap();
    if let Event::Arrived { backlog, .. } = &mut arrived.event {
        *backlog += 1;
    }
    let report = Report::of(&entries, None).unwrap();
    assert_eq!(report.little.backlog_mismatches, 1);
    assert!(super::text::render(&report).contains("DISAGREES"));

    let mut entries = crash_after_effect_story().entries;
    let applied = entries.iter().position(|e| matches!(e.event, Event::EffectApplied { .. })).unwrap();
    let mut again = entries[applied].clone();
    if let Event::EffectApplied { from, epoch, .. } = &mut again.event {
        (*from, *epoch) = (Node::Worker(9), Epoch(9));
    }
    entries.insert(applied + 1, again);
    let report = Report::of(&entries, None).unwrap();
    assert_eq!(report.integrity.duplicate_effects, 1);
}

// Proves a history that cannot be reported on is refused with its reason: no run line, lines out
// of time order.
#[test]
fn unreadable_histories_are_refused() {
    let entries = calm().history();
    assert_eq!(Report::of(&entries[1..], None).unwrap_err(), super::ReportError::NoRunLine);
    let mut swapped = entries.clone();
    swapped.swap(5, 50);
    assert!(matches!(Report::of(&swapped, None), Err(super::ReportError::OutOfOrder { .. })));
    assert_eq!(Report::of(&entries, Some(0)).unwrap_err(), super::ReportError::Window);
    // A line far in the future, then the rest: refused before any window is laid out up to it
    // (the fuzz test found this asking for 29 GB of windows).
    let mut future = entries.clone();
    future[5].t_us = u64::MAX / 2;
    assert!(matches!(Report::of(&future, None), Err(super::ReportError::OutOfOrder { line: 7, .. })));
    future.truncate(6);
    assert!(matches!(Report::of(&future, None), Err(super::ReportError::TooManyWindows { .. })));
}

// Proves a history may start anywhere: shifted by 1.7e15 us (a store on the host's clock), the
// report is the same report, its times counted from the first line, with `origin_us` to map back.
#[test]
fn a_history_starting_anywhere_gives_the_same_report() {
    let entries = calm().history();
    let shift = 1_700_000_000_000_000;
    let shifted: Vec<Entry> =
        entries.iter().cloned().map(|entry| Entry { t_us: entry.t_us + shift, ..entry }).collect();
    let (plain, moved) = (Report::of(&entries, None).unwrap(), Report::of(&shifted, None).unwrap());
    assert_eq!(moved.origin_us, shift);
    assert_eq!(moved.windows, plain.windows);
    assert_eq!(moved.incidents, plain.incidents);
    assert_eq!(super::text::render(&moved), super::text::render(&plain));
}

// Proves arrivals turned away are customer impact: a calm queue with three rejections at 4 s has
// an incident over them that counts them, and the report counts them too; without them, none.
#[test]
fn rejections_open_an_incident_and_are_counted() {
    let mut entries = calm().history();
    assert!(Report::of(&entries, None).unwrap().incidents.is_empty());
    let at = entries.iter().position(|entry| entry.t_us >= 4_000_000).unwrap();
    for n in 0..3 {
        let rejected = Event::Rejected { job: JobId(1_000_000 + n), reason: lease_history::RejectReason::QueueFull };
        entries.insert(at, Entry { t_us: entries[at].t_us, node: Node::Table, event: rejected });
    }
    let report = Report::of(&entries, None).unwrap();
    assert_eq!(report.rejections, 3);
    assert_eq!(report.incidents.len(), 1, "{:?}", report.incidents);
    assert_eq!(report.incidents[0].rejections, 3);
    assert!(report.incidents[0].from_us <= entries[at].t_us && entries[at].t_us < report.incidents[0].to_us);
    assert!(super::text::render(&report).contains("3 turned away (queue full)"));
}

// Proves an incident says what the reclaimers did in it: the leases fenced inside it (a fence
// before it is not its, though the whole history's figure counts it), by how many reclaimers, over how long, how late after each lease's
// expiry (median and longest), and the fences lost to a race; and that the text says so.
#[test]
fn an_incident_counts_its_reclaims_and_how_late_they_came() {
    let mut crashes = calm();
    crashes.down = (1..4).map(|w| (w, FAULT.start, FAULT.end)).collect();
    let mut entries = crashes.history();
    let batch = |n: u32| BatchId { reclaimer: ReclaimerId(n), seq: 1 };
    let fence = |t_us: u64, job: u64, late_us: u64, n: u32| Entry {
        t_us,
        node: Node::Table,
        event: Event::Reclaimed {
            job: JobId(job),
            epoch: Epoch(1),
            expires_at_us: t_us - late_us,
            new_epoch: Epoch(2),
            new_expires_at_us: t_us + TTL_US,
            reclaimer: Node::Reclaimer(n),
            batch: batch(n),
        },
    };
    let lost = |t_us: u64, job: u64| Entry {
        t_us,
        node: Node::Table,
        event: Event::LostRace { job: JobId(job), expected: Epoch(1), current: Epoch(2), batch: batch(1) },
    };
    let start = FAULT.start + 100_000;
    let added = [
        fence(500_000, 1, 10_000, 0),
        fence(start, 2, 30_000, 0),
        fence(start + 10_000, 3, 50_000, 1),
        lost(start + 15_000, 3),
        fence(start + 40_000, 4, 90_000, 0),
    ];
    for entry in added {
        let at = entries.iter().position(|line| line.t_us > entry.t_us).unwrap_or(entries.len());
        entries.insert(at, entry);
    }
    let report = Report::of(&entries, None).unwrap();
    let incident = &report.incidents[0];
    assert!(incident.from_us > 500_000 && incident.from_us <= start, "{incident:?}");
    let reclaims = &incident.reclaims;
    assert_eq!((reclaims.leases, reclaims.reclaimers, reclaims.lost), (3, 2, 1), "{reclaims:?}");
    assert_eq!((reclaims.first_us, reclaims.last_us), (Some(start), Some(start + 40_000)));
    assert_eq!((reclaims.late_p50_us, reclaims.late_max_us), (Some(50_000), Some(90_000)));
    // Over the whole history, the fence before the incident counts too.
    assert_eq!((report.reclaims.leases, report.reclaims.first_us, report.reclaims.lost), (4, Some(500_000), 1));
    let text = super::text::render(&report);
    assert!(
        text.contains("reclaim: 3 leases fenced by 2 reclaimers in 0.040 s")
            && text.contains("50.0 ms after expiry at the median (90.0 ms at most); 1 fences lost"),
        "{text}"
    );
    // Without any reclaim, the incident says so.
    let report = Report::of(&crashes.history(), None).unwrap();
    assert_eq!(report.incidents[0].reclaims.leases, 0);
    assert!(super::text::render(&report).contains("reclaim: no lease fenced; 0 fences lost to a race"));
}
