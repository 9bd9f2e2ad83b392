"""A small asyncio client for etcd v3, over etcd's JSON gateway (``/v3/...``) with httpx.

Why the gateway and not a gRPC client: the gateway is part of every etcd server since 3.3,
speaks plain JSON over HTTP/1.1, and needs nothing beyond httpx, which spoolmq already depends
on; gRPC clients for Python pull in grpcio and generated stubs for the handful of calls a
broker makes (leases, a compare-and-put, ranges, a watch). Keys and values travel base64 in
both directions; 64-bit numbers come back as strings.

Every call raises :class:`EtcdUnavailableError` when no endpoint answers, so callers can keep
serving what they own while etcd is down (an election without a quorum never succeeds).

https endpoints are checked against the CA of ``tls`` (``--tls-ca``; the system's CAs
without one), and the process's certificate (``--tls-cert``) is presented when etcd asks for
one (etcd's ``--client-cert-auth``).
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from services.errors import EtcdError, EtcdUnavailableError
from services.tls import TlsConfig, client_context


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd holds it."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    def json(self) -> Any:
        return json.loads(self.value)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change seen by a watch: ``PUT`` or ``DELETE`` of ``kv.key`` at ``kv.mod_revision``."""

    type: str
    kv: KeyValue


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode("ascii")


