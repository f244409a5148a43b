"""A watch (``GET /v1/watch``, server-sent events) that resumes by itself.

Every node emits the same events with the same ``revision.seq`` ids, so when a connection ends,
fails or stays silent past ``idle_timeout``, the watch reconnects (to the next endpoint) with
``Last-Event-ID`` of the last event delivered and drops anything at or before it: no event is
lost or delivered twice. A ``compacted`` event (the resume point is older than the retained
history) raises :class:`turnstile.CompactedError` and ends the watch.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Generator, List, Optional, Tuple

import httpx

from . import _transport as t
from .errors import (
    CompactedError,
    ProtocolError,
    Retry,
    TurnstileError,
    UnreachableError,
    from_response,
)

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("turnstile")

#: Longest SSE line accepted (a watch event carries at most one 64 KiB value, escaped).
SSE_LINE_BYTES_MAX = 1024 * 1024


@dataclass(frozen=True)
class SseEvent:
    id: Optional[str]
    event: str
    data: str


class SseParser:
    """Incremental ``text/event-stream`` parser: feed bytes, get whole events."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._id: Optional[str] = None
        self._event: Optional[str] = None
        self._data: Optional[List[str]] = None

    def push(self, chunk: bytes) -> List[SseEvent]:
        out: List[SseEvent] = []
        self._buf.extend(chunk)
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                if len(self._buf) > SSE_LINE_BYTES_MAX:
                    raise ProtocolError(f"event stream line over {SSE_LINE_BYTES_MAX} bytes")
                return out
            raw = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            ev = self._line(raw.decode("utf-8", "replace"))
            if ev is not None:
                out.append(ev)

    def _line(self, line: str) -> Optional[SseEvent]:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "id":
            self._id = value
        elif name == "event":
            self._event = value
        elif name == "data":
            if self._data is None:
                self._data = []
            self._data.append(value)
        return None

    def _dispatch(self) -> Optional[SseEvent]:
        ev_id, event, data = self._id, self._event, self._data
        self._id = self._event = None
        self._data = None
        if data is None:
            return None
        return SseEvent(ev_id, event or "message", "\n".join(data))


def parse_event_id(s: str) -> Optional[Tuple[int, int]]:
    r, sep, q = s.partition(".")
    if not sep or not r.isdigit() or not q.isdigit():
        return None
    return int(r), int(q)


@dataclass(frozen=True)
class WatchEvent:
    """One event. ``kind``: ``put``, ``delete``, ``lock_granted``, ``lock_released``,
    ``lease_expired``, ``election_leader``, ``election_resigned`` (or a newer kind). ``data``
    is the whole JSON object."""

    revision: int
    seq: int
    kind: str
    data: Dict[str, Any] = field(repr=False)

    @property
    def id(self) -> str:
        return f"{self.revision}.{self.seq}"

    def _s(self, k: str) -> Optional[str]:
        v = self.data.get(k)
        return v if isinstance(v, str) else None

    def _i(self, k: str) -> Optional[int]:
        v = self.data.get(k)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def key(self) -> Optional[str]:
        return self._s("key")

    @property
    def value(self) -> Optional[str]:
        return self._s("value")

    @property
    def lock(self) -> Optional[str]:
        return self._s("lock")

    @property
    def lease_id(self) -> Optional[int]:
        return self._i("lease_id")

    @property
    def token(self) -> Optional[int]:
        return self._i("token")

    @property
    def cause(self) -> Optional[str]:
        return self._s("cause")


