"""What a Kafka record becomes: deserializers for its key and value, translators to a tuple.

A record read by ``KafkaSpout`` is a ``KafkaRecord``: where it is (topic, partition, offset),
its key and value as the deserializers made them, its timestamp and its headers. A
``RecordTranslator`` (Storm's name) turns it into a tuple's values on a stream:

- ``DefaultRecordTranslator``: ``(topic, partition, offset, key, value)``, optionally followed by
  ``timestamp`` (epoch ms, for an event-time window's ``with_timestamp_field("timestamp")``)
  and ``headers``;
- ``SimpleRecordTranslator(func, fields, stream="default")``: a function of the record;
  returning ``None`` leaves the record out (its offset still counts as read);
- ``ByTopicRecordTranslator({topic: translator}, default=None)``: a translator per topic, each
  on its own stream (a partition is one topic, so a partition's batch has one stream).

Deserializers turn the key's and the value's bytes into values: ``BytesDeserializer`` (as they
are), ``StringDeserializer(encoding)``, ``JsonDeserializer``, ``MsgpackDeserializer``; a
missing key or value (``None``) stays ``None``. The spout takes one by object or by name
(``"bytes"``, ``"str"``, ``"json"``, ``"msgpack"``). They and the translators are shipped to the
executors with the spout, so they must pickle: a module-level function, not a lambda, in a
``SimpleRecordTranslator`` that runs on a cluster (Spark's cloudpickle takes a lambda locally).

Example:
    >>> record = KafkaRecord("clicks", 0, 7, "u1", {"page": "/"}, 1700000000000, ())
    >>> DefaultRecordTranslator().translate(record)
    ['clicks', 0, 7, 'u1', {'page': '/'}]
    >>> DefaultRecordTranslator(timestamp=True).fields
    ('topic', 'partition', 'offset', 'key', 'value', 'timestamp')
    >>> JsonDeserializer()(b'{"page": "/"}')
    {'page': '/'}
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import msgpack

from statefulbolts.tuples import DEFAULT_STREAM

__all__ = [
    "DESERIALIZERS",
    "ByTopicRecordTranslator",
    "BytesDeserializer",
    "DefaultRecordTranslator",
    "Deserializer",
    "JsonDeserializer",
    "KafkaRecord",
    "MsgpackDeserializer",
    "RecordTranslator",
    "SimpleRecordTranslator",
    "StringDeserializer",
    "deserializer",
]


class KafkaRecord(NamedTuple):
    """One record as the translator sees it.

    ``timestamp``: epoch milliseconds (the producer's create time, or the broker's append
    time, as the topic keeps them), ``None`` when the record has none. ``headers``: its
    ``(name, value bytes)`` pairs, in order.
    """

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: int | None
    headers: tuple[tuple[str, bytes | None], ...]


# ------------------------------------------------------------------ deserializers
class Deserializer(ABC):
    """Bytes of a key or value to a value; ``None`` (no key, a tombstone) stays ``None``."""

    def __call__(self, data: bytes | None) -> Any:
        """``decode(data)``, or ``None`` for ``None``."""
        return None if data is None else self.decode(data)

    @abstractmethod
    def decode(self, data: bytes) -> Any:
        """The value ``data`` holds; raise ``ValueError`` (or any error) when it holds none."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self).items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class BytesDeserializer(Deserializer):
    """The bytes as they are."""

    def decode(self, data: bytes) -> bytes:
        """``data``."""
        return data


class StringDeserializer(Deserializer):
    """The bytes as text in ``encoding`` (``errors="strict"``: bad bytes are an error)."""

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def decode(self, data: bytes) -> str:
        """``data`` decoded."""
        return data.decode(self.encoding)


class JsonDeserializer(Deserializer):
    """The bytes as one JSON document (UTF-8)."""

    def decode(self, data: bytes) -> Any:
        """``json.loads(data)``."""
        return json.loads(data)


class MsgpackDeserializer(Deserializer):
    """The bytes as one msgpack value (strings as ``str``)."""

    def decode(self, data: bytes) -> Any:
        """``msgpack.unpackb(data)``."""
        return msgpack.unpackb(data, raw=False)


DESERIALIZERS: dict[str, type[Deserializer]] = {
    "bytes": BytesDeserializer,
    "str": StringDeserializer,
    "json": JsonDeserializer,
    "msgpack": MsgpackDeserializer,
}


def deserializer(given: str | Deserializer | Callable[[bytes | None], Any]) -> Any:
    """A deserializer from its name (``DESERIALIZERS``), or the object given.

    Raises:
        ValueError: an unknown name, or neither a name nor a callable.
    """
    if isinstance(given, str):
        try:
            return DESERIALIZERS[given]()
        except KeyError:
            msg = f"deserializer {given!r} is not one of {sorted(DESERIALIZERS)}"
            raise ValueError(msg) from None
    if not callable(given):
        msg = f"a deserializer is a name {sorted(DESERIALIZERS)} or a callable, got {given!r}"
        raise ValueError(msg)
    return given


