#!/usr/bin/env bash
# Command-line tools the tests run on capi-lb's deliverables (not systems capi-lb talks to: those are
# the harnesses, tests/k8s/harness.sh and tests/octavia/harness.sh). Each is built with Go from the Go
# module proxy at a pinned version, cached outside the checkout in $PREFIX/<name>-<version>/, never
# committed.
#
#   tests/tools.sh install [tool...]   # build the named tools (default: all); idempotent, cached
#   tests/tools.sh path <tool>         # print the binary's path; fails, saying how to install, if absent
#
# Tools (name, Go package, version, Go build tags):
#   helm        helm.sh/helm/v3/cmd/helm                     v3.22.0   the chart: lint, install, upgrade
#   promtool    github.com/prometheus/prometheus/cmd/promtool  v0.316.0 the alerts: check and unit-test
#               (tag remove_all_sd: without Prometheus' service-discovery plugins, AWS, Azure, GCE...,
#               which rule checks do not use)
#   actionlint  github.com/rhysd/actionlint/cmd/actionlint   v1.7.12   the release workflow: lint
set -euo pipefail

PREFIX="${CAPI_LB_TOOLS_PREFIX:-/opt/capi-lb-tools}"

TOOLS=(
  "helm helm.sh/helm/v3/cmd/helm v3.22.0"
  "promtool github.com/prometheus/prometheus/cmd/promtool v0.316.0 remove_all_sd"
  "actionlint github.com/rhysd/actionlint/cmd/actionlint v1.7.12"
)

log() { printf '[tools] %s\n' "$*" >&2; }

# The line of TOOLS for a name, or failure.
tool_line() {
  local line
  for line in "${TOOLS[@]}"; do
    if [ "${line%% *}" = "$1" ]; then
      printf '%s\n' "$line"
      return 0
    fi
  done
  log "unknown tool '$1' (known: $(for l in "${TOOLS[@]}"; do printf '%s ' "${l%% *}"; done))"
  return 1
}

bin_of() {
  local name package version tags
  read -r name package version tags <<<"$(tool_line "$1")"
  printf '%s/%s-%s/bin/%s\n' "$PREFIX" "$name" "$version" "$name"
}

install_one() {
  local name package version tags bin stage start
  read -r name package version tags <<<"$(tool_line "$1")"
  bin="$(bin_of "$name")"
  if [ -x "$bin" ]; then
    log "$name $version: cached ($bin)"
    return 0
  fi
  command -v go >/dev/null || { log "Go is needed to build $name"; return 1; }
  mkdir -p "$PREFIX"
  stage="$(mktemp -d "$PREFIX/.$name-XXXXXX")"
  start=$(date +%s)
  log "building $name $version ($package${tags:+, tags $tags})"
  GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 GOBIN="$stage/bin" \
    go install -trimpath -ldflags '-s -w' -tags "${tags:-}" "$package@$version"
  rm -rf "$PREFIX/$name-$version"
  mv "$stage" "$PREFIX/$name-$version"
  log "$name $version built in $(($(date +%s) - start)) s: $bin"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  install)
    if [ $# -eq 0 ]; then
      set -- $(for l in "${TOOLS[@]}"; do printf '%s ' "${l%% *}"; done)
    fi
    for t in "$@"; do install_one "$t"; done
    ;;
  path)
    [ $# -eq 1 ] || { log "usage: $0 path <tool>"; exit 2; }
    bin="$(bin_of "$1")"
    if [ ! -x "$bin" ]; then
      log "$1 is not installed: run tests/tools.sh install $1"
      exit 1
    fi
    printf '%s\n' "$bin"
    ;;
  *)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
