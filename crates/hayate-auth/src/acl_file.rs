//! Mosquitto `acl_file`: parsing and evaluation with Mosquitto 2.0 semantics.
//!
//! ```text
//! # Lines before any `user` line form the anonymous section (clients without a username).
//! topic read $SYS/#
//!
//! user alice
//! topic readwrite alice/#
//! topic deny alice/secret/#
//! topic sensors/#            # no access keyword: readwrite
//!
//! # Patterns apply to every client, wherever they appear in the file.
//! pattern write devices/%c/out
//! pattern read users/%u/#
//! ```
//!
//! Evaluation, as in Mosquitto 2.0's `mosquitto_acl_check_default`:
//!
//! 1. The client's own section is chosen: `user NAME` for a client with that username, the
//!    anonymous section for a client without one. If it has no section and there are no
//!    patterns, access is denied (so an ACL file without rules denies everything).
//! 2. In that section, `deny` entries come first: one that matches denies. Then the other
//!    entries in file order: the first that matches *and* has the needed access grants.
//!    A matching entry without the needed access does not stop the search.
//! 3. If patterns exist and the username or client id contains `+`, `#` or `/`, access is
//!    denied (Mosquitto 2.0 refuses `+` and `#`; Hayate also refuses `/`, as Mosquitto 1.x
//!    did, because a client id such as `victim/x` would otherwise substitute into
//!    `devices/%c/#` as a path inside another client's subtree).
//! 4. Patterns are tried the same way (deny first, then in order) after substituting `%c` by
//!    the client id and `%u` by the username; a pattern with `%u` is skipped for clients
//!    without a username.
//! 5. Otherwise access is denied.
//!
//! Topics whose first level starts with `$` are only matched by entries whose first level
//! starts with `$` (so `topic read #` does not give `$SYS`).
//!
//! Subscriptions: Mosquitto's `acl_file` grants every SUBSCRIBE and filters each message on
//! delivery with a read check. Hayate offers both: [`Access::Read`] for each delivered message
//! (the server must keep doing this, also for retained messages), and [`Access::Subscribe`]
//! to decide whether a SUBSCRIBE is accepted: the filter is accepted when a `read` or
//! `readwrite` entry *covers* it (every topic the filter can match is matched by the entry,
//! wildcard-aware: `sensors/#` covers `sensors/+/temp`, `sensors/+` does not cover
//! `sensors/#`), and refused when a `deny` entry covers it, with the same order as above.
//! A filter that only partly overlaps a `deny` entry is accepted, and the denied topics are
//! then filtered out by the per-message read check — exactly what Mosquitto delivers.
//! Shared subscriptions (`$share/group/filter`) are checked on their inner filter.
//!
//! Parsing follows Mosquitto too: `topic`/`pattern` followed by one word that is the topic
//! means readwrite (so `topic read` alone is the topic `read`), the topic is the rest of the
//! line and may contain spaces, topics must be valid subscription filters, and an unknown
//! keyword is an error. Hayate additionally accepts tabs as separators and comments indented
//! by whitespace.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use crate::error::{AuthError, FileKind};
use crate::topic;

/// The kind of access being checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Receiving a message on a topic (checked for every delivery, retained ones included).
    Read,
    /// Publishing a message on a topic.
    Write,
    /// Subscribing with a topic *filter* (the `topic` argument is the filter).
    Subscribe,
}

const READ: u8 = 1;
const WRITE: u8 = 2;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Rules {
    /// Topics (or patterns) whose match denies, checked first.
    deny: Vec<String>,
    /// (topic, access bits) in file order.
    allow: Vec<(String, u8)>,
}

impl Rules {
    fn is_empty(&self) -> bool {
        self.deny.is_empty() && self.allow.is_empty()
    }

    fn add(&mut self, topic: String, bits: u8) {
        if bits == 0 {
            self.deny.push(topic);
        } else {
            self.allow.push((topic, bits));
        }
    }
}

/// A parsed Mosquitto ACL file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclFile {
    anonymous: Rules,
    users: HashMap<String, Rules>,
    patterns: Rules,
}

/// Outcome of checking one rule list.
enum Verdict {
    Allow,
    Deny,
    NoMatch,
}

