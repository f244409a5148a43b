"""The :class:`Client`: the typed HTTP API of a Turnstile cluster.

Every mutating call carries a ``request_id`` (a fresh random one unless the caller passes
``request_id=``), so a retry after an unknown outcome is answered with the first outcome and never
acts twice. Reads and writes go to any node (followers relay to the leader); the client keeps
using the node that last answered and moves to the next one on connection errors and on the
server's retryable answers (``no_quorum``, ``not_member``, ``unavailable``, ``indeterminate``).
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Union,
)

from . import _transport as t
from .errors import KeyNotFoundError, ProtocolError
from .types import (
    JSON,
    ClusterInfo,
    Condition,
    CounterValue,
    Deleted,
    ElectionInfo,
    Fence,
    FenceCheck,
    Grant,
    KeyValue,
    Keepalive,
    KvPage,
    Leadership,
    LeaseGrant,
    LeaseInfo,
    LeaseList,
    LockInfo,
    LockPage,
    MultiGrant,
    TxnResult,
    Written,
    condition_json,
    fence_json,
)

if TYPE_CHECKING:
    from .session import Hold, Session
    from .watch import Watch

#: HTTP timeout of one attempt (s): above the server's write deadline (5 s) plus a follower's
#: forwarding margin (0.5 s), so the server's own answer (even ``504``) normally arrives first.
REQUEST_TIMEOUT_S_DEFAULT = 7.0
#: How long a call keeps retrying (s), beyond a waiting acquire's own wait.
RETRY_BUDGET_S_DEFAULT = 10.0
#: TCP connect timeout (s): a dead endpoint is skipped quickly.
CONNECT_TIMEOUT_S_DEFAULT = 1.0

IfArg = Optional[Union[Condition, Mapping[str, Any]]]


def _ms(seconds_or_ms: Optional[int]) -> int:
    return 0 if seconds_or_ms is None else int(seconds_or_ms)


def _obj(answer: Any, what: str) -> JSON:
    if not isinstance(answer, dict):
        raise ProtocolError(f"{what}: expected a JSON object, got {answer!r}")
    return answer


class Client:
    """A Turnstile client. Thread-safe: share one per process.

    ``endpoints``: ``"ip:port"``, ``"http://host:port"`` or ``"https://host:port"``. With
    ``ca`` (the cluster CA's PEM file, the only CA trusted) a bare ``ip:port`` means https;
    ``cert``/``key`` add a client certificate; ``token`` is sent as ``Authorization: Bearer``
    (refused over plain HTTP to a host other than loopback).
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        ca: Optional[str] = None,
        cert: Optional[str] = None,
        key: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: float = REQUEST_TIMEOUT_S_DEFAULT,
        retry_budget: float = RETRY_BUDGET_S_DEFAULT,
        connect_timeout: float = CONNECT_TIMEOUT_S_DEFAULT,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = [e for e in endpoints.split(",")]
        self._t = t.Transport(
            list(endpoints),
            ca=ca,
            cert=cert,
            key=key,
            token=token,
            request_timeout=request_timeout,
            retry_budget=retry_budget,
            connect_timeout=connect_timeout,
        )

    # -- plumbing -------------------------------------------------------------------------

    @property
    def endpoints(self) -> List[str]:
        return list(self._t.endpoints.urls)

    @property
    def preferred_endpoint(self) -> str:
        """The endpoint the next request goes to first."""
        return self._t.endpoints.current()[1]

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, req: t.Request) -> JSON:
        return _obj(self._t.send(req), req.path)

    # -- leases ---------------------------------------------------------------------------

    def grant_lease(self, ttl_ms: int, *, request_id: Optional[str] = None) -> LeaseGrant:
        """Grants a lease of ``ttl_ms`` (1,000 to 3,600,000)."""
        req = t.write("POST", "/v1/leases", {"ttl_ms": ttl_ms}, request_id)
        return LeaseGrant.parse(self._send(req))

    def keepalive(self, lease_id: int) -> Keepalive:
        """Renews a lease once (sessions do this in the background). Takes no ``request_id``:
        repeating it is harmless."""
        req = t.Request("POST", f"/v1/leases/{lease_id}/keepalive", mutating=True)
        return Keepalive.parse(self._send(req))

    def revoke_lease(self, lease_id: int, *, request_id: Optional[str] = None) -> Written:
        """Ends a lease now: releases its locks, deletes its keys."""
        req = t.write("DELETE", f"/v1/leases/{lease_id}", {}, request_id)
        return Written.parse(self._send(req))

    def lease(self, lease_id: int) -> LeaseInfo:
        """A linearizable read of a lease (``LeaseNotFoundError`` once it is gone)."""
        return LeaseInfo.parse(self._send(t.read(f"/v1/leases/{lease_id}")))

    def leases(self) -> LeaseList:
        """Contract v3: the caller's own live leases (root: all)."""
        return LeaseList.parse(self._send(t.read("/v1/leases")))

    def session(self, ttl_ms: int = 10_000) -> "Session":
        """A lease kept alive on a background thread; see :class:`turnstile.Session`."""
        from .session import Session

        return Session(self, ttl_ms=ttl_ms)

    # -- locks ----------------------------------------------------------------------------

    def acquire(
        self,
        name: str,
        lease_id: int,
        *,
        wait_ms: int = 0,
        mode: str = "exclusive",
        permits: Optional[int] = None,
        request_id: Optional[str] = None,
    ) -> Grant:
        """Acquires ``name`` under ``lease_id``, waiting in the lock's FIFO queue up to
        ``wait_ms`` (0: try once). A retry after an unknown outcome reuses the request id, so
        it re-attaches to the same queue entry and never acquires twice."""
        body: JSON = {"lease_id": lease_id, "wait_ms": _ms(wait_ms)}
        if mode != "exclusive":
            body["mode"] = mode
        if permits is not None:
            body["permits"] = permits
        req = t.write("POST", f"/v1/locks/{t.encode_path(name)}/acquire", body, request_id)
        req.server_wait = _ms(wait_ms) / 1000.0
        return Grant.parse(self._send(req))

    def release(
        self, name: str, token: int, lease_id: int, *, request_id: Optional[str] = None
    ) -> Written:
        """Releases the hold ``{token, lease_id}`` of ``name`` (``NotHolderError`` if this is
        not a current hold)."""
        body = {"token": token, "lease_id": lease_id}
        req = t.write("POST", f"/v1/locks/{t.encode_path(name)}/release", body, request_id)
        return Written.parse(self._send(req))

    def acquire_many(
        self,
        names: Iterable[str],
        lease_id: int,
        *,
        wait_ms: int = 0,
        request_id: Optional[str] = None,
    ) -> MultiGrant:
        """Takes 1 to 64 locks, exclusive, all or nothing, in one entry (one shared token)."""
        body = {"names": list(names), "lease_id": lease_id, "wait_ms": _ms(wait_ms)}
        req = t.write("POST", "/v1/locks/acquire-many", body, request_id)
        req.server_wait = _ms(wait_ms) / 1000.0
        return MultiGrant.parse(self._send(req))

    def lock_info(self, name: str) -> LockInfo:
        """A linearizable read of a lock: holders (grant order) and waiters (queue order)."""
        return LockInfo.parse(self._send(t.read(f"/v1/locks/{t.encode_path(name)}")), name)

    def locks(
        self, prefix: str = "", *, after: Optional[str] = None, limit: Optional[int] = None
    ) -> LockPage:
        """Contract v3: one page of the locks whose names start with ``prefix``."""
        params = t.query({"prefix": prefix, "after": after, "limit": limit})
        return LockPage.parse(self._send(t.read("/v1/locks", params)))

    def fence_check(self, name: str, token: int, cluster_id: str) -> FenceCheck:
        """A diagnostic only: the answer can be stale by the time it is acted on. Fence with
        ``put(..., fence=hold.fence)`` instead."""
        body = {"name": name, "token": token, "cluster_id": cluster_id}
        return FenceCheck.parse(self._send(t.Request("POST", "/v1/fence/check", body)))

    def lock(
        self,
        name: str,
        *,
        wait_ms: int = 0,
        mode: str = "exclusive",
        permits: Optional[int] = None,
        ttl_ms: int = 10_000,
        session: Optional["Session"] = None,
    ) -> "Hold":
        """Acquires ``name`` and returns a :class:`turnstile.Hold` (a context manager that
        releases on exit). Without ``session`` a session of ``ttl_ms`` is started for this hold
        and closed (its lease revoked) when the hold ends."""
        from .session import Session

        own = session is None
        s = Session(self, ttl_ms=ttl_ms) if session is None else session
        try:
            hold = s.lock(name, wait_ms=wait_ms, mode=mode, permits=permits)
        except BaseException:
            if own:
                s.close()
            raise
        hold._owns_session = own
        return hold

    # -- keys -----------------------------------------------------------------------------

    def get(self, key: str) -> Optional[KeyValue]:
        """A linearizable read of a key; ``None`` if absent."""
        try:
            return KeyValue.parse(self._send(t.read(f"/v1/kv/{t.encode_path(key)}")))
        except KeyNotFoundError:
            return None

    def put(
        self,
        key: str,
        value: str,
        *,
        lease_id: Optional[int] = None,
        if_: IfArg = None,
        fence: Optional[Fence] = None,
        request_id: Optional[str] = None,
    ) -> Written:
        """Writes a key. ``if_``: :class:`IfAbsent`, :class:`IfModRevision` or
        :class:`IfValue` (``CompareFailedError`` otherwise). ``fence=(lock, token)`` (pass
        ``hold.fence``): applied only while that token is the lock's current exclusive grant,
        else ``FencedError`` and nothing is written."""
        body: JSON = {"value": value}
        if lease_id is not None:
            body["lease_id"] = lease_id
        if if_ is not None:
            body["if"] = condition_json(if_)
        if fence is not None:
            body["fence"] = fence_json(fence)
        req = t.write("PUT", f"/v1/kv/{t.encode_path(key)}", body, request_id)
        return Written.parse(self._send(req))

    def delete(
        self,
        key: str,
        *,
        if_: IfArg = None,
        fence: Optional[Fence] = None,
        request_id: Optional[str] = None,
    ) -> Deleted:
        """Deletes a key (``deleted=False`` if it was absent), under the same guards as
        :meth:`put`."""
        body: JSON = {}
        if if_ is not None:
            body["if"] = condition_json(if_)
        if fence is not None:
            body["fence"] = fence_json(fence)
        req = t.write("DELETE", f"/v1/kv/{t.encode_path(key)}", body, request_id)
        return Deleted.parse(self._send(req))

    def range(
        self, prefix: str = "", *, after: Optional[str] = None, limit: Optional[int] = None
    ) -> KvPage:
        """Contract v3: one page of the keys starting with ``prefix``, after key ``after``."""
        params = t.query({"prefix": prefix, "after": after, "limit": limit})
        return KvPage.parse(self._send(t.read("/v1/kv", params)))

    def scan(self, prefix: str = "", *, page_size: int = 100) -> List[KeyValue]:
        """Contract v3: every key under ``prefix``, page after page."""
        out: List[KeyValue] = []
        after: Optional[str] = None
        while True:
            page = self.range(prefix, after=after, limit=page_size)
            out.extend(page.items)
            if not page.more or not page.items:
                return out
            after = page.items[-1].key

    # -- counters -------------------------------------------------------------------------

    def incr(self, name: str, by: int = 1, *, request_id: Optional[str] = None) -> CounterValue:
        """Adds ``by`` (may be negative) and returns the new value."""
        req = t.write("POST", f"/v1/counters/{t.encode_path(name)}/incr", {"by": by}, request_id)
        return CounterValue.parse(self._send(req))

    def counter(self, name: str) -> int:
        """A linearizable read of a counter (0 if never incremented)."""
        d = self._send(t.read(f"/v1/counters/{t.encode_path(name)}"))
        v = d.get("value")
        if not isinstance(v, int):
            raise ProtocolError(f"counter answer without a value: {d!r}")
        return v

    # -- transactions (contract v3) -------------------------------------------------------

    def txn(
        self,
        compare: Sequence[Mapping[str, Any]] = (),
        success: Sequence[Mapping[str, Any]] = (),
        failure: Sequence[Mapping[str, Any]] = (),
        *,
        request_id: Optional[str] = None,
    ) -> TxnResult:
        """One entry: every compare judged together, then one branch applies. Build the parts
        with ``turnstile.cmp_*`` and ``turnstile.op_*``.

        The v3 contract gives ``/v1/txn`` no ``request_id``, so none is sent unless you pass
        one, and an attempt whose outcome is unknown is not resent: it raises
        ``IndeterminateError``."""
        body: JSON = {
            "compare": [dict(c) for c in compare],
            "success": [dict(o) for o in success],
            "failure": [dict(o) for o in failure],
        }
        if request_id is not None:
            req = t.write("POST", "/v1/txn", body, request_id)
        else:
            req = t.Request("POST", "/v1/txn", body, mutating=True, resend_uncertain=False)
        return TxnResult.parse(self._send(req))

    # -- elections (contract v3) ----------------------------------------------------------

    def campaign(
        self,
        name: str,
        lease_id: int,
        value: str,
        *,
        wait_ms: int = 0,
        request_id: Optional[str] = None,
    ) -> Leadership:
        """Queues for leadership of election ``name`` (FIFO, like a lock) and returns once
        this lease leads; ``token`` fences like any lock token."""
        body = {"lease_id": lease_id, "value": value, "wait_ms": _ms(wait_ms)}
        req = t.write("POST", f"/v1/elections/{t.encode_path(name)}/campaign", body, request_id)
        req.server_wait = _ms(wait_ms) / 1000.0
        return Leadership.parse(self._send(req))

    def proclaim(self, name: str, lease_id: int, token: int, value: str) -> Written:
        """Publishes a new value as the current leader (``NotLeaderError`` otherwise).
        Resending the same proclamation is harmless, so it is retried."""
        body = {"lease_id": lease_id, "token": token, "value": value}
        req = t.Request(
            "POST", f"/v1/elections/{t.encode_path(name)}/proclaim", body, mutating=True
        )
        return Written.parse(self._send(req))

    def resign(self, name: str, lease_id: int, token: int) -> Written:
        """Gives up leadership. Not resent after an unknown outcome (a resend of a resign
        that went through would answer ``not_leader``): that raises ``IndeterminateError``;
        read :meth:`election` to learn the outcome."""
        body = {"lease_id": lease_id, "token": token}
        req = t.Request(
            "POST",
            f"/v1/elections/{t.encode_path(name)}/resign",
            body,
            mutating=True,
            resend_uncertain=False,
        )
        return Written.parse(self._send(req))

    def election(self, name: str) -> ElectionInfo:
        return ElectionInfo.parse(self._send(t.read(f"/v1/elections/{t.encode_path(name)}")))

    # -- watch and cluster ----------------------------------------------------------------

    def watch(
        self,
        *,
        key: Optional[str] = None,
        prefix: Optional[str] = None,
        from_revision: int = 0,
        idle_timeout: float = 30.0,
    ) -> "Watch":
        """A resuming stream of watch events; see :class:`turnstile.Watch`."""
        from .watch import Watch

        return Watch(
            self,
            key=key,
            prefix=prefix,
            from_revision=from_revision,
            idle_timeout=idle_timeout,
        )

    def cluster(self) -> ClusterInfo:
        """The answering node's own view (not linearizable)."""
        return ClusterInfo.parse(self._send(t.read("/v1/cluster")))

    def raw(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        """Sends one request as it is (reads are retried; a body is sent without an added
        ``request_id``). For routes this client has no method for."""
        req = t.Request(method, path, body, mutating=method != "GET", resend_uncertain=False)
        return self._t.send(req)
