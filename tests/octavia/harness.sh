#!/usr/bin/env bash
# The real OpenStack Octavia API and Keystone on 127.0.0.1, for the Octavia provider's tests.
#
#   tests/octavia/harness.sh install   # Debian packages + two Python venvs (pinned), idempotent
#   tests/octavia/harness.sh packages  # the Debian packages alone (apt; CI installs them before its
#                                      # other apt users start, then the venvs in the background)
#   tests/octavia/harness.sh start     # MariaDB, RabbitMQ, Keystone (:5000), octavia-api (:9876), octavia-worker,
#                                      # and a Neutron floating IP simulator (:9696, neutron_floatingips.py)
#   tests/octavia/harness.sh stop
#
# Octavia runs with its amphora provider and no-op compute/network/amphora drivers, so load balancers
# go through the real provisioning states (PENDING_CREATE -> ACTIVE, PENDING_UPDATE, 409 while
# pending) without any cloud. `start` writes $STATE/env (OS_AUTH_URL, application credential,
# project, a subnet ID) and $STATE/clouds.yaml for the tests, and makes availability zones az1 and az2. Facts behind the configuration:
# ../shared/FACTS.md section 7.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
PREFIX="${CAPI_LB_OCTAVIA_PREFIX:-/opt/capi-lb-octavia}"
STATE="${CAPI_LB_OCTAVIA_STATE:-/tmp/capi-lb-octavia}"
KS="$PREFIX/keystone/bin"
OC="$PREFIX/octavia/bin"

log() { printf '[octavia-harness] %s\n' "$*" >&2; }

packages() {
  if ! command -v mariadbd >/dev/null 2>&1 || ! command -v rabbitmq-server >/dev/null 2>&1 \
     || ! command -v curl >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    log "installing mariadb-server, rabbitmq-server, python3-venv"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      mariadb-server mariadb-client rabbitmq-server openssl curl python3-venv >/dev/null
  fi
}

install() {
  packages
  if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    log "Octavia 19 needs Python 3.11 or newer; $(python3 --version) found"
    return 1
  fi
  for venv in keystone octavia; do
    if [ ! -x "$PREFIX/$venv/bin/python" ] || ! "$PREFIX/$venv/bin/pip" freeze 2>/dev/null | grep -qi "^$venv=="; then
      log "installing $venv into $PREFIX/$venv"
      python3 -m venv "$PREFIX/$venv"
      "$PREFIX/$venv/bin/pip" install -q -r "$HERE/$venv-requirements.txt"
    fi
  done
}

wait_for() { # url seconds
  local url="$1" deadline=$((SECONDS + $2))
  until curl -fs -o /dev/null "$url" 2>/dev/null || [ "$(curl -s -o /dev/null -w '%{http_code}' "$url")" = 401 ]; do
    if [ $SECONDS -ge $deadline ]; then
      log "timed out waiting for $url"
      return 1
    fi
    sleep 0.5
  done
}

start_mariadb() {
  if mysqladmin ping >/dev/null 2>&1; then return; fi
  log "starting MariaDB"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  (mysqld_safe --bind-address=127.0.0.1 >"$STATE/mariadb.log" 2>&1 &)
  for _ in $(seq 1 60); do mysqladmin ping >/dev/null 2>&1 && break; sleep 0.5; done
  mysql -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS keystone;
CREATE DATABASE IF NOT EXISTS octavia;
CREATE USER IF NOT EXISTS 'keystone'@'127.0.0.1' IDENTIFIED BY 'keystone';
CREATE USER IF NOT EXISTS 'octavia'@'127.0.0.1' IDENTIFIED BY 'octavia';
GRANT ALL PRIVILEGES ON keystone.* TO 'keystone'@'127.0.0.1';
GRANT ALL PRIVILEGES ON octavia.* TO 'octavia'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
}

start_rabbitmq() {
  if rabbitmqctl status >/dev/null 2>&1; then return; fi
  log "starting RabbitMQ"
  (RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 rabbitmq-server >"$STATE/rabbitmq.log" 2>&1 &)
  for _ in $(seq 1 120); do rabbitmqctl status >/dev/null 2>&1 && return; sleep 1; done
  log "RabbitMQ did not start"; return 1
}

