"""Sessions: keepalive, and the lost signal."""

from __future__ import annotations

import time

import pytest

from cluster import Cluster, wait_for
from proxy import Proxy
from turnstile import (
    Client,
    LeaseNotFoundError,
    LostReason,
    SessionLostError,
)


def test_keepalive_keeps_a_short_lease_alive(client: Client, name: str) -> None:
    # A 3 s TTL, not 1.5 s: a keepalive sent TTL/3 after the last confirmed one must be
    # confirmed before the local deadline, TTL - TTL/10 after it, so it may take 0.57 x TTL.
    # At the end of a CI run on a loaded 2-core VM one took longer than the 0.85 s of a 1.5 s
    # TTL (2026-12-02), and the session rightly reported deadline_passed. This test checks
    # the schedule, not the VM's worst pause.
    with client.session(ttl_ms=3_000) as s:
        h = s.lock(name)
        start = s.deadline
        # Two TTLs: the lease would be long gone without the background keepalives.
        wait_for("two TTLs to pass", lambda: time.monotonic() > start + 6.0, timeout=15)
        assert not s.lost.is_set(), s.lost_reason
        assert s.deadline > start, "keepalives moved the local deadline"
        info = client.lease(s.lease_id)
        assert info.locks == [name]
        assert [x.token for x in client.lock_info(name).holders] == [h.token]
    assert s.lost_reason is LostReason.CLOSED


def test_lost_when_the_lease_is_revoked_elsewhere(client: Client, name: str) -> None:
    s = client.session(ttl_ms=1_500)
    hold = s.lock(name)
    client.revoke_lease(s.lease_id)  # e.g. an operator, or the lease expired while paused
    assert hold.lost.wait(5), "the next keepalive learns lease_not_found"
    assert s.lost_reason is LostReason.LEASE_NOT_FOUND
    assert client.lock_info(name).holders == []
    with pytest.raises(SessionLostError):
        s.lock(name)
    hold.release()  # nothing to release: not an error
    s.close()


def test_lost_when_keepalives_cannot_reach_the_cluster(
    cluster: Cluster, client: Client, name: str
) -> None:
    """The client is cut off from the cluster (its only endpoint stops answering): lost fires
    at the local deadline, which falls before the lease's expiry on the cluster."""
    proxy = Proxy(cluster.nodes[0].url)
    try:
        with Client([proxy.addr], retry_budget=1.0) as cut:
            s = cut.session(ttl_ms=1_000)
            hold = s.lock(name)
            assert not hold.lost.is_set()
            proxy.stop()
            t0 = time.monotonic()
            assert hold.lost.wait(5)
            assert s.lost_reason is LostReason.DEADLINE_PASSED
            # The local deadline is at most one TTL after the last confirmed keepalive (sent
            # before t0); the slack is for thread scheduling on a loaded machine.
            assert time.monotonic() - t0 < 1.0 + 1.0, "fires within about one TTL"

            # The cluster, seen by a client that can reach it, expires the lease after that.
            def gone() -> bool:
                try:
                    client.lease(s.lease_id)
                    return False
                except LeaseNotFoundError:
                    return True

            wait_for("the lease to expire on the cluster", gone, timeout=10)
            assert client.lock_info(name).holders == []
    finally:
        proxy.stop()
