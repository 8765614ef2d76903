//! Durations and deadlines given in seconds, and the conversion between wall-clock and monotonic time.
//!
//! Deadlines fire on the monotonic clock (`Instant`), so that a wall-clock step never fires or delays them;
//! snapshots show them on the wall clock, as given.

use std::fmt;
use std::time::{Duration, Instant, SystemTime};

/// The largest number of seconds a timeout, wait or deadline may be away: about 31 years. Beyond it a value is
/// almost certainly a unit mistake, and it could overflow the platform's clocks.
pub const MAX_SECONDS: f64 = 1e9;

/// Why a number of seconds was refused.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum SecondsProblem {
    /// Not a number.
    NotANumber,
    /// Infinite.
    Infinite(f64),
    /// Below zero.
    Negative(f64),
    /// Infinite, or above [`MAX_SECONDS`].
    TooLarge(f64),
}

impl fmt::Display for SecondsProblem {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SecondsProblem::NotANumber => formatter.write_str("got nan"),
            SecondsProblem::Infinite(seconds) => write!(formatter, "got {seconds}"),
            SecondsProblem::Negative(seconds) => {
                write!(formatter, "got {}, which is negative", Shown(seconds))
            }
            SecondsProblem::TooLarge(seconds) => {
                write!(
                    formatter,
                    "got {}, which is more than {MAX_SECONDS:e} seconds",
                    Shown(seconds)
                )
            }
        }
    }
}

/// A number of seconds in a message: in exponent form from `SHOWN_IN_FULL_BELOW` on, as `1e300`, where the
/// decimal form would print every one of its 301 digits.
struct Shown(f64);

const SHOWN_IN_FULL_BELOW: f64 = 1e15;

impl fmt::Display for Shown {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.abs() < SHOWN_IN_FULL_BELOW {
            write!(formatter, "{}", self.0)
        } else {
            write!(formatter, "{:e}", self.0)
        }
    }
}

