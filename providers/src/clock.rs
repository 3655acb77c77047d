//! Time source for providers and reconcilers. Production uses the system clock; `simulate` and the
//! tests use a manual clock they advance, so delays (provisioning time, requeues) run instantly and
//! deterministically.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// Shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Move the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        let by = SignedDuration::try_from(by).unwrap_or(SignedDuration::MAX);
        *now = now.saturating_add(by).unwrap_or(*now);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `to - from` as a std Duration, zero when `to` is not after `from`.
pub fn until(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// `from + by`, saturating.
pub fn after(from: Timestamp, by: Duration) -> Timestamp {
    let by = SignedDuration::try_from(by).unwrap_or(SignedDuration::MAX);
    from.saturating_add(by).unwrap_or(from)
}

/// A duration the way kubectl shows ages: `42s`, `10m`, `2h2m`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        _ => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_advances() {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = ManualClock::new(start);
        clock.advance(Duration::from_secs(90));
        assert_eq!(until(start, clock.now()), Duration::from_secs(90));
        assert_eq!(until(clock.now(), start), Duration::ZERO);
        assert_eq!(after(start, Duration::from_secs(90)), clock.now());
    }

    #[test]
    fn durations_read_like_kubectl() {
        assert_eq!(human(Duration::from_secs(42)), "42s");
        assert_eq!(human(Duration::from_secs(600)), "10m");
        assert_eq!(human(Duration::from_secs(7320)), "2h2m");
    }
}
