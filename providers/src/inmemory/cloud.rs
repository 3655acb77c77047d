//! The in-memory cloud: load balancers with ownership tags, addresses, listeners and members with
//! states, held in process memory and shared by clones (a test restarts the controller and keeps
//! the cloud), saved to and loaded from a file (`capi-lb run --inmemory-state`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use capi_lb_api::loadbalancer::LoadBalancerAddress;
use jiff::Timestamp;

use crate::clock::SharedClock;
use crate::provider::{Listener, MemberState};

/// A load balancer in the in-memory cloud.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CloudLoadBalancer {
    /// Provider ID, `imlb-0001`.
    pub id: String,
    /// Ownership tags.
    pub tags: BTreeMap<String, String>,
    /// Allocated addresses (IPs first, then the hostname).
    pub addresses: Vec<LoadBalancerAddress>,
    /// Configured listeners.
    pub listeners: Vec<Listener>,
    /// Source CIDRs allowed to connect; empty allows every source.
    pub source_ranges: Vec<String>,
    /// Members by target name.
    pub members: BTreeMap<String, CloudMember>,
    /// When provisioning completes.
    pub ready_at: Timestamp,
    /// Provisioning delay of this load balancer.
    pub delay: Duration,
    /// When deletion was requested.
    pub deleting_since: Option<Timestamp>,
}

/// A member in the in-memory cloud.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CloudMember {
    /// Address traffic goes to.
    pub address: String,
    /// State.
    pub state: MemberState,
    /// When an `Adding` member becomes `Active`.
    pub active_at: Timestamp,
}

#[derive(Debug, Default)]
pub(super) struct CloudState {
    pub(super) next_id: u64,
    pub(super) load_balancers: BTreeMap<String, CloudLoadBalancer>,
    /// Injected transient failures already returned, by (infrastructure object UID, failure index).
    pub(super) failures_returned: HashMap<(String, usize), u32>,
    /// Calls made to the cloud (every provider method counts one).
    pub(super) calls: u64,
}

/// What [`InMemoryCloud::save`] keeps (calls and injected failures are not kept).
#[derive(serde::Deserialize)]
struct Saved {
    next_id: u64,
    load_balancers: BTreeMap<String, CloudLoadBalancer>,
}

#[derive(serde::Serialize)]
struct SavedRef<'a> {
    next_id: u64,
    load_balancers: &'a BTreeMap<String, CloudLoadBalancer>,
}

impl<'a> SavedRef<'a> {
    fn of(state: &'a CloudState) -> Self {
        Self {
            next_id: state.next_id,
            load_balancers: &state.load_balancers,
        }
    }
}

/// The in-memory cloud: shared state behind every [`InMemoryProvider`] built from it.
#[derive(Clone, Debug)]
pub struct InMemoryCloud {
    state: Arc<Mutex<CloudState>>,
    pub(super) clock: SharedClock,
}

impl InMemoryCloud {
    /// An empty cloud using `clock` for delays.
    pub fn new(clock: SharedClock) -> Self {
        Self {
            state: Arc::new(Mutex::new(CloudState::default())),
            clock,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, CloudState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every load balancer in the cloud.
    pub fn load_balancers(&self) -> Vec<CloudLoadBalancer> {
        self.lock().load_balancers.values().cloned().collect()
    }

    /// Number of provider calls made so far.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// The cloud saved in `path` by [`InMemoryCloud::save`], or an empty one when there is no
    /// such file.
    pub fn load(clock: SharedClock, path: &std::path::Path) -> std::io::Result<Self> {
        let cloud = Self::new(clock);
        match std::fs::read(path) {
            Ok(bytes) => {
                let saved: Saved = serde_json::from_slice(&bytes).map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: {e}", path.display()),
                    )
                })?;
                let mut state = cloud.lock();
                state.next_id = saved.next_id;
                state.load_balancers = saved.load_balancers;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(cloud)
    }

    /// A fingerprint of what [`InMemoryCloud::save`] writes: it changes when that does. Computed
    /// by serialising into a hasher, so no copy of the cloud is made.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::Hasher;
        struct Hashing(std::collections::hash_map::DefaultHasher);
        impl std::io::Write for Hashing {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.write(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut hashing = Hashing(std::collections::hash_map::DefaultHasher::new());
        let state = self.lock();
        // Plain data with string keys into a writer that cannot fail: serialising cannot fail.
        let _ = serde_json::to_writer(&mut hashing, &SavedRef::of(&state));
        hashing.0.finish()
    }

    /// Write the cloud's load balancers as JSON to `path` atomically (a temporary file renamed over
    /// it), streamed from the state rather than built in memory first.
    pub fn save(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write;
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(".tmp");
        let mut file = std::io::BufWriter::new(std::fs::File::create(&temporary)?);
        {
            let state = self.lock();
            serde_json::to_writer(&mut file, &SavedRef::of(&state))?;
        }
        file.flush()?;
        drop(file);
        std::fs::rename(&temporary, path)
    }

    /// Put a load balancer into the cloud as if someone else created it (tests: a foreign load
    /// balancer with the same name must never be adopted). Returns its ID.
    pub fn insert_foreign(&self, tags: BTreeMap<String, String>, address: &str) -> String {
        let now = self.clock.now();
        let mut state = self.lock();
        state.next_id += 1;
        let id = format!("imlb-{:04}", state.next_id);
        state.load_balancers.insert(
            id.clone(),
            CloudLoadBalancer {
                id: id.clone(),
                tags,
                addresses: vec![LoadBalancerAddress::ip(address)],
                listeners: Vec::new(),
                source_ranges: Vec::new(),
                members: BTreeMap::new(),
                ready_at: now,
                delay: Duration::ZERO,
                deleting_since: None,
            },
        );
        id
    }
}

impl InMemoryCloud {
    /// Put an active member into load balancer `id` behind the controller's back (tests: a member
    /// no target claims must be removed). Returns false when there is no such load balancer.
    pub fn insert_member(&self, id: &str, name: &str, address: &str) -> bool {
        let now = self.clock.now();
        let mut state = self.lock();
        let Some(lb) = state.load_balancers.get_mut(id) else {
            return false;
        };
        lb.members.insert(
            name.to_string(),
            CloudMember {
                address: address.to_string(),
                state: MemberState::Active,
                active_at: now,
            },
        );
        true
    }
}
