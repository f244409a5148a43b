#!/usr/bin/env bash
# Schemathesis against a live 3-node cluster of $TURNSTILE_BINARY, driven by the cluster's own
# `/v1/openapi.json`: zero 5xx, every response conforming to the document (status, content
# type, headers, body schema), and every documented operation exercised. Exits non-zero on
# any failure, and prints the operations it covered.
#
#   TURNSTILE_BINARY=/path/to/turnstile tests/schemathesis/run.sh [extra schemathesis args...]
#
# Env: PYTHON (default python3), SCHEMATHESIS_MAX_EXAMPLES (per operation and phase, default
# 25), SCHEMATHESIS_SEED (default: random, printed), TURNSTILE_KEEP_LOGS=1 (keep the nodes'
# logs and the reports, and print where).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
# Pinned: a new release may add checks or change what they mean.
schemathesis_version="4.32.5"
max_examples="${SCHEMATHESIS_MAX_EXAMPLES:-25}"
seed="${SCHEMATHESIS_SEED:-$RANDOM$RANDOM}"
startup_s_max=60
run_s_max=900

if [[ -z "${TURNSTILE_BINARY:-}" || ! -x "${TURNSTILE_BINARY:-}" ]]; then
    echo "run.sh: set TURNSTILE_BINARY to a built turnstile binary" >&2
    exit 2
fi
binary="$(cd "$(dirname "$TURNSTILE_BINARY")" && pwd)/$(basename "$TURNSTILE_BINARY")"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/turnstile-schemathesis.XXXXXX")"
pids=()
cleanup() {
    local rc=$?
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [[ $rc -ne 0 ]]; then
        for log in "$tmp"/node-*.log; do
            [[ -f "$log" ]] || continue
            echo "--- last lines of $(basename "$log")" >&2
            tail -n 20 "$log" >&2
        done
    fi
    if [[ "${TURNSTILE_KEEP_LOGS:-}" == 1 ]]; then
        echo "logs and reports kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT

echo "== venv: schemathesis $schemathesis_version"
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "schemathesis==$schemathesis_version"
py="$tmp/venv/bin/python"

# Free loopback ports chosen now (the same approach as clients/python/tests/cluster.py).
ports=()
for _ in 1 2 3; do
    ports+=("$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')")
done
initial="1=127.0.0.1:${ports[0]},2=127.0.0.1:${ports[1]},3=127.0.0.1:${ports[2]}"
secret="$("$py" -c 'import secrets; print(secrets.token_hex(16))')"

echo "== cluster: $initial"
for i in 1 2 3; do
    mkdir -p "$tmp/node-$i"
    TURNSTILE_CLUSTER_SECRET="$secret" "$binary" serve --id "$i" \
        --listen "127.0.0.1:${ports[$((i - 1))]}" --data-dir "$tmp/node-$i" \
        --initial-cluster "$initial" </dev/null >"$tmp/node-$i.log" 2>&1 &
    pids+=("$!")
done

# Every node ready, then the leader (backups are served by the leader alone, and a write
# through a follower is the same API one hop later).
leader_url="$("$py" - "$startup_s_max" "${ports[@]}" <<'PY'
import json, sys, time, urllib.request
deadline = time.monotonic() + float(sys.argv[1])
urls = [f"http://127.0.0.1:{p}" for p in sys.argv[2:]]
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read())
    except Exception as e:
        return None, None
while True:
    ready = all(get(u + "/readyz")[0] == 200 for u in urls)
    leaders = [u for u in urls if ready and (get(u + "/v1/cluster")[1] or {}).get("state") == "Leader"]
    if leaders:
        print(leaders[0])
        break
    if time.monotonic() > deadline:
        sys.exit("the cluster was not ready with a leader in time")
    time.sleep(0.1)
PY
)"
echo "leader: $leader_url"

echo "== schemathesis (seed $seed, $max_examples examples per operation and phase)"
report="$tmp/report"
set +e
(
    # Schemathesis keeps a cache in its working directory: the temp dir, not the repo.
    cd "$tmp"
    TURNSTILE_URL="$leader_url" TURNSTILE_HOOKS_SEED="$seed" SCHEMATHESIS_HOOKS=hooks \
        PYTHONPATH="$here" timeout "$run_s_max" "$tmp/venv/bin/schemathesis" \
        --config-file "$here/schemathesis.toml" run \
        --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
        --phases examples,coverage,fuzzing \
        --max-examples "$max_examples" --seed "$seed" \
        --request-timeout 10 \
        --generation-with-security-parameters false \
        --report junit --report-junit-path "$report/junit.xml" \
        "$@" "$leader_url/v1/openapi.json"
)
rc=$?
set -e

# Every operation in the document must have been exercised: a test case in the report that
# was not skipped. The document's own route is the one Schemathesis loaded (and checked as
# OpenAPI 3.1) before testing, and does not list among its operations.
"$py" - "$leader_url/v1/openapi.json" "$report/junit.xml" <<'PY' || rc=1
import json, sys, urllib.request
import xml.etree.ElementTree as ET
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    doc = json.loads(r.read())
documented = {f"{m.upper()} {p}" for p, item in doc["paths"].items() for m in item}
covered = {"GET /v1/openapi.json"}
for case in ET.parse(sys.argv[2]).getroot().iter("testcase"):
    if case.find("skipped") is None:
        covered.add(case.get("name"))
missing = sorted(documented - covered)
print(f"covered {len(documented & covered)} of {len(documented)} operations:")
for op in sorted(documented & covered):
    print(f"  {op}")
if missing:
    print("NOT exercised:", *missing, sep="\n  ")
    sys.exit(1)
PY
exit "$rc"
