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
}
