//! The one scheduler of capi-lb's background work: the probes of `spec.reachability` and
//! `spec.targetHealth` ([`crate::reachability`]) and the looks at workload clusters
//! ([`crate::workload`]). Each is a job of one namespace, and every job
//!
//! - waits for one of its namespace's places ([`Jobs::per_namespace`]: a quarter of the slots),
//!   then one of the shared slots ([`Jobs::slots`]), so a tenant with many slow jobs waits for its
//!   own places and never holds more than its share: the others' jobs run on the rest;
//! - runs for at most its deadline, then is dropped (whatever it waits on is cancelled) and
//!   reported as [`Stopped::Deadline`];
//! - runs inside the panic boundary ([`crate::boundary`]): a panic is [`Stopped::Panicked`] for
//!   that job alone.
//!
//! A namespace's places exist while it has jobs waiting or running, so the map of them is bounded
//! by the jobs there are, not by the namespaces a tenant can name.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::boundary::{Panicked, contain};

/// Jobs running at the same time, over every namespace and kind of job.
pub const SLOTS: usize = 24;

/// Why a job has no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It ran longer than its deadline and was dropped.
    Deadline(Duration),
    /// It panicked (a bug): dropped, its task retried at its next turn.
    Panicked(Panicked),
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Deadline(d) => write!(f, "it did not finish within {} s", d.as_secs()),
            Stopped::Panicked(p) => write!(f, "capi-lb failed inside it ({p})"),
        }
    }
}

/// Told of every panic caught in a job (the metrics).
pub type OnPanic = Arc<dyn Fn(&'static str) + Send + Sync>;

/// The scheduler.
pub struct Jobs {
    slots: Arc<Semaphore>,
    per_namespace: usize,
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
    on_panic: Option<OnPanic>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs")
            .field("slots", &self.slots.available_permits())
            .field("per_namespace", &self.per_namespace)
            .finish_non_exhaustive()
    }
}

impl Jobs {
    /// A scheduler of `slots` jobs at a time, a quarter of them (at least one) for one namespace.
    pub fn new(slots: usize, on_panic: Option<OnPanic>) -> Arc<Self> {
        Arc::new(Self {
            slots: Arc::new(Semaphore::new(slots.max(1))),
            per_namespace: (slots / 4).max(1),
            namespaces: Mutex::new(HashMap::new()),
            on_panic,
        })
    }

    /// The places of one namespace.
    pub fn per_namespace(&self) -> usize {
        self.per_namespace
    }

    /// Namespaces with jobs waiting or running (for tests and the bound above).
    pub fn namespaces(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Semaphore>>> {
        self.namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Run `job` of `task` for `namespace` in the background, within `deadline` once it runs,
    /// and give `done` its result.
    pub fn spawn<T, F, D>(
        self: &Arc<Self>,
        task: &'static str,
        namespace: &str,
        deadline: Duration,
        job: F,
        done: D,
    ) where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
        D: FnOnce(Result<T, Stopped>) + Send + 'static,
    {
        let jobs = self.clone();
        let namespace = namespace.to_string();
        let places = self
            .lock()
            .entry(namespace.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_namespace)))
            .clone();
        tokio::spawn(async move {
            let result = jobs.run(&places, task, deadline, job).await;
            drop(places);
            jobs.release(&namespace);
            done(result);
        });
    }

    async fn run<T, F: Future<Output = T>>(
        &self,
        places: &Arc<Semaphore>,
        task: &'static str,
        deadline: Duration,
        job: F,
    ) -> Result<T, Stopped> {
        // Both semaphores live as long as the scheduler and are never closed.
        let (Ok(_place), Ok(_slot)) = (places.acquire().await, self.slots.acquire().await) else {
            return Err(Stopped::Deadline(Duration::ZERO));
        };
        match tokio::time::timeout(deadline, contain(Box::pin(job))).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(panic)) => {
                tracing::error!(task, %panic, "a background job panicked; it alone failed");
                if let Some(on_panic) = &self.on_panic {
                    on_panic(task);
                }
                Err(Stopped::Panicked(panic))
            }
            Err(_) => Err(Stopped::Deadline(deadline)),
        }
    }

    /// Forget `namespace`'s places once no job of it waits or runs.
    fn release(&self, namespace: &str) {
        let mut namespaces = self.lock();
        if let Some(places) = namespaces.get(namespace)
            && Arc::strong_count(places) == 1
        {
            namespaces.remove(namespace);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::mpsc;

    #[tokio::test(start_paused = true)]
    async fn a_namespace_with_many_slow_jobs_slows_only_itself() {
        let jobs = Jobs::new(8, None);
        assert_eq!(jobs.per_namespace(), 2);
        let (tx, mut rx) = mpsc::unbounded_channel();
        // Ten jobs of a slow tenant that never finish by themselves.
        for i in 0..10 {
            let tx = tx.clone();
            jobs.spawn(
                "probe",
                "slow",
                Duration::from_secs(60),
                async move {
                    std::future::pending::<()>().await;
                    i
                },
                move |r| {
                    let _ = tx.send(("slow", r.is_ok()));
                },
            );
        }
        // Another tenant's job runs at once.
        let tx2 = tx.clone();
        jobs.spawn(
            "probe",
            "fast",
            Duration::from_secs(60),
            async { 1 },
            move |r| {
                let _ = tx2.send(("fast", r.is_ok()));
            },
        );
        let first = tokio::time::timeout(Duration::from_secs(1), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first, ("fast", true));
        // The slow ones end at their deadline, two at a time: 5 rounds of 60 s.
        let started = tokio::time::Instant::now();
        for _ in 0..10 {
            assert_eq!(rx.recv().await.unwrap(), ("slow", false));
        }
        assert_eq!(started.elapsed().as_secs(), 300);
        tokio::task::yield_now().await;
        assert_eq!(
            jobs.namespaces(),
            0,
            "a namespace's places outlived its jobs"
        );
    }

    #[tokio::test]
    async fn a_panicking_job_is_reported_and_counted() {
        let panics = Arc::new(AtomicUsize::new(0));
        let counted = panics.clone();
        let jobs = Jobs::new(
            4,
            Some(Arc::new(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            })),
        );
        let (tx, mut rx) = mpsc::unbounded_channel();
        jobs.spawn(
            "workload",
            "a",
            Duration::from_secs(5),
            async {
                if std::hint::black_box(true) {
                    panic!("boom");
                }
                0
            },
            move |r: Result<i32, Stopped>| {
                let _ = tx.send(r);
            },
        );
        let result = rx.recv().await.unwrap();
        assert!(
            matches!(result, Err(Stopped::Panicked(ref p)) if p.0 == "boom"),
            "{result:?}"
        );
        assert_eq!(panics.load(Ordering::SeqCst), 1);
    }
}
