#!/usr/bin/env bash
# Makes a Docker image that holds one binary, without a base image, a registry or a builder:
# the rootfs is assembled here and handed to `docker import`. Shared by deploy/build-image.sh
# (the `turnstile` image) and jepsen/image/build-image.sh (the chaos harness's node image).
#
#   deploy/lib/import-image.sh IMAGE BINARY ['INSTRUCTION']...
#   DATA_OWNER=65534:65534 deploy/lib/import-image.sh ...    # owner of /data (default 0:0)
#   NAME=turnstile-jepsen deploy/lib/import-image.sh ...     # name in the image (default: BINARY's)
#   STATIC_ONLY=1 deploy/lib/import-image.sh ...             # refuse a dynamic binary
#
# The rootfs: the binary as /<name> (owned by root, mode 0755), an empty /data owned by
# DATA_OWNER, and /tmp (mode 1777). A dynamic binary also gets the shared libraries `ldd` lists
# and the dynamic loader, at their host paths; a static one gets nothing else. Every file is
# written as root in the tarball, whoever runs this, apart from /data.
#
# The image gets `ENTRYPOINT ["/<name>"]` and two labels, `<name>.binary-sha256` (the binary's
# SHA-256) and `<name>.static` (1 or 0), then each INSTRUCTION given, as a `docker import
# --change` (CMD, ENV, EXPOSE, USER, VOLUME, LABEL, WORKDIR). An image this one replaces under
# IMAGE is removed when nothing else tags or uses it.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 IMAGE BINARY ['INSTRUCTION']..." >&2
    exit 2
fi
image=$1
binary=$2
shift 2
name=${NAME:-$(basename "$binary")}
data_owner=${DATA_OWNER:-0:0}
if [ ! -x "$binary" ]; then
    echo "no executable at $binary" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
install -d -m 0755 "$rootfs" "$rootfs/data"
install -m 0755 "$binary" "$rootfs/$name"
install -d -m 1777 "$rootfs/tmp"

# `ldd` lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", the loader as
# "/lib64/ld-linux-x86-64.so.2 (0x...)", and the kernel's vDSO with no path (skipped). A static
# binary has no "=>" line.
# (Captured first: `ldd | grep -q` under pipefail fails when grep stops reading early.)
deps=$(ldd "$binary" 2>&1 || true)
static=1
if grep -q '=>' <<<"$deps"; then
    static=0
    if [ "${STATIC_ONLY:-0}" = 1 ]; then
        echo "$binary is not static:" >&2
        echo "$deps" >&2
        exit 1
    fi
    libs=$(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$deps")
    for lib in $libs; do
        # -L: copy what a symlink (the loader in /lib64) points at, under the symlink's path.
        cp -L --parents "$lib" "$rootfs/"
    done
fi

# Everything but /data as root, then /data as its owner, appended to the same tarball.
tarball=$work/rootfs.tar
tar -C "$rootfs" --numeric-owner --owner=0 --group=0 --exclude=./data -cf "$tarball" .
tar -C "$rootfs" --numeric-owner --owner="${data_owner%%:*}" --group="${data_owner##*:}" \
    --no-recursion -rf "$tarball" ./data

sha=$(sha256sum "$binary" | cut -d' ' -f1)
args=(
    --change "ENTRYPOINT [\"/$name\"]"
    --change "LABEL $name.binary-sha256=$sha"
    --change "LABEL $name.static=$static"
)
for instruction in "$@"; do
    args+=(--change "$instruction")
done
previous=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
docker import "${args[@]}" "$tarball" "$image" >/dev/null
# The image this one replaced: remove it if that left it without a tag (and no container uses it).
current=$(docker image inspect -f '{{.Id}}' "$image")
if [ -n "$previous" ] && [ "$previous" != "$current" ] &&
    [ "$(docker image inspect -f '{{len .RepoTags}}' "$previous" 2>/dev/null)" = 0 ]; then
    docker rmi "$previous" >/dev/null 2>&1 || true
fi
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "built $image from $binary ($((size / 1024 / 1024)) MiB, static=$static)" >&2
