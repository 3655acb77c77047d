//! The real Octavia API and Keystone for the Octavia provider's tests (tests/octavia/harness.sh):
//! started on first use when not already running, and a small client for assertions made from the
//! outside (listing by tag, member weights, a foreign load balancer, stopping the API).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::NS;

/// What `harness.sh start` wrote.
#[derive(Clone, Debug)]
pub struct Harness {
    /// The `env` file's variables.
    pub env: BTreeMap<String, String>,
    /// The `clouds.yaml` (clouds `harness` and `harness-password`).
    pub clouds_yaml: String,
    /// The state folder.
    pub state: PathBuf,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn state_dir() -> PathBuf {
    std::env::var_os("CAPI_LB_OCTAVIA_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/capi-lb-octavia"))
}

fn script(action: &str) -> Result<(), String> {
    let status = Command::new(repo().join("tests/octavia/harness.sh"))
        .arg(action)
        .status()
        .map_err(|e| format!("running tests/octavia/harness.sh {action}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "tests/octavia/harness.sh {action} failed: {status}"
        ))
    }
}

/// Every request of the tests to Keystone, Octavia and the Neutron simulator is bounded, so a
/// stuck API fails the test that waits on it, naming the request, instead of hanging it (a CI run
/// of 2026-11-27 ran out of time in an Octavia test).
const CURL_LIMITS: [&str; 4] = ["--connect-timeout", "5", "--max-time", "60"];

/// Panic, naming the request and the logs, when curl gave up waiting for the answer.
fn unanswered(out: &std::process::Output, method: &str, url: &str) {
    // curl's exit code 28: "Operation timeout".
    assert!(
        out.status.code() != Some(28),
        "{method} {url}: no answer within {} s (the harness's logs are in {})",
        CURL_LIMITS[3],
        state_dir().display()
    );
}

fn keystone_up() -> bool {
    Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-m",
            "3",
            "http://127.0.0.1:5000/v3",
        ])
        .status()
        .is_ok_and(|s| s.success())
}

fn api_up() -> bool {
    Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-m", "3", "http://127.0.0.1:9876/"])
        .status()
        .is_ok_and(|s| s.success())
}

/// The Octavia API the tests of a binary share. The fault tests stop it and run the project's quota
/// out, so they hold it alone ([`exclusive_api`]); every other test that uses it holds it shared
/// ([`shared_api`]) for as long as it runs. The fault tests had a binary of their own until the
/// tests became two binaries; since then they ran beside the others, and on 2026-11-27 a test's
/// reconcile met the API stopped ("Connection refused") and failed.
static API: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The harness ([`harness`]), with the API held shared until the guard is dropped.
pub async fn shared_api() -> (Harness, tokio::sync::RwLockReadGuard<'static, ()>) {
    let guard = API.read().await;
    (harness(), guard)
}

/// The harness ([`harness`]), with the API held by this test alone until the guard is dropped.
pub async fn exclusive_api() -> (Harness, tokio::sync::RwLockWriteGuard<'static, ()>) {
    let guard = API.write().await;
    (harness(), guard)
}

/// The harness, installed and started on first use (idempotent; `.ci/run` starts it beforehand).
/// Panics with the script's failure: these tests need the real API and never pass without it.
pub fn harness() -> Harness {
    static HARNESS: OnceLock<Result<Harness, String>> = OnceLock::new();
    HARNESS
        .get_or_init(|| {
            let state = state_dir();
            if !(state.join("env").exists() && api_up()) {
                script("install")?;
                script("start")?;
            }
            let env = std::fs::read_to_string(state.join("env"))
                .map_err(|e| format!("{}: {e}", state.join("env").display()))?
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let clouds_yaml = std::fs::read_to_string(state.join("clouds.yaml"))
                .map_err(|e| format!("{}: {e}", state.join("clouds.yaml").display()))?;
            Ok(Harness {
                env,
                clouds_yaml,
                state,
            })
        })
        .clone()
        .unwrap_or_else(|e| panic!("the Octavia test harness is not available: {e}"))
}

