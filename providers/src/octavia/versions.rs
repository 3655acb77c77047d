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
use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::http::Text;

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
    deserializer
        .deserialize_any(Document { major })
        .ok()
        .flatten()
}

/// The minor number of a version id (`v2.30` -> 30; 0 without one).
fn minor(id: &str) -> u32 {
    id.split_once('.')
        .and_then(|(_, m)| m.parse().ok())
        .unwrap_or(0)
}

/// The values other than the one a visitor reads: skipped, read as "nothing".
macro_rules! other_values_are_nothing {
    ($nothing:expr) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($nothing)
        }
    };
}

/// The whole document: its `versions`, every other field skipped.
struct Document<'m> {
    major: &'m str,
}

impl<'de> Visitor<'de> for Document<'_> {
    type Value = Option<Listed>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a version document")
    }

    other_values_are_nothing!(None);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Key>()? {
            if key.0 == Some(Field::Versions) && found.is_none() {
                found = Some(map.next_value_seed(Versions { major: self.major })?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found.flatten())
    }
}

impl<'de> DeserializeSeed<'de> for Document<'_> {
    type Value = Option<Listed>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// The keys the parser reads (every other key is not kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Versions,
    Values,
}

/// A map key: one the parser reads, or another (its text not kept).
struct Key(Option<Field>);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(Key(match s {
                    "versions" => Some(Field::Versions),
                    "values" => Some(Field::Values),
                    _ => None,
                }))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// `versions`: the list, or Keystone's object holding it in `values`.
struct Versions<'m> {
    major: &'m str,
}

impl<'de> DeserializeSeed<'de> for Versions<'_> {
    type Value = Option<Listed>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Versions<'_> {
    type Value = Option<Listed>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of versions")
    }

    other_values_are_nothing!(None);

    /// The entries, one at a time: the best so far kept (on a tie the later one, as
    /// `Iterator::max_by_key` chooses).
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let dotted = format!("{}.", self.major);
        let mut best: Option<(u32, Listed)> = None;
        let mut highest_minor = None;
        while let Some(entry) = seq.next_element::<Lenient<Entry>>()? {
            let Some(id) = entry.0.id.0 else { continue };
            let versioned = id.strip_prefix(&dotted).and_then(|m| m.parse::<u32>().ok());
            if id != self.major && !id.starts_with(&dotted) {
                continue;
            }
            if versioned.is_some() {
                highest_minor = highest_minor.max(versioned);
            }
            let rank = minor(&id);
            if best.as_ref().is_none_or(|(b, _)| rank >= *b) {
                let href = entry.0.links.0;
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

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Key>()? {
            if key.0 == Some(Field::Values) && found.is_none() {
                found = Some(map.next_value_seed(Versions { major: self.major })?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found.flatten())
    }
}

/// An object read as `T` (fields it does not name skipped while parsing), or `T::default()` when
/// the document put anything else there (skipped).
struct Lenient<T>(T);

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for V<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            other_values_are_nothing!(Lenient(T::default()));
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Lenient(T::default()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Lenient)
            }
        }
        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}

/// One listed version, as far as it is read.
#[derive(Default, Deserialize)]
struct Entry {
    #[serde(default)]
    id: Text,
    #[serde(default)]
    links: SelfLink,
}

/// The `href` of the first link whose `rel` is `self` (the links visited one at a time).
#[derive(Default)]
struct SelfLink(Option<String>);

#[derive(Default, Deserialize)]
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
            other_values_are_nothing!(SelfLink(None));
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SelfLink, A::Error> {
                let mut chosen = None;
                while let Some(link) = seq.next_element::<Lenient<Link>>()? {
                    if chosen.is_none() && link.0.rel.0.as_deref() == Some("self") {
                        chosen = Some(link.0.href.0);
                    }
                }
                Ok(SelfLink(chosen.flatten()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SelfLink, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(SelfLink(None))
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
