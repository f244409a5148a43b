#!/usr/bin/env bash
# Regenerates src/gen/ from proto/ (after editing a proto file). Needs no `protoc`: the
# codegen tool compiles the protos with protox. Its own target dir keeps its build out of the
# workspace's.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cargo run --quiet --manifest-path "$here/codegen/Cargo.toml" --target-dir "$here/codegen/target"
