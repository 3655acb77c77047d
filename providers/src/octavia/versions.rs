//! An OpenStack service's version document, read for one major version.
//!
//! Octavia and Neutron list their versions (`{"versions": [{"id": "v2.30", "links": [{"rel":
//! "self", "href": ...}]}, ...]}`); Keystone nests the list (`{"versions": {"values": [...]}}`).
//! capi-lb needs, for one major (`v2`, `v2.0`), the highest listed version: its id, its `self`
//! link and the highest minor. The parser visits the entries one at a time and keeps only the
//! best so far, the fields it does not read skipped while parsing: nothing else of the document is
//! built, whatever it holds (within the byte cap), and an entry or field of another type than
//! expected is skipped. A body that is not such a document lists nothing.

use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::lenient::{Lenient, Text, other_scalars_are, skip_map, skip_seq};

/// The highest listed version of a major.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    /// Its id (`v2.30`).
    pub id: String,
    /// Its `self` link, when it has one.
    pub href: Option<String>,
    /// The highest minor among the listed ids `<major>.N` (none: only `<major>` itself listed).
    pub highest_minor: Option<u32>,
}

/// The highest version of `major` that `body`, a version document, lists (`None`: it lists none,
/// or it is not a version document).
pub fn highest(body: &[u8], major: &str) -> Option<Listed> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    Level {
        major,
        step: Step::Document,
    }
    .deserialize(&mut deserializer)
    .ok()
    .flatten()
}

/// The minor number of a version id (`v2.30` -> 30; 0 without one).
fn minor(id: &str) -> u32 {
    id.split_once('.')
        .and_then(|(_, m)| m.parse().ok())
        .unwrap_or(0)
}

/// Where the parser is in the document: the document itself (an object whose `versions` leads
/// on), its `versions` (the list, or Keystone's object whose `values` is the list), or that
/// `values` (the list). Every other field is skipped, and anything else lists nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Document,
    Versions,
    Values,
}

#[derive(Clone, Copy)]
struct Level<'m> {
    major: &'m str,
    step: Step,
}