# ------------------------------------------------------------------ translators
class RecordTranslator(ABC):
    """A record to a tuple's values, on the stream of its topic (Storm's ``RecordTranslator``)."""

    @abstractmethod
    def translate(self, record: KafkaRecord) -> Sequence[Any] | None:
        """The tuple's values (one per field of ``stream_of(record.topic)``); ``None``: none."""

    @abstractmethod
    def streams(self) -> Mapping[str, Sequence[str]]:
        """Every stream the spout declares, with its fields."""

    @abstractmethod
    def stream_of(self, topic: str) -> str:
        """The stream a record of ``topic`` goes on."""


class DefaultRecordTranslator(RecordTranslator):
    """``(topic, partition, offset, key, value)``, then ``timestamp`` and ``headers`` if asked."""

    def __init__(
        self, *, timestamp: bool = False, headers: bool = False, stream: str = DEFAULT_STREAM
    ) -> None:
        self.timestamp, self.headers, self.stream = timestamp, headers, stream
        extra = (("timestamp",) if timestamp else ()) + (("headers",) if headers else ())
        self.fields: tuple[str, ...] = ("topic", "partition", "offset", "key", "value", *extra)

    def translate(self, record: KafkaRecord) -> list[Any]:
        """The record's fields, in ``fields`` order."""
        values = [record.topic, record.partition, record.offset, record.key, record.value]
        if self.timestamp:
            values.append(record.timestamp)
        if self.headers:
            values.append(record.headers)
        return values

    def streams(self) -> dict[str, tuple[str, ...]]:
        """One stream."""
        return {self.stream: self.fields}

    def stream_of(self, topic: str) -> str:
        """``stream``, whatever the topic."""
        return self.stream


class SimpleRecordTranslator(RecordTranslator):
    """``func(record)`` on ``stream`` with ``fields`` (``None`` from ``func``: no tuple).

    Example:
        >>> words = SimpleRecordTranslator(_doc_value, ["sentence"])
        >>> words.translate(KafkaRecord("t", 0, 0, None, "a b", None, ()))
        ['a b']
    """

    def __init__(
        self,
        func: Callable[[KafkaRecord], Sequence[Any] | None],
        fields: Sequence[str],
        stream: str = DEFAULT_STREAM,
    ) -> None:
        if not fields:
            msg = "SimpleRecordTranslator: fields must name at least one field"
            raise ValueError(msg)
        self.func, self.fields, self.stream = func, tuple(fields), stream

    def translate(self, record: KafkaRecord) -> Sequence[Any] | None:
        """``func(record)``."""
        return self.func(record)

    def streams(self) -> dict[str, tuple[str, ...]]:
        """One stream."""
        return {self.stream: self.fields}

    def stream_of(self, topic: str) -> str:
        """``stream``, whatever the topic."""
        return self.stream


def _doc_value(record: KafkaRecord) -> list[Any]:
    return [record.value]


class ByTopicRecordTranslator(RecordTranslator):
    """A translator per topic; ``default`` for the others (``None``: another topic is an error).

    Two translators on one stream must declare the same fields.
    """

    def __init__(
        self, by_topic: Mapping[str, RecordTranslator], default: RecordTranslator | None = None
    ) -> None:
        self.by_topic, self.default = dict(by_topic), default
        declared: dict[str, tuple[str, ...]] = {}
        for translator in [*self.by_topic.values(), *([default] if default else [])]:
            for stream, fields in translator.streams().items():
                if declared.setdefault(stream, tuple(fields)) != tuple(fields):
                    msg = (
                        f"ByTopicRecordTranslator: stream {stream!r} declared with fields "
                        f"{list(declared[stream])} and {list(fields)}"
                    )
                    raise ValueError(msg)
        self._streams = declared

    def _for(self, topic: str) -> RecordTranslator:
        found = self.by_topic.get(topic, self.default)
        if found is None:
            msg = (
                f"ByTopicRecordTranslator has no translator for topic {topic!r} and no "
                f"default; it knows {sorted(self.by_topic)}"
            )
            raise KeyError(msg)
        return found

    def translate(self, record: KafkaRecord) -> Sequence[Any] | None:
        """The translation by the record's topic's translator."""
        return self._for(record.topic).translate(record)

    def streams(self) -> dict[str, tuple[str, ...]]:
        """Every translator's streams."""
        return dict(self._streams)

    def stream_of(self, topic: str) -> str:
        """The stream of the topic's translator."""
        return self._for(topic).stream_of(topic)
