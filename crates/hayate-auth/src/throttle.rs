//! Failed-login slowdown per source address, in bounded memory.
//!
//! Each failed login from an address raises its *score* by one; the delay to apply before
//! answering that address's next attempt is `base_delay × 2^(score−1)`, capped at
//! `max_delay`. The score decays by one for every `decay_interval` without a new failure, and
//! a successful login clears it. Time is an argument ([`Instant`]), never read here.
//!
//! Addresses are grouped: an IPv4 address (or IPv4-mapped IPv6 address) counts alone, an IPv6
//! address counts with its whole /64, since one host usually controls a /64.
//!
//! Memory is bounded by `capacity` entries: when a new address arrives at a full table, the
//! least recently updated entry is evicted (an attacker with many addresses can make the table
//! forget old offenders, but never grow it). Every operation is O(log n).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

/// Settings of a [`LoginThrottle`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleConfig {
    /// Most addresses remembered at once.
    pub capacity: usize,
    /// Delay after the first failure.
    pub base_delay: Duration,
    /// Largest delay.
    pub max_delay: Duration,
    /// The score drops by one for each such interval without a failure.
    pub decay_interval: Duration,
}

impl Default for ThrottleConfig {
    /// 65 536 addresses; 100 ms after one failure, doubling up to 10 s; one failure forgiven
    /// per minute.
    fn default() -> Self {
        ThrottleConfig {
            capacity: 65_536,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            decay_interval: Duration::from_secs(60),
        }
    }
}

/// The key an address is counted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    V4(u32),
    V6Prefix(u64),
}

fn key_of(ip: IpAddr) -> Key {
    match ip {
        IpAddr::V4(v4) => Key::V4(u32::from(v4)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => Key::V4(u32::from(v4)),
            None => Key::V6Prefix(prefix64(&v6)),
        },
    }
}

fn prefix64(v6: &Ipv6Addr) -> u64 {
    (u128::from(*v6) >> 64) as u64
}

#[derive(Debug, Clone)]
struct Entry {
    score: u32,
    /// When the score was last decayed or raised; decay counts whole intervals from here.
    anchor: Instant,
    /// Position in the recency order.
    seq: u64,
    /// End of the penalty window opened by the last failure (its time + the delay it set).
    until: Instant,
}

/// Highest score kept: beyond it the delay is at its cap anyway (2^31 × base).
const MAX_SCORE: u32 = 32;

/// Per-address failed-login counter.
#[derive(Debug, Clone)]
pub struct LoginThrottle {
    config: ThrottleConfig,
    entries: HashMap<Key, Entry>,
    /// seq → key, oldest first.
    order: BTreeMap<u64, Key>,
    next_seq: u64,
}

impl LoginThrottle {
    /// An empty throttle. A zero `capacity` is treated as 1 and a zero `decay_interval` as
    /// 1 ms.
    pub fn new(mut config: ThrottleConfig) -> Self {
        config.capacity = config.capacity.max(1);
        config.decay_interval = config.decay_interval.max(Duration::from_millis(1));
        LoginThrottle {
            config,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
        }
    }

    /// The score of an entry at `now` after decay, and the new decay anchor (moved forward by
    /// the whole intervals consumed, so the remainder of the current interval is kept).
    fn decayed(&self, entry: &Entry, now: Instant) -> (u32, Instant) {
        let interval = self.config.decay_interval;
        let elapsed = now.saturating_duration_since(entry.anchor);
        let steps = elapsed.as_nanos() / interval.as_nanos().max(1);
        if steps >= u128::from(entry.score) {
            return (0, now);
        }
        // steps < score ≤ MAX_SCORE, so it fits in u32.
        let steps = steps as u32;
        let anchor = interval
            .checked_mul(steps)
            .and_then(|d| entry.anchor.checked_add(d))
            .unwrap_or(now);
        (entry.score - steps, anchor)
    }

    fn delay_for_score(&self, score: u32) -> Duration {
        if score == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(score - 1).unwrap_or(u32::MAX);
        self.config
            .base_delay
            .checked_mul(factor)
            .unwrap_or(self.config.max_delay)
            .min(self.config.max_delay)
    }

