# Sourced by the docs' shell (docs_sh/mod.rs) inside the test's namespaces: makes the `sh`
# examples' `turnstile serve` and `turnstile restore` lines run on machines of their own.
#
# A machine is an address (10.0.0.1, ...): its data dir is "$DOCS_W/machines/<addr>", bind-mounted
# at /var/lib/turnstile for that machine's processes only. The rules:
# - `turnstile serve --id N --listen A ...` starts node N on machine A, in the background (its
#   log in "$DOCS_W/logs/<addr>.log"). If a node already runs there, the doc is replacing that
#   machine: the old node is stopped and the new one gets an empty disk.
# - For a new cluster (no `--initial-cluster-state existing`), the other members of
#   `--initial-cluster` are started too, on their own machines, with the same flags (`--id`,
#   `--listen` and `node-N.` certificate names changed; a missing node certificate is made by
#   the CA beside it), as an operator does on each machine. Then it waits until every node
#   answers, and until the doc's node is ready (a joining node: until it answers at all).
# - `turnstile restore --id N --initial-cluster ...` runs on N's machine.
# Every other command is the real binary.

docs_flag() { # NAME ARGS...: the value after --NAME
    local name=$1
    shift
    while [ $# -gt 0 ]; do
        if [ "$1" = "$name" ]; then
            echo "${2-}"
            return
        fi
        shift
    done
}

docs_member_addr() { # ID CLUSTER: the address of member ID in id=addr,id=addr
    local m
    for m in ${2//,/ }; do
        if [ "${m%%=*}" = "$1" ]; then
            echo "${m#*=}"
            return
        fi
    done
}

docs_running() { # HOST
    local pidfile="$DOCS_W/machines/$1.pid"
    [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

docs_on_machine() { # HOST CMD...: becomes CMD with HOST's disk at /var/lib/turnstile
    # It execs, so call it in a subshell: `( ... )`, or in the background, where $! is then
    # CMD itself (unshare and sh exec into it).
    local disk="$DOCS_W/machines/$1"
    shift
    mkdir -p "$disk"
    exec unshare --mount --propagation private -- \
        sh -c 'mount --bind "$0" /var/lib/turnstile && exec "$@"' "$disk" "$@"
}

docs_start() { # HOST ARGS...: a node on HOST (replacing the one running there)
    local host=$1 pidfile="$DOCS_W/machines/$1.pid" pid
    shift
    if docs_running "$host"; then
        pid=$(cat "$pidfile")
        kill -TERM "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        rm -rf "${DOCS_W:?}/machines/$host"
    fi
    docs_on_machine "$host" "$DOCS_BIN" "$@" >>"$DOCS_W/logs/$host.log" 2>&1 &
    echo $! >"$pidfile"
}

docs_answers() { # ADDR CA: the HTTP status of /readyz (000: no answer)
    if [ -n "$2" ]; then
        curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$2" "https://$1/readyz"
    else
        curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$1/readyz"
    fi
}

docs_serve() { # serve ARGS...
    local id listen cluster state ca m peer addr arg
    id=$(docs_flag --id "$@")
    listen=$(docs_flag --listen "$@")
    cluster=$(docs_flag --initial-cluster "$@")
    state=$(docs_flag --initial-cluster-state "$@")
    ca=$(docs_flag --tls-ca "$@")
    docs_start "${listen%:*}" "$@"
    local started=("$listen")
    if [ "$state" != existing ]; then
        for m in ${cluster//,/ }; do
            peer=${m%%=*}
            addr=${m#*=}
            if [ "$peer" = "$id" ] || docs_running "${addr%:*}"; then
                continue
            fi
            local args=() prev=""
            for arg in "$@"; do
                case "$prev" in
                    --id) arg=$peer ;;
                    --listen) arg=$addr ;;
                esac
                arg=${arg//node-$id./node-$peer.}
                if [[ "$arg" == *node-$peer.crt && ! -f "$arg" ]]; then
                    command turnstile certs create-node --certs-dir "$(dirname "$arg")" \
                        --id "$peer" --host "${addr%:*}" >/dev/null || return 1
                fi
                args+=("$arg")
                prev=$arg
            done
            docs_start "${addr%:*}" "${args[@]}"
            started+=("$addr")
        done
    fi
    for _ in $(seq 600); do
        local all=yes
        for addr in "${started[@]}"; do
            [ "$(docs_answers "$addr" "$ca")" != 000 ] || all=""
        done
        if [ -n "$all" ] && { [ "$state" = existing ] || [ "$(docs_answers "$listen" "$ca")" = 200 ]; }; then
            return 0
        fi
        sleep 0.1
    done
    echo "docs: the node at $listen did not become ready; its log:" >&2
    tail -n 20 "$DOCS_W/logs/${listen%:*}.log" >&2
    return 1
}

docs_restore() { # restore ARGS...
    local id cluster addr
    id=$(docs_flag --id "$@")
    cluster=$(docs_flag --initial-cluster "$@")
    addr=$(docs_member_addr "$id" "$cluster")
    if [ -z "$addr" ]; then
        echo "docs: restore --id $id: not in --initial-cluster" >&2
        return 1
    fi
    if docs_running "${addr%:*}"; then
        echo "docs: restore on ${addr%:*}, where a node runs" >&2
        return 1
    fi
    (docs_on_machine "${addr%:*}" "$DOCS_BIN" "$@")
}

turnstile() {
    case "${1-}" in
        serve) docs_serve "$@" ;;
        restore) docs_restore "$@" ;;
        *) command turnstile "$@" ;;
    esac
}

# What a block that needs a running cluster finds, when no block of its file started one: the
# README's secure cluster on 10.0.0.1-3, its certificates in certs/ (kept if already there).
docs_given_cluster() {
    local n
    [ -f certs/ca.crt ] || command turnstile certs create-ca --certs-dir certs >/dev/null
    [ -f certs/client-root.crt ] ||
        command turnstile certs create-client --certs-dir certs --user root >/dev/null
    [ -f certs/node-1.crt ] ||
        command turnstile certs create-node --certs-dir certs --id 1 --host 10.0.0.1 >/dev/null
    turnstile serve --id 1 --listen 10.0.0.1:7001 --data-dir /var/lib/turnstile \
        --initial-cluster 1=10.0.0.1:7001,2=10.0.0.2:7001,3=10.0.0.3:7001 \
        --cluster-secret "$SECRET" \
        --tls-ca certs/ca.crt --tls-cert certs/node-1.crt --tls-key certs/node-1.key
}

# What a block naming /etc/turnstile finds: the secret and a CA with node 1's certificate.
docs_given_etc() {
    mkdir -p /etc/turnstile
    printf '%s\n' "$SECRET" >/etc/turnstile/secret
    command turnstile certs create-ca --certs-dir /etc/turnstile/certs >/dev/null &&
        command turnstile certs create-node --certs-dir /etc/turnstile/certs --id 1 \
            --host 10.0.0.1 >/dev/null
}

# What a block naming 127.0.0.1:7001 finds: the README's `turnstile dev` cluster.
docs_given_dev() {
    command turnstile dev --data-dir "$DOCS_W/dev" >>"$DOCS_W/logs/dev.log" 2>&1 &
    for _ in $(seq 600); do
        [ "$(docs_answers 127.0.0.1:7001 "")" = 200 ] && return 0
        sleep 0.1
    done
    echo "docs: turnstile dev did not become ready" >&2
    return 1
}