start_keystone() {
  mkdir -p "$STATE/keystone/fernet-keys" "$STATE/keystone/credential-keys"
  cat >"$STATE/keystone/keystone.conf" <<EOF
[database]
connection = mysql+pymysql://keystone:keystone@127.0.0.1/keystone
[token]
provider = fernet
expiration = 3600
[fernet_tokens]
key_repository = $STATE/keystone/fernet-keys
[credential]
key_repository = $STATE/keystone/credential-keys
EOF
  # gunicorn's own arguments must not reach Keystone's option parser.
  cat >"$STATE/keystone/keystone_wsgi.py" <<EOF
import os, sys
sys.argv = sys.argv[:1]
os.environ.setdefault("OS_KEYSTONE_CONFIG_DIR", "$STATE/keystone")
os.environ.setdefault("OS_KEYSTONE_CONFIG_FILES", "keystone.conf")
from keystone.server.wsgi import initialize_public_application
application = initialize_public_application()
EOF
  local conf=(--config-file "$STATE/keystone/keystone.conf")
  "$KS/keystone-manage" "${conf[@]}" db_sync
  "$KS/keystone-manage" "${conf[@]}" fernet_setup --keystone-user root --keystone-group root
  "$KS/keystone-manage" "${conf[@]}" credential_setup --keystone-user root --keystone-group root
  "$KS/keystone-manage" "${conf[@]}" bootstrap --bootstrap-password admin \
    --bootstrap-admin-url http://127.0.0.1:5000/v3/ --bootstrap-internal-url http://127.0.0.1:5000/v3/ \
    --bootstrap-public-url http://127.0.0.1:5000/v3/ --bootstrap-region-id RegionOne >/dev/null
  log "starting Keystone on 127.0.0.1:5000"
  # exec: no shell stays behind holding the caller's stdout (a test's output pipe waited on it).
  (cd "$STATE/keystone" && exec "$KS/gunicorn" --bind 127.0.0.1:5000 --workers 2 \
     --control-socket "$STATE/keystone/gunicorn.ctl" --pid "$STATE/keystone.pid" \
     keystone_wsgi:application >"$STATE/keystone.log" 2>&1 &)
  wait_for http://127.0.0.1:5000/v3 60
}

# keystone_api METHOD PATH TOKEN [JSON] -> body on stdout
keystone_api() {
  curl -fsS -X "$1" "http://127.0.0.1:5000/v3$2" -H "X-Auth-Token: $3" \
    -H 'Content-Type: application/json' ${4:+-d "$4"}
}

admin_token() {
  curl -fsS -i -X POST http://127.0.0.1:5000/v3/auth/tokens -H 'Content-Type: application/json' -d '{
    "auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "admin",
      "domain": {"id": "default"}, "password": "admin"}}},
     "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}}' \
    | awk -F': ' 'tolower($1)=="x-subject-token" {print $2}' | tr -d '\r'
}

json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# catalog_entry TOKEN TYPE NAME URL: a service with public/internal/admin endpoints, once.
catalog_entry() {
  local service
  if ! keystone_api GET "/services?type=$2" "$1" | grep -q "\"$2\""; then
    service="$(keystone_api POST /services "$1" "{\"service\": {\"type\": \"$2\", \"name\": \"$3\"}}" | json "['service']['id']")"
    for iface in public internal admin; do
      keystone_api POST /endpoints "$1" "{\"endpoint\": {\"service_id\": \"$service\", \"interface\": \"$iface\", \"region_id\": \"RegionOne\", \"url\": \"$4\"}}" >/dev/null
    done
  fi
}

