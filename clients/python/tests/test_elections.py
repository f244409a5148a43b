"""Elections (DESIGN.md, contract v3). Skipped while the server does not serve
``/v1/elections`` (set TURNSTILE_REQUIRE_V3=1 to fail instead)."""

from __future__ import annotations

import threading
from typing import List

import pytest

from cluster import wait_for
from conftest import require_route
from turnstile import (
    Client,
    FencedError,
    Leadership,
    NotLeaderError,
    WatchEvent,
    cmp_fence,
    op_put,
)


@pytest.fixture(autouse=True)
def _served(client: Client) -> None:
    require_route(client, "GET", "/v1/elections/probe", "GET /v1/elections/{name}")


def test_campaign_proclaim_resign(client: Client, name: str) -> None:
    assert client.election(name).leader is None
    with client.session(ttl_ms=5_000) as a, client.session(ttl_ms=5_000) as b:
        lead = client.campaign(name, a.lease_id, "node-a", wait_ms=0)
        assert lead.value == "node-a" and lead.lease_id == a.lease_id and lead.token > 0
        info = client.election(name)
        assert info.leader is not None
        assert (info.leader.value, info.leader.token) == ("node-a", lead.token)

        client.proclaim(name, a.lease_id, lead.token, "node-a v2")
        leader = client.election(name).leader
        assert leader is not None and leader.value == "node-a v2"

        # Not the leader: proclaim and resign are refused.
        with pytest.raises(NotLeaderError):
            client.proclaim(name, b.lease_id, lead.token, "usurper")
        with pytest.raises(NotLeaderError):
            client.resign(name, b.lease_id, lead.token)

        # B campaigns (queued behind A, or granted at once if A's resign commits first: the
        # contract exposes no election queue to wait on); A resigns; B leads, larger token.
        won: List[Leadership] = []
        t = threading.Thread(
            target=lambda: won.append(client.campaign(name, b.lease_id, "node-b", wait_ms=10_000))
        )
        t.start()
        client.resign(name, a.lease_id, lead.token)
        t.join(15)
        assert won and won[0].value == "node-b" and won[0].token > lead.token
        leader = client.election(name).leader
        assert leader is not None and leader.lease_id == b.lease_id
        # A's old token no longer proclaims.
        with pytest.raises(NotLeaderError):
            client.proclaim(name, a.lease_id, lead.token, "stale")


def test_leadership_ends_with_the_lease(client: Client, name: str) -> None:
    s = client.session(ttl_ms=2_000)
    client.campaign(name, s.lease_id, "x")
    s.close()  # revokes the lease
    assert client.election(name).leader is None


def test_leader_token_fences(client: Client, name: str) -> None:
    with client.session(ttl_ms=5_000) as s:
        lead = client.campaign(name, s.lease_id, "v")
        client.put(f"{name}/k", "ok", fence=(name, lead.token))
        with pytest.raises(FencedError):
            client.put(f"{name}/k", "stale", fence=(name, lead.token - 1))
        r = client.txn([cmp_fence((name, lead.token))], [op_put(f"{name}/k", "txn")])
        assert r.succeeded


def test_watch_carries_election_events(client: Client, name: str) -> None:
    events: List[WatchEvent] = []
    with client.watch(prefix=name) as w:
        def run() -> None:
            for ev in w:
                events.append(ev)
                if ev.kind == "election_resigned":
                    return

        t = threading.Thread(target=run, daemon=True)
        t.start()
        wait_for("the watch to connect", lambda: w.endpoint is not None)
        with client.session(ttl_ms=5_000) as s:
            lead = client.campaign(name, s.lease_id, "v")
            client.resign(name, s.lease_id, lead.token)
        t.join(10)
    kinds = [e.kind for e in events]
    assert "election_leader" in kinds and "election_resigned" in kinds, kinds
