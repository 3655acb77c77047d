//! Reading an OpenStack answer leniently and within bounds, straight from its bytes: a field of
//! another type than expected reads as absent (it is skipped by the parser, never an error for the
//! whole answer), and a list keeps at most a fixed number of the elements capi-lb wants, visited
//! one at a time, the others skipped while parsing. Nothing here builds a value tree, so what an
//! answer holds beyond what capi-lb reads costs no memory, whatever it holds within the byte cap.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The scalar values a visitor does not read: read as `$nothing`.
macro_rules! other_scalars_are {
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
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($nothing)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($nothing)
        }
    };
}
pub(super) use other_scalars_are;

/// Skip the rest of a list.
pub(super) fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Skip the rest of an object.
pub(super) fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// A string field, or nothing when the answer put anything else there (skipped while parsing).
#[derive(Clone, Debug, Default)]
pub(super) struct Text(pub(super) Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Text, E> {
                Ok(Text(Some(s.to_string())))
            }
            other_scalars_are!(Text(None));
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Text, A::Error> {
                skip_seq(seq).map(|()| Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text, A::Error> {
                skip_map(map).map(|()| Text(None))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// An object read as `T` (the fields `T` does not name skipped while parsing), or `None` when the
/// answer put anything else there (skipped).
pub(super) struct Lenient<T>(pub(super) Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            other_scalars_are!(Lenient(None));
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|()| Lenient(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|t| Lenient(Some(t)))
            }
        }
        deserializer.deserialize_any(V(PhantomData))
    }
}

/// Which elements of a [`List`] are kept.
pub(super) trait Keep {
    /// Whether this element is kept (all are, by default).
    fn keep(&self) -> bool {
        true
    }
}

/// A list of objects read one at a time (each as [`Lenient`]), keeping the first `MAX` that
/// [`Keep::keep`] accepts and skipping the others and every element that is not an object: what it holds is bounded by `MAX` elements
/// whatever the answer lists. Anything but a list reads as an empty one.
#[derive(Debug)]
pub(super) struct List<T, const MAX: usize>(pub(super) Vec<T>);

impl<T, const MAX: usize> Default for List<T, MAX> {
    fn default() -> Self {
        List(Vec::new())
    }
}

impl<'de, T: Deserialize<'de> + Keep, const MAX: usize> Deserialize<'de> for List<T, MAX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T, const MAX: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Keep, const MAX: usize> Visitor<'de> for V<T, MAX> {
            type Value = List<T, MAX>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }
            other_scalars_are!(List::default());
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(List::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut kept = Vec::new();
                while let Some(element) = seq.next_element::<Lenient<T>>()? {
                    if let Some(element) = element.0
                        && kept.len() < MAX
                        && element.keep()
                    {
                        kept.push(element);
                    }
                }
                Ok(List(kept))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                skip_map(map).map(|()| List::default())
            }
        }
        deserializer.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Item {
        #[serde(default)]
        name: Option<String>,
    }

    impl Keep for Item {
        fn keep(&self) -> bool {
            self.name.as_deref() != Some("skip")
        }
    }

    #[test]
    fn a_list_keeps_the_first_wanted_objects_and_reads_anything_else_as_nothing() {
        let list: List<Item, 2> = serde_json::from_str(
            r#"[1, {"name": "skip"}, "x", {"name": "a", "other": [1]}, [{}], {"name": "b"}, {"name": "c"}]"#,
        )
        .unwrap();
        let names: Vec<_> = list.0.iter().map(|i| i.name.as_deref()).collect();
        assert_eq!(names, [Some("a"), Some("b")]);
        for other in [r#""list""#, "5", "null", r#"{"a": [1]}"#] {
            let list: List<Item, 2> = serde_json::from_str(other).unwrap();
            assert!(list.0.is_empty(), "{other}");
        }
        let text: Vec<Text> = serde_json::from_str(r#"["a", 1, {"b": 2}, [3], null]"#).unwrap();
        let text: Vec<_> = text.into_iter().map(|t| t.0).collect();
        assert_eq!(text, [Some("a".into()), None, None, None, None]);
    }
}
