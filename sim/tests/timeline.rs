//! `timeline.svg`: the picture of one fixed history is pinned under `snapshots/`, and reports the
//! simulator seldom writes (no windows, one window, no faults, an unknown fault kind, incidents,
//! huge or missing figures) still draw every panel.
//!
//! The input is a history committed under `tests/data/` (`lease-sim run --scenario
//! crash-after-effect --seed 1 --history ...`), so a change to the simulator does not move the
//! snapshot; a change to the report or the picture does.

use lease_check::figures::Spread;
use lease_check::report::diagnose::{Integrity, Reclaims, Terms};
use lease_check::report::{svg, Attribution, Cause, FaultSpan, Incident, Report};
use lease_history::parse_jsonl;

const HISTORY: &str = include_str!("data/crash-after-effect-seed-1.jsonl");

fn report() -> Report {
    let entries = parse_jsonl(HISTORY).expect("the fixture parses");
    Report::of(&entries, None).expect("the fixture reports")
}

/// Asserts `svg` is one whole picture with the title and all four panels in it.
fn assert_whole(svg: &str, report: &Report) {
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "not one SVG document");
    assert!(svg.contains(&format!("{} seed {}", report.scenario, report.seed)), "no title");
    for panel in ["queue", "capacity", "flow", "dependency", "time (s)"] {
        assert!(has_text(svg, panel), "{panel} missing");
    }
    assert!(!svg.contains("NaN") && !svg.contains("inf"), "a figure that is not a number reached the picture");
    assert!(svg.len() < 200_000, "{} bytes", svg.len());
}

/// Whether `svg` has a `<text>` element saying exactly `text` (plotters writes it on a line of its own).
fn has_text(svg: &str, text: &str) -> bool {
    svg.contains(&format!(">\n{text}\n</text>"))
}

/// Where `svg`'s `<text>` element saying `text` is.
fn text_at(svg: &str, text: &str) -> usize {
    svg.find(&format!(">\n{text}\n</text>")).unwrap_or_else(|| panic!("no text {text:?}"))
}

fn incident(from_us: u64, to_us: u64, cause: Cause) -> Incident {
    Incident {
        from_us,
        to_us,
        recovered: true,
        peak_backlog: 60,
        peak_us: to_us,
        peak_age_us: 2_000_000,
        verdict: Attribution {
            cause: cause.to_string(),
            causes: vec![cause],
            terms: Terms { arrivals: 0.0, workers: 1.0, dependency: 0.0 },
            load: 1.2,
            evidence: vec![],
        },
        labels: vec![],
        delay: Spread::default(),
        waited_over_ttl: 0,
        rejections: 0,
        integrity: Integrity::default(),
        reclaims: Reclaims::default(),
        fault_end_us: None,
        recovery_us: None,
        drain_rate: 0.0,
    }
}

// Pins the timeline of crash-after-effect seed 1 (seven crashes, healed at 3 s, one incident the
// workers caused), and proves that drawing it twice gives the same bytes.
#[test]
fn the_timeline_of_a_fixed_history_is_pinned() {
    let report = report();
    let picture = svg::render(&report);
    assert_whole(&picture, &report);
    assert!(has_text(&picture, "crash: 7 windows") && has_text(&picture, "faults healed"));
    assert!(has_text(&picture, "incident 1: workers"));
    assert_eq!(picture, svg::render(&report.clone()), "the same report drew different bytes");
    insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("timeline-crash-after-effect", picture);
    });
}

// A history with no dependency call, no fault and no incident still draws every panel: the
// dependency panel is empty, and the lane says there is nothing to show.
#[test]
fn a_quiet_history_draws_every_panel() {
    let mut report = report();
    report.faults.clear();
    report.incidents.clear();
    report.healed_us = None;
    for window in &mut report.windows {
        (window.calls, window.failures, window.failure_rate) = (0, 0, 0.0);
        (window.dependency_p50_us, window.dependency_p99_us, window.dependency_mean_us) = (None, None, None);
    }
    let picture = svg::render(&report);
    assert_whole(&picture, &report);
    assert!(has_text(&picture, "faults: none on the history") && has_text(&picture, "incidents: none"));
    assert!(!has_text(&picture, "faults healed"));
}

// A fault kind the renderer has never heard of gets its own row, in the default grey, after the
// kinds it knows; incidents are outlined and labelled with their cause, in order.
#[test]
fn an_unknown_fault_kind_and_incidents_are_drawn_and_labelled() {
    let mut report = report();
    let (from_us, to_us) = (1_000_000, 1_200_000);
    report.faults.push(FaultSpan { kind: "meteor", target: "w0".into(), peer: None, from_us, to_us });
    report.incidents =
        vec![incident(500_000, 2_500_000, Cause::Workers), incident(2_600_000, 4_000_000, Cause::Arrivals)];
    let picture = svg::render(&report);
    assert_whole(&picture, &report);
    assert!(has_text(&picture, "meteor: 1 window") && picture.contains("fill=\"#7F7F7F\""));
    let crash = text_at(&picture, "crash: 7 windows");
    assert!(crash < text_at(&picture, "meteor: 1 window"), "unknown kinds come last");
    let first = text_at(&picture, "incident 1: workers");
    assert!(first < text_at(&picture, "incident 2: arrivals"));
}

// Reports with no window, one window, or figures at the ends of their types draw without a
// panic, and nothing that is not a number reaches the picture.
#[test]
fn degenerate_reports_draw_without_a_panic() {
    let full = report();

    let mut empty = full.clone();
    (empty.windows, empty.end_us, empty.healed_us) = (vec![], 0, Some(0));
    empty.faults = vec![FaultSpan { kind: "crash", target: "w0".into(), peer: None, from_us: 0, to_us: 0 }];
    assert_whole(&svg::render(&empty), &empty);

    let mut single = full.clone();
    single.windows.truncate(1);
    single.end_us = single.windows[0].to_us;
    assert_whole(&svg::render(&single), &single);

    let mut huge = full.clone();
    huge.fleet = u32::MAX;
    huge.healed_us = Some(u64::MAX);
    huge.faults.push(FaultSpan { kind: "surge", target: "arrivals".into(), peer: None, from_us: 0, to_us: u64::MAX });
    for window in &mut huge.windows {
        (window.backlog, window.oldest_age_us, window.dependency_p99_us) = (u64::MAX, u64::MAX, Some(u64::MAX));
        (window.backlog_mean, window.arrival_rate, window.completion_rate) = (f64::MAX, f64::NAN, f64::INFINITY);
        (window.in_flight, window.live_workers, window.failure_rate) = (1e300, -1.0, f64::NEG_INFINITY);
    }
    assert_whole(&svg::render(&huge), &huge);
}
