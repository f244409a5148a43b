"""Watches against the live cluster, including a resume across a node kill. This file runs
last (it kills a node, and restarts it before it ends)."""

from __future__ import annotations

import threading
from typing import List

from cluster import Cluster, wait_for
from turnstile import Client, Watch, WatchEvent


class Collector:
    """Iterates a watch on a thread of its own."""

    def __init__(self, watch: Watch, pause_after: int = -1) -> None:
        """With ``pause_after``, stops asking for events after that many until ``resume()``."""
        self.watch = watch
        self.pause_after = pause_after
        self.gate = threading.Event()
        self.events: List[WatchEvent] = []
        self.error: List[BaseException] = []
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for ev in self.watch:
                with self._lock:
                    self.events.append(ev)
                    n = len(self.events)
                if n == self.pause_after:
                    self.gate.wait(20)
        except BaseException as e:
            self.error.append(e)

    def count(self) -> int:
        if self.error:
            raise AssertionError(f"watch failed: {self.error[0]!r}")
        with self._lock:
            return len(self.events)

    def resume(self) -> None:
        self.gate.set()

    def stop(self) -> None:
        self.watch.close()
        self.thread.join(5)
        assert not self.thread.is_alive(), "close() from another thread ends the iteration"


def test_watch_sees_puts_deletes_and_lock_events(client: Client, name: str) -> None:
    with client.watch(prefix=name) as w:
        c = Collector(w)
        wait_for("the watch to connect", lambda: w.endpoint is not None)
        client.put(f"{name}/a", "1")
        with client.lock(f"{name}.lock") as hold:
            pass
        client.delete(f"{name}/a")
        wait_for("4 events", lambda: c.count() >= 4)
        c.stop()
    kinds = [(e.kind, e.key or e.lock) for e in c.events]
    assert kinds == [
        ("put", f"{name}/a"),
        ("lock_granted", f"{name}.lock"),
        ("lock_released", f"{name}.lock"),
        ("delete", f"{name}/a"),
    ]
    assert c.events[1].token == hold.token
    assert c.events[2].cause == "released"


def test_watch_from_revision_replays_history(client: Client, name: str) -> None:
    first = client.put(f"{name}/k", "0").revision
    for i in range(1, 4):
        client.put(f"{name}/k", str(i))
    with client.watch(key=f"{name}/k", from_revision=first) as w:
        got = [next(w) for _ in range(4)]
    assert [e.value for e in got] == ["0", "1", "2", "3"]
    assert got[0].revision == first


def test_watch_resumes_on_another_node_after_a_kill(cluster: Cluster, name: str) -> None:
    """The watch is connected to a follower; the follower is SIGKILLed while events keep
    coming. The watch reconnects to another node with Last-Event-ID and delivers every event
    exactly once, in order."""
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    others = [n.addr for n in cluster.nodes if n is not follower]
    watcher = Client([follower.addr] + others)
    writer = Client(others)
    n_before, n_after = 10, 10
    try:
        w = watcher.watch(prefix=f"{name}/")
        # The collector stops reading after the first events, so the events written while the
        # node is down can reach the watcher only through a resume (a reconnect "from now"
        # would miss all of them).
        c = Collector(w, pause_after=n_before)
        wait_for("the watch to connect", lambda: w.endpoint is not None)
        assert w.endpoint == follower.url
        for i in range(n_before):
            writer.put(f"{name}/k{i:02d}", str(i))
        wait_for(f"{n_before} events before the kill", lambda: c.count() >= n_before)

        cluster.kill(follower)
        for i in range(n_before, n_before + n_after):
            writer.put(f"{name}/k{i:02d}", str(i))
        c.resume()
        total = n_before + n_after
        wait_for(f"{total} events after the kill", lambda: c.count() >= total, timeout=20)
        resumed_on = w.endpoint
        # Nothing more may arrive: a duplicate would show up as an extra event.
        writer.put(f"{name}/zz-end", "end")
        wait_for("the end marker", lambda: c.count() >= total + 1)
        c.stop()

        keys = [e.key for e in c.events]
        assert keys == [f"{name}/k{i:02d}" for i in range(total)] + [f"{name}/zz-end"]
        ids = [(e.revision, e.seq) for e in c.events]
        assert ids == sorted(set(ids)), "no event twice, in order"
        assert w.connections >= 2, "the watch reconnected"
        assert resumed_on is not None and resumed_on != follower.url
        print(f"watch connections: {w.connections}; resumed on {resumed_on}")
        assert c.events[-1].revision > 0
    finally:
        watcher.close()
        writer.close()
        cluster.restart(follower)
