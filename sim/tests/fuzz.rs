//! The verdict is safe on any input: `check`, `report` and plan parsing fed arbitrary and mutated
//! lines, by proptest in `cargo test`. No input may panic, and none may make the process allocate
//! past [`ALLOCATED_MAX`] (a history stamped in real time once made `report` ask for 24 GB): a
//! counting allocator wraps the system's for this test binary, and every case reads its peak.
//!
//! What is tried, [`CASES`] inputs of each kind (6,000 in all, fixed so a run is comparable):
//! - real histories (a simulated swarm seed, a live-shaped store log), each line mutated: a number
//!   set to 0, 1, 2^53, u64::MAX or made negative or fractional; a field dropped; a kind renamed;
//!   a line doubled, dropped or swapped; a line cut short; every time shifted by 1.7 x 10^15 us;
//! - lines of arbitrary JSON-ish bytes after a valid `run` line;
//! - the regression plans of `scenarios/regressions`, mutated the same way.
//!
//! Each case goes through `parse_jsonl`, then (when it parses) `check_history` and
//! `Report::of` with the default window and with a 1 us window (which a long history must refuse
//! as too many windows, never lay out), and plans through `Plan::parse`.

use lease_check::report::Report;
use lease_history::{parse_jsonl, Entry};
use lease_sim::faults::plan::Plan;
use lease_sim::runner::Target;
use lease_sim::scenarios::Scenario;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The most any one case may have allocated at once, beyond what was live before it.
const ALLOCATED_MAX: usize = 256 << 20;

/// The system allocator, counting the bytes live and the peak since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        unsafe { System.dealloc(pointer, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `work` and returns how far the live bytes rose above where they started.
fn peak_of(work: impl FnOnce()) -> usize {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    work();
    PEAK.load(Ordering::Relaxed).saturating_sub(before)
}

/// Every verdict on `text`: it parses or is refused; what parses is checked and reported on.
fn judge(text: &str) {
    let Ok(entries) = parse_jsonl(text) else { return };
    let _ = lease_check::check_history(&entries);
    let _ = Report::of(&entries, None).map(|report| lease_check::report::text::render(&report));
    let _ = Report::of(&entries, Some(1));
    let _ = lease_check::figures::Figures::of(&entries);
}

fn judged_within_bounds(text: &str) -> Result<(), TestCaseError> {
    let peak = peak_of(|| judge(text));
    prop_assert!(peak < ALLOCATED_MAX, "{peak} bytes allocated for:\n{}", &text[..text.len().min(2_000)]);
    Ok(())
}

/// A simulated swarm history, and the same as a store would stamp it: times since 1970.
fn histories() -> &'static [String; 2] {
    static HISTORIES: OnceLock<[String; 2]> = OnceLock::new();
    HISTORIES.get_or_init(|| {
        let report = Target::new(Scenario::SWARM).run(3);
        let simulated = lease_history::to_jsonl(&report.history);
        let shifted: String = report.history.iter().map(|entry| shifted(entry, 1_700_000_000_000_000) + "\n").collect();
        [simulated, shifted]
    })
}