bootstrap_identity() {
  local token service project user role secret cred
  token="$(admin_token)"
  catalog_entry "$token" load-balancer octavia http://127.0.0.1:9876
  catalog_entry "$token" network neutron-floatingips-simulator http://127.0.0.1:9696
  project="$(keystone_api GET "/projects?name=capi-lb" "$token" | json "['projects'][0]['id']" 2>/dev/null || true)"
  if [ -z "$project" ]; then
    project="$(keystone_api POST /projects "$token" '{"project": {"name": "capi-lb", "domain_id": "default"}}' | json "['project']['id']")"
  fi
  user="$(keystone_api GET "/users?name=capi-lb" "$token" | json "['users'][0]['id']" 2>/dev/null || true)"
  if [ -z "$user" ]; then
    user="$(keystone_api POST /users "$token" "{\"user\": {\"name\": \"capi-lb\", \"domain_id\": \"default\", \"password\": \"capi-lb-password\", \"default_project_id\": \"$project\"}}" | json "['user']['id']")"
  fi
  # Octavia's default policies: admin on the test project keeps the harness independent of them.
  role="$(keystone_api GET "/roles?name=admin" "$token" | json "['roles'][0]['id']")"
  keystone_api PUT "/projects/$project/users/$user/roles/$role" "$token" >/dev/null || true
  # An application credential of the test user, scoped to the project.
  local user_token
  user_token="$(curl -fsS -i -X POST http://127.0.0.1:5000/v3/auth/tokens -H 'Content-Type: application/json' -d "{
    \"auth\": {\"identity\": {\"methods\": [\"password\"], \"password\": {\"user\": {\"id\": \"$user\", \"password\": \"capi-lb-password\"}}},
     \"scope\": {\"project\": {\"id\": \"$project\"}}}}" | awk -F': ' 'tolower($1)=="x-subject-token" {print $2}' | tr -d '\r')"
  secret="capi-lb-test-secret-$RANDOM$RANDOM"
  cred="$(keystone_api POST "/users/$user/application_credentials" "$user_token" \
    "{\"application_credential\": {\"name\": \"capi-lb-tests-$RANDOM$RANDOM\", \"secret\": \"$secret\"}}" \
    | json "['application_credential']['id']")"
  cat >"$STATE/env" <<EOF
OS_AUTH_URL=http://127.0.0.1:5000/v3
OS_APPLICATION_CREDENTIAL_ID=$cred
OS_APPLICATION_CREDENTIAL_SECRET=$secret
OS_PROJECT_ID=$project
OS_USERNAME=capi-lb
OS_PASSWORD=capi-lb-password
OS_REGION_NAME=RegionOne
OCTAVIA_URL=http://127.0.0.1:9876
OCTAVIA_SUBNET_ID=8c1b7a84-6b36-4d1b-9f3f-0d5e8a4f2b11
NEUTRON_URL=http://127.0.0.1:9696
FIP_NETWORK_ID=$FIP_NETWORK
FIP_CIDR=$FIP_CIDR
EOF
  cat >"$STATE/clouds.yaml" <<EOF
clouds:
  harness:
    auth_type: v3applicationcredential
    auth:
      auth_url: http://127.0.0.1:5000/v3
      application_credential_id: $cred
      application_credential_secret: $secret
    region_name: RegionOne
  harness-password:
    auth_type: password
    auth:
      auth_url: http://127.0.0.1:5000/v3
      username: capi-lb
      password: capi-lb-password
      user_domain_id: default
      project_id: $project
    region_name: RegionOne
EOF
}

# alive PIDFILE PROGRAM: the pid file names a running PROGRAM. A pid alone is not enough: a state
# folder kept across a reboot names pids that other processes now have (stop must not kill those).
alive() { [ -s "$1" ] && tr '\0' ' ' 2>/dev/null <"/proc/$(cat "$1")/cmdline" | grep -q -- "$2"; }

