"""The server's refusals arrive as typed exceptions."""

from __future__ import annotations

import pytest

from turnstile import (
    BadRequestError,
    Client,
    ConflictError,
    LeaseNotFoundError,
    LockHeldError,
    NotFoundError,
    NotHolderError,
    TurnstileError,
    WaitTimeoutError,
)


def test_refusals_are_typed(client: Client, name: str) -> None:
    with pytest.raises(BadRequestError) as bad:
        client.grant_lease(10)  # below the 1,000 ms minimum
    assert bad.value.status == 400 and bad.value.code == "bad_request" and bad.value.message

    with pytest.raises(LeaseNotFoundError) as e1:
        client.keepalive(999_999_999)
    assert e1.value.status == 404

    lease = client.grant_lease(5_000)
    g = client.acquire(name, lease.lease_id)
    with pytest.raises(LockHeldError) as held:
        client.acquire(name, lease.lease_id)  # not re-entrant
    assert isinstance(held.value, ConflictError) and held.value.status == 409
    assert held.value.current_token == g.token

    with pytest.raises(NotHolderError):
        client.release(name, g.token + 1000, lease.lease_id)

    other = client.grant_lease(5_000)
    with pytest.raises(WaitTimeoutError):
        client.acquire(name, other.lease_id, wait_ms=200)

    with pytest.raises(BadRequestError):
        client.acquire("bad name with spaces", lease.lease_id)

    with pytest.raises(NotFoundError):
        client.raw("GET", "/v1/no-such-route")

    client.revoke_lease(lease.lease_id)
    with pytest.raises(LeaseNotFoundError):
        client.acquire(name, lease.lease_id)
    with pytest.raises(TurnstileError):  # everything derives from the base class
        client.revoke_lease(lease.lease_id)
    client.revoke_lease(other.lease_id)
