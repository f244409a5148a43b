#!/usr/bin/env bash
# Builds the node image of the chaos harness's Docker backend (`turnstile-jepsen:test`) from a
# local `turnstile-jepsen` binary, without pulling anything: no registry is needed or reachable.
#
#   jepsen/image/build-image.sh [BINARY]      # default: ${CARGO_TARGET_DIR:-target}/release/turnstile-jepsen
#   STATIC=1 jepsen/image/build-image.sh      # a fully static build instead (see below)
#   IMAGE=name:tag jepsen/image/build-image.sh
#
# Dynamic (the default, what the tests use): the image holds the binary CI already built plus
# the shared libraries `ldd` lists for it and the dynamic loader, at their host paths.
#
# STATIC=1: builds the binary with deploy/lib/static-build.sh (crt-static on the binary only,
# dependencies shared with the ordinary release build; copied to
# ${STATIC_DIR:-${CARGO_TARGET_DIR:-target}/static}) and puts only that binary in the image. The node never resolves names (IP literals
# only), so static glibc's NSS `dlopen` is never reached.
#
# The rootfs is assembled by deploy/lib/import-image.sh and goes through `docker import`, so no
# builder (BuildKit or legacy) is involved. The entrypoint is the binary and the node runs as
# root (the harness bind-mounts data dirs it created as root); nodes run as
# `turnstile-jepsen node ...` (no tini: the node handles SIGTERM itself, and the harness kills
# with SIGKILL). Labels `turnstile-jepsen.binary-sha256` and `turnstile-jepsen.static` let the
# harness warn about a stale image.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
image=${IMAGE:-turnstile-jepsen:test}

if [ "${STATIC:-0}" = 1 ]; then
    binary=$("$repo/deploy/lib/static-build.sh" turnstile-jepsen)
else
    binary=${1:-${CARGO_TARGET_DIR:-$repo/target}/release/turnstile-jepsen}
    if [ ! -x "$binary" ]; then
        echo "no binary at $binary: build it (cargo build --release -p turnstile-jepsen) or pass its path" >&2
        exit 1
    fi
fi

NAME=turnstile-jepsen "$repo/deploy/lib/import-image.sh" "$image" "$binary"
