#!/usr/bin/env bash
# CI hook for the Python client: builds a throwaway venv, installs the package with its test
# extras, runs `mypy --strict` and the pytest suite against a live 3-node cluster of
# $TURNSTILE_BINARY. Exits non-zero on any failure.
#
#   TURNSTILE_BINARY=/path/to/turnstile clients/python/run-tests.sh [pytest args...]
#
# Env: PYTHON (default python3), TURNSTILE_TEST_SEED (replay a run's names), TURNSTILE_KEEP_LOGS=1
# (keep the nodes' logs), TURNSTILE_REQUIRE_V3=1 (fail, rather than skip, contract-v3 tests
# whose routes the server does not serve).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"

if [[ -z "${TURNSTILE_BINARY:-}" ]]; then
    echo "run-tests.sh: set TURNSTILE_BINARY to a built turnstile binary" >&2
    exit 2
fi
if [[ ! -x "$TURNSTILE_BINARY" ]]; then
    echo "run-tests.sh: TURNSTILE_BINARY=$TURNSTILE_BINARY is not an executable" >&2
    exit 2
fi
export TURNSTILE_BINARY="$(cd "$(dirname "$TURNSTILE_BINARY")" && pwd)/$(basename "$TURNSTILE_BINARY")"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/turnstile-py-ci.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here[test]"

cd "$here"
echo "== mypy --strict"
"$tmp/venv/bin/python" -m mypy --strict --cache-dir "$tmp/mypy-cache" src tests
echo "== pytest"
# The installed package (not the source tree) is what the tests import.
"$tmp/venv/bin/python" -m pytest -q -p no:cacheprovider "$@" tests
