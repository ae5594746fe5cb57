"""The value envelope: how a payload or a deletion is stored in a Redis hash.

Every value in ``ns`` and ``ns$prepare`` is msgpack ``[1, <payload bytes>]`` (present; the
payload is the value serializer's output) or ``[0]`` (a tombstone, the two bytes ``91 00``). The
envelope lets a deletion travel in the prepared delta and keeps the payload opaque, so any value
serializer works. Envelopes exist only on the wire: a state keeps payloads, so a ``get`` or a
``put`` never packs or unpacks one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgpack

from providers.errors import StateSerializationError

__all__ = ["TOMBSTONE", "parse_txid", "unwrap", "wire", "wrap"]

TOMBSTONE: bytes = msgpack.packb([0])
_PRESENT = 1

# The envelope of a present value is msgpack [1, bin payload]: fixarray(2), fixint 1, then the
# bin header. It is built by hand below 64 KiB (bin 8 / bin 16, byte for byte what msgpack gives)
# and read by hand below 256 bytes, because it is done once per key crossing the wire; anything
# else goes through msgpack.
_HEAD8 = b"\x92\x01\xc4"
_HEADS8 = [_HEAD8 + bytes((n,)) for n in range(256)]
_HEAD16 = b"\x92\x01\xc5"


def wrap(payload: bytes) -> bytes:
    """The envelope of a present value."""
    n = len(payload)
    if n < 0x100:
        return _HEADS8[n] + payload
    if n < 0x10000:
        return _HEAD16 + n.to_bytes(2, "big") + payload
    return msgpack.packb([_PRESENT, payload], use_bin_type=True)


def wire(writes: Mapping[bytes, bytes | None]) -> Iterator[bytes]:
    """``field, envelope, field, envelope, ...`` for a script's ARGV; ``None`` is a tombstone."""
    for ekey, payload in writes.items():
        yield ekey
        yield TOMBSTONE if payload is None else wrap(payload)


def unwrap(raw: bytes, namespace: str) -> bytes | None:
    """The payload of an envelope, ``None`` for a tombstone.

    Raises:
        StateSerializationError: ``raw`` is not an envelope (the hash holds something else).
    """
    if raw.startswith(_HEAD8) and len(raw) > 3 and raw[3] == len(raw) - 4:
        return raw[4:]
    if raw == TOMBSTONE:
        return None
    try:
        tag, payload = msgpack.unpackb(raw, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        msg = f"state {namespace!r}: a stored value is not a statefulbolts envelope"
        raise StateSerializationError(msg) from exc
    if tag != _PRESENT or not isinstance(payload, bytes):
        msg = f"state {namespace!r}: a stored value has an unknown envelope tag {tag!r}"
        raise StateSerializationError(msg)
    return payload


def parse_txid(raw: Any) -> int | None:
    """A txid as Redis holds it (a decimal string), ``None`` for absent or empty."""
    if raw is None or raw in (b"", ""):
        return None
    return int(raw)
