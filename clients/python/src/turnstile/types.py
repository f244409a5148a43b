"""The JSON shapes of the HTTP API, typed. Parsers ignore fields they do not know (a newer
server stays readable); every object keeps the whole answer in ``raw``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from .errors import ProtocolError

JSON = Dict[str, Any]

#: A fence guard: ``(lock name, token)``. Pass ``hold.fence``.
Fence = Tuple[str, int]


def _int(d: Mapping[str, Any], k: str) -> int:
    v = d.get(k)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"answer field {k!r} is not an integer: {d!r}")
    return v


def _opt_int(d: Mapping[str, Any], k: str) -> Optional[int]:
    v = d.get(k)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(d: Mapping[str, Any], k: str) -> str:
    v = d.get(k)
    if not isinstance(v, str):
        raise ProtocolError(f"answer field {k!r} is not a string: {d!r}")
    return v


def _opt_str(d: Mapping[str, Any], k: str) -> Optional[str]:
    v = d.get(k)
    return v if isinstance(v, str) else None


def _str_list(d: Mapping[str, Any], k: str) -> List[str]:
    v = d.get(k)
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _dict_list(d: Mapping[str, Any], k: str) -> List[JSON]:
    v = d.get(k)
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


# --- conditions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class IfAbsent:
    """``if: {"absent": true}``: the key must not exist."""

    def to_json(self) -> JSON:
        return {"absent": True}


@dataclass(frozen=True)
class IfModRevision:
    """``if: {"mod_revision": n}``: the key must exist with this ``mod_revision``."""

    mod_revision: int

    def to_json(self) -> JSON:
        return {"mod_revision": self.mod_revision}


@dataclass(frozen=True)
class IfValue:
    """``if: {"value": v}``: the key must exist with this value."""

    value: str

    def to_json(self) -> JSON:
        return {"value": self.value}


Condition = Union[IfAbsent, IfModRevision, IfValue]


def condition_json(c: Union[Condition, Mapping[str, Any]]) -> JSON:
    if isinstance(c, (IfAbsent, IfModRevision, IfValue)):
        return c.to_json()
    return dict(c)


def fence_json(f: Fence) -> JSON:
    lock, token = f
    return {"lock": lock, "token": token}


# --- answers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "Written":
        return Written(_int(d, "revision"), d)


@dataclass(frozen=True)
class Deleted:
    revision: int
    deleted: bool
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "Deleted":
        return Deleted(_int(d, "revision"), bool(d.get("deleted", False)), d)


@dataclass(frozen=True)
class LeaseGrant:
    lease_id: int
    ttl_ms: int
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "LeaseGrant":
        return LeaseGrant(_int(d, "lease_id"), _int(d, "ttl_ms"), _int(d, "revision"), d)


@dataclass(frozen=True)
class Keepalive:
    lease_id: int
    ttl_ms: int
    remaining_ms: int
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "Keepalive":
        return Keepalive(
            _int(d, "lease_id"), _int(d, "ttl_ms"), _int(d, "remaining_ms"), _int(d, "revision"), d
        )


@dataclass(frozen=True)
class LeaseInfo:
    lease_id: int
    ttl_ms: int
    remaining_ms: int
    locks: List[str]
    keys: List[str]
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "LeaseInfo":
        return LeaseInfo(
            _int(d, "lease_id"),
            _int(d, "ttl_ms"),
            _int(d, "remaining_ms"),
            _str_list(d, "locks"),
            _str_list(d, "keys"),
            d,
        )


@dataclass(frozen=True)
class Grant:
    """One acquisition. ``token`` is the fencing token."""

    name: str
    token: int
    term: int
    cluster_id: Optional[str]
    lease_id: int
    mode: str
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "Grant":
        return Grant(
            _str(d, "name"),
            _int(d, "token"),
            _int(d, "term"),
            _opt_str(d, "cluster_id"),
            _int(d, "lease_id"),
            _opt_str(d, "mode") or "exclusive",
            _int(d, "revision"),
            d,
        )


@dataclass(frozen=True)
class MultiGrant:
    """An acquire-many: every lock granted by one entry, sharing its token."""

    tokens: Dict[str, int]
    token: int
    term: Optional[int]
    cluster_id: Optional[str]
    lease_id: Optional[int]
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "MultiGrant":
        t = d.get("tokens")
        tokens = (
            {k: v for k, v in t.items() if isinstance(k, str) and isinstance(v, int)}
            if isinstance(t, dict)
            else {}
        )
        return MultiGrant(
            tokens,
            _opt_int(d, "token") or _int(d, "revision"),
            _opt_int(d, "term"),
            _opt_str(d, "cluster_id"),
            _opt_int(d, "lease_id"),
            _int(d, "revision"),
            d,
        )


@dataclass(frozen=True)
class Holder:
    lease_id: Optional[int]
    token: Optional[int]
    term: Optional[int]
    mode: str
    since_ms: int

    @staticmethod
    def parse(d: JSON) -> "Holder":
        return Holder(
            _opt_int(d, "lease_id"),
            _opt_int(d, "token"),
            _opt_int(d, "term"),
            _opt_str(d, "mode") or "exclusive",
            _opt_int(d, "since_ms") or 0,
        )


@dataclass(frozen=True)
class Waiter:
    lease_id: Optional[int]
    mode: str
    since_ms: int

    @staticmethod
    def parse(d: JSON) -> "Waiter":
        return Waiter(
            _opt_int(d, "lease_id"), _opt_str(d, "mode") or "exclusive", _opt_int(d, "since_ms") or 0
        )


@dataclass(frozen=True)
class LockInfo:
    name: str
    permits: int
    holders: List[Holder]
    waiters: List[Waiter]
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON, name: str = "") -> "LockInfo":
        return LockInfo(
            _opt_str(d, "name") or name,
            _opt_int(d, "permits") or 1,
            [Holder.parse(h) for h in _dict_list(d, "holders")],
            [Waiter.parse(w) for w in _dict_list(d, "waiters")],
            d,
        )


@dataclass(frozen=True)
class FenceCheck:
    current: bool
    current_token: Optional[int]
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "FenceCheck":
        return FenceCheck(bool(d.get("current")), _opt_int(d, "current_token"), d)


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: str
    create_revision: int
    mod_revision: int
    version: int
    lease_id: Optional[int]
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "KeyValue":
        return KeyValue(
            _str(d, "key"),
            _str(d, "value"),
            _int(d, "create_revision"),
            _int(d, "mod_revision"),
            _int(d, "version"),
            _opt_int(d, "lease_id"),
            d,
        )


@dataclass(frozen=True)
class CounterValue:
    value: int
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "CounterValue":
        return CounterValue(_int(d, "value"), _int(d, "revision"), d)


@dataclass(frozen=True)
class ClusterInfo:
    cluster_id: Optional[str]
    node_id: int
    leader_id: Optional[int]
    state: str
    term: int
    applied_index: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "ClusterInfo":
        return ClusterInfo(
            _opt_str(d, "cluster_id"),
            _int(d, "node_id"),
            _opt_int(d, "leader_id"),
            _opt_str(d, "state") or "",
            _opt_int(d, "term") or 0,
            _int(d, "applied_index"),
            d,
        )


# --- contract v3: ranges, elections, transactions -------------------------------------------


@dataclass(frozen=True)
class KvPage:
    """``GET /v1/kv?prefix=&after=&limit=``: one page, consistent at ``revision``."""

    items: List[KeyValue]
    more: bool
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "KvPage":
        return KvPage(
            [KeyValue.parse(i) for i in _dict_list(d, "items")],
            bool(d.get("more", False)),
            _int(d, "revision"),
            d,
        )


@dataclass(frozen=True)
class LockPage:
    """``GET /v1/locks?prefix=&after=&limit=``."""

    items: List[LockInfo]
    more: bool
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "LockPage":
        return LockPage(
            [LockInfo.parse(i) for i in _dict_list(d, "items")],
            bool(d.get("more", False)),
            _int(d, "revision"),
            d,
        )


@dataclass(frozen=True)
class LeaseSummary:
    lease_id: int
    ttl_ms: int
    remaining_ms: int

    @staticmethod
    def parse(d: JSON) -> "LeaseSummary":
        return LeaseSummary(_int(d, "lease_id"), _int(d, "ttl_ms"), _int(d, "remaining_ms"))


@dataclass(frozen=True)
class LeaseList:
    items: List[LeaseSummary]
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "LeaseList":
        return LeaseList(
            [LeaseSummary.parse(i) for i in _dict_list(d, "items")], _int(d, "revision"), d
        )


@dataclass(frozen=True)
class Leadership:
    """A campaign's win: ``token`` is the index of the entry that made this lease leader."""

    name: str
    lease_id: int
    value: str
    token: int
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "Leadership":
        return Leadership(
            _str(d, "name"),
            _int(d, "lease_id"),
            _str(d, "value"),
            _int(d, "token"),
            _int(d, "revision"),
            d,
        )


