//! `timeline.svg`: stacked panels on one time axis, fault windows shaded, incidents marked.
//!
//! Top to bottom: a title line; a lane with one row per fault kind, a row of incidents and the
//! heal; then four panels sharing the time axis, in seconds:
//!
//! 1. backlog (at each window's end, and its mean) and the oldest waiting job's age;
//! 2. jobs in flight and live workers, against the fleet;
//! 3. arrival and completion rates;
//! 4. the dependency's p99 latency (a gap where no call was answered) and its failure rate.
//!
//! Each window's figure is drawn as a step held from the window's start to its end, so a line
//! never suggests a value between two windows that neither measured. A kind's fault windows are
//! merged into bands before they are drawn (a swarm run has dozens of short, overlapping crashes;
//! stacked translucent boxes would read as a darker, different thing), and each kind's bands are
//! shaded across every panel in the kind's colour.
//!
//! Determinism: plotters' SVG backend writes integer pixel coordinates and formats the few floats
//! it writes (opacity, font size) with Rust's shortest round-trip form; this module iterates only
//! vectors and a `BTreeMap`. The same report gives the same bytes.
//!
//! Text: plotters is built without its `ttf` feature, so it needs no font library. Its SVG backend
//! writes every title, label and tick as a `<text>` element that the viewer lays out; plotters
//! only estimates text widths, which is all the layout here needs.

use super::{FaultSpan, Report, Window};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;

/// The picture's width.
const WIDTH_PX: u32 = 1100;
/// The title lines' height.
const TITLE_PX: u32 = 48;
/// One row of the fault and incident lane.
const LANE_ROW_PX: u32 = 30;
/// One panel's height, its legend line included.
const PANEL_PX: u32 = 190;
/// The legend line above each panel.
const LEGEND_PX: u32 = 20;
/// The time axis' labels, under the last panel.
const TIME_AXIS_PX: u32 = 40;
/// The y axes' labels, left and right of every panel (the same on all, so the time axes align).
const Y_AXIS_PX: u32 = 70;
/// The space left and right of the axes, and between the panels.
const MARGIN_PX: u32 = 10;
/// The fault kinds a history names, in the order the lane lists them, with their colours. Any
/// other kind follows in [`UNKNOWN_KIND`]'s grey, in name order.
const KINDS: [(&str, RGBColor); 7] = [
    ("crash", RGBColor(214, 39, 40)),
    ("shutdown", RGBColor(188, 189, 34)),
    ("pause", RGBColor(255, 127, 14)),
    ("partition", RGBColor(148, 103, 189)),
    ("slow_dependency", RGBColor(140, 86, 75)),
    ("failing_dependency", RGBColor(227, 119, 194)),
    ("surge", RGBColor(23, 190, 207)),
];
/// The colour of a fault kind not in [`KINDS`].
const UNKNOWN_KIND: RGBColor = RGBColor(127, 127, 127);
/// How opaque a fault band is.
const BAND_ALPHA: f64 = 0.14;
/// Incidents' outlines.
const INCIDENT: RGBColor = RGBColor(60, 60, 60);
/// The line at which the faults healed.
const HEALED: RGBColor = RGBColor(0, 128, 0);
/// The series' colours.
const BLUE_LINE: RGBColor = RGBColor(31, 119, 180);
const LIGHT_BLUE_LINE: RGBColor = RGBColor(120, 170, 215);
const ORANGE_LINE: RGBColor = RGBColor(230, 110, 0);
const GREEN_LINE: RGBColor = RGBColor(44, 160, 44);
const GREY_LINE: RGBColor = RGBColor(150, 150, 150);
/// Font sizes as plotters takes them (its SVG backend writes `size / 1.24` as `font-size`).
const TITLE_FONT: f64 = 16.0 * 1.24;
const TEXT_FONT: f64 = 12.0 * 1.24;
const SMALL_FONT: f64 = 11.0 * 1.24;
/// The largest figure drawn: past it a line stays at the top (an axis to infinity has no ticks).
const FIGURE_MAX: f64 = 1e15;
/// The y axes' tick count.
const Y_TICKS: usize = 5;
/// The time axis' tick count.
const TIME_TICKS: usize = 12;

