//! Spreading a run's clients over several brokers, the nodes of a cluster (`--targets`,
//! `--pub-targets`, `--sub-targets`).
//!
//! The rule, for every scenario: the clients of one role are numbered by their connection
//! index (publisher `p0, p1, ...`, subscriber `s0, s1, ...`, the same numbers as in the client
//! ids, across worker processes), and connection `i` of a role goes to entry `i mod N` of
//! that role's list. Subscribers (role `s`) use `--sub-targets`, every other role
//! (publishers, `conn` and swarm clients) `--pub-targets`; either falls back to `--targets`,
//! and with none of them given every client goes to `--host`/`--port` as before.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// A `HOST:PORT` as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    /// Host name or address (IPv6 without its brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Parses a comma-separated `HOST:PORT,HOST:PORT,...` list (`[::1]:1883` for IPv6).
pub fn parse_list(text: &str, option: &str) -> Result<Vec<TargetSpec>, String> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(format!("{option}: empty entry in {text:?}"));
        }
        let (host, port) = item
            .rsplit_once(':')
            .ok_or_else(|| format!("{option}: {item:?} is not HOST:PORT"))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() || host.contains(':') && !item.starts_with('[') {
            return Err(format!(
                "{option}: {item:?} is not HOST:PORT (write IPv6 addresses as [ADDR]:PORT)"
            ));
        }
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("{option}: {port:?} in {item:?} is not a port"))?;
        out.push(TargetSpec {
            host: host.to_string(),
            port,
        });
    }
    Ok(out)
}

/// The lists in effect for publishers and subscribers: the per-role option, else
/// `--targets`, else empty (meaning `--host`/`--port`).
pub fn role_lists(
    targets: Option<&str>,
    pub_targets: Option<&str>,
    sub_targets: Option<&str>,
) -> Result<(Vec<TargetSpec>, Vec<TargetSpec>), String> {
    let all = targets
        .map(|t| parse_list(t, "--targets"))
        .transpose()?
        .unwrap_or_default();
    let publishers = match pub_targets {
        Some(t) => parse_list(t, "--pub-targets")?,
        None => all.clone(),
    };
    let subscribers = match sub_targets {
        Some(t) => parse_list(t, "--sub-targets")?,
        None => all,
    };
    Ok((publishers, subscribers))
}

/// Resolved broker addresses per role; an empty list means the run's single address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread {
    /// Addresses of publishers (and of every role but `s`), round robin by index.
    pub publishers: Vec<SocketAddr>,
    /// Addresses of subscribers (role `s`), round robin by index.
    pub subscribers: Vec<SocketAddr>,
}

impl Spread {
    /// True when every client goes to the single `--host`/`--port` address.
    pub fn is_single(&self) -> bool {
        self.publishers.is_empty() && self.subscribers.is_empty()
    }

    /// The list of a role (`s`: subscribers; any other role: publishers).
    pub fn list(&self, role: char) -> &[SocketAddr] {
        if role == 's' {
            &self.subscribers
        } else {
            &self.publishers
        }
    }

    /// The address of connection `index` of `role`: entry `index mod N` of the role's list,
    /// or `default` when the list is empty.
    pub fn addr(&self, role: char, index: u64, default: SocketAddr) -> SocketAddr {
        let list = self.list(role);
        if list.is_empty() {
            default
        } else {
            list[(index % list.len() as u64) as usize]
        }
    }

    /// Every distinct address the run connects to, `default` included when a role uses it.
    pub fn distinct(&self, default: SocketAddr) -> Vec<SocketAddr> {
        let mut out = Vec::new();
        for list in [&self.publishers, &self.subscribers] {
            if list.is_empty() {
                out.push(default);
            }
            out.extend(list.iter().copied());
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|a| seen.insert(*a));
        out
    }
}