start_octavia() {
  mkdir -p "$STATE/octavia/lock" "$STATE/octavia/certs"
  if [ ! -f "$STATE/octavia/certs/ca.pem" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=capi-lb-octavia-harness" \
      -keyout "$STATE/octavia/certs/ca.key" -out "$STATE/octavia/certs/ca.pem" 2>/dev/null
  fi
  cat >"$STATE/octavia/octavia.conf" <<EOF
[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:5672/
[api_settings]
bind_host = 127.0.0.1
bind_port = 9876
auth_strategy = keystone
enabled_provider_drivers = amphora:The Octavia Amphora driver.
default_provider_driver = amphora
[database]
connection = mysql+pymysql://octavia:octavia@127.0.0.1/octavia
[keystone_authtoken]
www_authenticate_uri = http://127.0.0.1:5000
auth_url = http://127.0.0.1:5000
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = admin
username = admin
password = admin
# Validate every token with Keystone (no 5-minute cache), so a revoked credential is refused at once.
token_cache_time = -1
[controller_worker]
amphora_driver = amphora_noop_driver
compute_driver = compute_noop_driver
network_driver = network_noop_driver
volume_driver = volume_noop_driver
image_driver = image_noop_driver
loadbalancer_topology = SINGLE
client_ca = $STATE/octavia/certs/ca.pem
[certificates]
ca_certificate = $STATE/octavia/certs/ca.pem
ca_private_key = $STATE/octavia/certs/ca.key
cert_generator = local_cert_generator
cert_manager = noop_cert_manager
[task_flow]
jobboard_enabled = false
[driver_agent]
status_socket_path = $STATE/octavia/status.sock
stats_socket_path = $STATE/octavia/stats.sock
get_socket_path = $STATE/octavia/get.sock
[oslo_concurrency]
lock_path = $STATE/octavia/lock
EOF
  "$OC/octavia-db-manage" --config-file "$STATE/octavia/octavia.conf" upgrade head >"$STATE/octavia-db.log" 2>&1
  if ! alive "$STATE/octavia-worker.pid" octavia-worker; then
    log "starting octavia-worker"
    ("$OC/octavia-worker" --config-file "$STATE/octavia/octavia.conf" >>"$STATE/octavia-worker.log" 2>&1 &
     echo $! >"$STATE/octavia-worker.pid")
  fi
  # Octavia's WSGI application in gunicorn (pinned in octavia-requirements.txt), as Keystone runs
  # above and as deployments run it (uwsgi or Apache), not Octavia's `octavia-api` command, which
  # serves with wsgiref one request at a time: the e2e tests run four at a time with a controller
  # each, and one request stuck there would hold up every test after it (the likeliest reading of
  # a CI run of 2026-11-27 that ran out of time in an Octavia test). Three workers; one stuck for
  # 120 s is restarted. gunicorn's own arguments must not reach Octavia's option parser, and
  # `--name octavia-api` is how `stop` knows the process.
  cat >"$STATE/octavia/octavia_api_wsgi.py" <<EOF
import sys
sys.argv = ["octavia-api", "--config-file", "$STATE/octavia/octavia.conf"]
from octavia.api import app
application = app.setup_app(argv=sys.argv)
EOF
  log "starting octavia-api on 127.0.0.1:9876"
  (cd "$STATE/octavia" && exec "$OC/gunicorn" --name octavia-api --bind 127.0.0.1:9876 --workers 3 \
     --timeout 120 --pid "$STATE/octavia-api.pid" --access-logfile "$STATE/octavia-api-access.log" \
     octavia_api_wsgi:application >>"$STATE/octavia-api.log" 2>&1 &)
  wait_for http://127.0.0.1:9876/ 90
}

FIP_NETWORK=4a6e2c8e-5d3b-4f0e-9a51-7c2d1e0f3b99
FIP_CIDR=203.0.113.0/24

# Neutron's floating IP API, simulated (Octavia's no-op network driver makes VIP ports no real
# Neutron knows): tests/octavia/neutron_floatingips.py.
start_neutron_sim() {
  if ! curl -fs -o /dev/null http://127.0.0.1:9696/; then
    log "starting the Neutron floating IP simulator on 127.0.0.1:9696"
    (python3 "$HERE/neutron_floatingips.py" 9696 >>"$STATE/neutron-sim.log" 2>&1 &
     echo $! >"$STATE/neutron-sim.pid")
    wait_for http://127.0.0.1:9696/ 20
  fi
  curl -fsS -X POST http://127.0.0.1:9696/_sim/networks -H 'Content-Type: application/json' \
    -d "{\"id\": \"$FIP_NETWORK\", \"cidr\": \"$FIP_CIDR\"}" >/dev/null
}

# Two availability zones, az1 and az2, as an operator makes them (an availability zone profile of
# the amphora provider each, with its compute zone), once: the zoned provider's tests put one
# Octavia load balancer in each. Created with the admin token; Octavia checks a load balancer's
# availability_zone against them.
availability_zones() {
  local token zone profile
  token="$(admin_token)"
  for zone in az1 az2; do
    if curl -fsS "http://127.0.0.1:9876/v2/lbaas/availabilityzones/$zone" -H "X-Auth-Token: $token" >/dev/null 2>&1; then
      continue
    fi
    profile="$(curl -fsS -X POST http://127.0.0.1:9876/v2/lbaas/availabilityzoneprofiles -H "X-Auth-Token: $token" \
      -H 'Content-Type: application/json' -d "{\"availability_zone_profile\": {\"name\": \"$zone\",
      \"provider_name\": \"amphora\", \"availability_zone_data\": \"{\\\"compute_zone\\\": \\\"$zone\\\"}\"}}" \
      | json "['availability_zone_profile']['id']")"
    curl -fsS -X POST http://127.0.0.1:9876/v2/lbaas/availabilityzones -H "X-Auth-Token: $token" \
      -H 'Content-Type: application/json' \
      -d "{\"availability_zone\": {\"name\": \"$zone\", \"availability_zone_profile_id\": \"$profile\"}}" >/dev/null
    log "availability zone $zone created"
  done
}

start() {
  mkdir -p "$STATE"
  start_mariadb
  start_rabbitmq
  if ! curl -fs -o /dev/null http://127.0.0.1:5000/v3; then start_keystone; fi
  bootstrap_identity
  if ! curl -s -o /dev/null http://127.0.0.1:9876/; then start_octavia; fi
  availability_zones
  start_neutron_sim
  log "ready: $STATE/env"
}

stop() {
  local component
  for component in octavia-api:octavia-api octavia-worker:octavia-worker keystone:gunicorn neutron-sim:neutron_floatingips; do
    if alive "$STATE/${component%%:*}.pid" "${component#*:}"; then kill "$(cat "$STATE/${component%%:*}.pid")" 2>/dev/null || true; fi
  done
  rabbitmqctl stop >/dev/null 2>&1 || true
  mysqladmin -uroot shutdown >/dev/null 2>&1 || true
}

case "${1:-}" in
  install) install ;;
  packages) packages ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 install|packages|start|stop" >&2; exit 2 ;;
esac