type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// The timeline, as SVG text: the same report gives the same bytes.
pub fn render(report: &Report) -> String {
    let timeline = Timeline::of(report);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, timeline.height_px())).into_drawing_area();
        // The backend writes into a string, which cannot fail, and every range is non-empty.
        draw(&root, report, &timeline).expect("drawing a timeline into a string");
        root.present().expect("finishing a timeline in a string");
    }
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"), "an unfinished SVG");
    svg
}

/// What the picture shows, in the units it shows it.
struct Timeline {
    /// The time axis' end, seconds: the history's end or its last window's, at least a window.
    end_s: f64,
    /// The fault kinds on the history, in the lane's order.
    kinds: Vec<Kind>,
    /// The panels, top to bottom.
    panels: [Panel; 4],
}

impl Timeline {
    fn of(report: &Report) -> Timeline {
        let last_window_us = report.windows.last().map_or(0, |w| w.to_us);
        // At least a window long, so a history with no window still has a readable axis.
        let end_us = report.end_us.max(last_window_us).max(report.window_us).max(1);
        Timeline { end_s: seconds(end_us), kinds: kinds(&report.faults, end_us), panels: panels(report) }
    }

    /// The lane's rows: one per fault kind (or one saying there are none), and the incidents'.
    fn lane_rows(&self) -> u32 {
        self.kinds.len().max(1) as u32 + 1
    }

    fn lane_px(&self) -> u32 {
        self.lane_rows() * LANE_ROW_PX + 2 * MARGIN_PX
    }

    fn height_px(&self) -> u32 {
        TITLE_PX + self.lane_px() + self.panels.len() as u32 * PANEL_PX + TIME_AXIS_PX
    }
}

/// One fault kind's windows, merged into bands where they overlap or touch.
struct Kind {
    name: &'static str,
    colour: RGBColor,
    /// The fault windows of this kind on the history.
    spans: usize,
    /// Disjoint, in time order, seconds.
    bands: Vec<(f64, f64)>,
}

/// The kinds of `faults`, known ones first in [`KINDS`]' order, each clipped to `end_us`.
fn kinds(faults: &[FaultSpan], end_us: u64) -> Vec<Kind> {
    let mut by_kind: BTreeMap<(usize, &'static str), Vec<(u64, u64)>> = BTreeMap::new();
    for fault in faults {
        let rank = KINDS.iter().position(|(name, _)| *name == fault.kind).unwrap_or(KINDS.len());
        let from_us = fault.from_us.min(end_us);
        by_kind.entry((rank, fault.kind)).or_default().push((from_us, fault.to_us.clamp(from_us, end_us)));
    }
    by_kind
        .into_iter()
        .map(|((rank, name), spans)| Kind {
            name,
            colour: KINDS.get(rank).map_or(UNKNOWN_KIND, |(_, colour)| *colour),
            spans: spans.len(),
            bands: merged(spans).into_iter().map(|(from_us, to_us)| (seconds(from_us), seconds(to_us))).collect(),
        })
        .collect()
}

/// The union of `spans`, as disjoint spans in time order.
fn merged(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut bands: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (from_us, to_us) in spans {
        assert!(from_us <= to_us, "a fault window ends before it starts");
        match bands.last_mut() {
            Some(last) if from_us <= last.1 => last.1 = last.1.max(to_us),
            _ => bands.push((from_us, to_us)),
        }
    }
    assert!(bands.windows(2).all(|pair| pair[0].1 < pair[1].0), "bands overlap");
    bands
}

/// Which y axis a line is read on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Axis {
    Left,
    Right,
}

