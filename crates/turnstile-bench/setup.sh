#!/usr/bin/env bash
# Installs what the benchmark harness needs from Debian when it is missing: `etcd-server` (the
# 3.4 `etcd` binary the harness runs as the comparison cluster), and `protobuf-compiler` with
# `libprotobuf-dev` (`protoc` and the well-known `google/protobuf/*.proto` files, which the
# `etcd-client` crate's build script needs to compile etcd's v3 API).
# Run it before building the workspace (`cargo build` compiles `etcd-client`); it does nothing
# when all three are present.
set -euo pipefail

missing=""
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
command -v protoc >/dev/null 2>&1 || missing="$missing protobuf-compiler"
[ -f /usr/include/google/protobuf/descriptor.proto ] || missing="$missing libprotobuf-dev"
if [ -z "$missing" ]; then
    echo "setup: etcd, protoc and the protobuf includes are installed"
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "setup: missing$missing; install them (apt-get install$missing) or run as root." >&2
        exit 1
    fi
    sudo="sudo"
fi
echo "setup: installing$missing"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
# shellcheck disable=SC2086 # word splitting of the package list is intended
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
# Debian's package starts a single-node etcd service on 2379/2380 where systemd runs; the
# harness picks its own free ports, but a running service would only compete for the CPU.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
    $sudo systemctl stop etcd || true
fi
etcd_version=$(etcd --version)
echo "${etcd_version%%$'\n'*}"
protoc --version
