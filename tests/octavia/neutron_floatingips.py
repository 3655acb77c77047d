#!/usr/bin/env python3
"""A simulator of Neutron's floating IP API (networking v2.0), for the Octavia provider's tests.

Octavia runs with its no-op network driver in the test harness, so its VIP ports exist in no Neutron:
a real neutron-server would refuse to associate a floating IP with them. This serves the documented
subset capi-lb uses, with Neutron's status codes and error bodies:

  GET    /                                 version document (v2.0)
  GET    /v2.0/floatingips                 filters: floating_ip_address, port_id, floating_network_id,
                                           tags (all of, comma-separated)
  POST   /v2.0/floatingips                 {"floatingip": {"floating_network_id", "port_id"?, "description"?}}
  GET    /v2.0/floatingips/{id}
  PUT    /v2.0/floatingips/{id}            {"floatingip": {"port_id": id|null}}
  DELETE /v2.0/floatingips/{id}
  PUT    /v2.0/floatingips/{id}/tags       {"tags": [...]}

Requests need an X-Auth-Token that Keystone accepts (checked against Keystone with an admin token).
External networks: any UUID registered with POST /_sim/networks {"id": ..., "cidr": "203.0.113.0/24"}.
Like a Neutron subnet whose allocation pool is narrower than its CIDR, automatic allocation uses the
first 199 host addresses (oldest free first); a floating_ip_address asked for explicitly may be any free
host address of the CIDR.
"""
import ipaddress
import json
import sys
import threading
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

KEYSTONE = "http://127.0.0.1:5000/v3"
LOCK = threading.Lock()
NETWORKS = {}  # id -> list of free addresses
POOLS = {}  # id -> addresses automatic allocation may use
FIPS = {}  # id -> floating ip dict
TOKENS = {}  # token -> project id


def admin_token():
    body = json.dumps({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": "admin"}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}}).encode()
    req = urllib.request.Request(KEYSTONE + "/auth/tokens", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers["X-Subject-Token"]


def project_of(token):
    if token in TOKENS:
        return TOKENS[token]
    req = urllib.request.Request(KEYSTONE + "/auth/tokens",
                                 headers={"X-Auth-Token": admin_token(), "X-Subject-Token": token})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            project = json.load(r)["token"].get("project", {}).get("id")
    except Exception:
        return None
    TOKENS[token] = project
    return project


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("neutron-sim: " + (fmt % args) + "\n")

    def reply(self, code, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, code, kind, message):
        self.reply(code, {"NeutronError": {"type": kind, "message": message, "detail": ""}})

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def route(self, method):
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        if method == "GET" and not parts:
            base = f"http://{self.headers.get('Host')}/v2.0/"
            return self.reply(200, {"versions": [{"id": "v2.0", "status": "CURRENT",
                                                  "links": [{"href": base, "rel": "self"}]}]})
        if parts[:2] == ["_sim", "networks"] and method == "POST":
            net = self.body()
            hosts = [str(h) for h in ipaddress.ip_network(net["cidr"]).hosts()]
            POOLS[net["id"]] = set(hosts[:199])
            with LOCK:
                # Registered again by a later `harness.sh start`: addresses that floating IPs still
                # hold stay out of the free list (else the same address is handed out twice).
                held = {f["floating_ip_address"] for f in FIPS.values()
                        if f["floating_network_id"] == net["id"]}
                NETWORKS[net["id"]] = [h for h in hosts if h not in held]
            return self.reply(201, {"network": net})
        if parts[:1] == ["v2.0"]:
            parts = parts[1:]
        if parts == [] and method == "GET":
            return self.reply(200, {"resources": [{"name": "floatingip", "collection": "floatingips"}]})
        project = project_of(self.headers.get("X-Auth-Token", ""))
        if project is None:
            return self.reply(401, {"error": {"message": "The request you have made requires authentication."}})
        if not parts or parts[0] != "floatingips":
            return self.error(404, "HTTPNotFound", "The resource could not be found.")
        with LOCK:
            if len(parts) == 1 and method == "GET":
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                out = [f for f in FIPS.values() if f["project_id"] == project]
                for key in ("floating_ip_address", "port_id", "floating_network_id"):
                    if key in q:
                        out = [f for f in out if (f[key] or "") == q[key]]
                if "tags" in q:
                    wanted = set(q["tags"].split(","))
                    out = [f for f in out if wanted <= set(f["tags"])]
                return self.reply(200, {"floatingips": out})
            if len(parts) == 1 and method == "POST":
                spec = self.body().get("floatingip", {})
                net = spec.get("floating_network_id")
                if net not in NETWORKS:
                    return self.error(404, "ExternalNetworkNotFound", f"External network {net} could not be found.")
                address = spec.get("floating_ip_address")
                free = NETWORKS[net]
                if address:
                    if address not in free:
                        return self.error(409, "IpAddressInUse", f"Unable to complete operation for network {net}. The IP address {address} is in use.")
                else:
                    pool = [a for a in free if a in POOLS[net]]
                    if not pool:
                        return self.error(409, "IpAddressGenerationFailure", f"No more IP addresses available on network {net}.")
                    address = pool[0]
                free.remove(address)
                fip = {"id": str(uuid.uuid4()), "floating_network_id": net, "floating_ip_address": address,
                       "port_id": spec.get("port_id"), "fixed_ip_address": None,
                       "status": "ACTIVE" if spec.get("port_id") else "DOWN",
                       "description": spec.get("description", ""), "project_id": project,
                       "tenant_id": project, "tags": []}
                FIPS[fip["id"]] = fip
                return self.reply(201, {"floatingip": fip})
            fip = FIPS.get(parts[1])
            if fip is None or fip["project_id"] != project:
                return self.error(404, "FloatingIPNotFound", f"Floating IP {parts[1]} could not be found")
            if len(parts) == 3 and parts[2] == "tags" and method == "PUT":
                fip["tags"] = list(self.body().get("tags", []))
                return self.reply(200, {"tags": fip["tags"]})
            if len(parts) == 2 and method == "GET":
                return self.reply(200, {"floatingip": fip})
            if len(parts) == 2 and method == "PUT":
                spec = self.body().get("floatingip", {})
                if "port_id" in spec:
                    port = spec["port_id"]
                    if port and fip["port_id"] and fip["port_id"] != port:
                        return self.error(409, "FloatingIPPortAlreadyAssociated",
                                          f"Cannot associate floating IP {fip['floating_ip_address']} ({fip['id']}) with port {port}, as that floating IP is already associated with port {fip['port_id']}.")
                    fip["port_id"] = port
                    fip["status"] = "ACTIVE" if port else "DOWN"
                if "description" in spec:
                    fip["description"] = spec["description"]
                return self.reply(200, {"floatingip": fip})
            if len(parts) == 2 and method == "DELETE":
                del FIPS[fip["id"]]
                NETWORKS[fip["floating_network_id"]].append(fip["floating_ip_address"])
                return self.reply(204)
        return self.error(405, "HTTPMethodNotAllowed", "Method not allowed.")

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")

    def do_DELETE(self):
        self.route("DELETE")


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9696
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
