//! The table's time: integer microseconds since the start of a run.
//!
//! Our own types rather than `std::time::Instant`, so that every run starts at zero, traces print
//! the same every time, and no clock is ever read: the caller passes `now` in.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, Div, Sub};

/// A point on a clock, in integer microseconds since the run began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Time(pub u64);

/// A length of time, in integer microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Span(pub u64);

impl Time {
    /// The start of every run.
    pub const ZERO: Time = Time(0);

    /// Microseconds since the start of the run.
    pub fn as_us(self) -> u64 {
        self.0
    }

    /// The span from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Span {
        Span(self.0.saturating_sub(earlier.0))
    }

    /// `self - span`, stopping at zero.
    pub fn saturating_sub(self, span: Span) -> Time {
        Time(self.0.saturating_sub(span.0))
    }
}

impl Span {
    /// A span of zero length.
    pub const ZERO: Span = Span(0);

    /// A span of `us` microseconds.
    pub const fn from_us(us: u64) -> Span {
        Span(us)
    }

    /// A span of `ms` milliseconds.
    pub const fn from_ms(ms: u64) -> Span {
        Span(ms * 1_000)
    }

    /// A span of `s` seconds.
    pub const fn from_secs(s: u64) -> Span {
        Span(s * 1_000_000)
    }

    /// Length in microseconds.
    pub fn as_us(self) -> u64 {
        self.0
    }
}

impl Add<Span> for Time {
    type Output = Time;
    fn add(self, rhs: Span) -> Time {
        Time(self.0.checked_add(rhs.0).expect("time overflow"))
    }
}

impl Sub<Span> for Time {
    type Output = Time;
    fn sub(self, rhs: Span) -> Time {
        Time(self.0.checked_sub(rhs.0).expect("time underflow"))
    }
}

impl Div<u64> for Span {
    type Output = Span;
    /// `self / divisor`, rounded down; the divisor must not be zero.
    fn div(self, divisor: u64) -> Span {
        assert!(divisor > 0, "span divided by zero");
        Span(self.0 / divisor)
    }
}

impl Add for Span {
    type Output = Span;
    fn add(self, rhs: Span) -> Span {
        Span(self.0.checked_add(rhs.0).expect("span overflow"))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1_000) {
            write!(f, "{}ms", self.0 / 1_000)
        } else {
            write!(f, "{}us", self.0)
        }
    }
}
