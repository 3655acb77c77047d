//! The value budget of an answer: a pass over its bytes that counts its JSON values and their
//! nesting without keeping any of them (serde's `IgnoredAny` for keys, nothing allocated), run
//! before the answer is parsed for real. An answer over [`super::Limits::values`] values or deeper
//! than [`super::MAX_DEPTH`] is refused; one that is not JSON at all is left to its parser to
//! refuse (the budget is about memory, not syntax).

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Limits, MAX_DEPTH, Refused};

/// Refuse `bytes` when, as JSON, they hold more than `limits.values` values or nest deeper than
/// [`MAX_DEPTH`].
pub fn check(bytes: &[u8], limits: &Limits) -> Result<(), Refused> {
    let mut count = Count {
        values: 0,
        max: limits.values,
        depth: 0,
        over: None,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let _ = Seed(&mut count).deserialize(&mut deserializer);
    match count.over {
        Some(why) => Err(Refused::TooComplex(why)),
        None => Ok(()),
    }
}

/// How far the count got, and why it stopped early.
struct Count {
    values: usize,
    max: usize,
    depth: usize,
    over: Option<String>,
}

impl Count {
    /// One more value; an error (which ends the pass) once over the budget.
    fn one<E: serde::de::Error>(&mut self) -> Result<(), E> {
        self.values += 1;
        if self.values > self.max {
            self.over = Some(format!("it holds more than {} JSON values", self.max));
            return Err(E::custom("over the value budget"));
        }
        Ok(())
    }

    fn enter<E: serde::de::Error>(&mut self) -> Result<(), E> {
        self.one()?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.over = Some(format!("it nests deeper than {MAX_DEPTH} levels"));
            return Err(E::custom("too deep"));
        }
        Ok(())
    }
}

struct Seed<'a>(&'a mut Count);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.0.one()
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.0.one()
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.0.one()
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.0.one()
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.0.one()
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, _: &'de str) -> Result<(), E> {
        self.0.one()
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.one()
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.one()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.enter()?;
        while seq.next_element_seed(Seed(self.0))?.is_some() {}
        self.0.depth -= 1;
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.enter()?;
        while map.next_key::<IgnoredAny>()?.is_some() {
            // The key is kept by whatever parses the answer: it counts.
            self.0.one()?;
            map.next_value_seed(Seed(self.0))?;
        }
        self.0.depth -= 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SMALL: Limits = Limits {
        connect: Duration::from_secs(1),
        answer: Duration::from_secs(1),
        bytes: 1 << 20,
        values: 100,
    };

    #[test]
    fn counts_values_keys_and_depth() {
        assert_eq!(
            check(br#"{"a": [1, 2, {"b": null}], "c": "d"}"#, &SMALL),
            Ok(())
        );
        let many = format!("{{\"x\":[{}0]}}", "0,".repeat(200));
        assert!(
            matches!(check(many.as_bytes(), &SMALL), Err(Refused::TooComplex(why)) if why.contains("100 JSON values"))
        );
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        assert!(
            matches!(check(deep.as_bytes(), &SMALL), Err(Refused::TooComplex(why)) if why.contains("deeper"))
        );
        let keys = format!(
            "{{{}\"z\":0}}",
            (0..60).map(|i| format!("\"k{i}\":0,")).collect::<String>()
        );
        assert!(check(keys.as_bytes(), &SMALL).is_err(), "keys count");
    }

    #[test]
    fn what_is_not_json_is_left_to_the_parser() {
        assert_eq!(check(b"", &SMALL), Ok(()));
        assert_eq!(check(b"<html>502 Bad Gateway</html>", &SMALL), Ok(()));
        assert_eq!(check(b"{\"a\": ", &SMALL), Ok(()));
    }

    #[test]
    fn a_very_deep_answer_does_not_exhaust_the_stack() {
        let deep = "[".repeat(1_000_000);
        assert!(check(deep.as_bytes(), &SMALL).is_err());
    }
}
