"""TLS and credentials against a one-node secure cluster (its own process, certificates made
with ``turnstile certs``): a client certificate, a bearer token, and the refusals."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from typing import Iterator, Tuple

import httpx
import pytest

from cluster import STARTUP_S_MAX, free_port, wait_for
from conftest import binary_path
from turnstile import (
    Client,
    PermissionDeniedError,
    TlsError,
    UnauthenticatedError,
)


class Secure:
    def __init__(self, root: str, addr: str) -> None:
        self.root = root
        self.addr = addr
        self.certs = os.path.join(root, "certs")

    def path(self, name: str) -> str:
        return os.path.join(self.certs, name)


def _run(args: list[str]) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def secure() -> Iterator[Secure]:
    binary = binary_path()
    root = tempfile.mkdtemp(prefix="turnstile-py-tls-")
    addr = f"127.0.0.1:{free_port()}"
    s = Secure(root, addr)
    d = ["--certs-dir", s.certs]
    _run([binary, "certs", "create-ca", *d])
    _run([binary, "certs", "create-node", *d, "--id", "1", "--host", "127.0.0.1"])
    _run([binary, "certs", "create-client", *d, "--user", "root"])
    _run([binary, "certs", "create-client", *d, "--user", "alice"])
    other = os.path.join(root, "other")
    _run([binary, "certs", "create-ca", "--certs-dir", other])
    log = open(os.path.join(root, "node.log"), "ab")
    env = dict(os.environ, TURNSTILE_CLUSTER_SECRET="tls-test-secret-0123")
    proc = subprocess.Popen(
        [
            binary, "serve", "--id", "1", "--listen", addr,
            "--data-dir", os.path.join(root, "data"),
            "--initial-cluster", f"1={addr}",
            "--tls-ca", s.path("ca.crt"),
            "--tls-cert", s.path("node-1.crt"),
            "--tls-key", s.path("node-1.key"),
        ],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
    )
    log.close()
    try:
        probe = httpx.Client(verify=False, timeout=2.0, trust_env=False)

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"secure node exited with {proc.returncode}")
            try:
                return probe.get(f"https://{addr}/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the secure node to be ready", ready, timeout=STARTUP_S_MAX)
        probe.close()
        yield s
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=20)
        shutil.rmtree(root, ignore_errors=True)


def test_client_certificate(secure: Secure, name: str) -> None:
    with Client([secure.addr], ca=secure.path("ca.crt"),
                cert=secure.path("client-root.crt"), key=secure.path("client-root.key")) as c:
        assert c.endpoints == [f"https://{secure.addr}"]
        with c.lock(name) as hold:
            c.put(f"{name}/k", "v", fence=hold.fence)
        kv = c.get(f"{name}/k")
        assert kv is not None and kv.value == "v"


def test_refusals(secure: Secure, name: str) -> None:
    # No credential: 401, typed.
    with Client([secure.addr], ca=secure.path("ca.crt")) as anon:
        with pytest.raises(UnauthenticatedError):
            anon.grant_lease(5_000)
    # A CA that did not sign the node's certificate: the handshake fails, final.
    other_ca = os.path.join(secure.root, "other", "ca.crt")
    with Client([secure.addr], ca=other_ca, retry_budget=1.0) as wrong:
        with pytest.raises(TlsError):
            wrong.grant_lease(5_000)
    # alice has no role: authenticated, and denied.
    with Client([secure.addr], ca=secure.path("ca.crt"),
                cert=secure.path("client-alice.crt"), key=secure.path("client-alice.key")) as a:
        lease = a.grant_lease(5_000)
        with pytest.raises(PermissionDeniedError):
            a.acquire(name, lease.lease_id)


def test_bearer_token(secure: Secure, name: str) -> None:
    root_cert: Tuple[str, str] = (secure.path("client-root.crt"), secure.path("client-root.key"))
    with Client([secure.addr], ca=secure.path("ca.crt"), cert=root_cert[0], key=root_cert[1]) as root:
        perms = [{"kind": k, "prefix": name, "access": "write"} for k in ("lock", "key", "counter")]
        root.raw("PUT", "/v1/auth/roles/py-writer", {"permissions": perms})
        root.raw("PUT", "/v1/auth/users/bob", {"roles": ["py-writer"]})
        made = root.raw("POST", "/v1/auth/tokens", {"user": "bob"})
        token = made["token"]
    with Client([secure.addr], ca=secure.path("ca.crt"), token=token) as bob:
        assert bob.incr(f"{name}.c").value == 1
        with pytest.raises(PermissionDeniedError):
            bob.incr("elsewhere.c")
    with Client([secure.addr], ca=secure.path("ca.crt"), token="0" * 16 + "." + "0" * 64) as bad:
        with pytest.raises(UnauthenticatedError):
            bad.counter(f"{name}.c")
