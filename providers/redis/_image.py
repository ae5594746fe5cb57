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

from providers.redis._codec import TOMBSTONE, unwrap, wrap

__all__ = ["IMAGE_PAGE", "scan_hash", "stage_image"]

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
) -> list[str]:
    """Write a new image beside namespace key ``base``; returns the three staged keys.

    ``base$import`` (the committed hash), ``base$import-prepare`` (the delta) and
    ``base$import-txid`` (``staged`` = 1, and ``commit`` / ``prepare`` when given), after
    deleting whatever an interrupted earlier call left there. The namespace itself is not
    touched.
    """
    staged = [f"{base}$import", f"{base}$import-prepare", f"{base}$import-txid"]
    client.delete(*staged)
    _hset_pages(client, staged[0], ((k, wrap(v)) for k, v in committed))
    delta = ((k, TOMBSTONE if v is None else wrap(v)) for k, v in prepared.items())
    _hset_pages(client, staged[1], delta)
    record = {"staged": "1"}
    if committed_txid is not None:
        record["commit"] = str(int(committed_txid))
    if prepared_txid is not None:
        record["prepare"] = str(int(prepared_txid))
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
