"""python-etcd3 against Turnstile's etcd port: every call below is etcd3's own API.

Usage: test_etcd3.py STARTUP_S_MAX PORT1 PORT2 PORT3 (the nodes' etcd ports).
"""

import sys
import time
import etcd3


def wait_for_leader(clients, startup_s_max):
    deadline = time.monotonic() + startup_s_max
    while True:
        try:
            leaders = {c.status().leader.id for c in clients}
            if len(leaders) == 1 and 0 not in leaders:
                return
        except Exception as e:  # not serving yet
            if time.monotonic() > deadline:
                raise SystemExit(f"no leader within {startup_s_max} s: {e}")
        if time.monotonic() > deadline:
            raise SystemExit(f"no agreed leader within {startup_s_max} s")
        time.sleep(0.2)


def main():
    startup_s_max = float(sys.argv[1])
    clients = [etcd3.client(host="127.0.0.1", port=int(p)) for p in sys.argv[2:5]]
    wait_for_leader(clients, startup_s_max)
    a, b, c = clients

    # Keys: a write through one node is read through the others (linearizable reads).
    a.put("app/x", "1")
    value, meta = b.get("app/x")
    assert value == b"1", value
    assert meta.version == 1 and meta.create_revision == meta.mod_revision > 0, vars(meta)
    c.put("app/y", b"\x80\xff")  # not text: stored and returned as the same bytes
    assert a.get("app/y")[0] == b"\x80\xff"
    assert sorted(k.key for _, k in b.get_prefix("app/")) == [b"app/x", b"app/y"]
    assert c.delete("app/y") is True and c.delete("app/y") is False

    # Transactions: equality compares, both branches, with a get in the failure branch.
    ok, _ = a.transaction(
        compare=[a.transactions.value("app/x") == "1"],
        success=[a.transactions.put("app/x", "2")],
        failure=[],
    )
    assert ok is True
    ok, responses = b.transaction(
        compare=[b.transactions.version("app/x") == 1],
        success=[b.transactions.put("app/x", "never")],
        failure=[b.transactions.get("app/x")],
    )
    assert ok is False and responses[0][0][0] == b"2", responses

    # Leases: keys go with their lease; the TTL is the one granted.
    lease = a.lease(30)
    b.put("svc/one", "up", lease=lease)
    assert lease.granted_ttl == 30 and 0 < lease.remaining_ttl <= 30
    assert [k for k in lease.keys] == [b"svc/one"]
    lease.refresh()
    lease.revoke()
    assert c.get("svc/one") == (None, None)

    # The lock recipe: a transaction creating the key with a binary uuid value, released by a
    # transaction comparing that value. (Waiting for a held lock needs Watch, not served yet,
    # so only uncontended acquires are exercised.)
    first = a.lock("res", ttl=10)
    assert first.acquire(timeout=5) and first.is_acquired()
    assert b.get("/locks/res")[0] == first.uuid, "the holder's binary uuid, as written"
    assert first.release() is True
    assert b.get("/locks/res") == (None, None)
    second = b.lock("res", ttl=10)
    assert second.acquire(timeout=5) and second.is_acquired()
    assert second.release() is True

    # Members and status.
    assert sorted(m.id for m in a.members) == [1, 2, 3]
    assert a.status().version == "3.5.0"
    print("etcd3: every check passed through three nodes")


if __name__ == "__main__":
    main()
