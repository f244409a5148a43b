#!/usr/bin/env bash
# Builds the node image of the chaos harness's Docker backend (`turnstile-jepsen:test`) from a
# local `turnstile-jepsen` binary, without pulling anything: no registry is needed or reachable.
#
#   jepsen/image/build-image.sh [BINARY]      # default: ${CARGO_TARGET_DIR:-target}/release/turnstile-jepsen
#   STATIC=1 jepsen/image/build-image.sh      # a fully static build instead (see below)
#   IMAGE=name:tag jepsen/image/build-image.sh
#
# Dynamic (the default, what the tests use): the image holds the binary CI already built plus
# the shared libraries `ldd` lists for it and the dynamic loader, at their host paths. A second,
# static build would double CI's compile time.
#
# STATIC=1: builds `RUSTFLAGS="-C target-feature=+crt-static" cargo build --release
# --target x86_64-unknown-linux-gnu -p turnstile-jepsen` into its own target dir
# (${STATIC_TARGET_DIR:-target/static}; `--target` is required, or proc-macro crates fail to
# build) and puts only that binary in the image. The node never resolves names (IP literals
# only), so static glibc's NSS `dlopen` is never reached.
#
# The rootfs goes through `docker import`, so no builder (BuildKit or legacy) is involved. The
# entrypoint is the binary; nodes run as `turnstile-jepsen node ...` (no tini: the node handles
# SIGTERM itself, and the harness kills with SIGKILL).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
image=${IMAGE:-turnstile-jepsen:test}
static=${STATIC:-0}

if [ "$static" = 1 ]; then
    target_dir=${STATIC_TARGET_DIR:-$repo/target/static}
    echo "building a static turnstile-jepsen into $target_dir" >&2
    (cd "$repo" && RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR="$target_dir" \
        cargo build --release --target x86_64-unknown-linux-gnu -p turnstile-jepsen)
    binary=$target_dir/x86_64-unknown-linux-gnu/release/turnstile-jepsen
    # ldd says "statically linked" (static-pie) or "not a dynamic executable" for a static
    # binary, and lists "lib => path" lines for a dynamic one.
    if ldd "$binary" 2>&1 | grep -q '=>'; then
        echo "$binary is not static:" >&2
        ldd "$binary" >&2
        exit 1
    fi
else
    binary=${1:-${CARGO_TARGET_DIR:-$repo/target}/release/turnstile-jepsen}
    if [ ! -x "$binary" ]; then
        echo "no binary at $binary: build it (cargo build --release -p turnstile-jepsen) or pass its path" >&2
        exit 1
    fi
fi

rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
install -m 0755 "$binary" "$rootfs/turnstile-jepsen"
mkdir -p "$rootfs/data"
install -d -m 1777 "$rootfs/tmp"

if [ "$static" != 1 ]; then
    # `ldd` lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", the loader as
    # "/lib64/ld-linux-x86-64.so.2 (0x...)", and the kernel's vDSO with no path (skipped).
    libs=$(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
    if [ -z "$libs" ]; then
        echo "ldd listed no libraries for $binary" >&2
        exit 1
    fi
    for lib in $libs; do
        # -L: copy what a symlink (the loader in /lib64) points at, under the symlink's path.
        cp -L --parents "$lib" "$rootfs/"
    done
fi

sha=$(sha256sum "$binary" | cut -d' ' -f1)
previous=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
tar -C "$rootfs" -cf - . |
    docker import \
        --change 'ENTRYPOINT ["/turnstile-jepsen"]' \
        --change "LABEL turnstile-jepsen.binary-sha256=$sha" \
        --change "LABEL turnstile-jepsen.static=$static" \
        - "$image" >/dev/null
# The image this one replaced: remove it if that left it without a tag (and no container uses it).
current=$(docker image inspect -f '{{.Id}}' "$image")
if [ -n "$previous" ] && [ "$previous" != "$current" ] &&
    [ "$(docker image inspect -f '{{len .RepoTags}}' "$previous" 2>/dev/null)" = 0 ]; then
    docker rmi "$previous" >/dev/null 2>&1 || true
fi
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "built $image from $binary ($((size / 1024 / 1024)) MiB, static=$static)" >&2