/// A duration of `seconds`: finite, not negative, and at most [`MAX_SECONDS`].
///
/// # Errors
/// The [`SecondsProblem`] of any other value.
pub fn duration_from_seconds(seconds: f64) -> Result<Duration, SecondsProblem> {
    check_finite(seconds)?;
    if seconds < 0.0 {
        return Err(SecondsProblem::Negative(seconds));
    }
    if seconds > MAX_SECONDS {
        return Err(SecondsProblem::TooLarge(seconds));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A deadline given as seconds since the Unix epoch (as Python's `time.time()` gives): finite, and at most
/// [`MAX_SECONDS`] in the future. A time in the past is a deadline that has already passed.
///
/// # Errors
/// The [`SecondsProblem`] of a value that is not a number or too far ahead.
pub fn system_time_from_epoch_seconds(seconds: f64) -> Result<SystemTime, SecondsProblem> {
    check_finite(seconds)?;
    let now = SystemTime::now();
    let now_seconds = epoch_seconds(now);
    if seconds - now_seconds > MAX_SECONDS {
        return Err(SecondsProblem::TooLarge(seconds));
    }
    let offset = Duration::from_secs_f64((seconds - now_seconds).abs().min(MAX_SECONDS * 100.0));
    Ok(if seconds >= now_seconds {
        now + offset
    } else {
        now.checked_sub(offset).unwrap_or(SystemTime::UNIX_EPOCH)
    })
}

fn check_finite(seconds: f64) -> Result<(), SecondsProblem> {
    if seconds.is_nan() {
        Err(SecondsProblem::NotANumber)
    } else if seconds.is_infinite() {
        Err(SecondsProblem::Infinite(seconds))
    } else {
        Ok(())
    }
}

/// Seconds since the Unix epoch (negative before it).
#[must_use]
pub fn epoch_seconds(time: SystemTime) -> f64 {
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => since.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

/// A deadline on both clocks: the monotonic instant that fires it, and the wall-clock time snapshots show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deadline {
    pub(crate) instant: Instant,
    pub(crate) wall: SystemTime,
}

impl Deadline {
    /// The deadline `timeout` after `now` (both clocks read by the caller, once).
    pub(crate) fn after(timeout: Duration, now: Instant, wall_now: SystemTime) -> Deadline {
        Deadline {
            instant: now + timeout,
            wall: wall_now.checked_add(timeout).unwrap_or(wall_now),
        }
    }

    /// A deadline given on one clock, placed on the other by the offset between them now.
    pub(crate) fn at_instant(instant: Instant, now: Instant, wall_now: SystemTime) -> Deadline {
        let wall = match instant.checked_duration_since(now) {
            Some(ahead) => wall_now.checked_add(ahead).unwrap_or(wall_now),
            None => wall_now
                .checked_sub(now.duration_since(instant))
                .unwrap_or(SystemTime::UNIX_EPOCH),
        };
        Deadline { instant, wall }
    }

    /// A deadline given on the wall clock. One further in the past than the monotonic clock reaches fires
    /// at once, like any past deadline, and still shows as given.
    pub(crate) fn at_wall(wall: SystemTime, now: Instant, wall_now: SystemTime) -> Deadline {
        let instant = match wall.duration_since(wall_now) {
            Ok(ahead) => now.checked_add(ahead).unwrap_or(now),
            Err(behind) => now.checked_sub(behind.duration()).unwrap_or(now),
        };
        Deadline { instant, wall }
    }

    /// The earlier of two deadlines.
    pub(crate) fn earlier(self, other: Deadline) -> Deadline {
        if other.instant < self.instant {
            other
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_checked_by_one_rule() {
        assert_eq!(duration_from_seconds(1.5), Ok(Duration::from_millis(1500)));
        assert_eq!(duration_from_seconds(0.0), Ok(Duration::ZERO));
        assert_eq!(
            duration_from_seconds(MAX_SECONDS),
            Ok(Duration::from_secs(1_000_000_000))
        );
        assert_eq!(
            duration_from_seconds(f64::NAN),
            Err(SecondsProblem::NotANumber)
        );
        assert_eq!(
            duration_from_seconds(-1.0),
            Err(SecondsProblem::Negative(-1.0))
        );
        assert_eq!(
            duration_from_seconds(1e19),
            Err(SecondsProblem::TooLarge(1e19))
        );
        assert_eq!(
            duration_from_seconds(f64::INFINITY),
            Err(SecondsProblem::Infinite(f64::INFINITY))
        );
    }

    #[test]
    fn a_huge_number_of_seconds_is_shown_short() {
        assert_eq!(
            SecondsProblem::TooLarge(1e300).to_string(),
            "got 1e300, which is more than 1e9 seconds"
        );
        assert_eq!(
            SecondsProblem::Negative(-1e300).to_string(),
            "got -1e300, which is negative"
        );
        assert_eq!(
            SecondsProblem::TooLarge(2e9).to_string(),
            "got 2000000000, which is more than 1e9 seconds"
        );
    }

    #[test]
    fn a_past_wall_deadline_keeps_its_time() {
        let now = Instant::now();
        let wall_now = SystemTime::now();
        let ten_seconds_ago = wall_now - Duration::from_secs(10);
        let deadline = Deadline::at_wall(ten_seconds_ago, now, wall_now);
        assert_eq!(deadline.wall, ten_seconds_ago);
        assert!(deadline.instant <= now);
    }

    #[test]
    fn epoch_deadlines_round_trip() {
        let at = system_time_from_epoch_seconds(1_000.5).unwrap();
        assert!((epoch_seconds(at) - 1_000.5).abs() < 1e-6);
        assert!(system_time_from_epoch_seconds(f64::INFINITY).is_err());
        assert!(system_time_from_epoch_seconds(f64::NEG_INFINITY).is_err());
        assert!(
            system_time_from_epoch_seconds(-1e12).is_ok(),
            "any finite past time is a passed deadline"
        );
    }
}
