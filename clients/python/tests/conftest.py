from __future__ import annotations

import os
import random
import re
import shutil
import sys
from typing import Iterator, List

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from cluster import Cluster  # noqa: E402

from turnstile import Client, NotFoundError, MethodNotAllowedError  # noqa: E402

#: Seed of the test run's names and random choices; set TURNSTILE_TEST_SEED to replay.
SEED = int(os.environ.get("TURNSTILE_TEST_SEED") or random.SystemRandom().randrange(1 << 30))


def pytest_report_header() -> List[str]:
    return [f"turnstile: TURNSTILE_TEST_SEED={SEED}", f"turnstile: binary {binary_path()}"]


def binary_path() -> str:
    b = os.environ.get("TURNSTILE_BINARY") or shutil.which("turnstile") or ""
    return b


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    binary = binary_path()
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("set TURNSTILE_BINARY to a built `turnstile` binary", pytrace=False)
    c = Cluster(binary)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture()
def client(cluster: Cluster) -> Iterator[Client]:
    c = Client(cluster.endpoints)
    yield c
    c.close()


@pytest.fixture()
def rng(request: pytest.FixtureRequest) -> random.Random:
    return random.Random(f"{SEED}-{request.node.nodeid}")


@pytest.fixture()
def name(request: pytest.FixtureRequest) -> str:
    """A name unique to this test (lock, key and counter names alike)."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:80]
    return f"{base}.{SEED}"


def require_route(client: Client, method: str, path: str, what: str) -> None:
    """Skips the test while the server does not serve a contract-v3 route (``404 not_found``
    or ``405``), unless TURNSTILE_REQUIRE_V3=1, which makes that a failure."""
    try:
        client.raw(method, path, {} if method != "GET" else None)
    except (NotFoundError, MethodNotAllowedError) as e:
        if os.environ.get("TURNSTILE_REQUIRE_V3") == "1":
            pytest.fail(f"{what} is not served by this server: {e}")
        pytest.skip(f"{what} not served by this server yet ({e}); set TURNSTILE_REQUIRE_V3=1 to fail instead")
    except Exception:
        pass  # served (the probe itself may be refused as bad input)
