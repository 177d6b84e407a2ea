//! One monotonic clock for the whole run, shared by every process of it.
//!
//! Times are nanoseconds since the run's epoch, an absolute `CLOCK_MONOTONIC` reading taken by
//! the coordinating process and handed to its worker processes, so a timestamp written into a
//! payload by one process can be compared with the receive time read in another (one machine).

use rustix::time::{clock_gettime, ClockId};
use std::time::Duration;

/// Reads `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The run's clock: nanoseconds since its epoch.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: u64,
}

impl Clock {
    /// A clock whose epoch is now.
    pub fn start() -> Clock {
        Clock {
            epoch: monotonic_ns(),
        }
    }

    /// A clock with the given absolute epoch (from another process of the same run).
    pub fn from_epoch(epoch: u64) -> Clock {
        Clock { epoch }
    }

    /// The absolute `CLOCK_MONOTONIC` epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Nanoseconds since the epoch.
    pub fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.epoch)
    }

    /// The tokio instant at which this clock reads `ns`.
    pub fn instant_at(&self, ns: u64) -> tokio::time::Instant {
        let now = self.now_ns();
        let now_instant = tokio::time::Instant::now();
        if ns >= now {
            now_instant + Duration::from_nanos(ns - now)
        } else {
            now_instant
                .checked_sub(Duration::from_nanos(now - ns))
                .unwrap_or(now_instant)
        }
    }

    /// Sleeps until the clock reads `ns` (returns at once when it already does).
    pub async fn sleep_until(&self, ns: u64) {
        if ns > self.now_ns() {
            tokio::time::sleep_until(self.instant_at(ns)).await;
        }
    }
}

/// Seconds as nanoseconds (negative and NaN become 0).
pub fn secs_to_ns(secs: f64) -> u64 {
    if secs.is_finite() && secs > 0.0 {
        (secs * 1e9) as u64
    } else {
        0
    }
}

/// Nanoseconds as seconds.
pub fn ns_to_secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The open-loop schedule of one sender: message `k` is due at `start + offset + k * period`.
///
/// Latency of a fixed-rate run is measured from this *intended* time, not from the moment the
/// message was actually written, so a stall of the broker (or of the sender) is charged to every
/// message that should have been sent during it: the coordinated-omission correction.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Time of message 0 (ns since epoch).
    pub start: u64,
    /// Interval between two messages, in nanoseconds (fractional, so high rates stay exact).
    pub period: f64,
}

impl Schedule {
    /// A schedule of `rate` messages per second starting at `start`.
    pub fn new(start: u64, rate: f64) -> Schedule {
        Schedule {
            start,
            period: 1e9 / rate,
        }
    }

    /// Intended send time of message `k`.
    pub fn intended(&self, k: u64) -> u64 {
        self.start + (k as f64 * self.period) as u64
    }

    /// How many messages are due at time `now` (messages `0..due`).
    pub fn due(&self, now: u64) -> u64 {
        if now < self.start {
            0
        } else {
            ((now - self.start) as f64 / self.period) as u64 + 1
        }
    }
}