/// `entry` with every time on the table's clock moved by `by_us` (its stamp and every expiry, in
/// listings too), as a store on the host's clock would have written it; durations stay.
fn shifted(entry: &Entry, by_us: u64) -> String {
    fn shift(value: &mut serde_json::Value, by_us: u64) {
        match value {
            serde_json::Value::Object(fields) => {
                for (key, field) in fields.iter_mut() {
                    let time = matches!(key.as_str(), "t_us" | "expires_at_us" | "new_expires_at_us");
                    match field.as_u64() {
                        Some(us) if time => *field = serde_json::Value::from(us + by_us),
                        _ => shift(field, by_us),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|item| shift(item, by_us)),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(entry).expect("an entry serialises");
    shift(&mut value, by_us);
    value.to_string()
}

/// One mutation of one line of `text`.
#[derive(Debug, Clone)]
enum Mutation {
    /// The n-th number of the line becomes this text.
    Number(usize, &'static str),
    /// The n-th `"key":value` pair is dropped.
    DropField(usize),
    /// The kind is renamed.
    Kind(&'static str),
    /// The line appears twice.
    Double,
    /// The line is dropped.
    Drop,
    /// The line swaps with the next.
    Swap,
    /// The line is cut after this many bytes.
    Cut(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let numbers = prop::sample::select(vec![
        "0",
        "1",
        "9007199254740992",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "0.5",
        "1e300",
        "null",
        "\"7\"",
    ]);
    let kinds = prop::sample::select(vec!["run", "granted", "terminal", "listed", "nonsense", ""]);
    prop_oneof![
        (0usize..12, numbers).prop_map(|(n, value)| Mutation::Number(n, value)),
        (0usize..12).prop_map(Mutation::DropField),
        kinds.prop_map(Mutation::Kind),
        Just(Mutation::Double),
        Just(Mutation::Drop),
        Just(Mutation::Swap),
        (0usize..200).prop_map(Mutation::Cut),
    ]
}

/// `text` with `mutation` applied to line `at` (taken modulo the line count).
fn mutate(text: &str, at: usize, mutation: &Mutation) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        return String::new();
    }
    let at = at % lines.len();
    let line = lines[at].clone();
    match mutation {
        Mutation::Number(n, value) => lines[at] = replace_number(&line, *n, value),
        Mutation::DropField(n) => lines[at] = drop_field(&line, *n),
        Mutation::Kind(kind) => lines[at] = replace_kind(&line, kind),
        Mutation::Double => lines.insert(at, line),
        Mutation::Drop => {
            lines.remove(at);
        }
        Mutation::Swap if at + 1 < lines.len() => lines.swap(at, at + 1),
        Mutation::Swap => {}
        Mutation::Cut(len) => lines[at] = line.chars().take(*len).collect(),
    }
    lines.join("\n") + "\n"
}

/// `line` with its n-th run of digits (modulo their count) replaced by `value`.
fn replace_number(line: &str, n: usize, value: &str) -> String {
    let runs: Vec<(usize, usize)> = digit_runs(line);
    let Some(&(start, end)) = runs.get(n % runs.len().max(1)) else { return line.to_string() };
    format!("{}{value}{}", &line[..start], &line[end..])
}

fn digit_runs(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut runs = Vec::new();
    let mut k = 0;
    while k < bytes.len() {
        if bytes[k].is_ascii_digit() && (k == 0 || bytes[k - 1] == b':' || bytes[k - 1] == b'[' || bytes[k - 1] == b',')
        {
            let start = k;
            while k < bytes.len() && bytes[k].is_ascii_digit() {
                k += 1;
            }
            runs.push((start, k));
        } else {
            k += 1;
        }
    }
    runs
}

/// `line` without its n-th top-level `"key":` pair (modulo their count), as text.
fn drop_field(line: &str, n: usize) -> String {
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_str::<serde_json::Value>(line) else {
        return line.to_string();
    };
    let keys: Vec<String> = fields.keys().cloned().collect();
    if let Some(key) = keys.get(n % keys.len().max(1)) {
        fields.remove(key);
    }
    serde_json::Value::Object(fields).to_string()
}

fn replace_kind(line: &str, kind: &str) -> String {
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_str::<serde_json::Value>(line) else {
        return line.to_string();
    };
    fields.insert("kind".to_string(), serde_json::Value::String(kind.to_string()));
    serde_json::Value::Object(fields).to_string()
}

/// The regression plans, as their files hold them.
fn plans() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/regressions");
    let mut files: Vec<_> = std::fs::read_dir(dir).expect("the regression plans").flatten().map(|e| e.path()).collect();
    files.sort();
    files.iter().take(8).map(|path| std::fs::read_to_string(path).expect("a plan reads")).collect()
}

const CASES: u32 = 2_000;

/// A runner of [`CASES`] cases from a fixed seed: `cargo test` tries the same inputs every time,
/// as every other test here is deterministic. `LEASE_FUZZ_SEED=N` (the nightly) tries others.
fn seeded_runner() -> TestRunner {
    let config = Config { cases: CASES, failure_persistence: None, ..Config::default() };
    let seed: u64 = std::env::var("LEASE_FUZZ_SEED").ok().and_then(|seed| seed.parse().ok()).unwrap_or(0);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

// Proves no mutated history panics or allocates past the bound in check, report or figures, and
// that the real histories themselves pass (so the mutations start from inputs that reach every
// checker). One test, so that no other test's allocations share the counter.
#[test]
fn no_input_panics_or_allocates_past_the_bound() {
    for text in histories() {
        let entries = parse_jsonl(text).expect("a simulated history parses");
        lease_check::check_history(&entries).unwrap_or_else(|violation| panic!("{violation}"));
        let report = Report::of(&entries, None).expect("the report reads it");
        assert_eq!(report.windows[0].from_us, 0, "windows are laid out from the first line");
        let refused = Report::of(&entries, Some(1)).expect_err("1 us windows over seconds are too many");
        assert!(refused.to_string().contains("--window"), "{refused}");
    }
    let mut runner = seeded_runner();
    let strategy = (0usize..2, 0usize..10_000, prop::collection::vec(mutation(), 1..4));
    runner
        .run(&strategy, |(which, at, mutations)| {
            let mut text = histories()[which].clone();
            for (k, mutation) in mutations.iter().enumerate() {
                text = mutate(&text, at.wrapping_mul(k + 1), mutation);
            }
            judged_within_bounds(&text)
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
    let run_line = histories()[0].lines().next().expect("a run line").to_string();
    let mut runner = seeded_runner();
    runner
        .run(&prop::collection::vec("[ -~]{0,120}", 0..20), |lines| {
            judged_within_bounds(&format!("{run_line}\n{}\n", lines.join("\n")))
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
    let plans = plans();
    assert!(!plans.is_empty());
    let mut runner = seeded_runner();
    runner
        .run(&(0usize..plans.len(), 0usize..10_000, mutation()), |(which, at, mutation)| {
            let text = mutate(&plans[which], at, &mutation);
            let peak = peak_of(|| {
                let _ = Plan::parse(&text);
            });
            prop_assert!(peak < ALLOCATED_MAX, "{peak} bytes for the plan:\n{text}");
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
}
