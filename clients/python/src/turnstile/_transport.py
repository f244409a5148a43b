"""Endpoints, one HTTP attempt, and the retry loop.

A request is built once (:class:`Request`), with its ``request_id`` fixed in its body, and may
be sent any number of times: the server applies it at most once and answers every resend with
the first outcome. The loop resends it on the *safe* and *uncertain* failures (see
:mod:`turnstile.errors`), moving to the next endpoint, with jittered exponential backoff, until
the call's deadline.
"""

from __future__ import annotations

import collections
import ipaddress
import json
import random
import secrets
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Mapping, Optional, Tuple

import httpx

from .errors import (
    ConfigError,
    IndeterminateError,
    ProtocolError,
    Retry,
    TlsError,
    TurnstileError,
    UnreachableError,
    from_response,
)

#: First pause after a failed attempt; doubles up to BACKOFF_S_MAX, with jitter.
BACKOFF_S_MIN = 0.05
BACKOFF_S_MAX = 1.0
#: Shortest HTTP timeout given to one attempt, even when the deadline is closer.
ATTEMPT_S_MIN = 0.2
#: The header the server reads acknowledgments from, and its limits.
ACK_HEADER = "x-turnstile-ack"
ACKS_PER_REQUEST_MAX = 64
PENDING_ACKS_MAX = 4096


def new_request_id() -> str:
    """A fresh request id: 128 random bits in hex."""
    return secrets.token_hex(16)


def encode_path(s: str) -> str:
    """Percent-encodes a name or key for a URL path, keeping ``/`` (``/v1/kv/a/b`` is key
    ``a/b``), ``:`` and RFC 3986's unreserved characters."""
    return urllib.parse.quote(s, safe="/:-._~")


@dataclass
class Request:
    method: str
    path: str
    body: Optional[Dict[str, Any]] = None
    params: Optional[Dict[str, str]] = None
    request_id: Optional[str] = None
    mutating: bool = False
    #: Seconds the server may hold the request before answering (a waiting acquire).
    server_wait: float = 0.0
    #: Whether an attempt whose outcome is unknown may be sent again.
    resend_uncertain: bool = True
    #: Whether to acknowledge the id once answered (ids the client made up itself; an id the
    #: caller chose is the caller's to resend, so it is left to age out on the server).
    ack: bool = False


def read(path: str, params: Optional[Dict[str, str]] = None) -> Request:
    return Request("GET", path, params=params)


def write(
    method: str, path: str, body: Dict[str, Any], request_id: Optional[str] = None
) -> Request:
    """A mutating request carrying a ``request_id`` in its body (a fresh one unless given)."""
    rid = request_id if request_id is not None else new_request_id()
    body = dict(body)
    body["request_id"] = rid
    return Request(method, path, body, request_id=rid, mutating=True, ack=request_id is None)


