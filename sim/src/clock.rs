//! Per-node local clocks: madsim has one global clock, so drift and offset are modelled here,
//! around the node, and the sans-IO core only ever sees local time.
//!
//! A local clock reads `BASE_US + offset_us + t * (1 + drift_ppm / 10^6)` at table time `t`.
//! The offset may be negative (a clock behind the table) and the base keeps every reading above
//! zero; the rate stays positive, so a local clock never runs backwards. The base stands for the
//! common origin of real clocks (as wall clocks share the Unix epoch): the table's own clock reads
//! from the start of the run instead, and [`on_table_scale`] puts a local reading on it.

use lease_core::{Span, Time};

/// Where every local clock stands at the start of the run, before its own offset: 10 s, far more
/// than any offset, so that a clock behind the table still reads above zero.
pub const BASE_US: u64 = 10_000_000;

/// The largest rate error a local clock may have, in parts per million: ±5%, inside the workers'
/// drift margin (ttl/8), beyond which self-fencing could not hold.
pub const DRIFT_PPM_MAX: i32 = 50_000;

/// A node's clock: `local(t) = BASE_US + offset_us + t * (1 + drift_ppm / 10^6)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalClock {
    /// How far ahead of the table (negative: behind) the clock stood when the run began, in
    /// microseconds.
    pub offset_us: i64,
    /// Rate error in parts per million: positive runs fast, negative runs slow.
    pub drift_ppm: i32,
}

const PPM: i128 = 1_000_000;

impl LocalClock {
    /// A clock that agrees with the table's, apart from the base.
    pub const EXACT: LocalClock = LocalClock { offset_us: 0, drift_ppm: 0 };

    /// A clock `offset_us` ahead of the table (behind when negative), running `drift_ppm` fast.
    pub fn new(offset_us: i64, drift_ppm: i32) -> LocalClock {
        assert!(offset_us.unsigned_abs() < BASE_US, "a clock offset of {offset_us}us would read below zero");
        assert!(drift_ppm.abs() <= DRIFT_PPM_MAX, "a drift of {drift_ppm}ppm is beyond ±{DRIFT_PPM_MAX}ppm");
        LocalClock { offset_us, drift_ppm }
    }

    /// The local reading at table time `t`.
    pub fn local(self, t: Time) -> Time {
        let rate = PPM + self.drift_ppm as i128;
        assert!(rate > 0, "a local clock must run forwards");
        let local = self.origin() + t.0 as i128 * rate / PPM;
        assert!(local >= 0, "a local clock read below zero");
        Time(local as u64)
    }

    /// The earliest table time at which the local clock reads at least `local`.
    pub fn global(self, local: Time) -> Time {
        let since = (local.0 as i128 - self.origin()).max(0);
        let rate = PPM + self.drift_ppm as i128;
        let t = (since * PPM + rate - 1) / rate;
        assert!(self.local(Time(t as u64)) >= local || since == 0);
        Time(t as u64)
    }

    /// The local reading at the start of the run.
    fn origin(self) -> i128 {
        BASE_US as i128 + self.offset_us as i128
    }
}

/// A local reading put on the table's scale, as a table comparing wall clocks would see it: the
/// table's clock reads from the start of the run, local clocks from [`BASE_US`] before it. A
/// reading from before the run began (a clock behind the table, early on) is zero.
pub fn on_table_scale(reading: Time) -> Time {
    reading.saturating_sub(Span::from_us(BASE_US))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clocks() -> [LocalClock; 5] {
        [
            LocalClock::EXACT,
            LocalClock::new(1_600_000, DRIFT_PPM_MAX),
            LocalClock::new(-1_600_000, -DRIFT_PPM_MAX),
            LocalClock::new(-3, DRIFT_PPM_MAX),
            LocalClock::new(2_000, -17),
        ]
    }

    // Proves the inverse is exact: waking at `global(x)` always finds the local clock at x or later,
    // and a microsecond earlier it had not reached x, for exact, fast, slow, ahead and behind clocks.
    #[test]
    fn global_is_the_earliest_time_the_local_clock_reaches_a_reading() {
        for clock in clocks() {
            let start = clock.local(Time::ZERO).0;
            for local in [start + 1, start + 999, start + 12_345_678] {
                let t = clock.global(Time(local));
                assert!(clock.local(t) >= Time(local));
                assert!(t.0 == 0 || clock.local(Time(t.0 - 1)) < Time(local));
            }
            assert_eq!(clock.global(Time(start)), Time::ZERO);
            assert_eq!(clock.global(Time(start.saturating_sub(5))), Time::ZERO);
        }
    }

    // Proves clocks go both ways and never break time: a clock behind the table reads less than
    // one ahead of it, on the table's scale below the table's own time (zero at the start), every
    // reading is above zero, and readings never decrease as table time goes on.
    #[test]
    fn clocks_run_ahead_and_behind_never_below_zero_and_never_backwards() {
        let (ahead, behind) = (LocalClock::new(400_000, 0), LocalClock::new(-400_000, 0));
        assert_eq!(on_table_scale(ahead.local(Time(1_000_000))), Time(1_400_000));
        assert_eq!(on_table_scale(behind.local(Time(1_000_000))), Time(600_000));
        assert_eq!(on_table_scale(behind.local(Time(100_000))), Time::ZERO);
        assert_eq!(on_table_scale(LocalClock::EXACT.local(Time(123))), Time(123));
        for clock in clocks() {
            let mut last = Time::ZERO;
            for t in (0..5_000_000).step_by(99_991) {
                let now = clock.local(Time(t));
                assert!(now > Time::ZERO && now >= last, "{clock:?} read {now} after {last}");
                last = now;
            }
        }
    }

    // Proves the limits are enforced: an offset that could read below zero, or a drift past ±5%,
    // is refused.
    #[test]
    fn an_offset_past_the_base_or_a_drift_past_five_percent_is_refused() {
        for (offset_us, drift_ppm) in [(-(BASE_US as i64), 0), (BASE_US as i64, 0), (0, 50_001), (0, -50_001)] {
            assert!(std::panic::catch_unwind(|| LocalClock::new(offset_us, drift_ppm)).is_err());
        }
    }
}