/// One series: its legend, colour, axis, and its steps, split where the figure is missing.
struct Line {
    label: &'static str,
    colour: RGBColor,
    width: u32,
    axis: Axis,
    segments: Vec<Vec<(f64, f64)>>,
}

impl Line {
    fn of(
        windows: &[Window],
        label: &'static str,
        colour: RGBColor,
        axis: Axis,
        figure: impl Fn(&Window) -> Option<f64>,
    ) -> Line {
        Line { label, colour, width: 2, axis, segments: steps(windows, figure) }
    }

    fn thin(self) -> Line {
        Line { width: 1, ..self }
    }

    fn max(&self) -> f64 {
        self.segments.iter().flatten().map(|&(_, y)| y).fold(0.0, f64::max)
    }
}

/// Each window's figure held from its start to its end, within 0 to [`FIGURE_MAX`]; a window
/// without one (or with a figure that is not a number) ends a segment.
fn steps(windows: &[Window], figure: impl Fn(&Window) -> Option<f64>) -> Vec<Vec<(f64, f64)>> {
    let mut segments = Vec::new();
    let mut segment = Vec::new();
    for window in windows {
        match figure(window).filter(|y| !y.is_nan()) {
            Some(y) => {
                let y = y.clamp(0.0, FIGURE_MAX);
                segment.extend([(seconds(window.from_us), y), (seconds(window.to_us), y)]);
            }
            None if segment.is_empty() => {}
            None => segments.push(std::mem::take(&mut segment)),
        }
    }
    if !segment.is_empty() {
        segments.push(segment);
    }
    segments
}

/// One panel: what it shows, its axes' names, its lines, and a level to read them against.
struct Panel {
    title: &'static str,
    left: &'static str,
    right: Option<&'static str>,
    lines: Vec<Line>,
    /// A horizontal line on the left axis, with its legend.
    reference: Option<(String, f64)>,
}

impl Panel {
    /// The top of `axis`: above every line on it (and the reference), and at least 1.
    fn top(&self, axis: Axis) -> f64 {
        let reference = self.reference.as_ref().filter(|_| axis == Axis::Left).map_or(0.0, |(_, y)| *y);
        let highest = self.lines.iter().filter(|line| line.axis == axis).map(Line::max).fold(reference, f64::max);
        (highest * 1.1).max(1.0)
    }
}

fn panels(report: &Report) -> [Panel; 4] {
    let w = &report.windows;
    let ms = |us: u64| us as f64 / 1e3;
    [
        Panel {
            title: "queue",
            left: "jobs",
            right: Some("age (ms)"),
            lines: vec![
                Line::of(w, "backlog at window end", BLUE_LINE, Axis::Left, |w| Some(w.backlog as f64)),
                Line::of(w, "backlog mean", LIGHT_BLUE_LINE, Axis::Left, |w| Some(w.backlog_mean)).thin(),
                Line::of(w, "oldest waiting job (ms, right)", ORANGE_LINE, Axis::Right, |w| Some(ms(w.oldest_age_us))),
            ],
            reference: None,
        },
        Panel {
            title: "capacity",
            left: "jobs / workers",
            right: None,
            lines: vec![
                Line::of(w, "jobs in flight", BLUE_LINE, Axis::Left, |w| Some(w.in_flight)),
                Line::of(w, "live workers", GREEN_LINE, Axis::Left, |w| Some(w.live_workers)),
            ],
            reference: Some((format!("fleet ({})", report.fleet), f64::from(report.fleet).min(FIGURE_MAX))),
        },
        Panel {
            title: "flow",
            left: "jobs / s",
            right: None,
            lines: vec![
                Line::of(w, "arrivals / s", ORANGE_LINE, Axis::Left, |w| Some(w.arrival_rate)),
                Line::of(w, "completions / s", BLUE_LINE, Axis::Left, |w| Some(w.completion_rate)),
            ],
            reference: None,
        },
        Panel {
            title: "dependency",
            left: "p99 (ms)",
            right: Some("failures (%)"),
            lines: vec![
                Line::of(w, "p99 latency (ms)", BLUE_LINE, Axis::Left, |w| w.dependency_p99_us.map(ms)),
                Line::of(w, "failed calls (%, right)", RED, Axis::Right, |w| {
                    Some(w.failure_rate * 100.0).filter(|_| w.calls > 0)
                }),
            ],
            reference: None,
        },
    ]
}

