"""request_id idempotency, retries across endpoints, and which failures are retried."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List

import pytest

from cluster import Cluster, free_port
from proxy import Action, Proxy
from turnstile import (
    Client,
    LockHeldError,
    RequestIdReusedError,
    UnreachableError,
    new_request_id,
)


@pytest.fixture()
def proxies() -> Iterator[List[Proxy]]:
    made: List[Proxy] = []
    yield made
    for p in made:
        p.stop()


def test_same_request_id_same_answer(client: Client, name: str) -> None:
    rid = new_request_id()
    first = client.incr(name, 1, request_id=rid)
    again = client.incr(name, 1, request_id=rid)
    assert (again.value, again.revision) == (first.value, first.revision)
    assert client.counter(name) == 1, "the retry must not act twice"
    # A fresh id acts again.
    assert client.incr(name, 1).value == 2
    # The same id for a different request is refused and does nothing.
    with pytest.raises(RequestIdReusedError):
        client.incr(name, 7, request_id=rid)
    assert client.counter(name) == 2


def test_retried_acquire_returns_the_same_token(client: Client, name: str) -> None:
    lease = client.grant_lease(5_000)
    rid = new_request_id()
    g1 = client.acquire(name, lease.lease_id, request_id=rid)
    g2 = client.acquire(name, lease.lease_id, request_id=rid)
    assert (g2.token, g2.revision) == (g1.token, g1.revision)
    assert len(client.lock_info(name).holders) == 1
    # A refusal is an outcome too: another lease's try under one id keeps answering lock_held.
    other = client.grant_lease(5_000)
    rid2 = new_request_id()
    with pytest.raises(LockHeldError):
        client.acquire(name, other.lease_id, request_id=rid2)
    client.release(name, g1.token, lease.lease_id)
    with pytest.raises(LockHeldError):
        client.acquire(name, other.lease_id, request_id=rid2)
    client.revoke_lease(lease.lease_id)
    client.revoke_lease(other.lease_id)


def test_ambiguous_write_is_retried_with_the_same_request_id(
    cluster: Cluster, client: Client, name: str, proxies: List[Proxy]
) -> None:
    """The first attempt reaches the cluster and is applied, but its answer is lost (the
    connection drops). The client resends to the next endpoint with the same request_id and
    gets the stored outcome: the counter moved once."""
    dropped: List[str] = []

    def lose_first_answer(method: str, path: str, body: Dict[str, Any]) -> Action:
        if path.endswith("/incr") and not dropped:
            dropped.append(str(body.get("request_id")))
            return ("forward_drop", None)
        return ("forward", None)

    a = Proxy(cluster.nodes[0].url, lose_first_answer)
    b = Proxy(cluster.nodes[1].url)
    proxies += [a, b]
    with Client([a.addr, b.addr]) as c:
        got = c.incr(name, 1)
    assert dropped, "the first attempt went through the dropping proxy"
    assert got.value == 1
    assert client.counter(name) == 1, "the resend did not act a second time"
    resent = [body["request_id"] for _, p, body in b.seen if p.endswith("/incr")]
    assert resent == dropped, "the resend carried the first attempt's request_id"


def test_next_endpoint_on_connection_error_and_no_quorum(
    cluster: Cluster, name: str, proxies: List[Proxy]
) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there

    def no_quorum(method: str, path: str, body: Dict[str, Any]) -> Action:
        return ("answer", (503, {"code": "no_quorum", "message": "test: no leader"}))

    nq = Proxy(cluster.nodes[0].url, no_quorum)
    proxies.append(nq)
    with Client([dead, nq.addr, cluster.nodes[2].addr]) as c:
        assert c.incr(name, 3).value == 3
        assert c.preferred_endpoint == f"http://{cluster.nodes[2].addr}"
    assert nq.paths() == [f"/v1/counters/{name}/incr"], "no_quorum moved on after one try"


def test_a_4xx_is_final_and_not_retried(
    cluster: Cluster, name: str, proxies: List[Proxy]
) -> None:
    def held(method: str, path: str, body: Dict[str, Any]) -> Action:
        return ("answer", (409, {"code": "lock_held", "message": "test", "current_token": 9}))

    a = Proxy(cluster.nodes[0].url, held)
    b = Proxy(cluster.nodes[1].url)
    proxies += [a, b]
    with Client([a.addr, b.addr]) as c:
        with pytest.raises(LockHeldError) as e:
            c.acquire(name, 1)
    assert e.value.current_token == 9
    assert len(a.seen) == 1 and b.seen == []


def test_unreachable_cluster_gives_up_within_budget(name: str) -> None:
    with Client([f"127.0.0.1:{free_port()}"], retry_budget=0.5) as c:
        with pytest.raises(UnreachableError):
            c.counter(name)
