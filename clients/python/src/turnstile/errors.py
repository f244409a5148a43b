"""Typed errors.

Every refusal the server sends is a JSON body ``{"code": ..., "message": ...}`` (plus
``current_token`` on ``lock_held`` and ``fenced``, ``cycle`` on ``deadlock_victim``). Each
``code`` maps to one exception class below (docs/api.md, "Errors"); a code this client does not
know becomes a plain :class:`ServerError` (5xx) or :class:`TurnstileError`.

Retry classes (what the client's retry loop does with a failed attempt):

- *safe*: nothing was appended (``no_quorum``, ``not_member``, a connection that could not be
  opened); the request is sent again, to the next endpoint.
- *uncertain*: the write may have been applied (``indeterminate``, ``unavailable``, any other 5xx,
  a connection lost after the request went out); sent again only with the same ``request_id``,
  so the server answers the first outcome instead of acting twice.
- every 4xx is a final answer and is never retried.
"""

from __future__ import annotations

import enum
from typing import Any, Dict, List, Mapping, Optional, Type


class Retry(enum.Enum):
    """What a failed attempt allows next."""

    NO = "no"
    SAFE = "safe"
    UNCERTAIN = "uncertain"


class TurnstileError(Exception):
    """Base of every error this client raises."""

    #: Stable server error code (``""`` for client-side errors).
    code: str = ""
    retry: Retry = Retry.NO

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        code: Optional[str] = None,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        if code is not None:
            self.code = code
        self.body: Dict[str, Any] = dict(body) if body is not None else {}

    def __str__(self) -> str:
        prefix = f"{self.code}: " if self.code else ""
        return f"{prefix}{self.message}"


class ConfigError(TurnstileError):
    """The client was configured wrongly (nothing was sent)."""


class ProtocolError(TurnstileError):
    """The server's answer could not be understood."""


class TlsError(TurnstileError):
    """The TLS handshake failed (unknown CA, name mismatch, refused client certificate)."""


class UnreachableError(TurnstileError):
    """No endpoint could be reached before the retry budget ran out."""

    code = "unreachable"
    retry = Retry.SAFE


