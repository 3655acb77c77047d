//! Back-off of the watches after errors.
//!
//! kube-runtime's `Controller` backs off its *merged* trigger stream by default: one back-off for
//! every watch it runs, so an error of any watch puts all of them to sleep, for up to a minute
//! (client-go's 0.8 s doubling to 30 s, with jitter), and it resets only after two minutes without
//! errors. After an apiserver outage each watch has errors of its own to report (the connection
//! gone, then 410 Gone): found by the fault tests, capi-lb then took minutes to see a LoadBalancer
//! created after the outage. Here each watch backs off on its own ([`for_watch`]), briefly, and the
//! merged stream not at all ([`NoBackoff`]).

use std::time::Duration;

use kube::runtime::utils::{Backoff, ResetTimerBackoff};

/// First delay after an error.
const FIRST: Duration = Duration::from_millis(500);
/// Longest delay between two attempts of one watch.
const LONGEST: Duration = Duration::from_secs(8);
/// Back to [`FIRST`] after this long without an error.
const RESET_AFTER: Duration = Duration::from_secs(60);

/// Doubling delays from [`FIRST`] to [`LONGEST`].
#[derive(Clone, Debug)]
pub struct Doubling {
    next: Duration,
}

impl Default for Doubling {
    fn default() -> Self {
        Self { next: FIRST }
    }
}

impl Iterator for Doubling {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(LONGEST);
        Some(now)
    }
}

impl Backoff for Doubling {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

/// The back-off of one watch.
pub fn for_watch() -> ResetTimerBackoff<Doubling> {
    ResetTimerBackoff::new(Doubling::default(), RESET_AFTER)
}

/// No back-off: for a controller's merged trigger stream, whose watches each back off on their own.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBackoff;

impl Iterator for NoBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoBackoff {
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_longest_and_reset() {
        let mut b = Doubling::default();
        let delays: Vec<u64> = (&mut b).take(7).map(|d| d.as_millis() as u64).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
        b.reset();
        assert_eq!(b.next(), Some(FIRST));
        assert_eq!(NoBackoff.next(), Some(Duration::ZERO));
    }
}
