#!/usr/bin/env bash
# capi-lb's container image, built on this machine from the release binary without pulling a base
# image (no container registry is reachable here): buildah assembles it from scratch, podman runs it.
#
#   hack/image.sh install                # podman, buildah and runc from Debian (apt-get), when missing,
#                                        # and the ca-certificates package the image takes
#   hack/image.sh build [--binary PATH]  # build the release binary (cargo build --release --locked
#                                        # -p capi-lb) or take PATH, and commit the image; idempotent:
#                                        # nothing is done when the image holds this binary already
#   hack/image.sh name                   # print the image's name
#   hack/image.sh rootfs BINARY DIR [--ca-bundle FILE]
#                                        # only assemble the image's files in DIR (the Dockerfile's way)
#   hack/image.sh podman ARGS...         # podman with this script's storage and settings
#   hack/image.sh save FILE              # write the image as a docker archive (`kind load image-archive`)
#   hack/image.sh clean                  # remove the image storage (containers included)
#
# The image, ghcr.io/capi-lb/capi-lb:v<workspace version> (the name `capi-lb manifests` writes into the
# Deployment, controllers/src/install/manifests.rs), is one layer:
#   /capi-lb                      the binary (entrypoint; cmd `run`)
#   the shared libraries `ldd` names for it, and the dynamic loader, at the paths ldd gives (glibc,
#                                 libgcc_s, ...: capi-lb is linked dynamically against the build
#                                 machine's glibc, since only the x86_64-unknown-linux-gnu target is
#                                 installed here and none can be downloaded)
#   /etc/ssl/certs/ca-certificates.crt  the CA bundle of Debian's ca-certificates package (its
#                                 mozilla/*.crt, as update-ca-certificates concatenates them): capi-lb's
#                                 HTTPS clients (kube's and reqwest's, with rustls-platform-verifier /
#                                 rustls-native-certs) trust the system roots for an apiserver, Keystone
#                                 or Octavia whose configuration names no CA of its own
#   /etc/passwd, /etc/group       root and nonroot (65532:65532, home /tmp)
#   /etc/nsswitch.conf            hosts: files dns (glibc 2.36 has both built in)
#   /tmp                          empty, mode 1777 (the Deployment mounts an emptyDir there)
# User 65532:65532, ports 8081 (health) and 8443 (metrics), OCI labels: title, description, version,
# source, licenses (the workspace's), revision (git HEAD), and dev.capi-lb.inputs: a digest of the
# binary, the CA bundle and this script, by which `build` knows the image is current.
#
# podman and buildah are run with configuration files of their own, not the machine's (the environment
# variables CONTAINERS_CONF, CONTAINERS_STORAGE_CONF, CONTAINERS_REGISTRIES_CONF point at files this
# script writes into $STATE): storage in $STATE/storage with the vfs driver (works on any file system,
# also nested in a container; the image is one small layer), cgroupfs as cgroup manager and a file for
# events (no systemd is needed), runc as OCI runtime (Debian bookworm's crun 1.8 refuses a hybrid
# cgroup v1/v2 host: "cgroups in hybrid mode not supported"), no registries (nothing is ever pulled),
# and the container's open-file and process limits set to what this machine allows (podman's defaults,
# 1048576, fail where the caller cannot raise its limits: "setrlimit RLIMIT_NOFILE: Operation not
# permitted"). $STATE is $CAPI_LB_IMAGE_STATE, default /var/tmp/capi-lb-image, outside the checkout.
#
# Needs root (podman and buildah run rootful), cargo, apt-get (install, and the ca-certificates
# package, downloaded with `apt-get download`, cached in $STATE/debs). Debian bookworm's podman 4.3.1,
# buildah 1.28.2 and runc 1.1.5 are what was tested; the packages are not pinned to exact versions
# (a Debian security update replaces the old version on the mirror), the ca-certificates version
# used is recorded in the image's label dev.capi-lb.ca-certificates.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
STATE="${CAPI_LB_IMAGE_STATE:-/var/tmp/capi-lb-image}"

REPOSITORY="ghcr.io/capi-lb/capi-lb"
SOURCE_URL="https://github.com/capi-lb/capi-lb"
NONROOT_ID=65532

