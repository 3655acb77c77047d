//! Slots for reconciles: fair between namespaces, and never held while a cloud is waited for.
//!
//! - A reconcile works (reads its caches, decides, writes to the apiserver) only while it holds one
//!   of a controller's `--concurrency` work slots, given out first come, first served.
//! - While a provider call waits on a cloud or a remote cluster, its reconcile gives the work slot
//!   back and takes one again when the answer is there ([`Waiting`]): tenants whose clouds never
//!   answer (until `--provider-timeout-seconds`) hold no slot, and the others' reconciles run.
//! - A namespace (a tenant) has at most half of the concurrency in flight, working or waiting on a
//!   provider: its places. A reconcile over that share waits for one of its namespace's places
//!   (first come, first served) before it may wait for a work slot. So one tenant with many
//!   LoadBalancers cannot fill the queue for the work slots, has at most that many provider calls in
//!   flight, and a place it gives back is taken at once by its next reconcile (no polling: with
//!   100 LoadBalancers in one namespace, putting the rest back for half a second left the places
//!   empty most of the time; docs/benchmarks.md).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use capi_lb_providers::registry::Waiting;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The work slots of a controller and the places of each namespace with reconciles in flight.
#[derive(Debug)]
pub struct Fairness {
    share: usize,
    work: Arc<Semaphore>,
    namespaces: Mutex<HashMap<String, Places>>,
}

/// One namespace's places, and how many reconciles hold or wait for one (the entry goes when none
/// does, so a namespace that was used once costs nothing afterwards).
#[derive(Debug)]
struct Places {
    semaphore: Arc<Semaphore>,
    users: usize,
}

impl Fairness {
    /// Fairness for a controller running `concurrency` reconciles at a time: that many work slots,
    /// and a namespace may have half of them in flight (at least one).
    pub fn new(concurrency: u16) -> Arc<Self> {
        Arc::new(Self {
            share: usize::from(concurrency / 2).max(1),
            work: Arc::new(Semaphore::new(usize::from(concurrency.max(1)))),
            namespaces: Mutex::new(HashMap::new()),
        })
    }

    /// A place for a reconcile in `namespace`, held until the permit is dropped: at once when the
    /// namespace has fewer than its share in flight, else when one of its reconciles gives its
    /// place back (first come, first served). The reconcile then waits for a work slot
    /// ([`Permit::work`]). Dropping the future while it waits gives up its turn.
    pub async fn enter(self: &Arc<Self>, namespace: &str) -> Permit {
        let places = {
            let mut namespaces = self.lock();
            let entry = namespaces
                .entry(namespace.to_string())
                .or_insert_with(|| Places {
                    semaphore: Arc::new(Semaphore::new(self.share)),
                    users: 0,
                });
            entry.users += 1;
            entry.semaphore.clone()
        };
        // Counted as a user from here on: dropped while waiting, the permit still counts it out.
        let mut permit = Permit {
            fairness: self.clone(),
            namespace: namespace.to_string(),
            place: None,
        };
        // The semaphore is never closed: acquiring fails never.
        permit.place = places.acquire_owned().await.ok();
        permit
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Places>> {
        self.namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One reconcile in flight in a namespace.
#[derive(Debug)]
pub struct Permit {
    fairness: Arc<Fairness>,
    namespace: String,
    place: Option<OwnedSemaphorePermit>,
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
        // The place first: the namespace's next reconcile takes it at once.
        drop(self.place.take());
        let mut namespaces = self.fairness.lock();
        if let Some(entry) = namespaces.get_mut(&self.namespace) {
            entry.users = entry.users.saturating_sub(1);
            if entry.users == 0 {
                namespaces.remove(&self.namespace);
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

    #[tokio::test]
    async fn a_namespace_gets_half_the_slots_and_its_next_reconcile_takes_one_given_back() {
        use std::time::Duration;
        use tokio::time::timeout;
        let soon = Duration::from_millis(50);
        let fairness = Fairness::new(4);
        let a1 = fairness.enter("a").await;
        let a2 = fairness.enter("a").await;
        let a3 = fairness.enter("a");
        tokio::pin!(a3);
        assert!(
            timeout(soon, &mut a3).await.is_err(),
            "a third place for one namespace"
        );
        // Another namespace still gets in.
        let b = timeout(soon, fairness.enter("b")).await.unwrap();
        // A fourth of a's waits behind the third: first come, first served.
        let mut a4 = Box::pin(fairness.enter("a"));
        assert!(timeout(soon, &mut a4).await.is_err());
        drop(a1);
        let a3 = timeout(soon, a3).await.unwrap();
        assert!(
            timeout(soon, &mut a4).await.is_err(),
            "one place given back, one taken"
        );
        // A reconcile that stops waiting (its future dropped) gives up its turn and counts no more.
        drop(a4);
        assert_eq!(fairness.lock()["a"].users, 2);
        drop((a2, a3, b));
        assert!(fairness.lock().is_empty());
        // One reconcile at a time: still one for each namespace.
        let single = Fairness::new(1);
        let _held = single.enter("a").await;
        assert!(timeout(soon, single.enter("a")).await.is_err());
        assert!(timeout(soon, single.enter("b")).await.is_ok());
    }

    #[tokio::test]
    async fn a_reconcile_waiting_on_a_provider_gives_its_work_slot_to_another() {
        use std::time::Duration;
        use tokio::time::timeout;
        let fairness = Fairness::new(2);
        let a = fairness.enter("a").await.work().await;
        let b = fairness.enter("b").await.work().await;
        let c = fairness.enter("c").await.work();
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
        assert!(fairness.lock().is_empty());
    }
}