impl<'de> DeserializeSeed<'de> for Level<'_> {
    type Value = Option<Listed>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Level<'_> {
    type Value = Option<Listed>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a version document")
    }

    other_scalars_are!(None);

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        match self.step {
            Step::Document => skip_seq(seq).map(|()| None),
            Step::Versions | Step::Values => highest_of(seq, self.major),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (wanted, next) = match self.step {
            Step::Document => ("versions", Step::Versions),
            Step::Versions => ("values", Step::Values),
            Step::Values => return skip_map(map).map(|()| None),
        };
        let next = Level {
            major: self.major,
            step: next,
        };
        let mut found = None;
        while let Some(key) = map.next_key::<Key>()? {
            if key.0 == Some(wanted) && found.is_none() {
                found = Some(map.next_value_seed(next)?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found.flatten())
    }
}

/// The entries, one at a time: the best so far kept (on a tie the later one, as
/// `Iterator::max_by_key` chooses).
fn highest_of<'de, A: SeqAccess<'de>>(mut seq: A, major: &str) -> Result<Option<Listed>, A::Error> {
    let dotted = format!("{major}.");
    let mut best: Option<(u32, Listed)> = None;
    let mut highest_minor = None;
    while let Some(entry) = seq.next_element::<Lenient<Entry>>()? {
        let Some(entry) = entry.0 else { continue };
        let Some(id) = entry.id.0 else { continue };
        if id != major && !id.starts_with(&dotted) {
            continue;
        }
        let versioned = id.strip_prefix(&dotted).and_then(|m| m.parse::<u32>().ok());
        highest_minor = highest_minor.max(versioned);
        let rank = minor(&id);
        if best.as_ref().is_none_or(|(b, _)| rank >= *b) {
            let href = entry.links.0;
            best = Some((
                rank,
                Listed {
                    id,
                    href,
                    highest_minor: None,
                },
            ));
        }
    }
    Ok(best.map(|(_, listed)| Listed {
        highest_minor,
        ..listed
    }))
}

/// A map key: one of the few the parser looks for, or another (its text not kept).
struct Key(Option<&'static str>);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(Key(["versions", "values"].into_iter().find(|k| *k == s)))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// One listed version, as far as it is read.
#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    id: Text,
    #[serde(default)]
    links: SelfLink,
}

/// The `href` of the first link whose `rel` is `self` (the links visited one at a time).
#[derive(Default)]
struct SelfLink(Option<String>);

#[derive(Deserialize)]
struct Link {
    #[serde(default)]
    rel: Text,
    #[serde(default)]
    href: Text,
}

impl<'de> Deserialize<'de> for SelfLink {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SelfLink;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of links")
            }
            other_scalars_are!(SelfLink(None));
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<SelfLink, E> {
                Ok(SelfLink(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SelfLink, A::Error> {
                let mut chosen = None;
                while let Some(link) = seq.next_element::<Lenient<Link>>()? {
                    if let Some(link) = link.0
                        && chosen.is_none()
                        && link.rel.0.as_deref() == Some("self")
                    {
                        chosen = Some(link.href.0);
                    }
                }
                Ok(SelfLink(chosen.flatten()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SelfLink, A::Error> {
                skip_map(map).map(|()| SelfLink(None))
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn listed(id: &str, href: Option<&str>, highest_minor: Option<u32>) -> Option<Listed> {
        Some(Listed {
            id: id.into(),
            href: href.map(str::to_string),
            highest_minor,
        })
    }

    #[test]
    fn the_highest_minor_of_the_major_is_chosen_with_its_self_link() {
        let octavia = br#"{"versions": [
            {"id": "v2.0", "status": "SUPPORTED", "links": [{"rel": "self", "href": "http://o/v2"}]},
            {"id": "v2.30", "links": [{"rel": "describedby", "href": "http://docs"},
                                      {"rel": "self", "href": "http://o/v2.30"}]},
            {"id": "v2.4"}, {"id": "v1.9"}, {"id": "v20.1"}]}"#;
        assert_eq!(
            highest(octavia, "v2"),
            listed("v2.30", Some("http://o/v2.30"), Some(30))
        );
        assert_eq!(highest(octavia, "v1"), listed("v1.9", None, Some(9)));
        assert_eq!(highest(octavia, "v3"), None);
        // Keystone's nesting; a major without minors.
        let keystone = br#"{"versions": {"values": [{"id": "v3.14", "links": []}]}}"#;
        assert_eq!(highest(keystone, "v3"), listed("v3.14", None, Some(14)));
        let neutron = br#"{"versions": [{"id": "v2.0", "status": "CURRENT"}]}"#;
        assert_eq!(highest(neutron, "v2.0"), listed("v2.0", None, None));
        assert_eq!(
            highest(br#"{"versions": [{"id": "v2"}]}"#, "v2"),
            listed("v2", None, None)
        );
    }

    #[test]
    fn what_is_not_a_version_document_lists_nothing_and_odd_entries_are_skipped() {
        for body in [
            &b""[..],
            b"not json",
            b"[1, 2]",
            b"\"versions\"",
            b"{}",
            br#"{"versions": 5}"#,
            br#"{"versions": {"other": []}}"#,
            br#"{"versions": {"values": {"values": [{"id": "v2.1"}]}}}"#,
            br#"{"versions": [{"id": "v2.1"}"#,
        ] {
            assert_eq!(
                highest(body, "v2"),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let odd = br#"{"versions": [1, "v2.9", [{"id": "v2.8"}], {"id": 7}, {"id": "v2.x"},
            {"id": "v2.3", "links": "self"}, {"id": "v2.2", "links": [5, {"rel": "self", "href": 1}]}]}"#;
        // v2.x ranks as minor 0 and has no numeric minor; v2.3 is the best; nested lists are skipped.
        assert_eq!(highest(odd, "v2"), listed("v2.3", None, Some(3)));
    }

    #[test]
    fn a_large_document_gives_the_entry_kept() {
        // Many entries and long unread fields (how little parsing holds meanwhile:
        // tests/octavia_memory.rs).
        let mut body = String::from(r#"{"pad": ""#);
        body.push_str(&"x".repeat(1 << 20));
        body.push_str(r#"", "versions": ["#);
        for i in 0..20_000 {
            body.push_str(&format!(
                r#"{{"id": "v2.{i}", "media-types": [{{}}, {{}}, [0, 0, 0]]}},"#
            ));
        }
        body.push_str(r#"{"id": "v2.7", "links": [{"rel": "self", "href": "http://o/v2"}]}]}"#);
        assert_eq!(
            highest(body.as_bytes(), "v2"),
            listed("v2.19999", None, Some(19_999))
        );
    }
}
