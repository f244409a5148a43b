"""A live three-node cluster of real ``turnstile serve`` processes, for the tests.

Each node binds a free loopback port chosen at start (never a fixed one), keeps its data in a
temporary directory and its output in ``node-N.log`` there. Readiness is ``/readyz`` answering
``200`` on every node; every wait is bounded and polls a condition.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Callable, Dict, List, Optional, TypeVar

import httpx

STARTUP_S_MAX = 60.0
WAIT_S_MAX = 20.0
POLL_S = 0.05

T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(
    what: str, cond: Callable[[], Optional[T]], timeout: float = WAIT_S_MAX, poll: float = POLL_S
) -> T:
    """Polls ``cond`` until it returns something other than ``None``/``False``."""
    deadline = time.monotonic() + timeout
    last_exc: Optional[BaseException] = None
    while True:
        try:
            v = cond()
            if v is not None and v is not False:
                return v
        except Exception as e:  # keep polling; report the last error on timeout
            last_exc = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.1f} s waiting for {what}; last error: {last_exc!r}")
        time.sleep(poll)


class Node:
    def __init__(self, node_id: int, port: int, root: str) -> None:
        self.id = node_id
        self.port = port
        self.addr = f"127.0.0.1:{port}"
        self.url = f"http://{self.addr}"
        self.data_dir = os.path.join(root, f"node-{node_id}")
        self.log_path = os.path.join(root, f"node-{node_id}.log")
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""


class Cluster:
    def __init__(self, binary: str, size: int = 3) -> None:
        self.binary = binary
        self.root = tempfile.mkdtemp(prefix="turnstile-py-")
        self.secret = secrets.token_hex(16)
        self.nodes: List[Node] = [Node(i + 1, free_port(), self.root) for i in range(size)]
        self.initial = ",".join(f"{n.id}={n.addr}" for n in self.nodes)
        self.http = httpx.Client(timeout=2.0, trust_env=False)

    @property
    def endpoints(self) -> List[str]:
        return [n.addr for n in self.nodes]

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    def start(self) -> None:
        for n in self.nodes:
            self._spawn(n)
        self.wait_ready()

    def _spawn(self, n: Node) -> None:
        os.makedirs(n.data_dir, exist_ok=True)
        log = open(n.log_path, "ab")
        env = dict(os.environ)
        env["TURNSTILE_CLUSTER_SECRET"] = self.secret  # keeps it out of the process list
        n.proc = subprocess.Popen(
            [
                self.binary, "serve",
                "--id", str(n.id),
                "--listen", n.addr,
                "--data-dir", n.data_dir,
                "--initial-cluster", self.initial,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        log.close()

    def ready(self, n: Node) -> bool:
        if n.proc is None:
            return False
        if n.proc.poll() is not None:
            raise RuntimeError(f"node {n.id} exited with {n.proc.returncode}:\n{n.log_tail()}")
        try:
            r = self.http.get(f"{n.url}/readyz")
        except httpx.HTTPError:
            return False
        return r.status_code == 200 and r.json().get("ready") is True

    def wait_ready(self, nodes: Optional[List[Node]] = None, timeout: float = STARTUP_S_MAX) -> None:
        for n in nodes if nodes is not None else self.live():
            wait_for(f"node {n.id} ready", lambda: self.ready(n), timeout=timeout)

    def live(self) -> List[Node]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def cluster_info(self, n: Node) -> Dict[str, object]:
        d: Dict[str, object] = self.http.get(f"{n.url}/v1/cluster").json()
        return d

    def leader(self) -> Node:
        def find() -> Optional[Node]:
            for n in self.live():
                try:
                    info = self.cluster_info(n)
                except httpx.HTTPError:
                    continue
                if info.get("state") == "Leader":
                    return n
            return None

        return wait_for("a leader", find)

    def kill(self, n: Node) -> None:
        """SIGKILL: the node stops at once, without draining."""
        if n.proc is not None and n.proc.poll() is None:
            n.proc.send_signal(signal.SIGKILL)
            n.proc.wait(timeout=WAIT_S_MAX)

    def restart(self, n: Node) -> None:
        self.kill(n)
        self._spawn(n)
        self.wait_ready([n])

    def stop(self) -> None:
        for n in self.nodes:
            if n.proc is not None and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGKILL)
        for n in self.nodes:
            if n.proc is not None:
                try:
                    n.proc.wait(timeout=WAIT_S_MAX)
                except subprocess.TimeoutExpired:
                    pass
        self.http.close()
        if os.environ.get("TURNSTILE_KEEP_LOGS"):
            print(f"\ncluster logs kept in {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