fn draw(root: &Area, report: &Report, timeline: &Timeline) -> Drawn {
    root.fill(&WHITE)?;
    let mut breaks = vec![TITLE_PX, TITLE_PX + timeline.lane_px()];
    for _ in 1..timeline.panels.len() {
        breaks.push(breaks[breaks.len() - 1] + PANEL_PX);
    }
    let areas = root.split_by_breakpoints::<u32, u32, _, _>([], breaks);
    assert_eq!(areas.len(), timeline.panels.len() + 2, "one area per part");
    draw_title(&areas[0], report)?;
    draw_lane(root, &areas[1], report, timeline)?;
    let last = timeline.panels.len() - 1;
    for (i, (panel, area)) in timeline.panels.iter().zip(&areas[2..]).enumerate() {
        draw_panel(area, report, timeline, panel, i == last)?;
    }
    Ok(())
}

fn draw_title(area: &Area, report: &Report) -> Drawn {
    let title = format!(
        "{} seed {}: {} windows of {} ms, {} workers",
        report.scenario,
        report.seed,
        report.windows.len(),
        tick(report.window_us as f64 / 1e3),
        report.fleet
    );
    let key = "shaded: fault windows, one colour per kind; outlined: incidents; green line: faults healed; \
               each window's figure is held from its start to its end";
    let left = (MARGIN_PX + Y_AXIS_PX) as i32;
    area.draw(&Text::new(title, (left, 8), (FontFamily::SansSerif, TITLE_FONT).into_font().style(FontStyle::Bold)))?;
    area.draw(&Text::new(key, (left, 30), (FontFamily::SansSerif, SMALL_FONT).into_font().color(&GREY_LINE)))
}

/// A chart over `area` with the time axis every part shares: the same margins and axis areas on
/// all, so a time has the same x everywhere.
fn chart<'a, 'b>(
    area: &'a Area<'b>,
    top: f64,
    time_axis: bool,
    end_s: f64,
) -> Result<
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    DrawingAreaErrorKind<std::io::Error>,
> {
    ChartBuilder::on(area)
        .margin_left(MARGIN_PX)
        .margin_right(MARGIN_PX)
        .margin_bottom(if time_axis { 0 } else { MARGIN_PX })
        .y_label_area_size(Y_AXIS_PX)
        .right_y_label_area_size(Y_AXIS_PX)
        .x_label_area_size(if time_axis { TIME_AXIS_PX } else { 0 })
        .build_cartesian_2d(0.0..end_s, 0.0..top)
}

