"""Locks against the live cluster: lock/unlock, FIFO hand-off, token order, modes."""

from __future__ import annotations

import threading
from typing import List, Optional, Tuple

import pytest

from cluster import wait_for
from turnstile import (
    Client,
    Hold,
    LockHeldError,
    ModeMismatchError,
    WaitTimeoutError,
)


def test_lock_and_unlock(client: Client, name: str) -> None:
    with client.lock(name, ttl_ms=5_000) as hold:
        assert hold.token > 0
        assert hold.cluster_id and len(hold.cluster_id) == 32
        info = client.lock_info(name)
        assert [h.token for h in info.holders] == [hold.token]
        assert [h.lease_id for h in info.holders] == [hold.lease_id]
        # Held: a try-acquire by another session is refused, naming the holder's token.
        with client.session(ttl_ms=5_000) as other:
            with pytest.raises(LockHeldError) as e:
                other.lock(name)
            assert e.value.current_token == hold.token
        assert not hold.lost.is_set()
    # Released on exit, and the lock's own session is closed (lease revoked).
    assert client.lock_info(name).holders == []
    assert hold.lost.is_set()
    with client.lock(name) as again:
        assert again.token > hold.token


def test_tokens_increase_across_grants(client: Client, name: str) -> None:
    tokens: List[int] = []
    with client.session(ttl_ms=5_000) as s:
        for _ in range(5):
            h = s.lock(name)
            tokens.append(h.token)
            h.release()
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens), tokens


def test_fifo_handoff_between_two_threads(client: Client, name: str) -> None:
    """A holder, then two threads queued in order B, C: the release hands the lock to B (token
    = the release's revision), B's release hands it to C."""
    holder = client.lock(name)
    order: List[Tuple[str, int]] = []
    order_lock = threading.Lock()
    errors: List[BaseException] = []
    release_b = threading.Event()

    def waiter(label: str, then: Optional[threading.Event]) -> None:
        try:
            with client.lock(name, wait_ms=15_000) as h:
                with order_lock:
                    order.append((label, h.token))
                if then is not None:
                    assert then.wait(15)
        except BaseException as e:  # reported below
            errors.append(e)

    tb = threading.Thread(target=waiter, args=("B", release_b))
    tb.start()
    wait_for("B queued", lambda: len(client.lock_info(name).waiters) == 1)
    tc = threading.Thread(target=waiter, args=("C", None))
    tc.start()
    wait_for("C queued behind B", lambda: len(client.lock_info(name).waiters) == 2)

    released = holder.release()  # and closes its session
    assert released is not None
    released_at = released.revision
    wait_for("B granted", lambda: len(order) == 1)
    assert order[0] == ("B", released_at), "the release's entry grants the next waiter"
    assert len(client.lock_info(name).waiters) == 1  # C still waits
    release_b.set()
    tb.join(20)
    tc.join(20)
    assert not errors, errors
    assert [label for label, _ in order] == ["B", "C"]
    assert order[1][1] > order[0][1] > holder.token


def test_wait_timeout_leaves_lock_unheld(client: Client, name: str) -> None:
    with client.lock(name) as hold:
        with client.session(ttl_ms=5_000) as s:
            with pytest.raises(WaitTimeoutError):
                s.lock(name, wait_ms=300)
            info = client.lock_info(name)
            assert [h.lease_id for h in info.holders] == [hold.lease_id]
            assert info.waiters == []


def test_shared_mode_and_semaphore(client: Client, name: str) -> None:
    with client.session(ttl_ms=5_000) as a, client.session(ttl_ms=5_000) as b:
        r1: Hold = a.lock(name, mode="shared")
        r2 = b.lock(name, mode="shared")
        assert {h.mode for h in client.lock_info(name).holders} == {"shared"}
        assert r1.mode == "shared"
        with pytest.raises(LockHeldError):
            client.lock(name, ttl_ms=2_000)  # exclusive excluded by shared holders
        r1.release()
        r2.release()

        sem = f"{name}-sem"
        p1 = a.lock(sem, permits=2)
        p2 = b.lock(sem, permits=2)
        assert client.lock_info(sem).permits == 2
        assert p2.token > p1.token
        with client.session(ttl_ms=5_000) as c:
            with pytest.raises(LockHeldError):
                c.lock(sem, permits=2)
            with pytest.raises(ModeMismatchError):
                c.lock(sem, permits=3)
            with pytest.raises(ModeMismatchError):
                c.lock(sem, mode="shared")


def test_acquire_many_shares_one_token(client: Client, name: str) -> None:
    names = [f"{name}-a", f"{name}-b", f"{name}-c"]
    with client.session(ttl_ms=5_000) as s:
        holds = s.acquire_many(names)
        assert sorted(h.name for h in holds) == sorted(names)
        assert len({h.token for h in holds}) == 1
        # All or nothing: another session cannot take any of them.
        with client.session(ttl_ms=5_000) as other:
            with pytest.raises(LockHeldError):
                other.acquire_many([f"{name}-c", f"{name}-d"])
            assert client.lock_info(f"{name}-d").holders == []
        for h in holds:
            h.release()
        assert all(client.lock_info(n).holders == [] for n in names)