    /// The delay to wait before answering the next login attempt from `ip`.
    pub fn delay(&self, ip: IpAddr, now: Instant) -> Duration {
        match self.entries.get(&key_of(ip)) {
            Some(e) => self.delay_for_score(self.decayed(e, now).0),
            None => Duration::ZERO,
        }
    }

    /// Record a failed login from `ip`; returns the delay that now applies to its next attempt.
    pub fn record_failure(&mut self, ip: IpAddr, now: Instant) -> Duration {
        let key = key_of(ip);
        let seq = self.next_seq;
        self.next_seq += 1;
        let (score, anchor) = match self.entries.get(&key) {
            Some(e) => {
                let (score, anchor) = self.decayed(e, now);
                self.order.remove(&e.seq);
                if score == 0 {
                    (1, now)
                } else {
                    ((score + 1).min(MAX_SCORE), anchor)
                }
            }
            None => {
                if self.entries.len() >= self.config.capacity {
                    self.evict_oldest();
                }
                (1, now)
            }
        };
        let delay = self.delay_for_score(score);
        let until = now.checked_add(delay).unwrap_or(now);
        self.entries.insert(
            key,
            Entry {
                score,
                anchor,
                seq,
                until,
            },
        );
        self.order.insert(seq, key);
        delay
    }

    /// What is left at `now` of the penalty window that the last failure from `ip` opened
    /// (that failure's time plus the delay it set): a server refuses attempts from `ip`
    /// without checking them until this is zero.
    pub fn penalty(&self, ip: IpAddr, now: Instant) -> Duration {
        self.entries
            .get(&key_of(ip))
            .map_or(Duration::ZERO, |e| e.until.saturating_duration_since(now))
    }

    /// Record a successful login from `ip`: its score is cleared.
    pub fn record_success(&mut self, ip: IpAddr) {
        if let Some(e) = self.entries.remove(&key_of(ip)) {
            self.order.remove(&e.seq);
        }
    }

    /// Drop entries whose score has decayed to zero (optional housekeeping; the table stays
    /// bounded without it).
    pub fn purge(&mut self, now: Instant) {
        let expired: Vec<(Key, u64)> = self
            .entries
            .iter()
            .filter(|(_, e)| self.decayed(e, now).0 == 0)
            .map(|(k, e)| (*k, e.seq))
            .collect();
        for (k, seq) in expired {
            self.entries.remove(&k);
            self.order.remove(&seq);
        }
    }

    fn evict_oldest(&mut self) {
        if let Some((_, key)) = self.order.pop_first() {
            self.entries.remove(&key);
        }
    }

