#!/usr/bin/env bash
# Builds one package's binary fully static and prints its path on stdout (cargo's own output
# goes to stderr). Shared by deploy/build-image.sh and jepsen/image/build-image.sh (STATIC=1).
#
#   deploy/lib/static-build.sh PACKAGE [BINARY]      # BINARY defaults to PACKAGE
#
# glibc is linked statically with `-C target-feature=+crt-static`, passed by `cargo rustc` to
# the binary's own compilation only. That flag matters only when the binary is linked (std
# decides at that point how to link libc), so every dependency is an ordinary release build in
# the ordinary target dir, ${CARGO_TARGET_DIR:-target}, shared with `cargo build --release` and
# `cargo test --release` wherever the features agree: after the test build, the static build
# compiles only the crates whose features differ (`-p PACKAGE` alone, as the README builds
# it, sees no other member's features; `crates/turnstile/Cargo.toml` asks for the rest). The
# binary is moved to ${STATIC_DIR:-${CARGO_TARGET_DIR:-target}/static}.
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
target_dir=${CARGO_TARGET_DIR:-$repo/target}
static_dir=${STATIC_DIR:-$target_dir/static}

echo "building a static $name (dependencies shared with $target_dir/release)" >&2
# Removed first: cargo links an up-to-date binary into release/ again only if none is there,
# and the one there may be another build's (a `cargo test` build's, with its test hooks).
rm -f "$target_dir/release/$name"
(cd "$repo" && CARGO_TARGET_DIR="$target_dir" "${CARGO:-cargo}" rustc --release -p "$package" \
    --bin "$name" -- -C target-feature=+crt-static >&2)
mkdir -p "$static_dir"
binary=$static_dir/$name
# Copied to a new file and renamed over the old, so a running copy of the old one is not hit.
cp "$target_dir/release/$name" "$binary.tmp"
mv -f "$binary.tmp" "$binary"
# And removed from release/ again, for the same reason: a later `cargo test` whose own build
# of NAME is up to date would otherwise run this one (without the test hooks) under its name.
rm -f "$target_dir/release/$name"
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
