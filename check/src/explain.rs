//! The story of a violation: the lines of the jobs it names, the listings that opened the
//! batches which fenced them, and the faults on the nodes that held them, as Elle prints a cycle
//! rather than the whole history.

use crate::Violation;
use lease_core::{BatchId, JobId};
use lease_history::render::{is_fault_line, named_nodes, render_line, HEADER};
use lease_history::{Entry, Event, Node};
use std::collections::BTreeSet;
use std::fmt::Write;

/// The story of a violation, as Elle prints a cycle and not the whole history: the lines about
/// the jobs it names, the `listed` lines of the batches that fenced them (a reclaimer fences
/// what it listed, so two listings of one lease are how two reclaims of it begin), and the
/// faults that touched the nodes holding them, up to the violation. Cited lines are marked `>`;
/// each line keeps its number in the full history.
pub fn explain(history: &[Entry], violation: &Violation) -> String {
    let end = violation.lines.last().copied().unwrap_or(history.len()).min(history.len());
    let cited: BTreeSet<usize> = violation.lines.iter().copied().collect();
    let (jobs, nodes) = involved(history, violation);
    let listings = listings(&history[..end], &jobs);
    let touches = |entry: &Entry| -> bool {
        let struck = named_nodes(entry);
        is_fault_line(&entry.event) && struck.iter().any(|node| nodes.contains(node))
    };
    let mut out = String::new();
    let _ = writeln!(out, "violation: {}: {}", violation.invariant, violation.message);
    let names = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(" ");
    let _ = writeln!(out, "jobs: {}", names(&jobs.iter().map(ToString::to_string).collect()));
    let _ = writeln!(out, "nodes: {}", names(&nodes.iter().map(ToString::to_string).collect()));
    let _ = writeln!(out, "{:>8} {HEADER}", "line");
    let mut shown = 0;
    for (index, entry) in history[..end].iter().enumerate() {
        let line = index + 1;
        let about = entry.job().is_some_and(|job| jobs.contains(&job));
        if line == 1
            || about
            || touches(entry)
            || cited.contains(&line)
            || listings.contains(&line)
            || matches!(entry.event, Event::FaultsHealed {})
        {
            let mark = if cited.contains(&line) { '>' } else { ' ' };
            let _ = writeln!(out, "{line:>7}{mark} {}", render_line(entry));
            shown += 1;
        }
    }
    let _ = writeln!(out, "({shown} of {end} lines up to the violation; trace.txt has them all)");
    out
}

/// The jobs a violation names (its own, and those of the lines it cites), and the workers,
/// reclaimers, table and ledger that touched them up to the violation.
pub fn involved(history: &[Entry], violation: &Violation) -> (BTreeSet<JobId>, BTreeSet<Node>) {
    let end = violation.lines.last().copied().unwrap_or(history.len()).min(history.len());
    let cited: BTreeSet<usize> = violation.lines.iter().copied().collect();
    let mut jobs: BTreeSet<JobId> = violation.job.into_iter().collect();
    jobs.extend(cited.iter().filter_map(|&line| history.get(line.wrapping_sub(1))?.job()));
    let mut nodes: BTreeSet<Node> = BTreeSet::new();
    for (index, entry) in history[..end].iter().enumerate() {
        if entry.job().is_some_and(|job| jobs.contains(&job)) || cited.contains(&(index + 1)) {
            nodes.extend(named_nodes(entry));
        }
    }
    nodes.retain(|node| !matches!(node, Node::World | Node::Arrivals));
    (jobs, nodes)
}

/// The 1-based lines, in `history`, of the `listed` lines that name one of `jobs`' leases and
/// opened a batch which then fenced one of `jobs` (reclaimed it, lost the race for it or found
/// it renewed). A lease listed by a batch that never fenced it is left out: an expired lease is
/// listed by every batch until it is reclaimed, and those listings explain nothing.
pub fn listings(history: &[Entry], jobs: &BTreeSet<JobId>) -> BTreeSet<usize> {
    let fenced: BTreeSet<BatchId> = history
        .iter()
        .filter_map(|entry| match entry.event {
            Event::Reclaimed { job, batch, .. }
            | Event::LostRace { job, batch, .. }
            | Event::NotExpired { job, batch, .. }
                if jobs.contains(&job) =>
            {
                Some(batch)
            }
            _ => None,
        })
        .collect();
    let names_a_job = |entry: &Entry| match &entry.event {
        Event::Listed { batch, leases, .. } => {
            fenced.contains(batch) && leases.iter().any(|lease| jobs.contains(&lease.job))
        }
        _ => false,
    };
    let lines = history.iter().enumerate().filter(|(_, entry)| names_a_job(entry)).map(|(index, _)| index + 1);
    lines.collect()
}

#[cfg(test)]
mod tests {
    use super::{explain, listings};
    use crate::fixtures::{batch, w, History, E1, E2, E3, J1, TTL_US};
    use crate::{check_history, Invariant};

    // Proves the explanation of a reclaim without compare-and-swap shows the two `listed` lines
    // that began it: two reclaimers list j1's expired lease, both fence it, and the second fence
    // reclaims a lease that has not expired. A listing by a batch that
    // fenced nothing stays out.
    #[test]
    fn a_double_reclaim_is_explained_with_both_listings() {
        let mut story = History::new(2, 10);
        story.arrived(J1);
        story.granted(J1, E1, w(0), TTL_US);
        story.at(TTL_US + 10);
        let other = story.listed(batch(2, 0), &[(J1, E1, TTL_US)]);
        let first = story.listed(batch(0, 0), &[(J1, E1, TTL_US)]);
        let second = story.listed(batch(1, 0), &[(J1, E1, TTL_US)]);
        story.at(TTL_US + 20);
        story.reclaimed(J1, E1, TTL_US, E2, batch(0, 0));
        story.at(TTL_US + 30);
        let reclaim = story.reclaimed(J1, E2, 2 * TTL_US + 20, E3, batch(1, 0));
        let violation = check_history(&story.entries).expect_err("the second reclaim is of an unexpired lease");
        assert_eq!(violation.invariant, Invariant::NoUnexpiredReclaim);
        assert_eq!(violation.lines.last(), Some(&reclaim));

        let jobs = [J1].into_iter().collect();
        assert_eq!(listings(&story.entries, &jobs), [first, second].into_iter().collect());
        let text = explain(&story.entries, &violation);
        let shown = |line: usize| text.lines().any(|row| row.trim_start().starts_with(&format!("{line} ")));
        assert!(shown(first) && shown(second), "both listings are in the story:\n{text}");
        assert!(!shown(other), "a batch that fenced nothing is not:\n{text}");
        assert_eq!(text.matches(" listed ").count(), 2, "{text}");
    }
}
