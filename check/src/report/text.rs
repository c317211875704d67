//! `report.txt`: what the operator reads first.

use super::Report;
use crate::figures::Spread;
use std::fmt::Write;

fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1e3)
}

fn s(us: u64) -> String {
    format!("{:.3} s", us as f64 / 1e6)
}

fn spread(delay: &Spread) -> String {
    format!("p50 {}, p99 {}, max {} over {} jobs", ms(delay.p50_us), ms(delay.p99_us), ms(delay.max_us), delay.count)
}

/// The summary, in plain text.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let b = &report.baseline;
    let _ = writeln!(
        out,
        "{} seed {}: {} lines, {} of history in windows of {}; {} workers",
        report.scenario,
        report.seed,
        report.lines,
        s(report.end_us),
        ms(report.window_us),
        report.fleet
    );
    let _ = writeln!(
        out,
        "{} ({} windows): {:.0} arrivals/s, backlog {:.1}, oldest job {}, dependency mean {} p99 {}, \
         failures {:.0}%, service {}, load {:.2}",
        if b.calm { "calm baseline" } else { "baseline (NO calm windows: over every window while jobs arrive)" },
        b.windows,
        b.arrival_rate,
        b.backlog,
        ms(b.oldest_age_us),
        ms(b.dependency_mean_us as u64),
        ms(b.dependency_p99_us),
        b.failure_rate * 100.0,
        ms(b.service_us as u64),
        b.load
    );
    let _ = writeln!(
        out,
        "incidents open when the backlog grows {} windows running past {:.1}, or the oldest job passes {}",
        super::diagnose::GROWTH_WINDOWS,
        b.backlog_threshold,
        ms(b.age_threshold_us)
    );
    if !report.faults.is_empty() {
        let mut kinds: Vec<&str> = report.faults.iter().map(|fault| fault.kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        let _ = writeln!(out, "fault windows on the history: {} ({})", report.faults.len(), kinds.join(", "));
    }
    if let Some(healed) = report.healed_us {
        let _ = writeln!(out, "faults healed at {}", s(healed));
    }
    let _ = writeln!(out);
    if report.incidents.is_empty() {
        let _ = writeln!(
            out,
            "no incident: the backlog never grew past its threshold, no job aged past it, no arrival was turned away"
        );
    }
    for (n, incident) in report.incidents.iter().enumerate() {
        let v = &incident.verdict;
        let _ = writeln!(
            out,
            "incident {}: {} to {}{}, cause {}{}",
            n + 1,
            s(incident.from_us),
            s(incident.to_us),
            if incident.recovered { "" } else { " (not recovered when the history ends)" },
            v.cause.to_uppercase(),
            match v.causes.len() {
                0 | 1 => String::new(),
                _ => format!(" ({})", v.causes.iter().map(|c| c.name()).collect::<Vec<_>>().join(" + ")),
            }
        );
        let _ = writeln!(
            out,
            "  load {:.2} (calm {:.2}); rise by factor: arrivals {:+.2}, workers {:+.2}, dependency {:+.2}",
            v.load, b.load, v.terms.arrivals, v.terms.workers, v.terms.dependency
        );
        for line in &v.evidence {
            let _ = writeln!(out, "  {line}");
        }
        if incident.labels.len() > 1 {
            let labels: Vec<String> =
                incident.labels.iter().map(|label| format!("{} at {}", label.cause, s(label.at_us))).collect();
            let _ = writeln!(out, "  as it grew: {}", labels.join(", then "));
        }
        let _ = writeln!(
            out,
            "  peak backlog {} at {}, oldest job {}",
            incident.peak_backlog,
            s(incident.peak_us),
            ms(incident.peak_age_us)
        );
        let _ = writeln!(
            out,
            "  customers: {}; {} waited longer than the ttl; {} turned away (queue full)",
            spread(&incident.delay),
            incident.waited_over_ttl,
            incident.rejections
        );
        let i = &incident.integrity;
        let _ = writeln!(
            out,
            "  integrity: {} duplicate effects, {} adoptions, {} completed, {} dead-lettered, {} quarantined",
            i.duplicate_effects,
            i.adoptions,
            i.completed,
            i.dead_lettered.len(),
            i.quarantined.len()
        );
        for ended in i.dead_lettered.iter().chain(&i.quarantined).take(5) {
            let _ = writeln!(out, "    j{} at {}: {}", ended.job, s(ended.at_us), ended.reason);
        }
        let _ = writeln!(out, "  {}", reclaim_line(&incident.reclaims));
        match (incident.recovery_us, incident.fault_end_us) {
            (Some(_), Some(end)) if end >= incident.to_us => {
                let _ = writeln!(
                    out,
                    "  recovery: back under the thresholds at {}, before the last fault ended ({})",
                    s(incident.to_us),
                    s(end)
                );
            }
            (Some(recovery), Some(end)) => {
                let _ = writeln!(
                    out,
                    "  recovery: {} after the last fault ended ({}), draining {:.0} jobs/s",
                    ms(recovery),
                    s(end),
                    incident.drain_rate
                );
            }
            (Some(recovery), None) => {
                let _ = writeln!(
                    out,
                    "  recovery: {} after the peak (no fault window on the history), draining {:.0} jobs/s",
                    ms(recovery),
                    incident.drain_rate
                );
            }
            (None, _) => {
                let _ = writeln!(out, "  recovery: none before the history ends");
            }
        }
    }
    let _ = writeln!(out);
    let i = &report.integrity;
    let _ = writeln!(
        out,
        "all customers: {}; {} waited longer than the ttl; {} turned away (queue full)",
        spread(&report.delay),
        report.waited_over_ttl,
        report.rejections
    );
    let _ = writeln!(
        out,
        "integrity: {} duplicate effects, {} adoptions, {} completed, {} dead-lettered, {} quarantined, {} unfinished",
        i.duplicate_effects,
        i.adoptions,
        i.completed,
        i.dead_lettered.len(),
        i.quarantined.len(),
        i.unfinished
    );
    let _ = writeln!(out, "{}", reclaim_line(&report.reclaims));
    let l = &report.little;
    if l.windows == 0 {
        let _ = writeln!(out, "Little's law: no steady windows to judge it over");
    } else {
        let _ = writeln!(
            out,
            "Little's law over {} steady windows: L {:.2} = {:.0}/s x {} ({:.2}); {}",
            l.windows,
            l.mean_backlog,
            l.arrival_rate,
            ms(l.mean_delay_us as u64),
            l.ratio,
            match (l.holds, &l.why) {
                (Some(true), _) => "holds".to_string(),
                (Some(false), why) => format!("does not hold: {}", why.as_deref().unwrap_or("")),
                (None, why) => why.clone().unwrap_or_default(),
            }
        );
    }
    let _ = writeln!(
        out,
        "bookkeeping: {}",
        if l.integral_matches && l.backlog_mismatches == 0 {
            "the backlog agrees with the table's on every arrival, and its integral with every job's time in the queue"
                .to_string()
        } else {
            format!(
                "DISAGREES: {} arrivals where the table's backlog differs from the report's; integral {}",
                l.backlog_mismatches,
                if l.integral_matches { "matches" } else { "does not match" }
            )
        }
    );
    out
}

/// The reclaimers' work in an incident, in one line: how many leases, over how long, and how late
/// after their expiry (the figure that says whether the reclaimers kept up).
fn reclaim_line(r: &super::diagnose::Reclaims) -> String {
    let ms = |us: u64| format!("{:.1} ms", us as f64 / 1e3);
    let (Some(first), Some(last), Some(late_p50), Some(late_max)) =
        (r.first_us, r.last_us, r.late_p50_us, r.late_max_us)
    else {
        return format!("reclaim: no lease fenced; {} fences lost to a race", r.lost);
    };
    let by = if r.reclaimers == 1 { "1 reclaimer".to_string() } else { format!("{} reclaimers", r.reclaimers) };
    format!(
        "reclaim: {} leases fenced by {by} in {:.3} s ({:.3} s to {:.3} s), {} after expiry at the median ({} at most); \
         {} fences lost to a race",
        r.leases,
        (last - first) as f64 / 1e6,
        first as f64 / 1e6,
        last as f64 / 1e6,
        ms(late_p50),
        ms(late_max),
        r.lost
    )
}