def prefix_end(prefix: str) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix`` (etcd's rule)."""
    raw = bytearray(prefix.encode())
    for i in range(len(raw) - 1, -1, -1):
        if raw[i] < 0xFF:
            raw[i] += 1
            return bytes(raw[: i + 1])
    return b"\0"


def _kv(data: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=base64.b64decode(data["key"]).decode(),
        value=base64.b64decode(data.get("value", "")),
        create_revision=int(data.get("create_revision", 0)),
        mod_revision=int(data.get("mod_revision", 0)),
        version=int(data.get("version", 0)),
        lease=int(data.get("lease", 0)),
    )


@dataclass(frozen=True, slots=True)
class Compare:
    """One txn condition: ``target`` of ``key`` compared with ``value`` (etcd's Compare)."""

    key: str
    target: str  # "CREATE" | "MOD" | "VERSION" | "VALUE"
    value: int | bytes
    result: str = "EQUAL"  # "EQUAL" | "GREATER" | "LESS" | "NOT_EQUAL"

    def body(self) -> dict[str, Any]:
        field = {
            "CREATE": "create_revision",
            "MOD": "mod_revision",
            "VERSION": "version",
            "VALUE": "value",
        }[self.target]
        value = _b64(self.value) if isinstance(self.value, bytes) else str(self.value)
        return {"key": _b64(self.key), "target": self.target, "result": self.result, field: value}


def put_op(key: str, value: bytes, lease: int = 0) -> dict[str, Any]:
    """A txn operation that puts ``value`` at ``key`` (attached to ``lease`` when not 0)."""
    request: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def range_op(key: str) -> dict[str, Any]:
    """A txn operation that reads ``key``."""
    return {"request_range": {"key": _b64(key)}}


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    ranges: list[list[KeyValue]]  # one list per range operation of the branch taken


class EtcdEndpoints:
    """The endpoints of one etcd cluster, tried in turn from the one that answered last."""

    def __init__(self, endpoints: Sequence[str]) -> None:
        if not endpoints:
            raise ValueError("etcd needs at least one endpoint URL")
        self.urls = [e.rstrip("/") for e in endpoints]
        self.preferred = 0

    def in_turn(self, path: str) -> list[tuple[int, str]]:
        """(index, URL of ``path``) of every endpoint, the preferred one first."""
        count = len(self.urls)
        order = [(self.preferred + i) % count for i in range(count)]
        return [(index, self.urls[index] + path) for index in order]

    def answer(self, index: int, path: str, response: httpx.Response) -> dict[str, Any] | None:
        """The JSON answer of endpoint ``index``; None when the next endpoint should be asked
        (it is overloaded or failing); :class:`EtcdError` when etcd refused the request."""
        if response.status_code >= 500 or response.status_code == 429:
            return None
        data: dict[str, Any] = response.json()
        if response.status_code != 200 or "error" in data:
            raise EtcdError(f"{path}: {data.get('message') or data.get('error') or data}")
        self.preferred = index
        return data


def _unanswered(url: str, response: httpx.Response) -> EtcdError:
    return EtcdError(f"{url}: {response.status_code} {response.text[:200]}")


class EtcdClient:
    """etcd v3 over its JSON gateway. ``endpoints`` are tried in turn until one answers."""

    def __init__(
        self, endpoints: Sequence[str], timeout_s: float = 2.0, tls: TlsConfig | None = None
    ) -> None:
        self._endpoints = EtcdEndpoints(endpoints)
        self._timeout = timeout_s
        self._http = httpx.AsyncClient(timeout=timeout_s, verify=client_context(tls) or True)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for index, url in self._endpoints.in_turn(path):
            try:
                response = await self._http.post(url, json=body)
            except (httpx.HTTPError, ssl.SSLError) as exc:  # etcd refused our certificate
                last = exc
                continue
            data = self._endpoints.answer(index, path, response)
            if data is not None:
                return data
            last = _unanswered(url, response)
        raise EtcdUnavailableError(f"no etcd endpoint answered {path}: {last}")

    # ------------------------------------------------------------------ keys

    async def get(self, key: str) -> KeyValue | None:
        data = await self._call("/v3/kv/range", {"key": _b64(key)})
        kvs = data.get("kvs") or []
        return _kv(kvs[0]) if kvs else None

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` (sorted by key) and the store revision they were read at."""
        body = {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}
        data = await self._call("/v3/kv/range", body)
        return [_kv(kv) for kv in data.get("kvs") or []], int(data["header"]["revision"])

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Put ``value`` at ``key``; answer the new revision."""
        request = put_op(key, value, lease)["request_put"]
        data = await self._call("/v3/kv/put", request)
        return int(data["header"]["revision"])

    async def delete(self, key: str) -> int:
        """Delete ``key``; answer how many keys went (0 or 1)."""
        data = await self._call("/v3/kv/deleterange", {"key": _b64(key)})
        return int(data.get("deleted", 0))

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[dict[str, Any]],
        failure: Sequence[dict[str, Any]] = (),
    ) -> TxnResult:
        """etcd's atomic If/Then/Else."""
        body = {
            "compare": [c.body() for c in compare],
            "success": list(success),
            "failure": list(failure),
        }
        data = await self._call("/v3/kv/txn", body)
        ranges = [
            [_kv(kv) for kv in r["response_range"].get("kvs") or []]
            for r in data.get("responses") or []
            if "response_range" in r
        ]
        return TxnResult(bool(data.get("succeeded")), int(data["header"]["revision"]), ranges)

    # ------------------------------------------------------------------ leases

    async def grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds; answer its id."""
        data = await self._call("/v3/lease/grant", {"TTL": str(ttl_s)})
        return int(data["ID"])

    async def keep_alive(self, lease: int) -> int:
        """Renew ``lease`` once; answer its remaining TTL (0: the lease is gone)."""
        data = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(data.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        """End ``lease`` now: every key attached to it is deleted."""
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError:
            pass  # already expired

    # ------------------------------------------------------------------ watch

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[WatchEvent]:
        """Changes under ``prefix`` from ``start_revision`` on, until the stream breaks.

        The caller re-reads and re-watches when the iterator ends (etcd restarted, compaction,
        a network error): a watch is a hint, the range read is the truth.
        """
        body = {
            "create_request": {
                "key": _b64(prefix),
                "range_end": _b64(prefix_end(prefix)),
                "start_revision": str(start_revision),
            }
        }
        url = self._endpoints.in_turn("/v3/watch")[0][1]
        timeout = httpx.Timeout(self._timeout, read=None)
        try:
            async with self._http.stream("POST", url, json=body, timeout=timeout) as response:
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    result = json.loads(line).get("result", {})
                    if result.get("canceled") or result.get("compact_revision"):
                        return
                    for event in result.get("events") or []:
                        yield WatchEvent(event.get("type", "PUT"), _kv(event["kv"]))
        except (httpx.HTTPError, ssl.SSLError):
            return


class EtcdLeaseClient:
    """The lease calls of :class:`EtcdClient`, blocking: for a thread that must not wait on
    the event loop (:mod:`services.cluster.heartbeat`)."""

    def __init__(
        self, endpoints: Sequence[str], timeout_s: float = 1.0, tls: TlsConfig | None = None
    ) -> None:
        self._endpoints = EtcdEndpoints(endpoints)
        self._http = httpx.Client(timeout=timeout_s, verify=client_context(tls) or True)

    def close(self) -> None:
        self._http.close()

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for index, url in self._endpoints.in_turn(path):
            try:
                response = self._http.post(url, json=body)
            except (httpx.HTTPError, ssl.SSLError) as exc:  # etcd refused our certificate
                last = exc
                continue
            data = self._endpoints.answer(index, path, response)
            if data is not None:
                return data
            last = _unanswered(url, response)
        raise EtcdUnavailableError(f"no etcd endpoint answered {path}: {last}")

    def grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds; answer its id."""
        return int(self._call("/v3/lease/grant", {"TTL": str(ttl_s)})["ID"])

    def keep_alive(self, lease: int) -> int:
        """Renew ``lease`` once; answer its remaining TTL (0: the lease is gone)."""
        data = self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(data.get("result", {}).get("TTL", 0))
