//! The status tree of a load balancer (`GET .../loadbalancers/{id}/status`): the one Octavia request
//! of a steady-state reconcile, read by `ensure` and cached for `converge_members` of the same
//! reconcile; forgotten before every write to the load balancer.

use std::time::{Duration, Instant};

use super::OctaviaProvider;
use super::api::{Request, Session};
use super::documents::{Tree, TreeDocument};
use super::stop::Stop;

/// How long the status tree read by `ensure` serves `converge_members` of the same reconcile.
const TREE_FRESH: Duration = Duration::from_secs(5);

impl OctaviaProvider {
    pub(super) fn forget_tree(&self, id: &str) {
        if let Ok(mut trees) = self.trees.lock() {
            trees.remove(id);
        }
    }

    /// The status tree of load balancer `id` (`None`: it does not exist), from the cache when
    /// `fresh` allows.
    pub(super) async fn tree(
        &self,
        session: &Session,
        id: &str,
        fresh: bool,
    ) -> Result<Option<Tree>, Stop> {
        if fresh
            && let Ok(trees) = self.trees.lock()
            && let Some((at, tree)) = trees.get(id)
            && at.elapsed() < TREE_FRESH
        {
            return Ok(Some(tree.clone()));
        }
        let Some(body) = session
            .require_or_gone(
                self.observer(),
                "loadbalancer.status",
                Request::get(format!("lbaas/loadbalancers/{id}/status")),
            )
            .await?
        else {
            self.forget_tree(id);
            return Ok(None);
        };
        let tree = body
            .decode::<TreeDocument>("loadbalancer.status")?
            .statuses
            .loadbalancer;
        if let Ok(mut trees) = self.trees.lock() {
            let now = Instant::now();
            let value = (now, tree.clone());
            crate::bounded::insert(
                &mut trees,
                id.to_string(),
                value,
                super::MAX_CACHED,
                TREE_FRESH,
                now,
                |(at, _)| *at,
            );
        }
        Ok(Some(tree))
    }
}
