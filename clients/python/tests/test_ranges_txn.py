"""Ranges, lease listing and transactions (DESIGN.md, contract v3). Each test is skipped while
the server does not serve its route (set TURNSTILE_REQUIRE_V3=1 to fail instead)."""

from __future__ import annotations

import pytest

from conftest import require_route
from turnstile import (
    BadRequestError,
    Client,
    cmp_absent,
    cmp_fence,
    cmp_mod_revision,
    cmp_value,
    cmp_version,
    op_delete,
    op_get,
    op_incr,
    op_put,
)


def test_kv_range_pages(client: Client, name: str) -> None:
    require_route(client, "GET", f"/v1/kv?prefix={name}", "GET /v1/kv?prefix=")
    keys = [f"{name}/{i:02d}" for i in range(7)]
    for k in keys:
        client.put(k, k[-2:])
    client.put(f"{name}0-outside", "x")  # shares the prefix without the slash
    page = client.range(f"{name}/", limit=3)
    assert [kv.key for kv in page.items] == keys[:3] and page.more
    page2 = client.range(f"{name}/", after=page.items[-1].key, limit=3)
    assert [kv.key for kv in page2.items] == keys[3:6] and page2.more
    page3 = client.range(f"{name}/", after=page2.items[-1].key, limit=3)
    assert [kv.key for kv in page3.items] == keys[6:] and not page3.more
    assert page3.revision >= page.revision
    assert [kv.key for kv in client.scan(f"{name}/", page_size=2)] == keys
    assert page.items[0].value == "00"


def test_locks_by_prefix(client: Client, name: str) -> None:
    require_route(client, "GET", f"/v1/locks?prefix={name}", "GET /v1/locks?prefix=")
    with client.session(ttl_ms=5_000) as s:
        h1 = s.lock(f"{name}.a")
        s.lock(f"{name}.b")
        page = client.locks(f"{name}.")
        assert [li.name for li in page.items] == [f"{name}.a", f"{name}.b"]
        assert page.items[0].holders[0].token == h1.token
        first = client.locks(f"{name}.", limit=1)
        assert len(first.items) == 1 and first.more


def test_leases_lists_own_leases(client: Client) -> None:
    require_route(client, "GET", "/v1/leases", "GET /v1/leases")
    lease = client.grant_lease(5_000)
    listed = {x.lease_id: x for x in client.leases().items}
    assert lease.lease_id in listed and listed[lease.lease_id].ttl_ms == 5_000
    client.revoke_lease(lease.lease_id)
    assert lease.lease_id not in {x.lease_id for x in client.leases().items}


def test_txn_branches(client: Client, name: str) -> None:
    require_route(client, "POST", "/v1/txn", "POST /v1/txn")
    k, c = f"{name}/k", f"{name}.ctr"
    r = client.txn([cmp_absent(k)], [op_put(k, "v1"), op_incr(c, 2)], [op_get(k)])
    assert r.succeeded and r.revision > 0
    kv = client.get(k)
    assert kv is not None and kv.value == "v1" and client.counter(c) == 2
    # Now the key exists: the failure branch runs, and the success branch does not.
    r2 = client.txn([cmp_absent(k)], [op_put(k, "nope")], [op_get(k)])
    assert not r2.succeeded
    assert "v1" in repr(r2.results)
    kv = client.get(k)
    assert kv is not None and kv.value == "v1"
    # All compares are judged together.
    r3 = client.txn(
        [cmp_value(k, "v1"), cmp_version(k, 1), cmp_mod_revision(k, kv.mod_revision)],
        [op_delete(k)],
    )
    assert r3.succeeded and client.get(k) is None
    r4 = client.txn([cmp_value(k, "v1")], [op_put(k, "x")], [])
    assert not r4.succeeded and client.get(k) is None


def test_txn_fence_compare(client: Client, name: str) -> None:
    require_route(client, "POST", "/v1/txn", "POST /v1/txn")
    k = f"{name}/k"
    with client.lock(name) as hold:
        ok = client.txn([cmp_fence(hold.fence)], [op_put(k, "current")])
        assert ok.succeeded
    with client.lock(name) as newer:
        stale = client.txn([cmp_fence((name, hold.token))], [op_put(k, "stale")])
        assert not stale.succeeded
        assert newer.token > hold.token
    kv = client.get(k)
    assert kv is not None and kv.value == "current"


def test_txn_is_one_entry(client: Client, name: str) -> None:
    require_route(client, "POST", "/v1/txn", "POST /v1/txn")
    r = client.txn([], [op_put(f"{name}/a", "1"), op_put(f"{name}/b", "2")])
    a, b = client.get(f"{name}/a"), client.get(f"{name}/b")
    assert a is not None and b is not None
    assert a.mod_revision == b.mod_revision == r.revision
    with pytest.raises(BadRequestError):
        client.txn([{"bogus": True}], [])
