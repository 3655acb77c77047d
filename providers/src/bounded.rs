//! Caches whose keys a tenant chooses (a Secret's name, a region, a LoadBalancer's UID) are bounded
//! by count and age, not by the keys asked for: [`make_room`] is what each of them does before it
//! keeps one more entry.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Make room in `map` for one more entry: entries last used (`used`) more than `ttl` before `now`
/// go, then the least recently used while `map` holds `max` or more.
pub fn make_room<K: Clone + Eq + Hash, V>(
    map: &mut HashMap<K, V>,
    max: usize,
    ttl: Duration,
    now: Instant,
    used: impl Fn(&V) -> Instant,
) {
    map.retain(|_, v| now.saturating_duration_since(used(v)) < ttl);
    while map.len() >= max.max(1) {
        let Some(oldest) = map
            .iter()
            .min_by_key(|(_, v)| used(v))
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        map.remove(&oldest);
    }
}

/// Keep `value` under `key` in `map`, bounded as [`make_room`] says (at most `max` entries, none
/// last used more than `ttl` ago). Room is made only for a new key in a full map, so an insert
/// costs a hash until the bound is reached.
pub fn insert<K: Clone + Eq + Hash, V>(
    map: &mut HashMap<K, V>,
    key: K,
    value: V,
    max: usize,
    ttl: Duration,
    now: Instant,
    used: impl Fn(&V) -> Instant,
) {
    if map.len() >= max.max(1) && !map.contains_key(&key) {
        make_room(map, max, ttl, now, used);
    }
    map.insert(key, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_entries_go_then_the_least_recently_used() {
        let start = Instant::now();
        let mut map: HashMap<String, Instant> = HashMap::new();
        for i in 0..100u64 {
            make_room(&mut map, 10, Duration::from_secs(60), start, |v| *v);
            map.insert(format!("k{i}"), start + Duration::from_millis(i));
        }
        assert_eq!(map.len(), 10);
        assert!(map.contains_key("k99") && !map.contains_key("k89"));
        make_room(
            &mut map,
            10,
            Duration::from_secs(60),
            start + Duration::from_secs(61),
            |v| *v,
        );
        assert!(map.is_empty());
    }

    #[test]
    fn an_insert_into_a_full_map_makes_room_first() {
        let start = Instant::now();
        let mut map: HashMap<u32, Instant> = HashMap::new();
        let ttl = Duration::from_secs(60);
        for i in 0..10_000u32 {
            let at = start + Duration::from_millis(u64::from(i));
            insert(&mut map, i, at, 100, ttl, at, |v| *v);
            assert!(map.len() <= 100);
        }
        assert!(map.contains_key(&9_999) && !map.contains_key(&9_899));
        // A known key is replaced, not counted again.
        let at = start + Duration::from_secs(30);
        insert(&mut map, 9_999, at, 100, ttl, at, |v| *v);
        assert_eq!(map.len(), 100);
        // Past the age, a new key clears what is stale.
        let late = start + Duration::from_secs(75);
        insert(&mut map, 1, late, 100, ttl, late, |v| *v);
        assert_eq!(map.len(), 2, "the refreshed key and the new one");
    }
}