impl Harness {
    /// A variable of the env file.
    pub fn var(&self, key: &str) -> String {
        self.env
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} missing from the harness env"))
    }

    /// A Secret `name` holding `clouds_yaml` under `clouds.yaml`.
    pub fn secret(name: &str, clouds_yaml: &str) -> Value {
        serde_json::to_value(Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NS.into()),
                ..Default::default()
            },
            data: Some(
                [(
                    "clouds.yaml".to_string(),
                    ByteString(clouds_yaml.as_bytes().to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        })
        .unwrap()
        .as_object()
        .map(|o| {
            let mut o = o.clone();
            o.insert("apiVersion".into(), json!("v1"));
            o.insert("kind".into(), json!("Secret"));
            Value::Object(o)
        })
        .unwrap()
    }

    /// A Keystone token of the test project (application credential).
    pub fn token(&self) -> String {
        self.authenticate(
            json!({"auth": {"identity": {"methods": ["application_credential"],
            "application_credential": {"id": self.var("OS_APPLICATION_CREDENTIAL_ID"),
                                       "secret": self.var("OS_APPLICATION_CREDENTIAL_SECRET")}}}}),
        )
        .0
    }

    /// `POST /v3/auth/tokens` with `auth`: the token and the response body.
    fn authenticate(&self, auth: Value) -> (String, Value) {
        let url = "http://127.0.0.1:5000/v3/auth/tokens";
        let out = Command::new("curl")
            .args(CURL_LIMITS)
            .args([
                "-s",
                "-i",
                "-X",
                "POST",
                url,
                "-H",
                "Content-Type: application/json",
                "-d",
                &auth.to_string(),
            ])
            .output()
            .unwrap();
        unanswered(&out, "POST", url);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let token = text
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("x-subject-token")
                    .then(|| v.trim().to_string())
            })
            .expect("Keystone gave no token");
        let body = text
            .split_once("\r\n\r\n")
            .and_then(|(_, b)| serde_json::from_str(b).ok())
            .unwrap_or(Value::Null);
        (token, body)
    }

    /// A new application credential of the test user: `(user id, credential id, secret, a
    /// clouds.yaml with cloud `own` for it)`.
    pub fn new_application_credential(&self, name: &str) -> (String, String, String, String) {
        let (token, user) = self.password_token();
        let secret = format!("{name}-secret");
        let (code, created) = self.keystone(
            "POST",
            &format!("users/{user}/application_credentials"),
            &token,
            Some(json!({"application_credential": {"name": name, "secret": secret}})),
        );
        assert_eq!(code, 201, "{created}");
        let id = created["application_credential"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let clouds = format!(
            "clouds:\n  own:\n    auth_type: v3applicationcredential\n    auth:\n      auth_url: http://127.0.0.1:5000/v3\n      application_credential_id: {id}\n      application_credential_secret: {secret}\n    region_name: RegionOne\n"
        );
        (user, id, secret, clouds)
    }

    /// Delete (revoke) an application credential; its tokens stop working.
    pub fn revoke_application_credential(&self, user: &str, id: &str) {
        let (token, _) = self.password_token();
        let (code, body) = self.keystone(
            "DELETE",
            &format!("users/{user}/application_credentials/{id}"),
            &token,
            None,
        );
        assert_eq!(code, 204, "{body}");
    }

    /// A project-scoped token of the test user by password, and the user's ID.
    fn password_token(&self) -> (String, String) {
        let (token, body) =
            self.authenticate(json!({"auth": {"identity": {"methods": ["password"],
            "password": {"user": {"name": self.var("OS_USERNAME"), "domain": {"id": "default"},
                                  "password": self.var("OS_PASSWORD")}}},
            "scope": {"project": {"id": self.var("OS_PROJECT_ID")}}}}));
        let user = body["token"]["user"]["id"].as_str().unwrap().to_string();
        (token, user)
    }

    fn keystone(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
        self.request_with(
            method,
            &format!("http://127.0.0.1:5000/v3/{path}"),
            token,
            body,
        )
    }

    /// An Octavia request from the outside: `(status, body)`.
    pub fn octavia(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.request(method, &format!("http://127.0.0.1:9876/v2/{path}"), body)
    }

    /// A request to the Neutron floating IP simulator: `(status, body)`.
    pub fn neutron(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.request(method, &format!("http://127.0.0.1:9696/v2.0/{path}"), body)
    }

    fn request(&self, method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
        self.request_with(method, url, &self.token(), body)
    }

    fn request_with(
        &self,
        method: &str,
        url: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut args = vec![
            "-s".to_string(),
            "-w".into(),
            "\n%{http_code}".into(),
            "-X".into(),
            method.into(),
            url.to_string(),
            "-H".into(),
            format!("X-Auth-Token: {token}"),
            "-H".into(),
            "Content-Type: application/json".into(),
        ];
        if let Some(body) = body {
            args.push("-d".into());
            args.push(body.to_string());
        }
        let out = Command::new("curl")
            .args(CURL_LIMITS)
            .args(&args)
            .output()
            .unwrap();
        unanswered(&out, method, url);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (
            code.trim().parse().unwrap_or(0),
            serde_json::from_str(body).unwrap_or(Value::Null),
        )
    }

    /// Load balancers carrying `tag` (not DELETED).
    pub fn lbs_tagged(&self, tag: &str) -> Vec<Value> {
        let (status, body) = self.octavia(
            "GET",
            &format!("lbaas/loadbalancers?tags={}", urlencode(tag)),
            None,
        );
        assert_eq!(status, 200, "{body}");
        body["loadbalancers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|lb| lb["provisioning_status"] != "DELETED")
            .collect()
    }

    /// The members of a pool.
    pub fn members(&self, pool: &str) -> Vec<Value> {
        let (status, body) = self.octavia("GET", &format!("lbaas/pools/{pool}/members"), None);
        assert_eq!(status, 200, "{body}");
        body["members"].as_array().cloned().unwrap_or_default()
    }

    /// Wait until load balancer `id` is ACTIVE (or gone).
    pub fn wait_active(&self, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let (status, body) = self.octavia("GET", &format!("lbaas/loadbalancers/{id}"), None);
            if status == 404 || body["loadbalancer"]["provisioning_status"] == "ACTIVE" {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("load balancer {id} did not become ACTIVE");
    }

    /// Put load balancer `id` into provisioning status `state` in Octavia's database: how a
    /// failed provisioning (ERROR) looks to the API, without a cloud to fail.
    pub fn set_provisioning_status(&self, id: &str, state: &str) {
        let status = Command::new("mysql")
            .args([
                "-uroot",
                "octavia",
                "-e",
                &format!("UPDATE load_balancer SET provisioning_status='{state}' WHERE id='{id}'"),
            ])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Stop the Octavia API server (Keystone and the worker keep running).
    pub fn stop_api(&self) {
        let pid = std::fs::read_to_string(self.state.join("octavia-api.pid")).unwrap();
        Command::new("kill").arg(pid.trim()).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while api_up() {
            assert!(Instant::now() < deadline, "octavia-api did not stop");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stop Keystone (the Octavia API keeps running, and fails to validate tokens meanwhile).
    pub fn stop_keystone(&self) {
        let pid = std::fs::read_to_string(self.state.join("keystone.pid")).unwrap();
        Command::new("kill").arg(pid.trim()).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while keystone_up() {
            assert!(Instant::now() < deadline, "Keystone did not stop");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Start what is stopped again (the Octavia API, Keystone) and wait until the API answers.
    pub fn start_api(&self) {
        script("start").unwrap();
        assert!(api_up());
    }
}

/// A LoadBalancer `name` whose infrastructure is the OctaviaLoadBalancer of the same name.
pub fn octavia_lb(name: &str) -> crate::LbFixture {
    crate::lb(name).spec(
        "infrastructureRef",
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OctaviaLoadBalancer", "name": name}),
    )
}

/// An OctaviaLoadBalancer `name` on the harness (Secret `openstack`, cloud `harness`, the harness's
/// VIP subnet), with `extra` merged into its spec.
pub fn olb(name: &str, h: &Harness, extra: Value) -> Value {
    let mut spec = json!({
        "credentials": {"secretName": "openstack", "cloud": "harness"},
        "vip": {"subnetID": h.var("OCTAVIA_SUBNET_ID")},
    });
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra) {
        spec.extend(extra);
    }
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "OctaviaLoadBalancer",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

/// The Secret, the LoadBalancer and its OctaviaLoadBalancer `name` (spec `extra`), on the harness.
pub fn octavia_objects(h: &Harness, name: &str, extra: Value) -> Vec<Value> {
    vec![
        Harness::secret("openstack", &h.clouds_yaml),
        octavia_lb(name).build(),
        olb(name, h, extra),
    ]
}

/// Percent-encode a query value.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Reconcile LoadBalancer `namespace/name` in real time (Octavia's timing is real; the world's clock
/// advances as much) until `done` holds for it; panics after a minute, showing its status.
pub async fn reconcile_until(
    world: &capi_lb::sim::world::World,
    namespace: &str,
    name: &str,
    what: &str,
    done: impl Fn(&capi_lb_api::LoadBalancer) -> bool,
) -> capi_lb_api::LoadBalancer {
    let api = kube::Api::<capi_lb_api::LoadBalancer>::namespaced(world.client(), namespace);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        world.reconcile(namespace, name).await.unwrap();
        let lb = api.get(name).await.unwrap();
        if done(&lb) {
            return lb;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: {what}: not reached; status {:#?}",
            lb.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        world.clock.advance(Duration::from_millis(250));
    }
}

/// Delete LoadBalancer `namespace/name` and reconcile until it is gone (its finalizer released).
pub async fn delete_until_gone(world: &capi_lb::sim::world::World, namespace: &str, name: &str) {
    let api = kube::Api::<capi_lb_api::LoadBalancer>::namespaced(world.client(), namespace);
    api.delete(name, &Default::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get_opt(name).await.unwrap().is_some() {
        world.reconcile(namespace, name).await.unwrap();
        assert!(Instant::now() < deadline, "{name}: deletion did not finish");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The addresses in the EndpointSlices of the `-ext` Service `service`.
pub async fn ext_addresses(world: &capi_lb::sim::world::World, service: &str) -> Vec<String> {
    crate::slices(world, service)
        .await
        .into_values()
        .flatten()
        .collect()
}
