"""Schemathesis hooks for tests/schemathesis/run.sh.

They only shape *valid* generated data so that it reaches deeper than a 404, and keep the
run from destroying the cluster it tests; no check is weakened and no invalid input is
changed (a negative test still sends exactly what it generated):

- a valid ``lease_id`` in a body is, half of the time, a real lease of this run (granted on
  first use, granted again once revoked), so acquires, campaigns and bound puts are granted
  or queue instead of always answering ``404 lease_not_found``;
- a valid ``wait_ms`` is cut to at most ``WAIT_MS_CAP`` so that a queued acquire or campaign
  answers ``409 wait_timeout`` within the run's request timeout;
- a valid lease id in a path (get, keepalive, revoke) is, half of the time, that lease;
- a valid release, proclaim or resign is, half of the time, sent by the holder of a lock or
  the leader of an election this run holds (so ``200`` answers are validated too, not only
  ``409 not_holder`` / ``not_leader``);
- ``application/octet-stream`` answers (backups) are read as a string, which is what the
  document says they are;
- ``DELETE /v1/members/{id}`` and ``POST /v1/members/{id}/promote`` never name a member of
  the cluster under test (removing one would take the cluster away from the rest of the run);
  they still run, and are refused with ``409 membership_refused``.
"""

from __future__ import annotations

import json
import os
import random
import urllib.error
import urllib.request
from typing import Any, Dict, Optional, Set

import schemathesis

BASE_URL = os.environ["TURNSTILE_URL"].rstrip("/")
WAIT_MS_CAP = 200
WAIT_MS_MAX = 300_000
LEASE_TTL_MS = 3_600_000
ID_MAX = 2**63

_lease: Optional[int] = None
_rng = random.Random(int(os.environ.get("TURNSTILE_HOOKS_SEED", "0")))


def _call(method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE_URL + path, data=data, method=method)
    req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read() or b"{}")


def _member_ids() -> Set[int]:
    return {int(m["id"]) for m in _call("GET", "/v1/members")["members"]}


MEMBERS = _member_ids()


def _real_lease() -> Optional[int]:
    """This run's lease, granted again if it is gone."""
    global _lease
    try:
        if _lease is not None:
            _call("GET", f"/v1/leases/{_lease}")
            return _lease
    except urllib.error.HTTPError:
        _lease = None
    try:
        _lease = int(_call("POST", "/v1/leases", {"ttl_ms": LEASE_TTL_MS})["lease_id"])
    except (urllib.error.URLError, KeyError, ValueError):
        _lease = None
    return _lease


def _valid_id(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v < ID_MAX


@schemathesis.hook("map_body")
def map_body(ctx: Any, body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    if _valid_id(body.get("lease_id")) and _rng.random() < 0.5:
        lease = _real_lease()
        if lease is not None:
            body = {**body, "lease_id": lease}
    wait = body.get("wait_ms")
    if isinstance(wait, int) and not isinstance(wait, bool) and WAIT_MS_CAP < wait <= WAIT_MS_MAX:
        body = {**body, "wait_ms": _rng.randint(0, WAIT_MS_CAP)}
    return body


@schemathesis.hook("map_path_parameters").apply_to(path_regex=r"^/v1/members/\{id\}")
def map_member_id(ctx: Any, path_parameters: Dict[str, Any]) -> Dict[str, Any]:
    node = path_parameters.get("id")
    if isinstance(node, int) and node in MEMBERS:
        return {**path_parameters, "id": node + 1_000}
    return path_parameters


def _chance() -> bool:
    return _rng.random() < 0.5


@schemathesis.hook("map_path_parameters").apply_to(path_regex=r"^/v1/leases/\{id\}")
def map_lease_id(ctx: Any, path_parameters: Dict[str, Any]) -> Dict[str, Any]:
    if _valid_id(path_parameters.get("id")) and _chance():
        lease = _real_lease()
        if lease is not None:
            return {**path_parameters, "id": lease}
    return path_parameters


LOCK = "schemathesis-lock"
ELECTION = "schemathesis-election"


def _held(path: str, name: str, body: Dict[str, Any]) -> Optional[Dict[str, int]]:
    """Our lease's hold on lock or election `name`: taken now if free, or found in its view."""
    lease = _real_lease()
    if lease is None:
        return None
    try:
        got = _call("POST", f"{path}/{name}/{'acquire' if path == '/v1/locks' else 'campaign'}",
                    {**body, "lease_id": lease, "wait_ms": 0})
        return {"lease_id": lease, "token": int(got["token"])}
    except urllib.error.HTTPError:
        pass
    try:
        now = _call("GET", f"{path}/{name}")
    except urllib.error.URLError:
        return None
    holders = now.get("holders") or ([now["leader"]] if now.get("leader") else [])
    for h in holders:
        if h.get("lease_id") == lease and h.get("token"):
            return {"lease_id": lease, "token": int(h["token"])}
    return None


def _with_hold(case: Any, path: str, name: str, body: Dict[str, Any]) -> Any:
    if not isinstance(case.body, dict) or not _chance():
        return case
    if not (_valid_id(case.body.get("lease_id")) and _valid_id(case.body.get("token"))):
        return case
    hold = _held(path, name, body)
    if hold is not None:
        case.path_parameters = {**(case.path_parameters or {}), "name": name}
        case.body = {**case.body, **hold}
    return case


@schemathesis.hook("map_case").apply_to(path="/v1/locks/{name}/release")
def map_release(ctx: Any, case: Any) -> Any:
    return _with_hold(case, "/v1/locks", LOCK, {})


@schemathesis.hook("map_case").apply_to(path_regex=r"^/v1/elections/\{name\}/(proclaim|resign)$")
def map_leader(ctx: Any, case: Any) -> Any:
    return _with_hold(case, "/v1/elections", ELECTION, {"value": "schemathesis"})


@schemathesis.deserializer("application/octet-stream")
def read_octets(ctx: Any, response: Any) -> str:
    return bytes(response.content).decode("latin-1")
