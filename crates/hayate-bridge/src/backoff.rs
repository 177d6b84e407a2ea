//! Reconnection delays and the choice of the next remote address.

use rand::Rng;
use std::time::Duration;

/// Delays between connection attempts, as Mosquitto's `restart_timeout`: a constant delay
/// (`cap` 0), or a jittered exponential back-off from `base` to `cap` ("decorrelated jitter":
/// each delay is drawn between `base` and three times the previous one, then capped).
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    previous: Duration,
}

impl Backoff {
    /// Delays from `base` up to `cap` (a constant `base` when `cap` is zero).
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            previous: base,
        }
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        if self.cap.is_zero() || self.cap <= self.base {
            return self.base.max(self.cap);
        }
        let low = self.base.as_millis() as u64;
        let high = (self.previous.as_millis() as u64)
            .saturating_mul(3)
            .max(low + 1);
        let drawn = Duration::from_millis(rand::rng().random_range(low..high));
        self.previous = drawn.min(self.cap);
        self.previous
    }

    /// A connection succeeded: the next failure starts from `base` again.
    pub fn reset(&mut self) {
        self.previous = self.base;
    }
}

/// Which remote address to try next. Mosquitto's `round_robin false`: the first address is
/// the main one, the others are tried in turn when it fails, and after a link drop the bridge
/// goes back to the main one. `round_robin true`: after a failure or a drop the bridge moves
/// on to the next address.
#[derive(Debug, Clone)]
pub struct AddressCycle {
    addresses: Vec<String>,
    round_robin: bool,
    index: usize,
}

impl AddressCycle {
    /// A cycle over `addresses` (at least one).
    pub fn new(addresses: Vec<String>, round_robin: bool) -> AddressCycle {
        AddressCycle {
            addresses,
            round_robin,
            index: 0,
        }
    }

    /// The address to try now.
    pub fn current(&self) -> &str {
        &self.addresses[self.index % self.addresses.len()]
    }

    /// Connecting to the current address failed.
    pub fn failed(&mut self) {
        self.index = (self.index + 1) % self.addresses.len();
    }

    /// A link to the current address dropped after it was up.
    pub fn dropped(&mut self) {
        if self.round_robin {
            self.failed();
        } else {
            self.index = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_delay_without_a_cap() {
        let mut backoff = Backoff::new(Duration::from_secs(5), Duration::ZERO);
        for _ in 0..5 {
            assert_eq!(backoff.next_delay(), Duration::from_secs(5));
        }
    }

    #[test]
    fn jittered_delays_stay_between_base_and_cap_and_grow() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(3);
        let mut backoff = Backoff::new(base, cap);
        let delays: Vec<Duration> = (0..200).map(|_| backoff.next_delay()).collect();
        assert!(delays.iter().all(|d| *d >= base && *d <= cap), "{delays:?}");
        assert!(
            delays.iter().any(|d| *d >= Duration::from_secs(1)),
            "never grew"
        );
        backoff.reset();
        assert!(backoff.next_delay() < Duration::from_millis(300));
    }

    #[test]
    fn main_address_first_unless_round_robin() {
        let addresses = vec!["a:1".to_string(), "b:1".to_string(), "c:1".to_string()];
        let mut cycle = AddressCycle::new(addresses.clone(), false);
        assert_eq!(cycle.current(), "a:1");
        cycle.failed();
        assert_eq!(cycle.current(), "b:1");
        cycle.dropped();
        assert_eq!(cycle.current(), "a:1");

        let mut cycle = AddressCycle::new(addresses, true);
        cycle.failed();
        cycle.failed();
        assert_eq!(cycle.current(), "c:1");
        cycle.dropped();
        assert_eq!(cycle.current(), "a:1");
        cycle.dropped();
        assert_eq!(cycle.current(), "b:1");
    }
}