class IndeterminateError(TurnstileError):
    """The write may or may not have been applied. Resend it with the same ``request_id``
    (e.g. ``client.incr(name, by, request_id=err.request_id)``) to learn its outcome."""

    code = "indeterminate"
    retry = Retry.UNCERTAIN

    def __init__(self, message: str, *, request_id: Optional[str] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.request_id = request_id


# --- server refusals -----------------------------------------------------------------------


class BadRequestError(TurnstileError):
    code = "bad_request"


class UnauthenticatedError(TurnstileError):
    code = "unauthenticated"


class PermissionDeniedError(TurnstileError):
    code = "permission_denied"


class NotFoundError(TurnstileError):
    """No such route (or, on ``/v1/auth``, no such user, role or token)."""

    code = "not_found"


class KeyNotFoundError(TurnstileError):
    code = "key_not_found"


class LeaseNotFoundError(TurnstileError):
    """The lease does not exist, was already due when the entry applied, or is another
    principal's."""

    code = "lease_not_found"


class MethodNotAllowedError(TurnstileError):
    code = "method_not_allowed"


class BodyTimeoutError(TurnstileError):
    code = "body_timeout"


class ConflictError(TurnstileError):
    """Base of the 409 refusals."""


class TokenError(ConflictError):
    """A 409 that may name the lock's current grant (``current_token``)."""

    @property
    def current_token(self) -> Optional[int]:
        t = self.body.get("current_token")
        return t if isinstance(t, int) else None


class LockHeldError(TokenError):
    code = "lock_held"


class FencedError(TokenError):
    """A fenced write whose token is not the lock's current exclusive grant: the writer has
    been superseded. Nothing was written."""

    code = "fenced"


class WaitTimeoutError(ConflictError):
    """``wait_ms`` passed and the wait was withdrawn for certain: the lock is not held."""

    code = "wait_timeout"


class ModeMismatchError(ConflictError):
    code = "mode_mismatch"


class DeadlockVictimError(ConflictError):
    code = "deadlock_victim"

    @property
    def cycle(self) -> List[int]:
        c = self.body.get("cycle")
        return [x for x in c if isinstance(x, int)] if isinstance(c, list) else []


class NotHolderError(ConflictError):
    code = "not_holder"


class RequestIdReusedError(ConflictError):
    code = "request_id_reused"


class CounterOverflowError(ConflictError):
    code = "counter_overflow"


class MembershipRefusedError(ConflictError):
    code = "membership_refused"


class NotLeaderError(ConflictError):
    """Elections: the caller is not the election's current leader (proclaim, resign)."""

    code = "not_leader"


class CompareFailedError(TurnstileError):
    code = "compare_failed"


class BodyTooLargeError(TurnstileError):
    code = "body_too_large"


class QuotaExceededError(TurnstileError):
    code = "quota_exceeded"


class LimitReachedError(TurnstileError):
    code = "limit_reached"


class ServerError(TurnstileError):
    """A 5xx answer. Unknown 5xx codes, and ``internal``, may have been applied."""

    retry = Retry.UNCERTAIN


class InternalError(ServerError):
    code = "internal"


class NoQuorumError(ServerError):
    """No leader able to commit was reachable: nothing was appended."""

    code = "no_quorum"
    retry = Retry.SAFE


class NotMemberError(ServerError):
    code = "not_member"
    retry = Retry.SAFE


class UnavailableError(ServerError):
    code = "unavailable"
    retry = Retry.UNCERTAIN


# --- client-side conditions ----------------------------------------------------------------


class SessionLostError(TurnstileError):
    """The session's lease is gone or can no longer be trusted to be alive."""

    code = "session_lost"


class LostBeforeGrantError(SessionLostError):
    """A grant arrived after the session's local deadline; it was released at once."""


class CompactedError(TurnstileError):
    """A watch's resume point is older than the server's retained history. Events in between
    are lost to this watcher: re-read the state, then watch from ``oldest_revision``."""

    code = "compacted"

    def __init__(self, oldest_revision: int) -> None:
        super().__init__(f"watch history compacted; oldest retained revision {oldest_revision}")
        self.oldest_revision = oldest_revision


_BY_CODE: Dict[str, Type[TurnstileError]] = {
    cls.code: cls
    for cls in (
        BadRequestError,
        UnauthenticatedError,
        PermissionDeniedError,
        NotFoundError,
        KeyNotFoundError,
        LeaseNotFoundError,
        MethodNotAllowedError,
        BodyTimeoutError,
        LockHeldError,
        FencedError,
        WaitTimeoutError,
        ModeMismatchError,
        DeadlockVictimError,
        NotHolderError,
        RequestIdReusedError,
        CounterOverflowError,
        MembershipRefusedError,
        NotLeaderError,
        CompareFailedError,
        BodyTooLargeError,
        QuotaExceededError,
        LimitReachedError,
        InternalError,
        NoQuorumError,
        NotMemberError,
        UnavailableError,
        IndeterminateError,
    )
}


def from_response(status: int, body: Any, url: str = "") -> TurnstileError:
    """The typed error of a non-2xx answer."""
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        code: str = body["code"]
        message = str(body.get("message", ""))
        cls = _BY_CODE.get(code)
        if cls is not None:
            return cls(message, status=status, code=code, body=body)
        if status >= 500:
            return ServerError(message, status=status, code=code, body=body)
        return TurnstileError(message, status=status, code=code, body=body)
    text = f"{url}: HTTP {status}: {body!r}" if url else f"HTTP {status}: {body!r}"
    # No {code, message} body (a proxy in the path): keep 401/403 typed.
    if status == 401:
        return UnauthenticatedError(text, status=status)
    if status == 403:
        return PermissionDeniedError(text, status=status)
    if status >= 500:
        return ServerError(text, status=status, code="")
    return ProtocolError(text, status=status)
