#!/usr/bin/env bash
# Builds the `turnstile` container image from a static build of the binary, FROM scratch: no
# base image is pulled and no registry or image builder is needed (docs/deploy.md).
#
#   deploy/build-image.sh                       # builds the binary, then turnstile:latest
#   IMAGE=registry.example/turnstile:1.2 deploy/build-image.sh
#   BINARY=path/to/static/turnstile deploy/build-image.sh    # skip the build; must be static
#
# The binary is built by deploy/lib/static-build.sh (crt-static glibc, copied to
# ${STATIC_DIR:-${CARGO_TARGET_DIR:-target}/static}); the image is assembled by
# deploy/lib/import-image.sh. It holds only /turnstile, an empty /data and /tmp.
#
# - ENTRYPOINT /turnstile, CMD serve: `docker run IMAGE` runs a node configured by TURNSTILE_*
#   variables; `docker run IMAGE status --endpoints ...` runs a client command instead.
# - It runs as uid:gid 65534:65534 (nobody:nogroup; scratch has no user database, so numbers).
#   /data belongs to 65534 in the image, so a new named volume mounted there does too. A
#   bind-mounted host directory must be writable by 65534 (`chown 65534:65534 DIR`), or run
#   the container with `--user` matching the directory's owner.
# - TURNSTILE_DATA_DIR=/data and TURNSTILE_LISTEN=0.0.0.0:7001 are set, so a node needs only
#   TURNSTILE_ID, TURNSTILE_INITIAL_CLUSTER and TURNSTILE_CLUSTER_SECRET. VOLUME /data,
#   EXPOSE 7001/tcp.
# - Labels: turnstile.binary-sha256, turnstile.static, and the OCI version and revision.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
image=${IMAGE:-turnstile:latest}
port=7001
uid_gid=65534:65534

binary=${BINARY:-}
if [ -z "$binary" ]; then
    binary=$("$repo/deploy/lib/static-build.sh" turnstile)
fi

version=$("$binary" --version | awk '{ print $2 }')
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ]; then
    revision=$revision-dirty
fi

STATIC_ONLY=1 NAME=turnstile DATA_OWNER=$uid_gid "$repo/deploy/lib/import-image.sh" "$image" "$binary" \
    'CMD ["serve"]' \
    "USER $uid_gid" \
    'WORKDIR /data' \
    'ENV TURNSTILE_DATA_DIR=/data' \
    "ENV TURNSTILE_LISTEN=0.0.0.0:$port" \
    "EXPOSE $port/tcp" \
    'VOLUME /data' \
    "LABEL org.opencontainers.image.title=turnstile" \
    "LABEL org.opencontainers.image.version=$version" \
    "LABEL org.opencontainers.image.revision=$revision"
