//! Keys and values inside fjall. Every value starts with a format version byte (1 today);
//! integers are big-endian. Nothing here is a file format: fjall owns the files, its journal
//! and its checksums; these are the bytes of one key or one value.
//!
//! | keyspace | key | value |
//! |---|---|---|
//! | `retained` | topic | version, expiry flag, expiry ms (u64, when flagged), MQTT 5 PUBLISH |
//! | `sessions` | client id | version, expiry interval (u32), protocol (u8), disconnected flag, disconnected-at ms (u64, when flagged), will flag, will (delay u32; listener, user name and transport identity as flagged u16-length strings; u32-length MQTT 5 PUBLISH; absent in values written before wills were stored) |
//! | `subs` | client id length (u16), client id, filter | version, options byte, id flag, subscription id (u32, when flagged) |
//! | `queue` | client id length (u16), client id, seq (u64) | version, message id (u64), QoS (u8), retain (u8), subscription id count (u16) and ids (u32 each), group flag, group (u16 length, bytes, when flagged) |
//! | `rel` | client id length (u16), client id, seq (u64) | version (a released entry: PUBREL sent, PUBCOMP awaited) |
//! | `inq2` | client id length (u16), client id, packet id (u16) | version (an inbound QoS 2 id awaiting PUBREL) |
//! | `msg` | message id (u64) | as `retained` |
//! | `msgref` | message id (u64) | version, entries in `queue` referring to it (u64; only when more than one: a body without a count has one) |
//! | `qmeta` | client id length (u16), client id | version, entries in `queue` (u64), lowest seq bound (u64), highest seq bound (u64) |
//! | `meta` | `bodies`, `layout` or `total/NAME` | version, then bodies in `msg` (u64), the layout of these keyspaces (u64; 2), or the broker's lifetime counter NAME (u64) |

use crate::engine::QueueMeta;
use bytes::{BufMut, Bytes, BytesMut};
use hayate_core::store::{MessageBody, QueueEntry, SessionRecord, StoredWill, SubscriptionData};

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
    fn u16(&mut self) -> Option<u16> {
        self.take(2)
            .map(|b| u16::from_be_bytes(b.try_into().expect("2 bytes")))
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

/// The value of a queued message's body: as [`retained_value`], with the PUBLISH encoded in
/// place; `None` if the message cannot be encoded.
pub(crate) fn message_value(body: &MessageBody) -> Option<Vec<u8>> {
    let mut out =
        BytesMut::with_capacity(10 + body.message.topic.len() + body.message.payload.len() + 16);
    out.put_u8(FORMAT);
    match body.expires_at_ms {
        None => out.put_u8(0),
        Some(at) => {
            out.put_u8(1);
            out.put_u64(at);
        }
    }
    body.encode_into(&mut out).then(|| Vec::from(out))
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
    // Added later: a value that ends here has no will.
    put_optional(&mut out, record.will.as_ref(), |o, will| {
        o.extend_from_slice(&will.delay.to_be_bytes());
        put_string(o, Some(&will.listener));
        put_string(o, will.username.as_deref());
        put_string(o, will.transport_identity.as_deref());
        o.extend_from_slice(&(will.publish.len() as u32).to_be_bytes());
        o.extend_from_slice(&will.publish);
    });
    out
}

/// A string of at most 65,535 bytes (longer ones are cut), or none: flag, u16 length, bytes.
fn put_string(out: &mut Vec<u8>, value: Option<&str>) {
    put_optional(out, value, |o, s| {
        let bytes = &s.as_bytes()[..s.len().min(usize::from(u16::MAX))];
        o.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        o.extend_from_slice(bytes);
    });
}

impl Fields<'_> {
    fn string(&mut self) -> Option<Option<String>> {
        self.optional(|f| {
            let len = usize::from(f.u16()?);
            std::str::from_utf8(f.take(len)?).ok().map(str::to_string)
        })
    }
}

/// A session from its key (the client id) and value.
pub(crate) fn read_session(key: &[u8], value: &[u8]) -> Result<SessionRecord, Unreadable> {
    let client_id = std::str::from_utf8(key).map_err(|_| Unreadable("session"))?;
    let mut fields = Fields(value);
    let mut read = || -> Option<_> {
        fields.version()?;
        let expiry_interval = fields.u32()?;
        let protocol = fields.u8()?;
        let disconnected_at_ms = fields.optional(Fields::u64)?;
        let will = if fields.0.is_empty() {
            None
        } else {
            fields.optional(|f| {
                let delay = f.u32()?;
                let listener = f.string()?.unwrap_or_default();
                let username = f.string()?;
                let transport_identity = f.string()?;
                let len = f.u32()? as usize;
                Some(StoredWill {
                    publish: Bytes::copy_from_slice(f.take(len)?),
                    delay,
                    username,
                    listener,
                    transport_identity,
                })
            })?
        };
        Some(SessionRecord {
            client_id: client_id.to_string(),
            expiry_interval,
            protocol,
            disconnected_at_ms,
            will,
        })
    };
    read().ok_or(Unreadable("session"))
}