/// The lane: each fault kind's bands in its row, the incidents in the last row, the heal. A row
/// is a caption above a strip: kinds' names can be long, and the y axis' space is narrow.
fn draw_lane(root: &Area, area: &Area, report: &Report, timeline: &Timeline) -> Drawn {
    let rows = timeline.lane_rows();
    let area = area.margin(MARGIN_PX, MARGIN_PX, 0, 0);
    let mut lane = chart(&area, f64::from(rows), false, timeline.end_s)?;
    // Row 0 is the top one; a row's strip is the lower half of it.
    let row_top = |row: u32| f64::from(rows - row);
    let strip = |row: u32| (row_top(row) - 0.5, row_top(row) - 0.95);
    let caption_at = |lane: &ChartContext<_, _>, at_s: f64, row: u32| {
        let (x, y) = lane.backend_coord(&(at_s, row_top(row)));
        (x, y + 1)
    };
    let right_px = lane.backend_coord(&(timeline.end_s, 0.0)).0;
    let caption = |colour: &RGBColor| text(SMALL_FONT, *colour, HPos::Left, VPos::Top);
    if timeline.kinds.is_empty() {
        root.draw(&Text::new("faults: none on the history", caption_at(&lane, 0.0, 0), caption(&BLACK)))?;
    }
    for (row, kind) in (0..).zip(&timeline.kinds) {
        let plural = if kind.spans == 1 { "" } else { "s" };
        let label = format!("{}: {} window{plural}", kind.name, kind.spans);
        root.draw(&Text::new(label, caption_at(&lane, 0.0, row), caption(&kind.colour)))?;
        let (top, bottom) = strip(row);
        let fill = kind.colour.mix(0.6).filled();
        lane.draw_series(
            visible(&kind.bands, timeline.end_s).map(|(from, to)| Rectangle::new([(from, top), (to, bottom)], fill)),
        )?;
    }
    let row = rows - 1;
    if report.incidents.is_empty() {
        root.draw(&Text::new("incidents: none", caption_at(&lane, 0.0, row), caption(&BLACK)))?;
    }
    let (top, bottom) = strip(row);
    // Each label starts at its incident, and is shortened when the one before it reaches that far.
    let mut free_px = i32::MIN;
    for (n, incident) in (1..).zip(&report.incidents) {
        let (from, to) = (seconds(incident.from_us), seconds(incident.to_us.max(incident.from_us)));
        lane.draw_series([Rectangle::new([(from, top), (to, bottom)], INCIDENT.stroke_width(1))])?;
        let (x, y) = caption_at(&lane, from, row);
        let long = format!("incident {n}: {}", incident.verdict.cause);
        let label = if x >= free_px { long } else { n.to_string() };
        let x = x.max(free_px).min(right_px - text_px(&label));
        free_px = x + text_px(&label) + 6;
        root.draw(&Text::new(label, (x, y), caption(&INCIDENT)))?;
    }
    if let Some(healed_us) = report.healed_us {
        let at = seconds(healed_us).min(timeline.end_s);
        lane.draw_series(LineSeries::new([(at, 0.0), (at, f64::from(rows))], HEALED.stroke_width(2)))?;
        let (x, y) = lane.backend_coord(&(at, f64::from(rows)));
        let label = "faults healed";
        let style = text(SMALL_FONT, HEALED, HPos::Left, VPos::Bottom);
        root.draw(&Text::new(label, ((x + 3).min(right_px - text_px(label)), y), style))?;
    }
    Ok(())
}

/// `bands` as drawn: at least a pixel wide, so the shortest fault still shows.
fn visible(bands: &[(f64, f64)], end_s: f64) -> impl Iterator<Item = (f64, f64)> + '_ {
    let pixel_s = end_s / f64::from(WIDTH_PX - 2 * (MARGIN_PX + Y_AXIS_PX));
    bands.iter().map(move |&(from, to)| {
        let to = to.max(from + pixel_s).min(end_s);
        (from.min(to - pixel_s).max(0.0), to)
    })
}

