//! Slots for reconciles: fair between namespaces, and never held while a cloud is waited for.
//!
//! - A reconcile works (reads its caches, decides, writes to the apiserver) only while it holds one
//!   of a controller's `--concurrency` work slots, given out first come, first served.
//! - While a provider call waits on a cloud or a remote cluster, its reconcile gives the work slot
//!   back and takes one again when the answer is there ([`Waiting`]): tenants whose clouds never
//!   answer (until `--provider-timeout-seconds`) hold no slot, and the others' reconciles run.
//! - A namespace (a tenant) may have at most half of the concurrency in flight, working or waiting
//!   on a provider. A reconcile over that share is not run: it is put back for a moment. So one
//!   tenant with many LoadBalancers cannot fill the queue for the work slots, and has at most that
//!   many provider calls in flight.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use capi_lb_providers::registry::Waiting;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How soon a reconcile put back for fairness is tried again.
pub const RETRY: Duration = Duration::from_millis(500);

/// The work slots of a controller and the reconciles in flight per namespace.
#[derive(Debug)]
pub struct Fairness {
    share: usize,
    work: Arc<Semaphore>,
    in_flight: Mutex<HashMap<String, usize>>,
}

impl Fairness {
    /// Fairness for a controller running `concurrency` reconciles at a time: that many work slots,
    /// and a namespace may have half of them in flight (at least one).
    pub fn new(concurrency: u16) -> Arc<Self> {
        Arc::new(Self {
            share: usize::from(concurrency / 2).max(1),
            work: Arc::new(Semaphore::new(usize::from(concurrency.max(1)))),
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    /// A place for a reconcile in `namespace`, held until the permit is dropped; `None` when the
    /// namespace has its share in flight. The reconcile then waits for a work slot
    /// ([`Permit::work`]).
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

impl Permit {
    /// Wait for a work slot (first come, first served). The slot is given back while a provider
    /// call waits (run the reconcile in `WAITING.scope(slot, ...)`), and when the slot is dropped.
    pub async fn work(self) -> Arc<Slot> {
        let work = self.fairness.work.clone();
        let permit = work.clone().acquire_owned().await.ok();
        Arc::new(Slot {
            _place: self,
            work,
            held: Arc::new(Mutex::new(Held { waiting: 0, permit })),
        })
    }
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

/// A reconcile's work slot, and its place in its namespace's share.
#[derive(Debug)]
pub struct Slot {
    _place: Permit,
    work: Arc<Semaphore>,
    held: Arc<Mutex<Held>>,
}

/// The provider calls a reconcile waits on, and its work slot unless it waits.
#[derive(Debug)]
struct Held {
    waiting: usize,
    permit: Option<OwnedSemaphorePermit>,
}

fn lock(held: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Waiting for Slot {
    fn release(&self) {
        let mut held = lock(&self.held);
        held.waiting += 1;
        held.permit = None;
    }

    fn reacquire(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        {
            let mut held = lock(&self.held);
            held.waiting = held.waiting.saturating_sub(1);
            // Another call of the same reconcile still waits, or the slot is held already.
            if held.waiting > 0 || held.permit.is_some() {
                return Box::pin(std::future::ready(()));
            }
        }
        let (work, held) = (self.work.clone(), self.held.clone());
        Box::pin(async move {
            let permit = work.acquire_owned().await.ok();
            let mut held = lock(&held);
            // A call started again meanwhile: it waits without the slot.
            if held.waiting == 0 && held.permit.is_none() {
                held.permit = permit;
            }
        })
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

    #[tokio::test]
    async fn a_reconcile_waiting_on_a_provider_gives_its_work_slot_to_another() {
        use std::time::Duration;
        use tokio::time::timeout;
        let fairness = Fairness::new(2);
        let a = fairness.enter("a").unwrap().work().await;
        let b = fairness.enter("b").unwrap().work().await;
        let c = fairness.enter("c").unwrap().work();
        tokio::pin!(c);
        assert!(
            timeout(Duration::from_millis(50), &mut c).await.is_err(),
            "a third work slot of two"
        );
        // a waits on its cloud: c works meanwhile.
        a.release();
        let c = timeout(Duration::from_secs(1), c).await.unwrap();
        // a's answer is there, but both slots are taken: it waits until one is given back.
        let mut again = a.reacquire();
        assert!(
            timeout(Duration::from_millis(50), &mut again)
                .await
                .is_err()
        );
        drop(c);
        timeout(Duration::from_secs(1), again).await.unwrap();
        assert!(lock(&a.held).permit.is_some());
        // Two calls of one reconcile at once: the slot is taken again after the last.
        a.release();
        a.release();
        a.reacquire().await;
        assert!(lock(&a.held).permit.is_none());
        a.reacquire().await;
        assert!(lock(&a.held).permit.is_some());
        drop((a, b));
        assert_eq!(fairness.work.available_permits(), 2);
        assert!(fairness.in_flight.lock().unwrap().is_empty());
    }
}