/// The prefix of every subscription key of `client_id`: its length (u16) and its bytes, so
/// that no client's prefix is a prefix of another's. `None` for an id over 65,535 bytes
/// (MQTT strings cannot be longer, §1.5.4).
pub(crate) fn subscription_prefix(client_id: &str) -> Option<Vec<u8>> {
    client_key(client_id, 0)
}

/// [`subscription_prefix`] in a buffer with room for `suffix` more bytes (one allocation for
/// the whole key).
fn client_key(client_id: &str, suffix: usize) -> Option<Vec<u8>> {
    let len = u16::try_from(client_id.len()).ok()?;
    let mut key = Vec::with_capacity(2 + client_id.len() + suffix);
    key.extend_from_slice(&len.to_be_bytes());
    key.extend_from_slice(client_id.as_bytes());
    Some(key)
}

/// The key of one subscription (`None` as for [`subscription_prefix`]).
pub(crate) fn subscription_key(client_id: &str, filter: &str) -> Option<Vec<u8>> {
    let mut key = client_key(client_id, filter.len())?;
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

/// The key of queue entry (or released entry) `seq` of `client_id`.
pub(crate) fn seq_key(client_id: &str, seq: u64) -> Option<Vec<u8>> {
    let mut key = client_key(client_id, 8)?;
    key.extend_from_slice(&seq.to_be_bytes());
    Some(key)
}

/// The key of inbound QoS 2 id `packet_id` of `client_id`.
pub(crate) fn packet_id_key(client_id: &str, packet_id: u16) -> Option<Vec<u8>> {
    let mut key = client_key(client_id, 2)?;
    key.extend_from_slice(&packet_id.to_be_bytes());
    Some(key)
}

/// The key of stored message `id`.
pub(crate) fn message_key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// The value of a key whose presence is the record (`rel`, `inq2`).
pub(crate) fn marker_value() -> Vec<u8> {
    vec![FORMAT]
}

/// Client id and the rest of a key made by [`subscription_prefix`].
fn split_client_key<'a>(
    key: &'a [u8],
    what: &'static str,
) -> Result<(String, &'a [u8]), Unreadable> {
    let bad = Unreadable(what);
    let mut key = Fields(key);
    let len = usize::from(key.u16().ok_or(bad)?);
    let client_id = std::str::from_utf8(key.take(len).ok_or(bad)?).map_err(|_| bad)?;
    Ok((client_id.to_string(), key.0))
}

/// Client id and seq of a `queue` or `rel` key.
pub(crate) fn read_seq_key(key: &[u8]) -> Result<(String, u64), Unreadable> {
    let (client_id, rest) = split_client_key(key, "queue key")?;
    let seq = <[u8; 8]>::try_from(rest).map_err(|_| Unreadable("queue key"))?;
    Ok((client_id, u64::from_be_bytes(seq)))
}

/// Client id and packet id of an `inq2` key.
pub(crate) fn read_packet_id_key(key: &[u8]) -> Result<(String, u16), Unreadable> {
    let (client_id, rest) = split_client_key(key, "inbound QoS 2 key")?;
    let id = <[u8; 2]>::try_from(rest).map_err(|_| Unreadable("inbound QoS 2 key"))?;
    Ok((client_id, u16::from_be_bytes(id)))
}

/// The id in a `msg` key.
pub(crate) fn read_message_key(key: &[u8]) -> Result<u64, Unreadable> {
    let id = <[u8; 8]>::try_from(key).map_err(|_| Unreadable("message key"))?;
    Ok(u64::from_be_bytes(id))
}

/// The value of a queue entry.
pub(crate) fn queue_entry_value(entry: &QueueEntry) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 4 * entry.subscription_ids.len());
    out.push(FORMAT);
    out.extend_from_slice(&entry.message_id.to_be_bytes());
    out.push(entry.qos);
    out.push(u8::from(entry.retain));
    // At most one identifier per subscription of the session, each under 2^28.
    let ids = u16::try_from(entry.subscription_ids.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&ids.to_be_bytes());
    for id in entry.subscription_ids.iter().take(usize::from(ids)) {
        out.extend_from_slice(&id.to_be_bytes());
    }
    let group = entry
        .shared_group
        .as_deref()
        .filter(|group| group.len() <= usize::from(u16::MAX));
    put_optional(&mut out, group, |o, group| {
        o.extend_from_slice(&(group.len() as u16).to_be_bytes());
        o.extend_from_slice(group.as_bytes());
    });
    out
}

/// A queue entry from its seq and value.
pub(crate) fn read_queue_entry(seq: u64, value: &[u8]) -> Result<QueueEntry, Unreadable> {
    let mut fields = Fields(value);
    let mut read = || -> Option<_> {
        fields.version()?;
        let message_id = fields.u64()?;
        let qos = fields.u8()?;
        let retain = match fields.u8()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        let count = fields.u16()?;
        let subscription_ids = (0..count)
            .map(|_| fields.u32())
            .collect::<Option<Vec<u32>>>()?;
        let shared_group = fields.optional(|f| {
            let len = usize::from(f.u16()?);
            let group = std::str::from_utf8(f.take(len)?).ok()?;
            Some(group.to_string())
        })?;
        (1..=2).contains(&qos).then_some(QueueEntry {
            seq,
            message_id,
            qos,
            retain,
            subscription_ids,
            shared_group,
        })
    };
    read().ok_or(Unreadable("queue entry"))
}

