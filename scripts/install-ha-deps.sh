#!/usr/bin/env bash
# Installs, from Debian's packages, what coordhost's high availability needs
# (docs/ha.md), unless it is there already:
#   protobuf-compiler  `protoc`: the etcd-client crate generates its gRPC code
#                      at build time with it (coordhost's own protocol needs no
#                      protoc: host/workers/build.rs uses protox)
#   libprotobuf-dev    the well-known types (google/protobuf/descriptor.proto,
#                      struct.proto) that etcd's .proto files import
#   etcd-server        `etcd`: the HA tests and scripts/demo-ha.sh start a real
#                      etcd server
# The README's two commands run this first (make ha-deps). Says what it
# installs; fails naming the packages when it cannot install them.
set -euo pipefail
need=()
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
if [ "${#need[@]}" -eq 0 ]; then
  exit 0
fi
echo "install-ha-deps: installing ${need[*]} from Debian's packages (protoc and its well-known types for the etcd-client build, etcd for the HA tests)" >&2
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: coordhost needs ${need[*]} (protoc, its well-known types, etcd); install them, e.g. as root: apt-get install ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Installing etcd-server must not start a system etcd (no init system here,
# and the tests start their own): policy-rc.d refuses service starts.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v protoc >/dev/null && command -v etcd >/dev/null \
  && [ -f /usr/include/google/protobuf/descriptor.proto ] || {
  echo "error: ${need[*]} installed but protoc, its well-known types or etcd are still missing" >&2
  exit 1
}
echo "install-ha-deps: $(protoc --version), etcd $(etcd --version 2>/dev/null | head -1 | awk '{print $3}')" >&2