fn entry_applies(entry: &str, topic: &str, access: Access) -> bool {
    match access {
        Access::Read | Access::Write => topic::matches(entry, topic),
        Access::Subscribe => topic::covers(entry, topic),
    }
}

/// Check one rule list: deny entries first, then the others in order. `subst` maps an entry
/// to the filter to match (pattern substitution), or `None` to skip the entry.
fn evaluate<'a>(
    rules: &'a Rules,
    topic: &str,
    access: Access,
    subst: impl Fn(&'a str) -> Option<Cow<'a, str>>,
) -> Verdict {
    let need = match access {
        Access::Read | Access::Subscribe => READ,
        Access::Write => WRITE,
    };
    for entry in &rules.deny {
        if subst(entry).is_some_and(|e| entry_applies(&e, topic, access)) {
            return Verdict::Deny;
        }
    }
    for (entry, bits) in &rules.allow {
        if bits & need != 0 && subst(entry).is_some_and(|e| entry_applies(&e, topic, access)) {
            return Verdict::Allow;
        }
    }
    Verdict::NoMatch
}

/// Substitute `%c` and `%u` the way Mosquitto 2.0 does (plain text replacement, left to right;
/// `%u` stays literal when there is no username, but such patterns are skipped anyway).
fn substitute<'a>(pattern: &'a str, client_id: &str, username: Option<&str>) -> Cow<'a, str> {
    if !pattern.contains('%') {
        return Cow::Borrowed(pattern);
    }
    let mut out = String::with_capacity(pattern.len() + client_id.len());
    let mut rest = pattern;
    while let Some(pos) = rest.find('%') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('c') {
            out.push_str(client_id);
            rest = tail;
        } else if let (Some(tail), Some(u)) = (after.strip_prefix('u'), username) {
            out.push_str(u);
            rest = tail;
        } else {
            out.push('%');
            rest = after;
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Characters that make pattern substitution unsafe in a username or client id.
fn dangerous(s: &str) -> bool {
    s.contains(['+', '#', '/'])
}

/// Split a line into its first whitespace-delimited word and the rest (leading blanks removed).
fn first_word(s: &str) -> (&str, &str) {
    let s = s.trim_start_matches([' ', '\t']);
    match s.find([' ', '\t']) {
        Some(i) => (&s[..i], s[i..].trim_start_matches([' ', '\t'])),
        None => (s, ""),
    }
}

impl AclFile {
    /// Parse the text of an ACL file; fails on the first bad line, with its number.
    pub fn parse(text: &str) -> Result<Self, AuthError> {
        let mut acl = AclFile::default();
        let mut user: Option<String> = None;
        for (idx, raw) in text.lines().enumerate() {
            let lineno = idx + 1;
            let err = |m: String| AuthError::parse(FileKind::AclFile, lineno, m);
            let line = raw.trim_end();
            if line.trim_start().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let (keyword, rest) = first_word(line);
            match keyword {
                "topic" | "pattern" => {
                    let (access_word, after) = first_word(rest);
                    if access_word.is_empty() {
                        return Err(err(format!("{keyword} without a topic")));
                    }
                    let (bits, topic) = if after.is_empty() {
                        // `topic foo`: the single word is the topic, with readwrite access.
                        (READ | WRITE, access_word)
                    } else {
                        let bits = match access_word {
                            "read" => READ,
                            "write" => WRITE,
                            "readwrite" => READ | WRITE,
                            "deny" => 0,
                            other => {
                                return Err(err(format!(
                                    "invalid access type {other:?} (expected read, write, readwrite or deny)"
                                )))
                            }
                        };
                        (bits, after.trim())
                    };
                    if !topic::valid_filter(topic) {
                        return Err(err(format!("invalid topic {topic:?}")));
                    }
                    let rules = if keyword == "pattern" {
                        &mut acl.patterns
                    } else if let Some(u) = &user {
                        acl.users.entry(u.clone()).or_default()
                    } else {
                        &mut acl.anonymous
                    };
                    rules.add(topic.to_owned(), bits);
                }
                "user" => {
                    let name = rest.trim();
                    if name.is_empty() {
                        return Err(err("missing username after `user`".into()));
                    }
                    user = Some(name.to_owned());
                }
                other => {
                    return Err(err(format!(
                        "unknown keyword {other:?} (expected topic, pattern or user)"
                    )))
                }
            }
        }
        Ok(acl)
    }

    /// Read and parse an ACL file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, AuthError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| AuthError::io(path, e))?;
        Self::parse(&text)
    }

    /// Whether the client may perform `access` on `topic` (a topic name for [`Access::Read`]
    /// and [`Access::Write`], a topic filter for [`Access::Subscribe`]). `username` is `None`
    /// for a client that sent no username. Invalid topics and filters are denied.
    pub fn check(
        &self,
        username: Option<&str>,
        client_id: &str,
        topic: &str,
        access: Access,
    ) -> bool {
        let topic = match access {
            Access::Subscribe => shared_inner_filter(topic),
            _ => topic,
        };
        let own = match username {
            Some(u) => self.users.get(u),
            None => Some(&self.anonymous).filter(|r| !r.is_empty()),
        };
        if own.is_none() && self.patterns.is_empty() {
            return false;
        }
        if let Some(rules) = own {
            match evaluate(rules, topic, access, |e| Some(Cow::Borrowed(e))) {
                Verdict::Allow => return true,
                Verdict::Deny => return false,
                Verdict::NoMatch => {}
            }
        }
        if self.patterns.is_empty() {
            return false;
        }
        if username.is_some_and(dangerous) || dangerous(client_id) {
            return false;
        }
        // Patterns with %u do not apply to clients without a username.
        let verdict = evaluate(&self.patterns, topic, access, |p| {
            (username.is_some() || !p.contains("%u")).then(|| substitute(p, client_id, username))
        });
        matches!(verdict, Verdict::Allow)
    }

    /// Whether the file contains no rule at all (which denies everything).
    pub fn is_empty(&self) -> bool {
        self.anonymous.is_empty()
            && self.patterns.is_empty()
            && self.users.values().all(Rules::is_empty)
    }
}