/// The value of a count (`msgref`, `meta`).
pub(crate) fn count_value(count: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    out.push(FORMAT);
    out.extend_from_slice(&count.to_be_bytes());
    out
}

/// A count written by [`count_value`].
pub(crate) fn read_count(value: &[u8]) -> Result<u64, Unreadable> {
    let mut fields = Fields(value);
    let mut read = || -> Option<u64> {
        fields.version()?;
        let count = fields.u64()?;
        fields.0.is_empty().then_some(count)
    };
    read().ok_or(Unreadable("count"))
}

/// The value of a session's queue summary (`qmeta`).
pub(crate) fn queue_meta_value(meta: &QueueMeta) -> Vec<u8> {
    let mut out = Vec::with_capacity(25);
    out.push(FORMAT);
    for field in [meta.count, meta.first_seq, meta.last_seq] {
        out.extend_from_slice(&field.to_be_bytes());
    }
    out
}

/// A queue summary written by [`queue_meta_value`].
pub(crate) fn read_queue_meta(value: &[u8]) -> Result<QueueMeta, Unreadable> {
    let mut fields = Fields(value);
    let mut read = || -> Option<QueueMeta> {
        fields.version()?;
        let meta = QueueMeta {
            count: fields.u64()?,
            first_seq: fields.u64()?,
            last_seq: fields.u64()?,
        };
        (fields.0.is_empty() && meta.first_seq <= meta.last_seq).then_some(meta)
    };
    read().ok_or(Unreadable("queue summary"))
}

/// The client id of a key made by [`subscription_prefix`] with nothing after it (`qmeta`).
pub(crate) fn read_client_key(key: &[u8]) -> Result<String, Unreadable> {
    match split_client_key(key, "queue summary key")? {
        (client_id, []) => Ok(client_id),
        _ => Err(Unreadable("queue summary key")),
    }
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
            will: None,
        };
        assert_eq!(
            read_session(b"dev-1", &session_value(&session)),
            Ok(session.clone())
        );
        let with_will = SessionRecord {
            will: Some(StoredWill {
                publish: Bytes::from_static(b"\x30\x05\x00\x01wbye"),
                delay: 30,
                username: Some("alice".into()),
                listener: "main".into(),
                transport_identity: None,
            }),
            ..session
        };
        assert_eq!(
            read_session(b"dev-1", &session_value(&with_will)),
            Ok(with_will)
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

    /// A queued message's body is encoded in place, with the very bytes a retained value of
    /// the encoded PUBLISH has (what `read_page` reads back).
    #[test]
    fn a_message_value_is_the_encoded_publish_behind_the_prefix() {
        for (qos, expiry) in [
            (hayate_codec::QoS::AtLeastOnce, None),
            (hayate_codec::QoS::ExactlyOnce, Some(1_800_000_000_123)),
            (hayate_codec::QoS::AtMostOnce, Some(7)),
        ] {
            let properties = hayate_codec::Properties {
                content_type: Some("text/plain".into()),
                correlation_data: Some(Bytes::from_static(b"c-1")),
                message_expiry_interval: Some(60),
                ..Default::default()
            };
            let message = hayate_core::Message::new(
                "plant/7/temp".into(),
                Bytes::from_static(b"21.5"),
                qos,
                true,
                properties,
                None,
                Some(1),
            );
            let body = MessageBody {
                expires_at_ms: expiry,
                message: std::sync::Arc::new(message),
            };
            let value = message_value(&body).expect("encodable");
            let publish = body.encode().expect("encodable");
            assert_eq!(value, retained_value(expiry, &publish));
            assert_eq!(read_retained(&value), Ok((expiry, publish)));
        }
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
        assert!(
            read_queue_entry(1, &[1, 0, 0, 0, 0, 0, 0, 0, 9, 3, 0, 0, 0, 0]).is_err(),
            "QoS 3"
        );
        assert!(read_seq_key(&[0, 1, b'a', 0, 0]).is_err(), "short seq");
    }

    #[test]
    fn queue_records_round_trip() {
        let entry = QueueEntry {
            seq: 42,
            message_id: u64::MAX - 1,
            qos: 2,
            retain: true,
            subscription_ids: vec![1, 268_435_455],
            shared_group: Some("$share/g/a/#".into()),
        };
        assert_eq!(read_queue_entry(42, &queue_entry_value(&entry)), Ok(entry));
        let key = seq_key("dev-1", 7).unwrap();
        assert_eq!(read_seq_key(&key), Ok(("dev-1".to_string(), 7)));
        let key = packet_id_key("dev-1", 65_535).unwrap();
        assert_eq!(read_packet_id_key(&key), Ok(("dev-1".to_string(), 65_535)));
        assert_eq!(read_message_key(&message_key(9)), Ok(9));
    }
}
