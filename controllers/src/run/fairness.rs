//! Fairness between namespaces: a namespace (a tenant) may have at most half of a controller's
//! reconciles in flight. A reconcile over that share is not run: it is put back for a moment, its
//! slot free for another namespace. So one tenant with many LoadBalancers whose cloud is slow
//! cannot occupy every slot while the others wait (the deadline of each provider call,
//! `--provider-timeout-seconds`, bounds how long one reconcile can hold a slot).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How soon a reconcile put back for fairness is tried again.
pub const RETRY: Duration = Duration::from_millis(500);

/// The reconciles in flight per namespace, and how many one namespace may have.
#[derive(Debug)]
pub struct Fairness {
    share: usize,
    in_flight: Mutex<HashMap<String, usize>>,
}

impl Fairness {
    /// Fairness for a controller running `concurrency` reconciles at a time: a namespace may have
    /// half of them (at least one).
    pub fn new(concurrency: u16) -> Arc<Self> {
        Arc::new(Self {
            share: usize::from(concurrency / 2).max(1),
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a reconcile in `namespace`, held until the permit is dropped; `None` when the
    /// namespace has its share in flight.
    pub fn enter(self: &Arc<Self>, namespace: &str) -> Option<Permit> {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = in_flight.entry(namespace.to_string()).or_default();
        if *count >= self.share {
            return None;
        }
        *count += 1;
        Some(Permit {
            fairness: self.clone(),
            namespace: namespace.to_string(),
        })
    }
}

/// One reconcile in flight in a namespace.
#[derive(Debug)]
pub struct Permit {
    fairness: Arc<Fairness>,
    namespace: String,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut in_flight = self
            .fairness
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = in_flight.get_mut(&self.namespace) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.namespace);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_gets_half_the_slots_and_gives_them_back() {
        let fairness = Fairness::new(4);
        let a1 = fairness.enter("a");
        let a2 = fairness.enter("a");
        assert!(a1.is_some() && a2.is_some());
        assert!(
            fairness.enter("a").is_none(),
            "a third slot for one namespace"
        );
        // Another namespace still gets in.
        let b = fairness.enter("b");
        assert!(b.is_some());
        drop(a1);
        let a3 = fairness.enter("a");
        assert!(a3.is_some(), "a slot given back is a slot again");
        drop((a2, a3, b));
        assert!(fairness.in_flight.lock().unwrap().is_empty());
        // One reconcile at a time: still one for each namespace.
        let single = Fairness::new(1);
        let held = single.enter("a");
        assert!(held.is_some() && single.enter("a").is_none() && single.enter("b").is_some());
    }
}
