//! `eventually` give_up_backs_off: a reclaimer that gave a batch up waits before it lists again.
//!
//! A reclaimer gives a batch up when one of its requests goes unanswered through every retry
//! (`gave_up`): the table is down, cut off or drowning. It must then wait its scan interval
//! (`scan_every_us` on the `run` line) before its next listing, or a fleet of reclaimers turns
//! an outage into a storm of scans against the table it cannot reach, each scan a transaction and,
//! in a store, a row. A violation is a `listed` line answering the reclaimer's next batch (a
//! higher batch number than the one it gave up) sooner than half the interval after its
//! `gave_up` line, in the same life: a `crashed`, `stopping`, `stopped` or `restarted` of the
//! reclaimer in between starts a new one, which scans at once.
//!
//! Why half: the reclaimer counts the interval on its own clock, which may run fast (the
//! simulator's by up to 5%), and a store stamps the `gave_up` line when it commits, after the
//! reclaimer decided to wait. Half is a bound that every reclaimer that waits keeps, and that
//! every reclaimer that does not (it lists again at once, or on its next timer) breaks. A listing
//! of an earlier batch (a retried copy the network held back) is not the next scan. A history
//! whose `run` line states no interval is not judged.
//!
//! Nothing wrong was accepted, so this is a liveness property (exit status 2), judged in the
//! fault phase too, since that is where give-ups happen; the first violation is kept and the
//! liveness check reports it.

use super::{Invariant, Violation};
use lease_history::{Entry, Event, Node};
use std::collections::BTreeMap;

/// A reclaimer's latest give-up in its current life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GaveUp {
    /// The `gave_up` line.
    line: usize,
    t_us: u64,
    /// The batch given up.
    seq: u64,
}

/// Each reclaimer's give-up awaiting its next listing: the memory of this checker.
#[derive(Debug, Clone, Default)]
pub(crate) struct BackOff {
    /// The run line's scan interval; `None`: not judged.
    scan_every_us: Option<u64>,
    waiting: BTreeMap<Node, GaveUp>,
    first: Option<Violation>,
}

impl BackOff {
    /// Folds the entry at `line` in, and keeps the first violation it shows.
    pub(crate) fn absorb(&mut self, line: usize, entry: &Entry) {
        match &entry.event {
            Event::Run { scan_every_us, .. } => self.scan_every_us = *scan_every_us,
            Event::GaveUp { batch, .. } => {
                self.waiting.insert(entry.node, GaveUp { line, t_us: entry.t_us, seq: batch.seq });
            }
            Event::Crashed { target, .. }
            | Event::Stopping { target, .. }
            | Event::Stopped { target }
            | Event::Restarted { target } => {
                self.waiting.remove(target);
            }
            Event::Listed { reclaimer, batch, .. } => {
                let Some(gave_up) = self.waiting.get(reclaimer).copied() else { return };
                if batch.seq <= gave_up.seq {
                    return; // A late copy of a listing sent before it gave up.
                }
                self.waiting.remove(reclaimer);
                let Some(scan_every_us) = self.scan_every_us else { return };
                let waited_us = entry.t_us.saturating_sub(gave_up.t_us);
                if waited_us < scan_every_us / 2 && self.first.is_none() {
                    let message = format!(
                        "{reclaimer} listed again {}us after it gave batch {} up, under half its scan interval of \
                         {scan_every_us}us: a reclaimer that gave up backs off",
                        waited_us, gave_up.seq
                    );
                    self.first =
                        Some(Violation::at(Invariant::GiveUpBacksOff, None, &[Some(gave_up.line)], line, message));
                }
            }
            _ => {}
        }
    }

    /// The first violation found so far.
    pub(crate) fn first(&self) -> Option<Violation> {
        self.first.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check_history, Invariant};
    use lease_history::{Event, Node, Point};

    const SCAN_EVERY_US: u64 = 250;

    /// w1 crashes with j1's grant; r1 lists j1 in r1#0, wins its fence, finds nothing, and
    /// requeues it; the requeue's answer never reaches it through its retries, and it gives up
    /// at 1_300.
    fn gave_up() -> (History, usize) {
        let mut history = History::new(2, 3);
        if let Event::Run { scan_every_us, .. } = &mut history.entries[0].event {
            *scan_every_us = Some(SCAN_EVERY_US);
        }
        history.at(0).arrived(J1);
        history.at(10).granted(J1, E1, w(1), 1_010);
        history.at(20).crashed(w(1), Point::AtRandom, None);
        history.at(1_010).listed(batch(1, 0), &[(J1, E1, 1_010)]);
        history.at(1_010).reclaimed(J1, E1, 1_010, E2, batch(1, 0));
        history.at(1_020).looked_up(J1, E2, None, None, Some(batch(1, 0)));
        history.at(1_030).requeued(J1, E2, 1, Some(batch(1, 0)));
        let line = history.at(1_300).gave_up(batch(1, 0), J1);
        (history, line)
    }

    /// w2 takes j1 again and completes it; the faults heal.
    fn finish(history: &mut History) {
        history.at(1_700).granted(J1, E3, w(2), 2_700);
        history.at(1_710).looked_up(J1, E3, None, None, None);
        history.at(1_720).executing(w(2), J1, E3);
        history.at(1_730).applied(J1, E3, O7);
        history.at(1_740).completed(J1, O7, E3, None);
        history.at(1_800).faults_healed();
    }

    // A listing of the next batch a whole interval after the give-up passes; one at once is
    // reported at the listing, with the give-up.
    #[test]
    fn a_listing_straight_after_a_give_up_fails() {
        let (mut waits, _) = gave_up();
        waits.at(1_300 + SCAN_EVERY_US).listed(batch(1, 1), &[]);
        finish(&mut waits);
        check_history(&waits.entries).unwrap();

        let (mut hurries, gave_up) = gave_up();
        let listed = hurries.at(1_310).listed(batch(1, 1), &[]);
        finish(&mut hurries);
        let violation = check_history(&hurries.entries).unwrap_err();
        assert_eq!(violation.invariant, Invariant::GiveUpBacksOff);
        assert_eq!(violation.lines, vec![gave_up, listed]);
        assert!(violation.message.contains("r1 listed again 10us after it gave batch 0 up"), "{}", violation.message);
        assert!(!Invariant::GiveUpBacksOff.is_safety());
    }

    // A late copy of the batch given up, another reclaimer's listing, a new life's first scan
    // and a run line without an interval are not judged.
    #[test]
    fn what_is_not_a_hurried_scan_passes() {
        let (mut late_copy, _) = gave_up();
        late_copy.at(1_310).listed(batch(1, 0), &[]);
        late_copy.at(1_320).listed(batch(2, 0), &[]);
        finish(&mut late_copy);
        check_history(&late_copy.entries).unwrap();

        let (mut restarted, _) = gave_up();
        restarted.at(1_305).crashed(Node::Reclaimer(1), Point::AtRandom, None);
        restarted.at(1_308).restarted(Node::Reclaimer(1));
        restarted.at(1_310).listed(batch(1, 1 << 32), &[]);
        finish(&mut restarted);
        check_history(&restarted.entries).unwrap();

        let (mut unknown, _) = gave_up();
        if let Event::Run { scan_every_us, .. } = &mut unknown.entries[0].event {
            *scan_every_us = None;
        }
        unknown.at(1_310).listed(batch(1, 1), &[]);
        finish(&mut unknown);
        check_history(&unknown.entries).unwrap();
    }
}
