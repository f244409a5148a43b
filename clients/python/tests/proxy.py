"""A small HTTP forwarder placed between the client and a node, to make failures happen on
demand: answer a request and then lose the answer (an ambiguous write), answer with a canned
refusal, or stop listening (a partition of this client)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

import httpx

#: What to do with a request: ("forward", None) | ("forward_drop", None): forward it, then close
#: the connection without answering | ("answer", (status, body)): answer without forwarding.
Action = Tuple[str, Optional[Tuple[int, Dict[str, Any]]]]
Rule = Callable[[str, str, Dict[str, Any]], Action]


def forward(_m: str, _p: str, _b: Dict[str, Any]) -> Action:
    return ("forward", None)


class Proxy:
    def __init__(self, upstream: str, rule: Rule = forward) -> None:
        self.upstream = upstream
        self.rule = rule
        self.seen: List[Tuple[str, str, Dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._conns: List[socket.socket] = []
        self._http = httpx.Client(timeout=30.0, trust_env=False)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._conns.append(self.connection)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                with proxy._lock:
                    proxy.seen.append((self.command, self.path, body))
                    action, canned = proxy.rule(self.command, self.path, body)
                if action == "answer":
                    assert canned is not None
                    status, payload = canned
                    self._reply(status, json.dumps(payload).encode())
                    return
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "x-turnstile-ack", "authorization")
                }
                r = proxy._http.request(
                    self.command, proxy.upstream + self.path, content=raw, headers=headers
                )
                if action == "forward_drop":
                    self.close_connection = True  # the write happened; its answer is lost
                    return
                self._reply(r.status_code, r.content)

            def _reply(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def paths(self) -> List[str]:
        with self._lock:
            return [p for _, p, _ in self.seen]

    def stop(self) -> None:
        """Stops listening: connections to it are refused from now on."""
        self.server.shutdown()
        self.server.server_close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:  # and open connections are cut
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._http.close()
