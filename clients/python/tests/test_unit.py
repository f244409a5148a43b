"""Client-side logic that needs no cluster: SSE parsing, watch dedup and compaction (against a
scripted SSE server), error mapping, configuration checks."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from turnstile import (
    Client,
    CompactedError,
    ConfigError,
    FencedError,
    IndeterminateError,
    LockHeldError,
    NoQuorumError,
    ServerError,
    TurnstileError,
    UnavailableError,
)
from turnstile.errors import Retry, from_response
from turnstile.watch import SseParser, parse_event_id


def test_sse_parser_handles_split_chunks_comments_and_crlf() -> None:
    p = SseParser()
    evs = []
    for chunk in [b": keepalive\n\nid: 7.0\nev", b"ent: put\r\ndata: {\"a\":\n", b"data: 1}\n\nid:8.1\nevent:delete\ndata:x\n\n"]:
        evs.extend(p.push(chunk))
    assert [(e.id, e.event, e.data) for e in evs] == [
        ("7.0", "put", '{"a":\n1}'),
        ("8.1", "delete", "x"),
    ]
    assert SseParser().push(b"id: 1.0\nevent: put\n\n") == []  # no data: not dispatched
    assert parse_event_id("12.3") == (12, 3)
    assert parse_event_id("12") is None and parse_event_id("x.1") is None


def test_error_mapping_and_retry_classes() -> None:
    table: List[Tuple[int, str, type, Retry]] = [
        (409, "lock_held", LockHeldError, Retry.NO),
        (409, "fenced", FencedError, Retry.NO),
        (503, "no_quorum", NoQuorumError, Retry.SAFE),
        (503, "unavailable", UnavailableError, Retry.UNCERTAIN),
        (504, "indeterminate", IndeterminateError, Retry.UNCERTAIN),
        (502, "something_new", ServerError, Retry.UNCERTAIN),
        (409, "something_new", TurnstileError, Retry.NO),
    ]
    for status, code, cls, retry in table:
        e = from_response(status, {"code": code, "message": "m", "current_token": 7})
        assert type(e) is cls, code
        assert e.retry is retry, code
        assert e.code == code and e.status == status
    e = from_response(409, {"code": "fenced", "message": "m", "current_token": 14})
    assert isinstance(e, FencedError) and e.current_token == 14
    assert from_response(401, "plain text").code == "unauthenticated"


def test_configuration_is_checked_before_anything_is_sent() -> None:
    with pytest.raises(ConfigError):
        Client([])
    with pytest.raises(ConfigError):
        Client(["https://127.0.0.1:1"])  # https without a CA to trust
    with pytest.raises(ConfigError):
        Client(["10.0.0.1:7001"], token="secret")  # a token over plain HTTP off loopback
    with pytest.raises(ConfigError):
        Client(["127.0.0.1:1"], ca="/nonexistent/ca.crt")
    with pytest.raises(ConfigError):
        Client(["127.0.0.1:1"], cert="c.crt")  # cert without key
    Client(["127.0.0.1:1"], token="ok-on-loopback").close()


# --- a scripted SSE server ------------------------------------------------------------------


class ScriptedSse:
    """Serves one scripted stream per connection; records each request's Last-Event-ID and
    query."""

    def __init__(self, streams: List[List[Tuple[Optional[str], str, str]]]) -> None:
        self.streams = streams
        self.requests: List[Tuple[Optional[str], str]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends with the connection

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append((self.headers.get("last-event-id"), self.path))
                if not outer.streams:
                    self.send_response(503)
                    body = b'{"code":"unavailable","message":"script over"}'
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                stream = outer.streams.pop(0)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for ev_id, kind, data in stream:
                    if ev_id is not None:
                        self.wfile.write(f"id: {ev_id}\n".encode())
                    self.wfile.write(f"event: {kind}\ndata: {data}\n\n".encode())
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def put(rev: int, seq: int, key: str) -> Tuple[str, str, str]:
    return (f"{rev}.{seq}", "put", f'{{"kind":"put","key":"{key}","revision":{rev},"seq":{seq},"value":"v","lease_id":null}}')


@pytest.fixture()
def scripted() -> Iterator[List[ScriptedSse]]:
    made: List[ScriptedSse] = []
    yield made
    for s in made:
        s.stop()


def test_watch_resumes_with_last_event_id_and_drops_resent_events(
    scripted: List[ScriptedSse],
) -> None:
    # First connection: two events, then the stream ends (the node died). The second
    # connection resends revision 5 from its start (as the server does for an inclusive
    # from_revision) and goes on.
    s = ScriptedSse([
        [put(5, 0, "a"), put(5, 1, "b")],
        [put(5, 0, "a"), put(5, 1, "b"), put(6, 0, "c")],
    ])
    scripted.append(s)
    with Client([s.addr], retry_budget=1.0) as c:
        w = c.watch(prefix="", from_revision=5)
        got = [next(w) for _ in range(3)]
        w.close()
    assert [(e.revision, e.seq, e.key) for e in got] == [(5, 0, "a"), (5, 1, "b"), (6, 0, "c")]
    assert s.requests[0][0] is None
    assert s.requests[1][0] == "5.1", "resumed after the last event delivered"
    assert "from_revision=5" in s.requests[1][1]


def test_watch_compacted_raises(scripted: List[ScriptedSse]) -> None:
    s = ScriptedSse([[(None, "compacted", '{"oldest_revision": 42}'), put(50, 0, "x")]])
    scripted.append(s)
    with Client([s.addr], retry_budget=1.0) as c:
        w = c.watch(from_revision=1)
        with pytest.raises(CompactedError) as e:
            next(w)
        assert e.value.oldest_revision == 42
        with pytest.raises(StopIteration):
            next(w)
