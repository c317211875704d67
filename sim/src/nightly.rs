//! What a nightly sweep adds to a plain one: a time budget, and a seed base taken from the date.
//!
//! Both read the wall clock, and only outside the simulated worlds: the budget decides when the
//! sweep stops *starting* seeds, the date decides where the night's seeds begin. Neither reaches
//! inside a world, so every seed still replays exactly from its number alone.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest time budget accepted: a week. Longer is a typo (`10000h`), not a plan.
pub const DURATION_MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// Seeds per day of the date base: the night of `YYYYMMDD` starts at `YYYYMMDD * SEEDS_PER_DAY`,
/// so the date can be read off any of its seeds, and no night's sweep reaches the next night's.
pub const SEEDS_PER_DAY: u64 = 1_000_000_000;

/// Why a `--duration` argument was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a number followed by `s`, `m` or `h`.
    #[error("bad duration {0:?}: write a whole number of seconds, or one with a unit: 90s, 10m, 1h")]
    Garbage(String),
    /// Zero.
    #[error("bad duration {0:?}: a sweep needs more than zero time")]
    Zero(String),
    /// Longer than [`DURATION_MAX`].
    #[error("bad duration {0:?}: at most {max_h}h", max_h = DURATION_MAX.as_secs() / 3600)]
    TooLong(String),
}

/// Parses a time budget: `90s`, `10m`, `1h`, or plain seconds (`600`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let garbage = || DurationError::Garbage(text.to_string());
    let trimmed = text.trim();
    let (number, unit_s) = match trimmed.char_indices().last() {
        Some((at, 's')) => (&trimmed[..at], 1),
        Some((at, 'm')) => (&trimmed[..at], 60),
        Some((at, 'h')) => (&trimmed[..at], 3600),
        _ => (trimmed, 1),
    };
    // `u64::from_str` accepts a leading `+`; a duration of `+5m` is still garbage to a person.
    if number.is_empty() || !number.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(garbage());
    }
    let seconds = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_s))
        .ok_or_else(|| DurationError::TooLong(text.to_string()))?;
    if seconds == 0 {
        return Err(DurationError::Zero(text.to_string()));
    }
    let duration = Duration::from_secs(seconds);
    if duration > DURATION_MAX {
        return Err(DurationError::TooLong(text.to_string()));
    }
    Ok(duration)
}

/// A UTC calendar date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Date {
    /// The year, e.g. 2025.
    pub year: u64,
    /// 1 to 12.
    pub month: u64,
    /// 1 to 31.
    pub day: u64,
}

impl Date {
    /// The UTC date of `now`. A clock set before 1970 reads as 1970-01-01.
    pub fn of(now: SystemTime) -> Date {
        let days = now.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs() / 86_400);
        Date::from_days(days)
    }

    /// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`, for days >= 0).
    pub fn from_days(days: u64) -> Date {
        // Count from 0000-03-01, so that the leap day is the last day of a 400-year era's year.
        let z = days + 719_468;
        let era = z / 146_097;
        let day_of_era = z % 146_097;
        let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let shifted_month = (5 * day_of_year + 2) / 153; // 0 = March
        let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
        let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
        let year = year_of_era + era * 400 + u64::from(month <= 2);
        assert!((1..=12).contains(&month) && (1..=31).contains(&day), "civil_from_days({days}) gave {month}/{day}");
        Date { year, month, day }
    }

    /// `YYYYMMDD` as a number.
    pub fn yyyymmdd(self) -> u64 {
        self.year * 10_000 + self.month * 100 + self.day
    }

    /// The night's seed base: `YYYYMMDD * SEEDS_PER_DAY`.
    pub fn seed_base(self) -> u64 {
        self.yyyymmdd() * SEEDS_PER_DAY
    }
}

impl std::fmt::Display for Date {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_parses_with_or_without_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration(" 30s "), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("168h"), Ok(DURATION_MAX));
    }

    #[test]
    fn a_bad_duration_is_refused_with_a_reason() {
        for garbage in ["", "s", "m", "ten", "10x", "1.5m", "-5s", "+5s", "5 m", "10ms", "1h30m", "0x10"] {
            assert_eq!(parse_duration(garbage), Err(DurationError::Garbage(garbage.to_string())), "{garbage:?}");
        }
        for zero in ["0", "0s", "0m", "00h"] {
            assert_eq!(parse_duration(zero), Err(DurationError::Zero(zero.to_string())), "{zero:?}");
        }
        for long in ["169h", "604801", "99999999999999999999", "18446744073709551615h"] {
            assert_eq!(parse_duration(long), Err(DurationError::TooLong(long.to_string())), "{long:?}");
        }
        assert!(parse_duration("ten").unwrap_err().to_string().contains("90s, 10m, 1h"));
        assert!(parse_duration("0s").unwrap_err().to_string().contains("more than zero"));
    }

    #[test]
    fn days_since_1970_become_the_civil_date() {
        let date = |days| Date::from_days(days).to_string();
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(31), "1970-02-01");
        assert_eq!(date(59), "1970-03-01");
        assert_eq!(date(10_956), "1999-12-31");
        assert_eq!(date(11_016), "2000-02-29");
        assert_eq!(date(11_017), "2000-03-01");
        assert_eq!(date(19_782), "2024-02-29");
        assert_eq!(date(20_421), "2025-11-29");
        assert_eq!(date(47_481), "2099-12-31");
        assert_eq!(date(47_482), "2100-01-01");
        assert_eq!(date(47_541), "2100-03-01"); // 2100 is not a leap year
    }

    #[test]
    fn the_seed_base_spells_the_date() {
        let now = UNIX_EPOCH + Duration::from_secs(20_421 * 86_400 + 86_399);
        assert_eq!(Date::of(now).seed_base(), 20_251_129_000_000_000);
        assert_eq!(Date::of(UNIX_EPOCH - Duration::from_secs(1)).to_string(), "1970-01-01");
    }
}
