#!/usr/bin/env bash
# The Python `etcd3` package (python-etcd3, from PyPI, pinned) against the etcd port of a live
# 3-node cluster of $TURNSTILE_BINARY: keys, prefixes, leases and their keys, transactions,
# its lock recipe (a transaction on a binary value), member list and status, through every
# node. Exits non-zero on any failure.
#
#   TURNSTILE_BINARY=/path/to/turnstile tests/etcd3/run.sh
#
# Env: PYTHON (default python3), TURNSTILE_KEEP_LOGS=1 (keep the nodes' logs, print where).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
startup_s_max=60

if [[ -z "${TURNSTILE_BINARY:-}" || ! -x "${TURNSTILE_BINARY:-}" ]]; then
    echo "run.sh: set TURNSTILE_BINARY to a built turnstile binary" >&2
    exit 2
fi
binary="$(cd "$(dirname "$TURNSTILE_BINARY")" && pwd)/$(basename "$TURNSTILE_BINARY")"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/turnstile-etcd3.XXXXXX")"
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
        echo "logs kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT

echo "== venv: etcd3 0.12.0"
"$python" -m venv "$tmp/venv"
# Pinned as tested. etcd3 0.12's generated protobuf modules predate protobuf 4, hence the
# pure-Python protobuf runtime below.
"$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "etcd3==0.12.0" "grpcio==1.85.3" "protobuf==7.36.2" "tenacity==9.2.1" "six==1.17.0"
py="$tmp/venv/bin/python"
export PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python

# Free loopback ports chosen now, two per node (HTTP and the etcd port).
ports=()
for _ in 1 2 3 4 5 6; do
    ports+=("$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')")
done
initial="1=127.0.0.1:${ports[0]},2=127.0.0.1:${ports[1]},3=127.0.0.1:${ports[2]}"
secret="$("$py" -c 'import secrets; print(secrets.token_hex(16))')"

echo "== cluster: $initial, etcd ports ${ports[3]} ${ports[4]} ${ports[5]}"
for i in 1 2 3; do
    mkdir -p "$tmp/node-$i"
    TURNSTILE_CLUSTER_SECRET="$secret" "$binary" serve --id "$i" \
        --listen "127.0.0.1:${ports[$((i - 1))]}" \
        --etcd-listen "127.0.0.1:${ports[$((i + 2))]}" --data-dir "$tmp/node-$i" \
        --initial-cluster "$initial" </dev/null >"$tmp/node-$i.log" 2>&1 &
    pids+=("$!")
done

timeout "$((startup_s_max + 120))" "$py" "$here/test_etcd3.py" "$startup_s_max" \
    "${ports[3]}" "${ports[4]}" "${ports[5]}"
