#!/usr/bin/env bash
# Builds one package's binary fully static and prints its path on stdout (cargo's own output
# goes to stderr). Shared by deploy/build-image.sh and jepsen/image/build-image.sh (STATIC=1).
#
#   deploy/lib/static-build.sh PACKAGE [BINARY]      # BINARY defaults to PACKAGE
#
# glibc is linked statically with `-C target-feature=+crt-static`. `--target` must be given
# explicitly, or RUSTFLAGS would also reach proc-macro crates, which cannot be static and fail
# to build. The flags differ from a normal build's, so nothing is shared with it: the build goes
# to its own target dir, ${STATIC_TARGET_DIR:-${CARGO_TARGET_DIR:-target}/static}, where every
# static build (turnstile, turnstile-jepsen) shares its dependencies and later builds are
# incremental.
#
# Static glibc cannot use NSS (its `dlopen` of libnss_* needs the very shared libc the binary
# does without), so such a binary must never resolve a host name: Turnstile's nodes and
# clients take IP literals only.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 PACKAGE [BINARY]" >&2
    exit 2
fi
package=$1
name=${2:-$1}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=x86_64-unknown-linux-gnu
target_dir=${STATIC_TARGET_DIR:-${CARGO_TARGET_DIR:-$repo/target}/static}

echo "building a static $name into $target_dir" >&2
(cd "$repo" && RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR="$target_dir" \
    "${CARGO:-cargo}" build --release --target "$target" -p "$package" --bin "$name" >&2)
binary=$target_dir/$target/release/$name
# ldd says "statically linked" (static-pie) or "not a dynamic executable" for a static binary,
# and lists "lib => path" lines for a dynamic one. (Captured first: `ldd | grep -q` under
# pipefail fails when grep stops reading early.)
deps=$(ldd "$binary" 2>&1 || true)
if grep -q '=>' <<<"$deps"; then
    echo "$binary is not static:" >&2
    echo "$deps" >&2
    exit 1
fi
echo "$binary"