class Watch:
    """Iterate to receive :class:`WatchEvent` objects; :meth:`close` (or ``with``) to stop.

    ``from_revision=R`` starts at the first event of revision R (inclusive); 0 means from now.
    ``idle_timeout``: a connection that delivers nothing (not even the server's 15 s keep-alive
    comment) for this long is replaced; the resume makes that invisible.
    """

    def __init__(
        self,
        client: "Client",
        *,
        key: Optional[str] = None,
        prefix: Optional[str] = None,
        from_revision: int = 0,
        idle_timeout: float = 30.0,
    ) -> None:
        self._t = client._t
        self._client = client
        self.key = key
        self.prefix = prefix
        self.from_revision = from_revision
        self.idle_timeout = idle_timeout
        #: ``(revision, seq)`` of the last event delivered.
        self.last: Optional[Tuple[int, int]] = None
        #: For a watch "from now": the applied index before the first connection, so a
        #: reconnect before any event resumes after it rather than from a later "now".
        self._now_floor: Optional[int] = None
        #: The endpoint the watch is connected to now (``None`` between connections).
        self.endpoint: Optional[str] = None
        #: How many times the watch has connected.
        self.connections = 0
        self._resp: Optional[httpx.Response] = None
        self._closed = threading.Event()
        self._gen = self._events()

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> WatchEvent:
        return next(self._gen)

    def close(self) -> None:
        """Stops the watch; safe to call from another thread than the one iterating (that
        one's blocked read is cut short and its iteration ends)."""
        self._closed.set()
        resp = self._resp
        if resp is not None:
            # Closing a file descriptor does not wake a thread blocked reading it; shutting
            # the socket down does.
            stream = resp.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        try:
            self._gen.close()  # a suspended iteration: end it now, closing its connection
        except ValueError:
            pass  # being iterated on another thread: it ends by itself now

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------

    def _resume_revision(self) -> int:
        if self.last is not None:
            return self.last[0]  # inclusive: the tail of this revision is dropped below
        if self.from_revision > 0:
            return self.from_revision
        if self._now_floor is not None:
            return self._now_floor + 1
        return 0

    def _events(self) -> Generator[WatchEvent, None, None]:
        while not self._closed.is_set():
            conn = self._connect()
            if conn is None:
                return
            i, resp = conn
            why = "the server ended the stream"
            try:
                parser = SseParser()
                for chunk in resp.iter_raw():
                    for sse in parser.push(chunk):
                        ev = self._deliver(sse)
                        if ev is not None:
                            yield ev
                    if self._closed.is_set():
                        break
            except (httpx.TransportError, httpx.StreamError) as e:
                why = f"{type(e).__name__}: {e}"
            finally:
                self._resp = None
                self.endpoint = None
                resp.close()
            if self._closed.is_set():
                return
            log.debug("watch connection ended (%s); resuming after %s", why, self.last)
            self._t.endpoints.failed(i)

    def _deliver(self, sse: SseEvent) -> Optional[WatchEvent]:
        try:
            data = json.loads(sse.data)
        except ValueError as e:
            raise ProtocolError(f"watch event data is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise ProtocolError(f"watch event data is not an object: {sse.data!r}")
        if sse.event == "compacted" or data.get("kind") == "compacted":
            self.close()
            oldest = data.get("oldest_revision")
            raise CompactedError(oldest if isinstance(oldest, int) else 0)
        pos = parse_event_id(sse.id) if sse.id is not None else None
        if pos is None:
            r, q = data.get("revision"), data.get("seq")
            if not isinstance(r, int) or not isinstance(q, int):
                raise ProtocolError(f"watch event without a position: {sse.data!r}")
            pos = (r, q)
        if self.last is not None and pos <= self.last:
            return None  # delivered already (a resumed stream resends its revision's tail)
        self.last = pos
        kind = data.get("kind")
        return WatchEvent(pos[0], pos[1], kind if isinstance(kind, str) else sse.event, data)

    def _connect(self) -> Optional[Tuple[int, httpx.Response]]:
        if self.from_revision == 0 and self.last is None and self._now_floor is None:
            try:
                self._now_floor = _applied_index(self._t)
            except TurnstileError:
                pass
        deadline = time.monotonic() + self._t.retry_budget
        pause = 0.05
        while True:
            if self._closed.is_set():
                return None
            i, base = self._t.endpoints.current()
            try:
                resp = self._open(base)
            except TurnstileError as e:
                if e.retry is Retry.NO:
                    raise
                self._t.endpoints.failed(i)
                if time.monotonic() + pause >= deadline:
                    raise UnreachableError(f"watch: no endpoint answered: {e}") from None
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            self._t.endpoints.answered(i)
            self._resp = resp
            self.endpoint = base
            self.connections += 1
            return i, resp

    def _open(self, base: str) -> httpx.Response:
        url = base + "/v1/watch"
        params: Dict[str, str] = {"from_revision": str(self._resume_revision())}
        if self.key is not None:
            params["key"] = self.key
        if self.prefix is not None:
            params["prefix"] = self.prefix
        headers = {"accept": "text/event-stream"}
        if self.last is not None:
            headers["last-event-id"] = f"{self.last[0]}.{self.last[1]}"
        timeout = httpx.Timeout(
            self.idle_timeout,
            connect=min(self._t.connect_timeout, self.idle_timeout),
        )
        request = self._t.http.build_request(
            "GET", url, params=params, headers=headers, timeout=timeout
        )
        try:
            resp = self._t.http.send(request, stream=True)
        except httpx.TransportError as e:
            err = t.transport_error(url, e)
            if err.retry is Retry.NO:
                raise err from None
            raise UnreachableError(err.message) from None  # a watch changes nothing
        if resp.status_code == 200:
            return resp
        try:
            resp.read()
            body: Any = json.loads(resp.content) if resp.content else None
        except (ValueError, httpx.HTTPError):
            body = None
        finally:
            resp.close()
        raise from_response(resp.status_code, body, url)


def _applied_index(tr: t.Transport) -> int:
    # Without the state digest: only the index is needed, and the digest costs the node a
    # hash of its whole state.
    d = tr.send(t.read("/v1/cluster?digest=false"), budget=1.0)
    v = d.get("applied_index") if isinstance(d, dict) else None
    if not isinstance(v, int):
        raise ProtocolError("cluster answer without applied_index")
    return v