/// `$share/group/filter` → `filter`; anything else unchanged.
fn shared_inner_filter(filter: &str) -> &str {
    filter
        .strip_prefix("$share/")
        .and_then(|rest| rest.split_once('/'))
        .map_or(filter, |(_, inner)| inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Access::{Read, Subscribe, Write};

    fn acl(text: &str) -> AclFile {
        AclFile::parse(text).unwrap()
    }

    #[test]
    fn empty_file_denies_everything() {
        let a = acl("# nothing\n\n");
        assert!(a.is_empty());
        assert!(!a.check(None, "c", "a", Read));
        assert!(!a.check(Some("u"), "c", "a", Write));
    }

    #[test]
    fn access_keywords() {
        let a =
            acl("user u\ntopic read r/#\ntopic write w/#\ntopic readwrite rw/#\ntopic both/#\n");
        let c = |t, x| a.check(Some("u"), "cid", t, x);
        assert!(c("r/1", Read) && !c("r/1", Write));
        assert!(!c("w/1", Read) && c("w/1", Write));
        assert!(c("rw/1", Read) && c("rw/1", Write));
        assert!(c("both/1", Read) && c("both/1", Write));
        assert!(!c("other", Read) && !c("other", Write));
    }

    #[test]
    fn single_word_is_the_topic() {
        // Mosquitto quirk: `topic read` alone is the topic "read" with readwrite access.
        let a = acl("user u\ntopic read\n");
        assert!(a.check(Some("u"), "c", "read", Write));
        assert!(!a.check(Some("u"), "c", "anything", Read));
    }

    #[test]
    fn topics_may_contain_spaces() {
        let a = acl("user u\ntopic read  a b/c  \n");
        assert!(a.check(Some("u"), "c", "a b/c", Read));
        assert!(!a.check(Some("u"), "c", "a", Read));
    }

    #[test]
    fn anonymous_section() {
        let a = acl("topic read public/#\n\nuser alice\ntopic readwrite alice/#\n");
        assert!(a.check(None, "c", "public/x", Read));
        assert!(!a.check(None, "c", "public/x", Write));
        assert!(!a.check(None, "c", "alice/x", Read));
        // Named users do not get the anonymous section.
        assert!(!a.check(Some("alice"), "c", "public/x", Read));
        assert!(a.check(Some("alice"), "c", "alice/x", Write));
        // A username without a section has no rules (and there are no patterns).
        assert!(!a.check(Some("bob"), "c", "public/x", Read));
        // An empty username is a username, not anonymous.
        assert!(!a.check(Some(""), "c", "public/x", Read));
    }

    #[test]
    fn user_sections_merge_and_switch() {
        let a = acl("user a\ntopic x\nuser b\ntopic y\nuser a\ntopic z\n");
        assert!(a.check(Some("a"), "c", "x", Read));
        assert!(a.check(Some("a"), "c", "z", Read));
        assert!(!a.check(Some("a"), "c", "y", Read));
        assert!(a.check(Some("b"), "c", "y", Read));
        // Usernames may contain spaces; the whole rest of the line is the name.
        let a = acl("user john smith\ntopic j\n");
        assert!(a.check(Some("john smith"), "c", "j", Read));
    }

    #[test]
    fn deny_wins_regardless_of_order() {
        let a = acl("user u\ntopic readwrite a/#\ntopic deny a/secret/#\n");
        assert!(a.check(Some("u"), "c", "a/open", Read));
        assert!(!a.check(Some("u"), "c", "a/secret/x", Read));
        assert!(!a.check(Some("u"), "c", "a/secret", Write));
    }

    #[test]
    fn first_matching_entry_without_access_does_not_stop_search() {
        let a = acl("user u\ntopic read a/#\ntopic write a/b\n");
        assert!(a.check(Some("u"), "c", "a/b", Write));
        assert!(a.check(Some("u"), "c", "a/b", Read));
        assert!(!a.check(Some("u"), "c", "a/c", Write));
    }

    #[test]
    fn wildcards_and_dollar_topics() {
        let a = acl("user u\ntopic read #\ntopic read +/x\ntopic read $SYS/broker/#\n");
        let c = |t| a.check(Some("u"), "c", t, Read);
        assert!(c("a/b/c"));
        assert!(!c("$SYS/load"), "# must not match $ topics");
        assert!(c("$SYS/broker/uptime"));
        assert!(!c("$share/x"));
        // Wildcards in a topic name never match.
        assert!(!c("a/+"));
        assert!(!c(""));
    }

    #[test]
    fn patterns_substitute_client_id_and_username() {
        let a = acl(
            "pattern readwrite users/%u/#\npattern write devices/%c/out\npattern read x/%u-%c\n",
        );
        assert!(a.check(Some("alice"), "dev1", "users/alice/inbox", Read));
        assert!(a.check(Some("alice"), "dev1", "users/alice", Write));
        assert!(!a.check(Some("alice"), "dev1", "users/bob/inbox", Read));
        assert!(a.check(Some("alice"), "dev1", "devices/dev1/out", Write));
        assert!(!a.check(Some("alice"), "dev1", "devices/dev1/out", Read));
        assert!(!a.check(Some("alice"), "dev1", "devices/dev2/out", Write));
        assert!(a.check(Some("alice"), "dev1", "x/alice-dev1", Read));
        // %c patterns apply to anonymous clients, %u patterns do not.
        assert!(a.check(None, "dev1", "devices/dev1/out", Write));
        assert!(!a.check(None, "dev1", "users/%u/x", Read));
        assert!(!a.check(None, "dev1", "x/%u-dev1", Read));
    }

    #[test]
    fn patterns_apply_after_user_rules_and_to_everyone() {
        let a = acl("user alice\ntopic read a/#\npattern write users/%u\n");
        assert!(a.check(Some("alice"), "c", "a/1", Read));
        assert!(a.check(Some("alice"), "c", "users/alice", Write));
        // A user without a section still gets the patterns.
        assert!(a.check(Some("bob"), "c", "users/bob", Write));
    }

    #[test]
    fn user_grant_beats_pattern_deny() {
        // Mosquitto checks the user's section completely before any pattern.
        let a = acl("user u\ntopic read p/#\npattern deny p/%u\n");
        assert!(a.check(Some("u"), "c", "p/u", Read));
        let a = acl("user u\ntopic read q\npattern deny p/%u\npattern read p/#\n");
        assert!(!a.check(Some("u"), "c", "p/u", Read));
        assert!(a.check(Some("u"), "c", "p/v", Read));
    }

    #[test]
    fn dangerous_names_refused_by_patterns_only() {
        let a = acl("user a+b\ntopic read t\npattern read p/%c\n");
        // The user's own section is checked first, so it still works...
        assert!(a.check(Some("a+b"), "c", "t", Read));
        // ...but patterns refuse names with +, # or /.
        assert!(!a.check(Some("a+b"), "c", "p/c", Read));
        assert!(a.check(Some("ok"), "c", "p/c", Read));
        for cid in ["x+", "x#", "victim/x"] {
            assert!(
                !a.check(Some("ok"), cid, &format!("p/{cid}"), Read),
                "{cid}"
            );
        }
        assert!(!a.check(Some("u/v"), "c", "p/c", Read));
        // Without patterns the check does not apply.
        let a = acl("user a#\ntopic read t\n");
        assert!(a.check(Some("a#"), "c", "t", Read));
    }

    #[test]
    fn subscribe_filters_are_matched_wildcard_aware() {
        let a =
            acl("user u\ntopic read sensors/#\ntopic deny sensors/secret/#\ntopic write cmd/#\n");
        let s = |f| a.check(Some("u"), "c", f, Subscribe);
        assert!(s("sensors/#"));
        assert!(s("sensors/+/temp"));
        assert!(s("sensors"));
        assert!(!s("#"), "not covered by sensors/#");
        assert!(!s("+/temp"));
        assert!(!s("sensors/secret/#"), "covered by a deny entry");
        assert!(!s("sensors/secret/x"));
        assert!(!s("cmd/#"), "write access does not allow subscribing");
        assert!(!s("sensors/#/x"), "invalid filter");
        // Partly overlapping a deny entry is allowed; delivery checks filter the rest.
        assert!(a.check(Some("u"), "c", "sensors/+", Subscribe));
        assert!(!a.check(Some("u"), "c", "sensors/secret/x", Read));
        // Shared subscriptions are checked on their inner filter.
        assert!(s("$share/g/sensors/+/temp"));
        assert!(!s("$share/g/#"));
    }

    #[test]
    fn subscribe_with_plus_entry() {
        let a = acl("user u\ntopic read +/status\npattern read clients/%c/#\n");
        assert!(a.check(Some("u"), "c1", "+/status", Subscribe));
        assert!(a.check(Some("u"), "c1", "dev/status", Subscribe));
        assert!(!a.check(Some("u"), "c1", "#", Subscribe));
        assert!(a.check(Some("u"), "c1", "clients/c1/+", Subscribe));
        assert!(!a.check(Some("u"), "c1", "clients/+/x", Subscribe));
    }

    #[test]
    fn parse_errors_have_line_numbers() {
        for (text, line) in [
            ("topic\n", 1),
            ("user u\n\ntopic bogus a/b\n", 3),
            ("user\n", 1),
            ("user   \n", 1),
            ("# c\nfoo bar\n", 2),
            ("topic read a/#/b\n", 1),
            ("pattern read a+\n", 1),
            ("Topic read a\n", 1),
        ] {
            match AclFile::parse(text) {
                Err(AuthError::Parse { line: l, kind, .. }) => {
                    assert_eq!((l, kind), (line, FileKind::AclFile), "{text:?}")
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn comments_whitespace_and_crlf() {
        let a = acl("# c\r\n  # indented\r\n\r\n\tuser\tu \r\n  topic\tread\ta/b\r\n");
        assert!(a.check(Some("u"), "c", "a/b", Read));
    }

    #[test]
    fn substitution_is_textual_like_mosquitto() {
        assert_eq!(substitute("a/%c/%u/%x/%", "cid", Some("u")), "a/cid/u/%x/%");
        assert_eq!(substitute("%u%c", "c", None), "%uc");
        assert_eq!(substitute("%%c", "c", None), "%c");
    }
}
