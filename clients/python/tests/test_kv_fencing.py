"""Keys, conditions, counters, and the fenced-write story."""

from __future__ import annotations

import time

import pytest

from cluster import wait_for
from turnstile import (
    Client,
    CompareFailedError,
    FencedError,
    IfAbsent,
    IfModRevision,
    IfValue,
    LeaseNotFoundError,
)


def test_put_get_delete_and_conditions(client: Client, name: str) -> None:
    key = f"{name}/cfg"
    assert client.get(key) is None
    w1 = client.put(key, "v1", if_=IfAbsent())
    kv = client.get(key)
    assert kv is not None and kv.value == "v1" and kv.version == 1
    assert kv.create_revision == kv.mod_revision == w1.revision
    with pytest.raises(CompareFailedError):
        client.put(key, "again", if_=IfAbsent())
    with pytest.raises(CompareFailedError):
        client.put(key, "v2", if_=IfModRevision(w1.revision - 1))
    w2 = client.put(key, "v2", if_=IfModRevision(w1.revision))
    with pytest.raises(CompareFailedError):
        client.put(key, "v3", if_=IfValue("v1"))
    client.put(key, "v3", if_=IfValue("v2"))
    kv = client.get(key)
    assert kv is not None and kv.value == "v3" and kv.version == 3 and kv.mod_revision > w2.revision
    with pytest.raises(CompareFailedError):
        client.delete(key, if_=IfValue("v2"))
    d = client.delete(key, if_={"value": "v3"})  # the raw JSON form works too
    assert d.deleted
    assert client.get(key) is None
    assert client.delete(key).deleted is False


def test_key_bound_to_lease_goes_with_it(client: Client, name: str) -> None:
    key = f"{name}/eph"
    lease = client.grant_lease(5_000)
    client.put(key, "x", lease_id=lease.lease_id)
    assert client.lease(lease.lease_id).keys == [key]
    client.revoke_lease(lease.lease_id)
    assert client.get(key) is None
    with pytest.raises(LeaseNotFoundError):
        client.lease(lease.lease_id)


def test_counters(client: Client, name: str) -> None:
    assert client.counter(name) == 0
    assert client.incr(name).value == 1
    assert client.incr(name, 5).value == 6
    assert client.incr(name, -2).value == 4
    assert client.counter(name) == 4


def test_fenced_write_story(client: Client, name: str) -> None:
    """A holder stops renewing (a long pause), its lease expires, another holder takes the
    lock. The stale holder's fenced write is refused; the new holder's lands. Negative
    control: the same stale write without the fence is accepted: the fence, not luck, is what
    protected the key."""
    lock, key = name, f"{name}/report"

    # Holder A: a bare lease that nobody renews, as if A were paused past its TTL.
    lease_a = client.grant_lease(1_000)
    a = client.acquire(lock, lease_a.lease_id)
    client.put(key, "from A, while current", fence=(lock, a.token))

    def a_expired() -> bool:
        try:
            client.lease(lease_a.lease_id)
            return False
        except LeaseNotFoundError:
            return True

    t0 = time.monotonic()
    wait_for("A's lease to expire", a_expired, timeout=10)
    print(f"lease of A expired after {time.monotonic() - t0:.2f} s")

    # Even before anyone else takes the lock, A's token is no longer current.
    with pytest.raises(FencedError) as early:
        client.put(key, "from A, expired", fence=(lock, a.token))
    assert early.value.current_token is None

    with client.lock(lock, wait_ms=5_000) as b:
        assert b.token > a.token
        # A wakes up and writes with its old token: refused, naming B's token.
        with pytest.raises(FencedError) as stale:
            client.put(key, "from A, stale", fence=(lock, a.token))
        assert stale.value.current_token == b.token
        with pytest.raises(FencedError):
            client.delete(key, fence=(lock, a.token))
        # B's fenced write lands.
        client.put(key, "from B", fence=b.fence)
        kv = client.get(key)
        assert kv is not None and kv.value == "from B"

        # Negative control: without the fence the stale write is accepted.
        client.put(key, "from A, unfenced")
        kv = client.get(key)
        assert kv is not None and kv.value == "from A, unfenced"


def test_shared_grant_cannot_fence(client: Client, name: str) -> None:
    with client.lock(name, mode="shared") as r:
        with pytest.raises(FencedError):
            client.put(f"{name}/k", "x", fence=r.fence)