log() { printf '[image] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The workspace's version and license (the root Cargo.toml's [workspace.package]).
workspace_field() {
  sed -n '/^\[workspace.package\]/,/^\[/p' "$REPO/Cargo.toml" |
    sed -n "s/^$1 *= *\"\\(.*\\)\"/\\1/p" | head -1
}
VERSION="$(workspace_field version)"
LICENSE="$(workspace_field license)"
if [ -z "$VERSION" ] || [ -z "$LICENSE" ]; then
  die "no version or license in $REPO/Cargo.toml [workspace.package]"
fi
IMAGE="$REPOSITORY:v$VERSION"

# --- podman and buildah, configured by this script only ----------------------------------------

# stdin into file $1, atomically (other podman calls may be reading it).
write_file() {
  cat >"$1.$$"
  mv -f "$1.$$" "$1"
}

# Write the configuration files and export the variables that make podman and buildah read them
# instead of /etc/containers and /usr/share/containers (CONTAINERS_CONF: "all system and user config
# files are ignored").
configure() {
  mkdir -p "$STATE/storage" "$STATE/run" "$STATE/tmp"
  local nofile nproc
  nofile="$(ulimit -Hn)"
  # Podman's default process limit (1048576) is refused where limits cannot be raised; the
  # machine's pid_max bounds what a container can use anyway.
  nproc="$(cat /proc/sys/kernel/pid_max)"
  if [ "$(ulimit -Hu)" != unlimited ] && [ "$(ulimit -Hu)" -lt "$nproc" ]; then nproc="$(ulimit -Hu)"; fi
  [ "$nofile" = unlimited ] && nofile=1048576
  write_file "$STATE/containers.conf" <<EOF
# Written by hack/image.sh; podman and buildah read only this file (CONTAINERS_CONF).
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$STATE/run/events.log"
runtime = "runc"
tmp_dir = "$STATE/run/libpod"
EOF
  write_file "$STATE/storage.conf" <<EOF
# Written by hack/image.sh (CONTAINERS_STORAGE_CONF).
[storage]
driver = "vfs"
graphroot = "$STATE/storage"
runroot = "$STATE/run/storage"
EOF
  write_file "$STATE/registries.conf" <<'EOF'
# Written by hack/image.sh (CONTAINERS_REGISTRIES_CONF): no registry; images are named in full.
unqualified-search-registries = []
short-name-mode = "enforcing"
EOF
  # Images are only ever committed locally, never pulled: nothing to verify.
  printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' | write_file "$STATE/policy.json"
  export CONTAINERS_CONF="$STATE/containers.conf"
  export CONTAINERS_STORAGE_CONF="$STATE/storage.conf"
  export CONTAINERS_REGISTRIES_CONF="$STATE/registries.conf"
  export TMPDIR="$STATE/tmp"
}

need_tools() {
  local t
  for t in podman buildah runc; do
    command -v "$t" >/dev/null || die "$t is not installed: run hack/image.sh install"
  done
}

# --- install -----------------------------------------------------------------------------------

install_tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v buildah >/dev/null || missing+=(buildah)
  command -v runc >/dev/null || missing+=(runc)
  if [ ${#missing[@]} -eq 0 ]; then
    log "podman, buildah and runc are installed"
    return 0
  fi
  log "installing ${missing[*]} from Debian"
  # runc first on the command line: podman depends on crun or runc, and runc is the one that works
  # on a hybrid cgroup host.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  }
}

# --- build -------------------------------------------------------------------------------------

# Debian's ca-certificates: the .deb of the version apt would install, cached in $STATE/debs; sets
# CA_VERSION, and CA_BUNDLE to the bundle made from it.
ca_bundle() {
  CA_VERSION="$(apt-cache policy ca-certificates | sed -n 's/^ *Candidate: *//p')"
  if [ -z "$CA_VERSION" ] || [ "$CA_VERSION" = "(none)" ]; then
    apt-get update -qq >&2
    CA_VERSION="$(apt-cache policy ca-certificates | sed -n 's/^ *Candidate: *//p')"
  fi
  if [ -z "$CA_VERSION" ] || [ "$CA_VERSION" = "(none)" ]; then die "apt knows no ca-certificates package"; fi
  local dir="$STATE/debs/ca-certificates-$CA_VERSION"
  if [ ! -s "$dir/ca-certificates.crt" ]; then
    log "fetching ca-certificates $CA_VERSION from Debian"
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    (cd "$dir.tmp" && apt-get download -qq "ca-certificates=$CA_VERSION" >&2 2>/dev/null) || {
      apt-get update -qq >&2
      (cd "$dir.tmp" && apt-get download -qq "ca-certificates=$CA_VERSION" >&2)
    }
    dpkg -x "$dir.tmp"/ca-certificates_*.deb "$dir.tmp/x"
    # As update-ca-certificates builds /etc/ssl/certs/ca-certificates.crt with every certificate
    # enabled (Debian's default): each PEM file, newline-terminated.
    local crt
    find "$dir.tmp/x/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | while read -r crt; do
      # shellcheck disable=SC1003 # sed's "append a newline if missing"
      sed -e '$a\' "$crt"
    done >"$dir.tmp/ca-certificates.crt"
    [ "$(grep -c 'BEGIN CERTIFICATE' "$dir.tmp/ca-certificates.crt")" -gt 50 ] ||
      die "the ca-certificates package held too few certificates"
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
  fi
  CA_BUNDLE="$dir/ca-certificates.crt"
}

# The release binary's path, after building it. CAPI_LB_IMAGE_TARGET_DIR, when set, is the target
# directory of this build (cargo's --target-dir): .ci/run builds the image in one of its own while the
# tests run, since cargo holds a lock on a whole target directory for a build, and `cargo test` in the
# workspace's would wait for the release build to end.
release_binary() {
  local target
  if [ -n "${CAPI_LB_IMAGE_TARGET_DIR:-}" ]; then
    target="$CAPI_LB_IMAGE_TARGET_DIR"
  else
    target="$(cd "$REPO" && cargo metadata --format-version 1 --no-deps --locked |
      sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
  fi
  [ -n "$target" ] || die "cargo metadata gave no target directory"
  local start=$SECONDS
  log "cargo build --release --locked -p capi-lb (target directory $target)"
  # Run from `cargo test` (the e2e image test), this script inherits the variables cargo sets for a
  # test process (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, OUT_DIR, ...). ring's build script tracks
  # them, so the release build .ci/run made before the tests was built again from ring up (402 s
  # on CI's two cores, 2026-11-27, starving the e2e tests running beside it) and once more at the
  # next build outside a test. They are not ours to pass on: the build runs without them.
  (
    cd "$REPO"
    for v in $(compgen -e); do
      case "$v" in
        CARGO_MANIFEST_* | CARGO_PKG_* | CARGO_CRATE_* | CARGO_BIN_* | CARGO_PRIMARY_PACKAGE | \
          CARGO_TARGET_TMPDIR | CARGO_CFG_* | OUT_DIR) unset "$v" ;;
      esac
    done
    cargo build --release --locked -p capi-lb --target-dir "$target"
  ) >&2
  log "release build: $((SECONDS - start)) s"
  printf '%s\n' "$target/release/capi-lb"
}

# The shared objects `ldd` names for $1 (the loader included), one absolute path per line. A binary
# of another architecture (the Dockerfile's cross build) cannot be run by ldd: its libraries are
# then resolved as the loader would, from readelf's NEEDED entries (recursively) in Debian's
# multiarch folders of its architecture, and its interpreter.
libraries() {
  local out
  if [ "$(elf_triplet "$1")" != "$(uname -m)-linux-gnu" ]; then
    libraries_of_foreign "$1"
    return
  fi
  out="$(ldd "$1" 2>&1)" || true
  if grep -q 'not a dynamic executable\|statically linked' <<<"$out"; then
    return 0
  fi
  if grep -q 'not found' <<<"$out"; then
    die "ldd $1: a library is missing: $out"
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out"
}

# Debian's multiarch triplet of an ELF file's machine.
elf_triplet() {
  case "$(readelf -h "$1" | sed -n 's/^ *Machine: *//p')" in
    *X86-64*) echo x86_64-linux-gnu ;;
    *AArch64*) echo aarch64-linux-gnu ;;
    *) die "$1: an architecture hack/image.sh does not know: $(readelf -h "$1" | sed -n 's/^ *Machine: *//p')" ;;
  esac
}

