"""Sessions (a lease kept alive on a background thread, with a *lost* signal) and holds.

**The local deadline.** After a keepalive sent at instant ``s`` (``time.monotonic()``) is
confirmed, the lease lives on the cluster until at least ``s + TTL``: the renewal was applied
after it was sent, and cluster time advances no faster than real time (docs/locking.md, "Sizing
the TTL"). The session keeps ``deadline = s + TTL - margin`` for the last *confirmed* keepalive,
measured from when it was *sent*; ``margin = max(TTL / 10, 100 ms)``.

**The schedule.** A keepalive goes out every TTL/3 after the last confirmed one. A failed one is
retried quickly on the next endpoint; nothing fires while the deadline has not passed, so an
election that ends in time goes unnoticed. ``lost`` is set at once on a definite
``lease_not_found`` and at the deadline otherwise; then the thread stops.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import TYPE_CHECKING, Optional, Type

from . import _transport as t
from .errors import (
    LeaseNotFoundError,
    LostBeforeGrantError,
    NotHolderError,
    SessionLostError,
    TurnstileError,
)
from .types import Fence, Grant, Written

if TYPE_CHECKING:
    from types import TracebackType

    from .client import Client

log = logging.getLogger("turnstile")

SAFETY_MARGIN_S_MIN = 0.1
#: Shortest HTTP timeout of one keepalive attempt.
KEEPALIVE_ATTEMPT_S_MIN = 1.0
KEEPALIVE_RETRY_S_MIN = 0.05
KEEPALIVE_RETRY_S_MAX = 0.4


def safety_margin(ttl_s: float) -> float:
    return max(ttl_s / 10.0, SAFETY_MARGIN_S_MIN)


class LostReason(enum.Enum):
    #: The cluster answered that the lease is gone (expired or revoked).
    LEASE_NOT_FOUND = "lease_not_found"
    #: No keepalive was confirmed before the local deadline: the lease may have expired.
    DEADLINE_PASSED = "deadline_passed"
    #: The session was closed.
    CLOSED = "closed"


class Session:
    """A lease kept alive on a daemon thread.

    ``lost`` (a :class:`threading.Event`) is set once the lease is gone or can no longer be
    trusted to be alive (``lost_reason`` says why); stop working under the session's locks
    when it fires. Use as a context manager, or call :meth:`close` (which revokes the lease,
    releasing its locks).
    """

    def __init__(self, client: "Client", ttl_ms: int = 10_000) -> None:
        self.client = client
        sent = time.monotonic()
        grant = client.grant_lease(ttl_ms)
        self.lease_id = grant.lease_id
        self.ttl_ms = grant.ttl_ms
        self._ttl_s = grant.ttl_ms / 1000.0
        self._lock = threading.Lock()
        self._deadline = sent + self._ttl_s - safety_margin(self._ttl_s)
        self._granted_sent = sent
        self.lost = threading.Event()
        self.lost_reason: Optional[LostReason] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"turnstile-keepalive-{self.lease_id}", daemon=True
        )
        self._thread.start()

    # -- state ----------------------------------------------------------------------------

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` value before which the lease is certainly alive on the
        cluster (barring pauses of this process, which is what fencing tokens are for)."""
        with self._lock:
            return self._deadline

    def _fire(self, reason: LostReason) -> None:
        with self._lock:
            if self.lost_reason is not None:
                return
            self.lost_reason = reason
        if reason is LostReason.CLOSED:
            log.debug("session %s closed", self.lease_id)
        else:
            log.warning("session %s lost: %s", self.lease_id, reason.value)
        self.lost.set()

    def lost_now(self) -> Optional[LostReason]:
        """Lost already, or past the local deadline (covers the instant before the thread
        notices)."""
        if self.lost_reason is not None:
            return self.lost_reason
        if time.monotonic() >= self.deadline:
            return LostReason.DEADLINE_PASSED
        return None

    # -- the keepalive thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            reason = self._keep()
        except Exception:  # never die silently: an unexpected error ends the session
            log.exception("keepalive thread of lease %s failed", self.lease_id)
            reason = LostReason.DEADLINE_PASSED
        if reason is not None:
            self._fire(reason)

    def _keep(self) -> Optional[LostReason]:
        interval = self._ttl_s / 3.0
        attempt = min(max(interval, KEEPALIVE_ATTEMPT_S_MIN), self.client._t.request_timeout)
        req = t.Request("POST", f"/v1/leases/{self.lease_id}/keepalive", mutating=True)
        nxt = self._granted_sent + interval
        retry = KEEPALIVE_RETRY_S_MIN
        while True:
            deadline = self.deadline
            if nxt >= deadline:
                if self._stop.wait(max(0.0, deadline - time.monotonic())):
                    return None
                return LostReason.DEADLINE_PASSED
            if self._stop.wait(max(0.0, nxt - time.monotonic())):
                return None
            sent = time.monotonic()
            if sent >= deadline:
                return LostReason.DEADLINE_PASSED
            try:
                self.client._t.attempt(req, min(deadline - sent, attempt))
            except LeaseNotFoundError:
                return LostReason.LEASE_NOT_FOUND
            except TurnstileError as e:
                log.debug("keepalive of lease %s failed (%s); retrying", self.lease_id, e)
                nxt = sent + retry
                retry = min(retry * 2, KEEPALIVE_RETRY_S_MAX)
                continue
            with self._lock:
                self._deadline = sent + self._ttl_s - safety_margin(self._ttl_s)
            nxt = sent + interval
            retry = KEEPALIVE_RETRY_S_MIN

    # -- locks ----------------------------------------------------------------------------

    def lock(
        self,
        name: str,
        *,
        wait_ms: int = 0,
        mode: str = "exclusive",
        permits: Optional[int] = None,
    ) -> "Hold":
        """Acquires ``name`` under this session's lease. Raises :class:`SessionLostError` if
        the session is lost; a grant that arrives after the local deadline is released and
        raises :class:`LostBeforeGrantError` (docs/locking.md: check the lease's local deadline
        before acting on a grant)."""
        reason = self.lost_now()
        if reason is not None:
            raise SessionLostError(f"session {self.lease_id} is lost ({reason.value})")
        try:
            grant = self.client.acquire(
                name, self.lease_id, wait_ms=wait_ms, mode=mode, permits=permits
            )
        except LeaseNotFoundError:
            self._fire(LostReason.LEASE_NOT_FOUND)
            raise
        if self.lost_now() is not None:
            try:
                self.client.release(grant.name, grant.token, grant.lease_id)
            except TurnstileError as e:
                log.debug("release of a late grant failed: %s", e)
            raise LostBeforeGrantError(
                f"lock {name}: grant (token {grant.token}) arrived after session "
                f"{self.lease_id} was lost; released"
            )
        return Hold(self, grant)

    def acquire_many(self, names: "list[str]", *, wait_ms: int = 0) -> "list[Hold]":
        """Takes several locks in one entry (all or nothing, one shared token)."""
        reason = self.lost_now()
        if reason is not None:
            raise SessionLostError(f"session {self.lease_id} is lost ({reason.value})")
        try:
            mg = self.client.acquire_many(names, self.lease_id, wait_ms=wait_ms)
        except LeaseNotFoundError:
            self._fire(LostReason.LEASE_NOT_FOUND)
            raise
        holds = []
        for n, tok in mg.tokens.items():
            g = Grant(n, tok, mg.term or 0, mg.cluster_id, self.lease_id, "exclusive",
                      mg.revision, mg.raw)
            holds.append(Hold(self, g))
        if self.lost_now() is not None:
            for h in holds:
                h.release()
            raise LostBeforeGrantError(f"locks {names}: granted after the session was lost")
        return holds

    # -- end ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the keepalives, sets ``lost`` (reason ``CLOSED``) and revokes the lease
        (releasing its locks). Best effort: a lease that cannot be revoked expires."""
        before = self.lost_reason
        self._stop.set()
        self._fire(LostReason.CLOSED)
        if before is LostReason.LEASE_NOT_FOUND:
            return
        try:
            self.client.revoke_lease(self.lease_id)
        except LeaseNotFoundError:
            pass
        except TurnstileError as e:
            log.debug("revoke of lease %s failed: %s", self.lease_id, e)

    def __enter__(self) -> "Session":
        return self

    def __exit__(
        self,
        et: Optional[Type[BaseException]],
        ev: Optional[BaseException],
        tb: "Optional[TracebackType]",
    ) -> None:
        self.close()


class Hold:
    """One hold of a lock. A context manager: releases the hold on exit (and closes the
    session if it was made for this hold by ``Client.lock``)."""

    def __init__(self, session: Session, grant: Grant) -> None:
        self.session = session
        self.grant = grant
        self._released = False
        self._owns_session = False

    @property
    def name(self) -> str:
        return self.grant.name

    @property
    def token(self) -> int:
        """The fencing token: greater than every earlier grant's token."""
        return self.grant.token

    @property
    def cluster_id(self) -> Optional[str]:
        return self.grant.cluster_id

    @property
    def lease_id(self) -> int:
        return self.grant.lease_id

    @property
    def mode(self) -> str:
        return self.grant.mode

    @property
    def fence(self) -> Fence:
        """``(lock, token)`` for ``put(..., fence=hold.fence)``."""
        return (self.grant.name, self.grant.token)

    @property
    def lost(self) -> threading.Event:
        """Set when the session's lease is lost: stop working under this lock."""
        return self.session.lost

    def release(self) -> Optional[Written]:
        """Releases the hold; returns the release's revision, or ``None`` if there was nothing
        to release (released already, or ended with its lease)."""
        if self._released:
            return None
        self._released = True
        try:
            if self.session.lost_reason not in (LostReason.LEASE_NOT_FOUND, LostReason.CLOSED):
                return self.session.client.release(
                    self.grant.name, self.grant.token, self.lease_id
                )
            return None
        except (LeaseNotFoundError, NotHolderError):
            return None
        finally:
            if self._owns_session:
                self.session.close()

    def __enter__(self) -> "Hold":
        return self

    def __exit__(
        self,
        et: Optional[Type[BaseException]],
        ev: Optional[BaseException],
        tb: "Optional[TracebackType]",
    ) -> None:
        try:
            self.release()
        except TurnstileError as e:
            if et is None:
                raise
            log.debug("release on exit failed: %s", e)