    /// Number of addresses remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn cfg() -> ThrottleConfig {
        ThrottleConfig {
            capacity: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
            decay_interval: Duration::from_secs(10),
        }
    }

    fn v4(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn exponential_and_capped() {
        let mut t = LoginThrottle::new(cfg());
        let now = Instant::now();
        assert_eq!(t.delay(v4(1), now), Duration::ZERO);
        let delays: Vec<Duration> = (0..8).map(|_| t.record_failure(v4(1), now)).collect();
        assert_eq!(
            delays,
            [
                MS(100),
                MS(200),
                MS(400),
                MS(800),
                MS(1600),
                MS(2000),
                MS(2000),
                MS(2000)
            ]
        );
        assert_eq!(t.delay(v4(1), now), MS(2000));
        assert_eq!(t.delay(v4(2), now), Duration::ZERO);
        // Scores stay bounded however many failures arrive.
        for _ in 0..100 {
            t.record_failure(v4(1), now);
        }
        assert_eq!(t.delay(v4(1), now), MS(2000));
    }

    #[test]
    fn decays_by_one_per_interval() {
        let mut t = LoginThrottle::new(cfg());
        let t0 = Instant::now();
        for _ in 0..3 {
            t.record_failure(v4(1), t0);
        }
        assert_eq!(t.delay(v4(1), t0), MS(400));
        assert_eq!(t.delay(v4(1), t0 + Duration::from_secs(9)), MS(400));
        assert_eq!(t.delay(v4(1), t0 + Duration::from_secs(10)), MS(200));
        assert_eq!(t.delay(v4(1), t0 + Duration::from_secs(25)), MS(100));
        assert_eq!(t.delay(v4(1), t0 + Duration::from_secs(30)), Duration::ZERO);
        // A failure after partial decay continues from the decayed score, and the remainder
        // of the current interval is kept.
        let t1 = t0 + Duration::from_secs(15);
        assert_eq!(t.record_failure(v4(1), t1), MS(400)); // 3 -1 +1 = 3
        assert_eq!(t.delay(v4(1), t0 + Duration::from_secs(20)), MS(200));
        // Fully decayed: starts over.
        let t2 = t0 + Duration::from_secs(1000);
        assert_eq!(t.record_failure(v4(1), t2), MS(100));
        t.purge(t2 + Duration::from_secs(10));
        assert!(t.is_empty());
    }

    #[test]
    fn penalty_window_runs_from_the_last_failure() {
        let mut t = LoginThrottle::new(cfg());
        let t0 = Instant::now();
        assert_eq!(t.penalty(v4(1), t0), Duration::ZERO);
        t.record_failure(v4(1), t0);
        assert_eq!(t.penalty(v4(1), t0), MS(100));
        assert_eq!(t.penalty(v4(1), t0 + MS(40)), MS(60));
        assert_eq!(t.penalty(v4(1), t0 + MS(100)), Duration::ZERO);
        // A second failure after the window: 200 ms from then.
        let t1 = t0 + MS(150);
        t.record_failure(v4(1), t1);
        assert_eq!(t.penalty(v4(1), t1 + MS(50)), MS(150));
        assert_eq!(t.penalty(v4(2), t1), Duration::ZERO);
        t.record_success(v4(1));
        assert_eq!(t.penalty(v4(1), t1), Duration::ZERO);
    }

    #[test]
    fn success_clears() {
        let mut t = LoginThrottle::new(cfg());
        let now = Instant::now();
        t.record_failure(v4(1), now);
        t.record_failure(v4(1), now);
        t.record_success(v4(1));
        assert_eq!(t.delay(v4(1), now), Duration::ZERO);
        assert!(t.is_empty());
    }

    #[test]
    fn bounded_with_lru_eviction() {
        let mut t = LoginThrottle::new(cfg());
        let now = Instant::now();
        for n in 1..=4 {
            t.record_failure(v4(n), now);
        }
        // Touch 1 so that 2 is now the least recently updated.
        t.record_failure(v4(1), now);
        for n in 5..=200 {
            t.record_failure(v4(n), now);
            assert!(t.len() <= 4);
        }
        assert_eq!(t.len(), 4);
        assert_eq!(t.delay(v4(2), now), Duration::ZERO);
        assert_eq!(t.delay(v4(200), now), MS(100));
        let mut t = LoginThrottle::new(cfg());
        for n in 1..=4 {
            t.record_failure(v4(n), now);
        }
        t.record_failure(v4(1), now);
        t.record_failure(v4(5), now);
        assert_eq!(t.delay(v4(1), now), MS(200), "recently used entry survives");
        assert_eq!(t.delay(v4(2), now), Duration::ZERO, "oldest evicted");
    }

    #[test]
    fn ipv6_grouped_by_64_and_mapped_v4() {
        let mut t = LoginThrottle::new(cfg());
        let now = Instant::now();
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        t.record_failure(a, now);
        assert_eq!(t.delay(b, now), MS(100));
        assert_eq!(t.delay(c, now), Duration::ZERO);
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped());
        t.record_failure(mapped, now);
        assert_eq!(t.delay(v4(7), now), MS(100));
        assert_ne!(key_of(IpAddr::V6(Ipv6Addr::LOCALHOST)), key_of(v4(1)));
    }

    #[test]
    fn degenerate_config_does_not_panic() {
        let mut t = LoginThrottle::new(ThrottleConfig {
            capacity: 0,
            base_delay: Duration::MAX,
            max_delay: Duration::MAX,
            decay_interval: Duration::ZERO,
        });
        let now = Instant::now();
        for _ in 0..40 {
            t.record_failure(v4(1), now);
        }
        assert_eq!(t.len(), 1);
        assert_eq!(t.delay(v4(1), now), Duration::MAX);
        let _ = t.delay(v4(1), now + Duration::from_secs(1));
    }
}
