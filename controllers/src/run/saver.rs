//! `--inmemory-state`: the in-memory cloud saved to its file, so that a restarted `capi-lb run` with
//! the in-memory provider finds its load balancers again.

use std::time::Duration;

use capi_lb_providers::inmemory::InMemoryCloud;

/// Saves the in-memory cloud to its file within a second of each change, and at the end.
pub(super) struct CloudSaver {
    task: tokio::task::JoinHandle<()>,
    cloud: InMemoryCloud,
    path: std::path::PathBuf,
}

impl CloudSaver {
    pub(super) fn start(cloud: InMemoryCloud, path: std::path::PathBuf) -> Self {
        let (watched, file) = (cloud.clone(), path.clone());
        let task = tokio::spawn(async move {
            // A fingerprint rather than a copy of what was saved: the cloud of 1,000 load
            // balancers is about 1 MB of JSON.
            let mut saved = watched.fingerprint();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let now = watched.fingerprint();
                if now != saved {
                    match watched.save(&file) {
                        Ok(()) => saved = now,
                        Err(e) => {
                            tracing::warn!(path = %file.display(), error = %e, "cannot save the in-memory cloud")
                        }
                    }
                }
            }
        });
        Self { task, cloud, path }
    }

    pub(super) async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        if let Err(e) = self.cloud.save(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot save the in-memory cloud");
        }
    }
}