libraries_of_foreign() {
  local triplet interpreter seen=" " queue name dir found
  triplet="$(elf_triplet "$1")"
  interpreter="$(readelf -l "$1" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')"
  [ -n "$interpreter" ] || return 0 # static
  [ -e "$interpreter" ] || die "$1 needs the loader $interpreter: install libc6 of its architecture"
  printf '%s\n' "$interpreter"
  queue="$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
  while [ -n "$queue" ]; do
    name="${queue%%$'\n'*}"
    if [ "$name" = "$queue" ]; then queue=""; else queue="${queue#*$'\n'}"; fi
    case "$seen" in *" $name "*) continue ;; esac
    seen="$seen$name "
    [ "$name" = "${interpreter##*/}" ] && continue # the loader, printed above
    found=""
    for dir in "/lib/$triplet" "/usr/lib/$triplet"; do
      if [ -e "$dir/$name" ]; then found="$dir/$name"; break; fi
    done
    [ -n "$found" ] || die "$1 needs $name, not found in /lib/$triplet or /usr/lib/$triplet"
    printf '%s\n' "$found"
    queue="$(printf '%s\n%s' "$queue" "$(readelf -d "$found" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')" | sed '/^$/d')"
  done
}

# Assemble the root file system in $1 from the binary $2 and the CA bundle $3.
assemble() {
  local root="$1" binary="$2" bundle="$3" lib libs
  libs="$(libraries "$binary")"
  mkdir -p "$root/etc/ssl/certs" "$root/tmp"
  chmod 1777 "$root/tmp"
  install -m 0755 "$binary" "$root/capi-lb"
  for lib in $libs; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
    chmod 0755 "$root$lib"
  done
  install -m 0644 "$bundle" "$root/etc/ssl/certs/ca-certificates.crt"
  cat >"$root/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:$NONROOT_ID:$NONROOT_ID:nonroot:/tmp:/sbin/nologin
EOF
  cat >"$root/etc/group" <<EOF
root:x:0:
nonroot:x:$NONROOT_ID:
EOF
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
  chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
}