@dataclass(frozen=True)
class ElectionLeader:
    lease_id: Optional[int]
    value: str
    token: Optional[int]
    since_ms: int

    @staticmethod
    def parse(d: JSON) -> "ElectionLeader":
        return ElectionLeader(
            _opt_int(d, "lease_id"),
            _opt_str(d, "value") or "",
            _opt_int(d, "token"),
            _opt_int(d, "since_ms") or 0,
        )


@dataclass(frozen=True)
class ElectionInfo:
    name: str
    leader: Optional[ElectionLeader]
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "ElectionInfo":
        leader = d.get("leader")
        return ElectionInfo(
            _str(d, "name"),
            ElectionLeader.parse(leader) if isinstance(leader, dict) else None,
            d,
        )


@dataclass(frozen=True)
class TxnResult:
    """``POST /v1/txn``: which branch applied and the result of each of its ops (raw JSON,
    in op order)."""

    succeeded: bool
    results: List[Any]
    revision: int
    raw: JSON = field(repr=False, compare=False)

    @staticmethod
    def parse(d: JSON) -> "TxnResult":
        r = d.get("results")
        return TxnResult(
            bool(d.get("succeeded")), list(r) if isinstance(r, list) else [], _int(d, "revision"), d
        )


# Transaction builders: small functions returning the contract's JSON forms.


def cmp_absent(key: str) -> JSON:
    return {"key": key, "absent": True}


def cmp_mod_revision(key: str, mod_revision: int) -> JSON:
    return {"key": key, "mod_revision": mod_revision}


def cmp_version(key: str, version: int) -> JSON:
    return {"key": key, "version": version}


def cmp_value(key: str, value: str) -> JSON:
    return {"key": key, "value": value}


def cmp_fence(fence: Fence) -> JSON:
    return {"fence": fence_json(fence)}


def op_put(key: str, value: str, lease_id: Optional[int] = None) -> JSON:
    put: JSON = {"key": key, "value": value}
    if lease_id is not None:
        put["lease_id"] = lease_id
    return {"put": put}


def op_delete(key: str) -> JSON:
    return {"delete": {"key": key}}


def op_get(key: str) -> JSON:
    return {"get": {"key": key}}


def op_incr(counter: str, by: int = 1) -> JSON:
    return {"incr": {"counter": counter, "by": by}}
