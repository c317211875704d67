//! Per-node local clocks: madsim has one global clock, so drift and offset are modelled here,
//! around the node, and the sans-IO core only ever sees local time.

use lease_core::Time;

/// A node's clock: `local(t) = offset + t * (1 + drift_ppm / 10^6)`, never running backwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalClock {
    /// Where the local clock stood when the run began, in microseconds.
    pub offset_us: u64,
    /// Rate error in parts per million: positive runs fast, negative runs slow.
    pub drift_ppm: i32,
}

const PPM: i128 = 1_000_000;

impl LocalClock {
    /// A perfect clock.
    pub const EXACT: LocalClock = LocalClock { offset_us: 0, drift_ppm: 0 };

    /// The local reading at global time `t`.
    pub fn local(self, t: Time) -> Time {
        let t = t.0 as i128;
        let local = self.offset_us as i128 + t * (PPM + self.drift_ppm as i128) / PPM;
        Time(local as u64)
    }

    /// The earliest global time at which the local clock reads at least `local`.
    pub fn global(self, local: Time) -> Time {
        let since = (local.0 as i128 - self.offset_us as i128).max(0);
        let rate = PPM + self.drift_ppm as i128;
        let t = (since * PPM + rate - 1) / rate;
        assert!(self.local(Time(t as u64)) >= local || since == 0);
        Time(t as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the inverse is exact: waking at `global(x)` always finds the local clock at x or later,
    // and a microsecond earlier it had not reached x, for fast, slow and offset clocks.
    #[test]
    fn global_is_the_earliest_time_the_local_clock_reaches_a_reading() {
        for clock in [
            LocalClock::EXACT,
            LocalClock { offset_us: 7_000_000, drift_ppm: 50_000 },
            LocalClock { offset_us: 3, drift_ppm: -50_000 },
        ] {
            for local in [clock.offset_us + 1, clock.offset_us + 999, clock.offset_us + 12_345_678] {
                let t = clock.global(Time(local));
                assert!(clock.local(t) >= Time(local));
                assert!(t.0 == 0 || clock.local(Time(t.0 - 1)) < Time(local));
            }
        }
    }
}