/// Fraction of messages whose publisher and subscriber connect to different addresses, for
/// a plan where message stream `k` (out of `streams`, all equally frequent) is published by
/// publisher `publisher_of(k)` and received by subscriber `subscriber_of(k)`. `None` when the
/// run uses one address only.
pub fn cross_fraction(
    spread: &Spread,
    default: SocketAddr,
    streams: u64,
    publisher_of: impl Fn(u64) -> u64,
    subscriber_of: impl Fn(u64) -> u64,
) -> Option<f64> {
    if spread.distinct(default).len() < 2 || streams == 0 {
        return None;
    }
    let crossing = (0..streams)
        .filter(|&k| {
            spread.addr('p', publisher_of(k), default)
                != spread.addr('s', subscriber_of(k), default)
        })
        .count();
    Some(crossing as f64 / streams as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn parses_lists() {
        let l = parse_list("127.0.0.1:1883, localhost:1884,[::1]:1885", "--targets").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].host, "localhost");
        assert_eq!(l[2].host, "::1");
        assert_eq!(l[2].port, 1885);
        for bad in ["", "a", "a:", "a:0", "a:99999", ":1883", "::1:1883", "a:1,"] {
            assert!(parse_list(bad, "--targets").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn role_lists_fall_back_to_targets() {
        let (p, s) = role_lists(Some("h:1,h:2"), None, Some("h:3")).unwrap();
        assert_eq!(p.iter().map(|t| t.port).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(s.iter().map(|t| t.port).collect::<Vec<_>>(), vec![3]);
        let (p, s) = role_lists(None, None, None).unwrap();
        assert!(p.is_empty() && s.is_empty());
        let (p, s) = role_lists(None, Some("h:1"), None).unwrap();
        assert_eq!(p.len(), 1);
        assert!(s.is_empty());
    }

    #[test]
    fn round_robin_per_role() {
        let spread = Spread {
            publishers: vec![a(1), a(2), a(3)],
            subscribers: vec![a(4), a(5)],
        };
        let d = a(9);
        let pubs: Vec<u16> = (0..7).map(|i| spread.addr('p', i, d).port()).collect();
        assert_eq!(pubs, vec![1, 2, 3, 1, 2, 3, 1]);
        let subs: Vec<u16> = (0..5).map(|i| spread.addr('s', i, d).port()).collect();
        assert_eq!(subs, vec![4, 5, 4, 5, 4]);
        // conn and swarm clients follow the publishers' list
        assert_eq!(spread.addr('c', 4, d).port(), 2);
        assert_eq!(spread.distinct(d).len(), 5);
        let single = Spread::default();
        assert!(single.is_single());
        assert_eq!(single.addr('s', 3, d), d);
        assert_eq!(single.distinct(d), vec![d]);
        let half = Spread {
            publishers: vec![a(1)],
            subscribers: vec![],
        };
        assert_eq!(half.addr('s', 0, d), d);
        assert_eq!(half.distinct(d), vec![a(1), d]);
    }

    #[test]
    fn cross_fraction_of_fan_out_shapes() {
        let three = vec![a(1), a(2), a(3)];
        let spread = Spread {
            publishers: three.clone(),
            subscribers: three,
        };
        let d = a(9);
        // fan-out own topics: topic k is published by publisher k mod P, read by subscriber k
        let own = |publishers: u64| {
            cross_fraction(&spread, d, 300, move |k| k % publishers, |k| k).unwrap()
        };
        // 3 publishers on 3 nodes: every topic's publisher sits on its subscriber's node
        assert_eq!(own(3), 0.0);
        // 4 publishers: two thirds of the messages cross, as with random placement
        assert!((own(4) - 2.0 / 3.0).abs() < 1e-9);
        // fan-in: publishers round robin, one subscriber on the first node
        let f = cross_fraction(&spread, d, 99, |k| k, |_| 0).unwrap();
        assert!((f - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(
            cross_fraction(&Spread::default(), d, 10, |k| k, |k| k),
            None
        );
    }
}
