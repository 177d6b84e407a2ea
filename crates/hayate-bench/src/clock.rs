//! One monotonic clock for the whole run, shared by every process of it.
//!
//! Times are nanoseconds since the run's epoch, an absolute `CLOCK_MONOTONIC` reading taken by
//! the coordinating process and handed to its worker processes, so a timestamp written into a
//! payload by one process can be compared with the receive time read in another (one machine).

use parking_lot::{Condvar, Mutex};
use rustix::time::{clock_gettime, ClockId};
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

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

/// One phase of a sender's open-loop pacing: the phase's messages, numbered from 0 within it,
/// follow `schedule` until the phase ends at `end` (ns since the epoch; `u64::MAX`: no end).
/// `count` messages fall into the phase; those not sent when it ends are abandoned (a
/// rate-schedule run counts them as unsent).
#[derive(Debug, Clone, Copy)]
pub struct PacePhase {
    /// The phase's schedule (its `start` is the first message's intended time).
    pub schedule: Schedule,
    /// End of the phase, ns since the epoch.
    pub end: u64,
    /// Messages intended before `end` (`u64::MAX` without an end).
    pub count: u64,
}

impl PacePhase {
    /// The phase of `schedule` ending at `end`.
    pub fn new(schedule: Schedule, end: u64) -> PacePhase {
        let count = if end == u64::MAX {
            u64::MAX
        } else if end > schedule.start {
            schedule.due(end - 1)
        } else {
            0
        };
        PacePhase {
            schedule,
            end,
            count,
        }
    }

    /// Messages of the phase due at `now` (phase-local numbering, at most `count`).
    pub fn due(&self, now: u64) -> u64 {
        self.schedule.due(now).min(self.count)
    }
}

/// A timer thread with sub-millisecond precision for fixed-rate senders.
///
/// tokio's timer wheel has a 1 ms tick, so a task sleeping until a message's intended send
/// time wakes up to ~2 ms late, and a coordinated-omission-corrected latency would mostly
/// measure the load generator's own lateness. This thread sleeps on a condition variable
/// (a futex wait, precise to tens of microseconds) until the earliest registered deadline and
/// wakes the task's [`Notify`]. Registering allocates nothing once the heap has grown.
#[derive(Debug)]
pub struct PrecisionTimer {
    shared: Arc<TimerShared>,
    clock: Clock,
}

#[derive(Debug)]
struct TimerShared {
    state: Mutex<TimerState>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct TimerState {
    heap: BinaryHeap<TimerEntry>,
    next_seq: u64,
    shutdown: bool,
}

#[derive(Debug)]
struct TimerEntry {
    deadline: u64,
    seq: u64,
    notify: Arc<Notify>,
}

impl PartialEq for TimerEntry {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest deadline on top.
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}

impl PrecisionTimer {
    /// Starts the timer thread.
    pub fn start(clock: Clock) -> std::io::Result<PrecisionTimer> {
        let shared = Arc::new(TimerShared {
            state: Mutex::new(TimerState::default()),
            wake: Condvar::new(),
        });
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("hayate-bench-timer".into())
            .spawn(move || timer_thread(&thread_shared, clock))?;
        Ok(PrecisionTimer { shared, clock })
    }

    /// Wakes `notify` when the clock reads `deadline_ns`.
    pub fn register(&self, deadline_ns: u64, notify: &Arc<Notify>) {
        let mut state = self.shared.state.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        let earliest = state.heap.peek().is_none_or(|e| deadline_ns < e.deadline);
        state.heap.push(TimerEntry {
            deadline: deadline_ns,
            seq,
            notify: notify.clone(),
        });
        drop(state);
        if earliest {
            self.shared.wake.notify_one();
        }
    }

    /// Sleeps until the clock reads `deadline_ns`, using `notify` (one per sleeping task).
    pub async fn sleep_until(&self, deadline_ns: u64, notify: &Arc<Notify>) {
        while self.clock.now_ns() < deadline_ns {
            self.register(deadline_ns, notify);
            notify.notified().await;
        }
    }
}

impl Drop for PrecisionTimer {
    fn drop(&mut self) {
        self.shared.state.lock().shutdown = true;
        self.shared.wake.notify_one();
    }
}

fn timer_thread(shared: &TimerShared, clock: Clock) {
    let mut state = shared.state.lock();
    loop {
        if state.shutdown {
            return;
        }
        let now = clock.now_ns();
        match state.heap.peek().map(|e| e.deadline) {
            None => shared.wake.wait(&mut state),
            Some(deadline) if deadline <= now => {
                if let Some(entry) = state.heap.pop() {
                    entry.notify.notify_one();
                }
            }
            Some(deadline) => {
                let _ = shared
                    .wake
                    .wait_for(&mut state, Duration::from_nanos(deadline - now));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pace_phase_counts_the_messages_intended_before_its_end() {
        // 1000/s from 0 to 1 s: messages 0..1000, the last one intended at 999 ms.
        let p = PacePhase::new(Schedule::new(0, 1000.0), 1_000_000_000);
        assert_eq!(p.count, 1000);
        assert!(p.schedule.intended(p.count - 1) < p.end);
        assert!(p.schedule.intended(p.count) >= p.end);
        assert_eq!(p.due(u64::MAX / 2), 1000);
        assert_eq!(p.due(0), 1);
        // Offset start (a worker's stagger), fractional period.
        let mut s = Schedule::new(0, 3.0);
        s.start = 100;
        let p = PacePhase::new(s, 1_000_000_000);
        assert_eq!(p.count, 3);
        // A phase that ends before its first message has none; no end: unbounded.
        assert_eq!(PacePhase::new(s, 50).count, 0);
        assert_eq!(PacePhase::new(s, u64::MAX).count, u64::MAX);
    }

    #[tokio::test]
    async fn precision_timer_wakes_on_time() {
        let clock = Clock::start();
        let timer = PrecisionTimer::start(clock).unwrap();
        let notify = Arc::new(Notify::new());
        let mut worst = 0;
        for i in 1..=20u64 {
            let deadline = clock.now_ns() + 300_000 * i;
            timer.sleep_until(deadline, &notify).await;
            let late = clock.now_ns() - deadline;
            worst = worst.max(late);
        }
        // tokio's own timer would be up to ~2 ms late; allow generous slack for a busy CI box.
        assert!(worst < 5_000_000, "worst lateness {worst} ns");
        // Deadlines in the past return at once.
        timer.sleep_until(0, &notify).await;
    }
}
