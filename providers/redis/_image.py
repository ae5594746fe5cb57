"""A namespace's stored image in Redis, read a page at a time and replaced whole.

The optional part of ``KeyValueState`` that offline tools use (``statefulbolts.state``: dump,
export, import); ``RedisKeyValueState`` calls these with its client and keys. A replacement is
staged beside the namespace, in keys whose names never end in ``$txid`` (so a namespace listing
never takes them for a namespace), then swapped in by one script (``_scripts.REPLACE``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

import providers.redis._scripts as _scripts
from providers._ttl import is_expired
from providers.redis._codec import TOMBSTONE, parse_txid, unwrap, wrap

__all__ = ["IMAGE_PAGE", "StoredImageReads", "replace_image", "scan_hash", "stage_image"]

# Fields per HSCAN page, and per HSET, when a namespace is read or written whole.
IMAGE_PAGE = 1000


def scan_hash(
    client: Any,
    key: str,
    count: int,
    namespace: str,
    backend: Callable[[str], AbstractContextManager[None]],
    step: str,
) -> Iterator[tuple[bytes, bytes | None]]:
    """``(field, payload)`` of a hash of envelopes (``None``: a tombstone), HSCAN page by page.

    ``backend(step)`` wraps each call, turning a Redis failure into the state's error.
    """
    cursor = 0
    while True:
        with backend(step):
            cursor, page = client.hscan(key, cursor, count=count)
        for field, raw in page.items():
            yield field, unwrap(raw, namespace)
        if not cursor:
            return


def stage_image(
    client: Any,
    base: str,
    committed_txid: int | None,
    committed: Iterable[tuple[bytes, bytes]],
    prepared_txid: int | None,
    prepared: Mapping[bytes, bytes | None],
    expiries: Iterable[tuple[bytes, int]] = (),
    committed_time: int | None = None,
) -> list[str]:
    """Write a new image beside namespace key ``base``; returns the four staged keys.

    ``base$import`` (the committed hash), ``base$import-prepare`` (the delta),
    ``base$import-txid`` (``staged`` = 1, and ``commit`` / ``prepare`` / ``time`` when given)
    and ``base$import-ttl`` (the expiry index of the committed fields), after deleting whatever
    an interrupted earlier call left there. The namespace itself is not touched.
    """
    staged = [
        f"{base}$import",
        f"{base}$import-prepare",
        f"{base}$import-txid",
        f"{base}$import-ttl",
    ]
    client.delete(*staged)
    fields: set[bytes] = set()

    def noted(pairs: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        for k, v in pairs:
            fields.add(k)
            yield k, wrap(v)

    _hset_pages(client, staged[0], noted(committed))
    page: dict[bytes, int] = {}
    for field, at in expiries:
        if field in fields:
            page[field] = int(at)
        if len(page) >= IMAGE_PAGE:
            client.zadd(staged[3], page)
            page = {}
    if page:
        client.zadd(staged[3], page)
    delta = ((k, TOMBSTONE if v is None else wrap(v)) for k, v in prepared.items())
    _hset_pages(client, staged[1], delta)
    record = {"staged": "1"}
    if committed_txid is not None:
        record["commit"] = str(int(committed_txid))
    if prepared_txid is not None:
        record["prepare"] = str(int(prepared_txid))
    if committed_time is not None:
        record["time"] = str(int(committed_time))
    client.hset(staged[2], mapping=record)
    return staged


def _hset_pages(client: Any, key: str, envelopes: Iterable[tuple[bytes, bytes]]) -> None:
    """``HSET`` the pairs into ``key``, ``IMAGE_PAGE`` fields per command."""
    page: dict[bytes, bytes] = {}
    for field, envelope in envelopes:
        page[field] = envelope
        if len(page) >= IMAGE_PAGE:
            client.hset(key, mapping=page)
            page = {}
    if page:
        client.hset(key, mapping=page)


def replace_image(
    client: Any,
    keys: tuple[str, str, str, str],
    image: tuple[
        int | None, Iterable[tuple[bytes, bytes]], int | None, Mapping[bytes, bytes | None]
    ],
    backend: Callable[[str], AbstractContextManager[None]],
    ttl: tuple[Iterable[tuple[bytes, int]], int | None] = ((), None),
    epoch: str = "",
) -> Any:
    """Replace a namespace's ``(committed, prepare, txid, ttl)`` keys by ``image``, atomically.

    ``image`` is ``(committed txid, committed pairs, prepared txid, prepared delta)``; ``ttl``
    is ``(the committed fields' expiries, the committed transaction's timestamp)``; ``epoch``
    the writer's lease epoch (``''``: unfenced). Returns ``None`` when replaced, or the
    namespace's fence when it refused ``epoch`` (the namespace is then as it was).

    Steps:
        1. Stage the new image beside the namespace (``stage_image``). If this fails, the
           namespace is untouched.
        2. One script (``REPLACE``) checks the fence, then swaps the staged keys in and the old
           ones out, atomically; a retry of it after a lost reply finds nothing staged and does
           nothing. A refused epoch has the staged keys deleted instead.
    """
    committed_key, prepare_key, txid_key, ttl_key = keys
    committed_txid, committed, prepared_txid, prepared = image
    with backend("replace (staging)"):
        staged = stage_image(
            client, committed_key, committed_txid, committed, prepared_txid, prepared, *ttl
        )
    with backend("replace"):
        reply = client.register_script(_scripts.REPLACE)(
            keys=[committed_key, prepare_key, txid_key, *staged[:3], ttl_key, staged[3]],
            args=[epoch],
        )
    return reply[1] if int(reply[0]) == _scripts.FENCED else None


class StoredImageReads:
    """The stored-image reads of ``RedisKeyValueState`` (``KeyValueState``'s optional part)."""

    _client: Any
    _values: Any
    namespace: str
    committed_key: str
    prepare_key: str
    txid_key: str
    ttl_key: str
    _now: int | None
    _backend: Callable[[str], AbstractContextManager[None]]
    _encode_key: Callable[[Any], bytes]

    def stored_txids(self) -> tuple[int | None, int | None]:
        """``commit`` and ``prepare`` of ``ns$txid``, read now (one ``HMGET``)."""
        with self._backend("txid read"):
            commit, prepare = self._client.hmget(self.txid_key, ["commit", "prepare"])
        return parse_txid(commit), parse_txid(prepare)

    def scan_committed(self) -> Iterator[tuple[bytes, bytes]]:
        """The committed hash, ``HSCAN`` page by page (a field twice if written meanwhile)."""
        scan = scan_hash(
            self._client, self.committed_key, IMAGE_PAGE, self.namespace, self._backend, "scan"
        )
        yield from ((k, v) for k, v in scan if v is not None)  # no tombstone is ever committed

    def scan_prepared(self) -> Iterator[tuple[bytes, bytes | None]]:
        """The prepared delta ``ns$prepare``, tombstones as ``None``."""
        yield from scan_hash(
            self._client, self.prepare_key, IMAGE_PAGE, self.namespace, self._backend, "scan"
        )

    def get_committed(self, key: Any, default: Any = None) -> Any:
        """The committed value of ``key``, whatever is prepared or pending (unless expired)."""
        ekey = self._encode_key(key)
        with self._backend("get"):
            raw = self._client.hget(self.committed_key, ekey)
            judged = raw is not None and self._now is not None
            at = self._client.zscore(self.ttl_key, ekey) if judged else None
        payload = None if raw is None or is_expired(at, self._now) else unwrap(raw, self.namespace)
        return default if payload is None else self._values.deserialize(payload)

    def scan_expiries(self) -> Iterator[tuple[bytes, int]]:
        """The expiry index ``ns$ttl``, ``ZSCAN`` page by page."""
        cursor = 0
        while True:
            with self._backend("scan"):
                cursor, page = self._client.zscan(self.ttl_key, cursor, count=IMAGE_PAGE)
            for field, score in page:
                yield field, int(score)
            if not cursor:
                return

    def committed_time(self) -> int | None:
        """``time`` of ``ns$txid``: the last committed transaction's timestamp."""
        with self._backend("txid read"):
            return parse_txid(self._client.hget(self.txid_key, "time"))