class PendingAcks:
    """Answered request ids to name in the ``x-turnstile-ack`` header of later requests, so the
    server forgets their records at once instead of after its 10-minute retry window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: Deque[str] = collections.deque()

    def push(self, rid: str) -> None:
        with self._lock:
            if len(self._ids) >= PENDING_ACKS_MAX:
                self._ids.popleft()
            self._ids.append(rid)

    def take(self) -> List[str]:
        with self._lock:
            n = min(len(self._ids), ACKS_PER_REQUEST_MAX)
            return [self._ids.popleft() for _ in range(n)]

    def restore(self, ids: List[str]) -> None:
        with self._lock:
            for rid in reversed(ids):
                if len(self._ids) >= PENDING_ACKS_MAX:
                    break
                self._ids.appendleft(rid)


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Endpoints:
    """Base URLs and the index of the preferred one: keep using the node that last answered,
    move to the next when one cannot be reached or cannot serve."""

    def __init__(self, endpoints: List[str], tls: bool) -> None:
        urls: List[str] = []
        for e in endpoints:
            e = e.strip().rstrip("/")
            if not e:
                continue
            if e.startswith("https://") or e.startswith("http://"):
                url = e
            else:
                url = ("https://" if tls else "http://") + e
            if tls and url.startswith("http://"):
                raise ConfigError(f"endpoint {e} is plain HTTP but a CA is given; use https://")
            if not tls and url.startswith("https://"):
                raise ConfigError(
                    f"endpoint {e} is https but no CA is given: the client trusts only the "
                    "cluster's CA"
                )
            parts = urllib.parse.urlsplit(url)
            if not parts.hostname or parts.port is None:
                raise ConfigError(f"endpoint {e!r}: expected host:port")
            urls.append(url)
        if not urls:
            raise ConfigError("no endpoints given")
        self.urls = urls
        self._preferred = 0
        self._lock = threading.Lock()

    def current(self) -> Tuple[int, str]:
        with self._lock:
            i = self._preferred % len(self.urls)
        return i, self.urls[i]

    def answered(self, i: int) -> None:
        with self._lock:
            self._preferred = i

    def failed(self, i: int) -> None:
        """Endpoint ``i`` failed: move on, unless a concurrent call already moved."""
        with self._lock:
            if self._preferred % len(self.urls) == i:
                self._preferred = (i + 1) % len(self.urls)

    def plain_non_loopback(self) -> Optional[str]:
        for u in self.urls:
            if u.startswith("http://") and not _is_loopback(u):
                return u
        return None


def _ssl_cause(e: BaseException) -> Optional[ssl.SSLError]:
    seen = 0
    cur: Optional[BaseException] = e
    while cur is not None and seen < 32:
        if isinstance(cur, ssl.SSLError):
            return cur
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return None


def transport_error(url: str, e: httpx.TransportError) -> TurnstileError:
    """A transport failure: a failed TLS handshake is final; a connection that could not be
    opened cannot have delivered the request; anything later may have."""
    tls = _ssl_cause(e)
    if tls is not None:
        return TlsError(f"TLS handshake with {url} failed: {tls}")
    message = f"{url}: {type(e).__name__}: {e}"
    if isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return UnreachableError(message)
    return IndeterminateError(message)


def decode(url: str, resp: httpx.Response) -> Any:
    if not resp.content:
        return {}
    try:
        return json.loads(resp.content)
    except ValueError as e:
        raise ProtocolError(f"non-JSON answer from {url}: {e}") from None


class Transport:
    def __init__(
        self,
        endpoints: List[str],
        *,
        ca: Optional[str],
        cert: Optional[str],
        key: Optional[str],
        token: Optional[str],
        request_timeout: float,
        retry_budget: float,
        connect_timeout: float,
    ) -> None:
        if (cert is None) != (key is None):
            raise ConfigError("cert and key go together")
        if cert is not None and ca is None:
            raise ConfigError("a client certificate needs a CA (ca=...)")
        self.endpoints = Endpoints(endpoints, tls=ca is not None)
        if token is not None:
            plain = self.endpoints.plain_non_loopback()
            if plain is not None:
                raise ConfigError(
                    f"refusing to send a token over plain HTTP to {plain}; use https:// with a CA"
                )
        verify: Any = False
        if ca is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # hostname check + CERT_REQUIRED
            try:
                ctx.load_verify_locations(cafile=ca)  # the only CA trusted: no system roots
                if cert is not None and key is not None:
                    ctx.load_cert_chain(cert, key)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(f"cannot load TLS files: {e}") from None
            verify = ctx
        headers: Dict[str, str] = {}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        self.request_timeout = request_timeout
        self.retry_budget = retry_budget
        self.connect_timeout = connect_timeout
        self.acks = PendingAcks()
        self.http = httpx.Client(
            verify=verify,
            headers=headers,
            http1=True,
            http2=False,
            follow_redirects=False,  # nodes never redirect; following could carry the token away
            trust_env=False,
            limits=httpx.Limits(max_connections=100, keepalive_expiry=30.0),
        )

    def close(self) -> None:
        self.http.close()

    def timeout(self, seconds: float) -> httpx.Timeout:
        return httpx.Timeout(seconds, connect=min(self.connect_timeout, seconds))

    # -- one attempt ----------------------------------------------------------------------

    def attempt(self, req: Request, timeout: float, acks: bool = True) -> Any:
        """One HTTP exchange on the preferred endpoint, moving the preference on failure."""
        i, base = self.endpoints.current()
        url = base + req.path
        try:
            answer = self._exchange(url, req, timeout, acks)
        except TurnstileError as e:
            if e.retry is not Retry.NO or isinstance(e, TlsError):
                self.endpoints.failed(i)
            else:
                self.endpoints.answered(i)
            raise
        self.endpoints.answered(i)
        return answer

    def _exchange(self, url: str, req: Request, timeout: float, send_acks: bool) -> Any:
        headers: Dict[str, str] = {}
        ids = self.acks.take() if send_acks else []
        if ids:
            headers[ACK_HEADER] = " ".join(ids)
        try:
            resp = self.http.request(
                req.method,
                url,
                json=req.body,
                params=req.params,
                headers=headers,
                timeout=self.timeout(timeout),
            )
        except httpx.TransportError as e:
            if ids:
                self.acks.restore(ids)  # maybe not delivered; acknowledging twice is harmless
            raise transport_error(url, e) from None
        if 200 <= resp.status_code < 300:
            return decode(url, resp)
        try:
            body: Any = json.loads(resp.content) if resp.content else None
        except ValueError:
            body = resp.text
        raise from_response(resp.status_code, body, url)

    # -- the retry loop -------------------------------------------------------------------

    def send(self, req: Request, budget: Optional[float] = None) -> Any:
        """Sends ``req``, resending it (same ``request_id``) until the retry budget plus the
        request's server-side wait has passed."""
        b = self.retry_budget if budget is None else budget
        deadline = time.monotonic() + b + req.server_wait
        try:
            result = self._loop(req, deadline)
        except IndeterminateError:
            raise  # not acknowledged: the caller may resend it to learn the outcome
        except TurnstileError:
            self._answered(req)
            raise
        self._answered(req)
        return result

    def _answered(self, req: Request) -> None:
        if req.ack and req.request_id is not None:
            self.acks.push(req.request_id)

    def _loop(self, req: Request, deadline: float) -> Any:
        backoff = BACKOFF_S_MIN
        uncertain = False
        while True:
            left = deadline - time.monotonic()
            timeout = max(min(self.request_timeout + req.server_wait, left), ATTEMPT_S_MIN)
            try:
                return self.attempt(req, timeout)
            except TurnstileError as e:
                err = e
            if err.retry is Retry.NO:
                raise err
            if err.retry is Retry.UNCERTAIN:
                if not req.resend_uncertain:
                    raise self._out_of_time(req, err, True)
                uncertain = True
            pause = random.uniform(backoff / 2, backoff)
            backoff = min(backoff * 2, BACKOFF_S_MAX)
            if time.monotonic() + pause >= deadline:
                raise self._out_of_time(req, err, uncertain)
            time.sleep(pause)

    @staticmethod
    def _out_of_time(req: Request, last: TurnstileError, uncertain: bool) -> TurnstileError:
        if req.mutating and uncertain:
            return IndeterminateError(
                f"outcome unknown (request_id {req.request_id}); last error: {last}",
                request_id=req.request_id,
                status=last.status,
            )
        if isinstance(last, IndeterminateError):
            # A read (or a write known not to have been applied) that lost its connection.
            return UnreachableError(last.message)
        return last


def query(params: Mapping[str, Optional[object]]) -> Dict[str, str]:
    return {k: str(v) for k, v in params.items() if v is not None}