image_label() {
  podman image inspect --format "{{index .Labels \"$1\"}}" "$IMAGE" 2>/dev/null || true
}

build() {
  local binary=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --binary) binary="${2:?--binary needs a path}"; shift 2 ;;
      *) die "unknown argument to build: $1" ;;
    esac
  done
  need_tools
  configure
  local start=$SECONDS
  [ -n "$binary" ] || binary="$(release_binary)"
  [ -x "$binary" ] || die "$binary is not an executable"
  local bundle inputs
  ca_bundle
  bundle="$CA_BUNDLE"
  inputs="$( { sha256sum "$binary" "$bundle" "$HERE/image.sh" | awk '{print $1}'; } | sha256sum | awk '{print $1}')"
  if [ "$(image_label dev.capi-lb.inputs)" = "$inputs" ]; then
    log "$IMAGE is current (binary $binary)"
    printf '%s\n' "$IMAGE"
    return 0
  fi
  local build_start=$SECONDS root container revision
  root="$(mktemp -d "$STATE/tmp/rootfs-XXXXXX")"
  assemble "$root" "$binary" "$bundle"
  revision="$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  buildah rm "capi-lb-image-$$" >/dev/null 2>&1 || true
  container="$(buildah from --name "capi-lb-image-$$" scratch)"
  # shellcheck disable=SC2064 # expand now: the container and folder of this build
  trap "buildah rm '$container' >/dev/null 2>&1 || true; rm -rf '$root'" EXIT
  buildah add --quiet "$container" "$root" / >/dev/null
  buildah config \
    --entrypoint '["/capi-lb"]' --cmd run \
    --user "$NONROOT_ID:$NONROOT_ID" --workingdir / \
    --port 8081/tcp --port 8443/tcp \
    --label "org.opencontainers.image.title=capi-lb" \
    --label "org.opencontainers.image.description=Generic Cluster API load balancers with pluggable infrastructure providers and stable -ext endpoints" \
    --label "org.opencontainers.image.version=v$VERSION" \
    --label "org.opencontainers.image.source=$SOURCE_URL" \
    --label "org.opencontainers.image.licenses=$LICENSE" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "dev.capi-lb.ca-certificates=$CA_VERSION" \
    --label "dev.capi-lb.inputs=$inputs" \
    "$container"
  buildah commit --quiet --rm --signature-policy "$STATE/policy.json" "$container" "$IMAGE" >/dev/null
  trap - EXIT
  rm -rf "$root"
  podman image prune -f >/dev/null 2>&1 || true # the previous build's image, now untagged
  local size
  size="$(podman image inspect --format '{{.Size}}' "$IMAGE")"
  log "$IMAGE committed in $((SECONDS - build_start)) s ($((SECONDS - start)) s with the binary), $((size / 1024 / 1024)) MiB, from $binary"
  printf '%s\n' "$IMAGE"
}

# One build at a time (several test processes may ask at once).
with_lock() {
  mkdir -p "$STATE"
  exec 9>"$STATE.lock"
  flock 9
  "$@"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  # The ca-certificates package too: `build` then needs no apt (CI builds beside other apt users).
  install) install_tools && ca_bundle ;;
  build) with_lock build "$@" ;;
  name) printf '%s\n' "$IMAGE" ;;
  rootfs)
    # The image's file system in a folder (what `build` commits; the Dockerfile's last stage copies it).
    [ $# -ge 2 ] || die "usage: $0 rootfs BINARY DIR [--ca-bundle FILE]"
    binary="$1" dir="$2"
    shift 2
    if [ "${1:-}" = --ca-bundle ]; then
      CA_BUNDLE="${2:?--ca-bundle needs a file}"
    else
      ca_bundle
    fi
    mkdir -p "$dir"
    assemble "$dir" "$binary" "$CA_BUNDLE"
    ;;
  podman)
    need_tools
    configure
    exec podman "$@"
    ;;
  save)
    [ $# -eq 1 ] || die "usage: $0 save FILE"
    need_tools
    configure
    podman image exists "$IMAGE" || die "no image $IMAGE: run hack/image.sh build"
    rm -f "$1"
    podman save --quiet --format docker-archive -o "$1" "$IMAGE"
    log "$IMAGE saved to $1"
    ;;
  clean)
    if [ -d "$STATE" ]; then
      configure
      podman rm -af >/dev/null 2>&1 || true
      podman system reset -f >/dev/null 2>&1 || true
      rm -rf "$STATE"
    fi
    ;;
  *)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
