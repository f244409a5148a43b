#!/usr/bin/env bash
# A rolling upgrade under load from an older release to this checkout: builds the older
# release's `turnstile-jepsen` from git (into target/upgrade-from/, with its own target dir, so
# this checkout's build is untouched), then runs the ignored test
# `rolling_restart::rolling_upgrade_from_an_older_release_loses_nothing`: a 3-node cluster
# starts on the old build and each node in turn is stopped with SIGTERM and started on this
# one, while clients acquire locks and write through their fences. About 10 minutes to build
# the old release on 2 cores the first time, then under a minute.
#
#   bash jepsen/upgrade.sh [OLD_REV]
#
# OLD_REV defaults to the commit that wrote the newest upgrade fixture
# (crates/turnstile/tests/fixtures/upgrade/), i.e. the last release whose format is kept.
# Needs root (network namespaces), like the other chaos tests.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
fixtures=crates/turnstile/tests/fixtures/upgrade
newest=$(find "$fixtures" -name manifest.json | sort -V | tail -n 1)
rev=$(git rev-parse --verify "${1:-$(git log -1 --format=%H -- "$newest")}^{commit}")
work=$PWD/target/upgrade-from
src=$work/src-$rev
if [ ! -f "$src/Cargo.toml" ]; then
    mkdir -p "$src"
    git archive "$rev" | tar -x -C "$src"
fi
echo "upgrade: building the old release ($rev) in $src"
CARGO_TARGET_DIR=$work/target cargo build --release --manifest-path "$src/Cargo.toml" \
    --locked -p turnstile-jepsen --bin turnstile-jepsen
old=$work/target/release/turnstile-jepsen
echo "upgrade: rolling from $old to this checkout's build"
TURNSTILE_UPGRADE_FROM=$old cargo test --release -p turnstile-jepsen --test suite -- \
    --ignored --exact rolling_restart::rolling_upgrade_from_an_older_release_loses_nothing \
    --nocapture