fn draw_panel(area: &Area, report: &Report, timeline: &Timeline, panel: &Panel, time_axis: bool) -> Drawn {
    let (legend, plot) = area.split_vertically(LEGEND_PX);
    draw_legend(&legend, panel)?;
    let (left_top, right_top) = (panel.top(Axis::Left), panel.top(Axis::Right));
    let mut chart =
        chart(&plot, left_top, time_axis, timeline.end_s)?.set_secondary_coord(0.0..timeline.end_s, 0.0..right_top);
    let label_font = (FontFamily::SansSerif, SMALL_FONT);
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(TIME_TICKS)
        .y_labels(Y_TICKS)
        .x_label_formatter(&|s| tick(*s))
        .y_label_formatter(&|y| tick(*y))
        .y_desc(panel.left)
        .light_line_style(TRANSPARENT)
        .bold_line_style(BLACK.mix(0.08))
        .label_style(label_font)
        .axis_desc_style(label_font);
    if time_axis {
        mesh.x_desc("time (s)");
    }
    mesh.draw()?;
    if let Some(right) = panel.right {
        chart
            .configure_secondary_axes()
            .y_labels(Y_TICKS)
            .y_label_formatter(&|y| tick(*y))
            .y_desc(right)
            .label_style(label_font)
            .axis_desc_style(label_font)
            .draw()?;
    }
    for kind in &timeline.kinds {
        let fill = kind.colour.mix(BAND_ALPHA).filled();
        chart.draw_series(
            visible(&kind.bands, timeline.end_s).map(|(from, to)| Rectangle::new([(from, 0.0), (to, left_top)], fill)),
        )?;
    }
    for incident in &report.incidents {
        let (from, to) = (seconds(incident.from_us), seconds(incident.to_us.max(incident.from_us)));
        chart.draw_series([Rectangle::new([(from, 0.0), (to, left_top)], INCIDENT.mix(0.5).stroke_width(1))])?;
    }
    if let Some((_, level)) = &panel.reference {
        chart.draw_series(LineSeries::new([(0.0, *level), (timeline.end_s, *level)], GREY_LINE.stroke_width(1)))?;
    }
    if let Some(healed_us) = report.healed_us {
        let at = seconds(healed_us).min(timeline.end_s);
        chart.draw_series(LineSeries::new([(at, 0.0), (at, left_top)], HEALED.stroke_width(2)))?;
    }
    for line in &panel.lines {
        let style = line.colour.stroke_width(line.width);
        for segment in &line.segments {
            match line.axis {
                Axis::Left => chart.draw_series(LineSeries::new(segment.iter().copied(), style))?,
                Axis::Right => chart.draw_secondary_series(LineSeries::new(segment.iter().copied(), style))?,
            };
        }
    }
    Ok(())
}

/// The panel's title, then each line's swatch and label in its colour, left to right.
fn draw_legend(area: &Area, panel: &Panel) -> Drawn {
    let y = (LEGEND_PX / 2) as i32 + 2;
    let mut x = (MARGIN_PX + Y_AXIS_PX) as i32;
    let anchor = Pos::new(HPos::Left, VPos::Center);
    let font = (FontFamily::SansSerif, TEXT_FONT).into_font();
    area.draw(&Text::new(panel.title, (x, y), font.style(FontStyle::Bold).color(&BLACK).pos(anchor)))?;
    x += text_px(panel.title) + 24;
    let reference = panel.reference.as_ref().map(|(label, _)| (label.as_str(), GREY_LINE, 1));
    let entries = panel.lines.iter().map(|line| (line.label, line.colour, line.width)).chain(reference);
    for (label, colour, width) in entries {
        area.draw(&PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(width)))?;
        x += 22;
        area.draw(&Text::new(label, (x, y), font.color(&colour).pos(anchor)))?;
        x += text_px(label) + 16;
    }
    Ok(())
}

/// A sans-serif text style, anchored at (`h`, `v`).
fn text(size: f64, colour: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle { color: colour.to_backend_color(), ..TextStyle::from((FontFamily::SansSerif, size)) }.pos(Pos::new(h, v))
}

/// About how wide `text` is at [`TEXT_FONT`] in a sans-serif face, bold or not: labels only need
/// to keep apart, and the viewer, not plotters, lays the text out.
fn text_px(text: &str) -> i32 {
    (text.chars().count() as f64 * 12.0 * 0.62).ceil() as i32
}

/// A tick label: at most three decimals, trailing zeros dropped; powers of ten past a million.
fn tick(value: f64) -> String {
    if value.abs() >= 1e6 {
        return format!("{value:.1e}");
    }
    let text = format!("{:.3}", value + 0.0);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        return "0".to_string();
    }
    text.to_string()
}

fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}
