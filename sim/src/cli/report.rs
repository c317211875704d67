//! `lease-sim report`: any history, read as the operator would, into report.txt, report.json and
//! timeline.svg.

use super::BadInput;
use crate::history::{parse_jsonl, Entry};
use crate::report::Report;
use std::path::Path;

/// Parses a duration: a number with `us`, `ms`, `s`, `m` or `h` (`400ms`, `1.5s`, `250000us`,
/// `3m`).
pub(super) fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1e6)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60e6)
    } else if let Some(n) = text.strip_suffix('h') {
        (n, 3_600e6)
    } else {
        return Err(format!("{text:?}: give a unit, e.g. 400ms, 1.5s, 3m or 250000us"));
    };
    let value: f64 = number.trim().parse().map_err(|_| format!("{text:?} is not a duration (e.g. 400ms)"))?;
    let us = value * scale;
    if !(1.0..=1e15).contains(&us) {
        return Err(format!("{text:?}: a window is from 1us to years long"));
    }
    Ok(us.round() as u64)
}

/// Reads a history file.
pub(super) fn read_history(file: &Path) -> Result<Vec<Entry>, BadInput> {
    let text =
        std::fs::read_to_string(file).map_err(|error| BadInput(format!("cannot read {}: {error}", file.display())))?;
    parse_jsonl(&text).map_err(|error| BadInput(format!("{}: {error}", file.display())))
}

/// Reports on `entries`: prints report.txt, and writes the three files to `out` when given.
pub(super) fn report(
    entries: &[Entry],
    source: &str,
    window_us: Option<u64>,
    out: Option<&Path>,
) -> Result<u8, BadInput> {
    let report = Report::of(entries, window_us).map_err(|error| BadInput(format!("{source}: {error}")))?;
    let text = crate::report::text::render(&report);
    print!("{text}");
    if let Some(dir) = out {
        write_all(dir, &report, &text)?;
        println!("report: report.txt, report.json and timeline.svg written to {}", dir.display());
    }
    Ok(0)
}

/// Writes report.txt, report.json and timeline.svg into `dir`, each atomically.
pub(super) fn write_all(dir: &Path, report: &Report, text: &str) -> Result<(), BadInput> {
    std::fs::create_dir_all(dir).map_err(|error| BadInput(format!("cannot create {}: {error}", dir.display())))?;
    let files = [
        ("report.txt", text.to_string()),
        ("report.json", report.to_json()),
        ("timeline.svg", crate::report::svg::render(report)),
    ];
    for (name, contents) in files {
        let path = dir.join(name);
        crate::atomic::write(&path, contents.as_bytes())
            .map_err(|error| BadInput(format!("cannot write {}: {error}", path.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    // Proves durations need a unit and a sane size, and read each unit right.
    #[test]
    fn durations_read_each_unit_and_refuse_the_rest() {
        assert_eq!(parse_duration("400ms"), Ok(400_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000));
        assert_eq!(parse_duration("250us"), Ok(250));
        assert_eq!(parse_duration("3m"), Ok(180_000_000)); // the nightly's live run: `--duration 3m`
        assert_eq!(parse_duration("0.5h"), Ok(1_800_000_000));
        for bad in ["400", "ms", "-1s", "0ms", "nan s", "1e30s", "4 hours", "3 min", "m", "h"] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
    }
}
