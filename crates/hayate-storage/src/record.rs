//! Keys and values inside fjall. Every value starts with a format version byte (1 today);
//! integers are big-endian. Nothing here is a file format: fjall owns the files, its journal
//! and its checksums; these are the bytes of one key or one value.
//!
//! | keyspace | key | value |
//! |---|---|---|
//! | `retained` | topic | version, expiry flag, expiry ms (u64, when flagged), MQTT 5 PUBLISH |
//! | `sessions` | client id | version, expiry interval (u32), protocol (u8), disconnected flag, disconnected-at ms (u64, when flagged) |
//! | `subs` | client id length (u16), client id, filter | version, options byte, id flag, subscription id (u32, when flagged) |

use bytes::Bytes;
use hayate_core::store::{SessionRecord, SubscriptionData};

/// The format version written in front of every value.
const FORMAT: u8 = 1;

/// A value that cannot be read (written by a newer Hayate, or damaged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unreadable {0} record")]
pub struct Unreadable(pub &'static str);

/// Reads fields front to back.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
    /// A flag byte and, when set, a value.
    fn optional<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.u8()? {
            0 => Some(None),
            1 => read(self).map(Some),
            _ => None,
        }
    }
    fn version(&mut self) -> Option<()> {
        (self.u8()? == FORMAT).then_some(())
    }
}

fn put_optional<T>(out: &mut Vec<u8>, value: Option<T>, put: impl FnOnce(&mut Vec<u8>, T)) {
    match value {
        None => out.push(0),
        Some(value) => {
            out.push(1);
            put(out, value);
        }
    }
}

/// The value of a retained message.
pub(crate) fn retained_value(expires_at_ms: Option<u64>, publish: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + publish.len());
    out.push(FORMAT);
    put_optional(&mut out, expires_at_ms, |o, v| {
        o.extend_from_slice(&v.to_be_bytes())
    });
    out.extend_from_slice(publish);
    out
}

/// Expiry and PUBLISH bytes of a retained message's value.
pub(crate) fn read_retained(value: &[u8]) -> Result<(Option<u64>, Bytes), Unreadable> {
    let mut fields = Fields(value);
    let mut read = || -> Option<_> {
        fields.version()?;
        let expiry = fields.optional(Fields::u64)?;
        Some((expiry, Bytes::copy_from_slice(fields.0)))
    };
    read().ok_or(Unreadable("retained"))
}

/// The value of a session.
pub(crate) fn session_value(record: &SessionRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(15);
    out.push(FORMAT);
    out.extend_from_slice(&record.expiry_interval.to_be_bytes());
    out.push(record.protocol);
    put_optional(&mut out, record.disconnected_at_ms, |o, v| {
        o.extend_from_slice(&v.to_be_bytes())
    });
    out
}

/// A session from its key (the client id) and value.
pub(crate) fn read_session(key: &[u8], value: &[u8]) -> Result<SessionRecord, Unreadable> {
    let client_id = std::str::from_utf8(key).map_err(|_| Unreadable("session"))?;
    let mut fields = Fields(value);
    let mut read = || -> Option<_> {
        fields.version()?;
        Some(SessionRecord {
            client_id: client_id.to_string(),
            expiry_interval: fields.u32()?,
            protocol: fields.u8()?,
            disconnected_at_ms: fields.optional(Fields::u64)?,
        })
    };
    read().ok_or(Unreadable("session"))
}

/// The prefix of every subscription key of `client_id`: its length (u16) and its bytes, so
/// that no client's prefix is a prefix of another's. `None` for an id over 65,535 bytes
/// (MQTT strings cannot be longer, §1.5.4).
pub(crate) fn subscription_prefix(client_id: &str) -> Option<Vec<u8>> {
    let len = u16::try_from(client_id.len()).ok()?;
    let mut key = Vec::with_capacity(2 + client_id.len());
    key.extend_from_slice(&len.to_be_bytes());
    key.extend_from_slice(client_id.as_bytes());
    Some(key)
}

/// The key of one subscription (`None` as for [`subscription_prefix`]).
pub(crate) fn subscription_key(client_id: &str, filter: &str) -> Option<Vec<u8>> {
    let mut key = subscription_prefix(client_id)?;
    key.extend_from_slice(filter.as_bytes());
    Some(key)
}

/// The value of one subscription.
pub(crate) fn subscription_value(subscription: &SubscriptionData) -> Vec<u8> {
    let mut out = Vec::with_capacity(7);
    out.push(FORMAT);
    out.push(subscription.options);
    put_optional(&mut out, subscription.subscription_id, |o, v| {
        o.extend_from_slice(&v.to_be_bytes())
    });
    out
}

/// Client id and subscription from a subscription key and value.
pub(crate) fn read_subscription(
    key: &[u8],
    value: &[u8],
) -> Result<(String, SubscriptionData), Unreadable> {
    let bad = Unreadable("subscription");
    let mut key = Fields(key);
    let len = key.take(2).ok_or(bad)?;
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    let client_id = std::str::from_utf8(key.take(len).ok_or(bad)?).map_err(|_| bad)?;
    let filter = std::str::from_utf8(key.0).map_err(|_| bad)?;
    let mut fields = Fields(value);
    let mut read = || -> Option<_> {
        fields.version()?;
        Some(SubscriptionData {
            filter: filter.to_string(),
            options: fields.u8()?,
            subscription_id: fields.optional(Fields::u32)?,
        })
    };
    Ok((client_id.to_string(), read().ok_or(bad)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let session = SessionRecord {
            client_id: "dev-1".into(),
            expiry_interval: u32::MAX,
            protocol: 4,
            disconnected_at_ms: Some(1_800_000_000_123),
        };
        assert_eq!(
            read_session(b"dev-1", &session_value(&session)),
            Ok(session)
        );
        let sub = SubscriptionData {
            filter: "$share/g/a/+/b".into(),
            options: 0b10_1101,
            subscription_id: Some(268_435_455),
        };
        let key = subscription_key("dev-1", &sub.filter).unwrap();
        assert_eq!(
            read_subscription(&key, &subscription_value(&sub)),
            Ok(("dev-1".to_string(), sub))
        );
        let value = retained_value(Some(7), b"\x31\x05\x00\x01ab");
        assert_eq!(
            read_retained(&value),
            Ok((Some(7), Bytes::from_static(b"\x31\x05\x00\x01ab")))
        );
    }

    #[test]
    fn damaged_or_newer_values_are_refused() {
        assert!(read_session(b"x", &[]).is_err());
        assert!(
            read_session(b"x", &[2, 0, 0, 0, 1, 5, 0]).is_err(),
            "newer format"
        );
        assert!(
            read_session(b"x", &[1, 0, 0, 0, 1, 5, 9]).is_err(),
            "bad flag"
        );
        assert!(
            read_subscription(&[0, 9, b'a'], &[1, 0, 0]).is_err(),
            "short key"
        );
        assert!(read_retained(&[1, 1, 0]).is_err(), "short expiry");
    }
}
