"""``providers.resolve_serializers``: Storm's four fields to key and value serializers."""

from __future__ import annotations

import collections
import dataclasses
import enum
import threading
import typing
from pathlib import Path
from typing import Any

import msgpack
import pytest

from providers import (
    MsgpackKeySerializer,
    MsgpackSerializer,
    ProviderConfigError,
    ProviderNotFoundError,
    StateSerializationError,
    encode_value,
    resolve_serializers,
)
from providers._config import StateProviderConfig


class Pair(typing.NamedTuple):
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


class Utf8:
    """A serializer with no arguments."""

    def serialize(self, obj: Any) -> bytes:
        return str(obj).encode()

    def deserialize(self, data: bytes) -> Any:
        return data.decode()


class NeedsArgs(Utf8):
    def __init__(self, encoding: str) -> None:
        self.encoding = encoding


NOT_A_CLASS = Utf8()


def round_trip(serializer: Any, value: Any) -> Any:
    return serializer.deserialize(serializer.serialize(value))


def test_nothing_configured_is_plain_msgpack_both_sides() -> None:
    keys, values = resolve_serializers({})
    assert type(keys) is MsgpackKeySerializer and type(values) is MsgpackSerializer
    assert type(round_trip(values, (1, 2))) is tuple and round_trip(values, (1, 2)) == (1, 2)
    assert round_trip(keys, "k") == "k"
    # A tuple key keeps the array keys always had: what an earlier version stored is found.
    assert keys.serialize((1, "a")) == msgpack.packb([1, "a"]) and round_trip(keys, (1, "a")) == [
        1,
        "a",
    ]


class Colour(enum.IntEnum):
    RED = 1


class Shade(str, enum.Enum):  # noqa: UP042 - a mixin enum: its str() is not its value
    DARK = "dark"


class Level(enum.StrEnum):
    HIGH = "high"


class Meters(float):
    pass


class Blob(bytes):
    pass


class Names(list):  # type: ignore[type-arg]
    pass


SUBCLASSES = [
    Colour.RED,
    Shade.DARK,
    Level.HIGH,
    enum.IntFlag("Bits", "A B").A | enum.IntFlag("Bits2", "A B").B,
    Meters(2.5),
    Blob(b"raw"),
    Names(["a", "b"]),
    collections.OrderedDict([("b", 1), ("a", 2)]),
    collections.defaultdict(int, {"a": 1}),
    collections.Counter({"x": 3}),
    {"nested": [Colour.RED, Shade.DARK, collections.OrderedDict(k=Names([1]))]},
    True,
    bytearray(b"ba"),
]


@pytest.mark.parametrize("value", SUBCLASSES, ids=lambda v: type(v).__name__)
def test_subclasses_of_msgpack_s_types_encode_exactly_as_before(value: Any) -> None:
    """The values packer refuses nothing it took before, and writes the same bytes for it."""
    before = msgpack.packb(value, use_bin_type=True)
    for serializer in (MsgpackSerializer(), MsgpackKeySerializer()):
        assert serializer.serialize(value) == before
        assert serializer.deserialize(before) == value


def test_old_arrays_still_read_as_lists_and_sets_tuples_come_back_exactly() -> None:
    values = MsgpackSerializer()
    assert values.deserialize(msgpack.packb({"pair": [1, 2], "items": [[3], "x"]})) == {
        "pair": [1, 2],
        "items": [[3], "x"],
    }
    written = {"t": (1, (2, "b")), "s": {(1, 2), "a"}, "f": frozenset({3}), "l": [(), set()]}
    read = values.deserialize(values.serialize(written))
    assert read == written
    assert type(read["t"]) is tuple and type(read["t"][1]) is tuple
    assert type(read["s"]) is set and type(read["f"]) is frozenset
    assert [type(v) for v in read["l"]] == [tuple, set]
    # A namedtuple is a tuple: it reads back as one (before: a list).
    point = collections.namedtuple("point", "x y")(1, 2)
    assert type(round_trip(values, point)) is tuple and round_trip(values, point) == (1, 2)


def test_equal_sets_encode_to_the_same_bytes() -> None:
    values = MsgpackSerializer()
    assert values.serialize({"b", "a", "c"}) == values.serialize({"c", "b", "a"})
    assert values.serialize({1, "a", (2,)}) == values.serialize({(2,), "a", 1})


@pytest.mark.parametrize("key", [frozenset({"a", "b"}), {"a"}, ("t", frozenset({1}))])
def test_a_set_key_is_refused_naming_the_tuple_to_use(key: Any) -> None:
    with pytest.raises(StateSerializationError) as info:
        MsgpackKeySerializer().serialize(key)
    kind = "set" if isinstance(key, set) else "frozenset"
    assert str(info.value) == (
        f"msgpack cannot encode a key of type builtins.{type(key).__name__}: a {kind} cannot be "
        "a key (a set is a value only): use a tuple, tuple(sorted(key, key=repr)) being the key "
        "an earlier version stored it under"
    )


def test_what_msgpack_cannot_encode_names_the_namespace_key_and_type() -> None:
    values = MsgpackSerializer()
    with pytest.raises(StateSerializationError) as info:
        encode_value(values, "wc/count-0", "storm", {"lock": (1, threading.Lock())})
    assert str(info.value) == (
        "state 'wc/count-0': value for key 'storm' cannot be stored: msgpack cannot encode a "
        "value of type builtins.dict: msgpack cannot encode an object of type _thread.lock"
    )
    assert values.deserialize(values.serialize([1])) == [1]  # the packer is usable after


def test_a_value_class_rebuilds_from_the_new_and_the_old_forms() -> None:
    _, points = resolve_serializers({"valueClass": f"{__name__}.Pair"})
    assert round_trip(points, Pair(1, 2)) == Pair(1, 2)
    assert points.deserialize(msgpack.packb([1, 2])) == Pair(1, 2)  # stored before: an array
    _, tuples = resolve_serializers({"valueClass": "tuple"})
    assert tuples.deserialize(msgpack.packb([1, 2])) == (1, 2)
    assert round_trip(tuples, (1, (2, 3))) == (1, (2, 3))


def test_classes_by_builtin_or_dotted_name_are_rebuilt() -> None:
    keys, values = resolve_serializers({"keyClass": "tuple", "valueClass": f"{__name__}.Point"})
    assert round_trip(keys, ("w", 1)) == ("w", 1)
    assert round_trip(values, Point(1, 2)) == Point(1, 2)
    _, ints = resolve_serializers({"valueClass": "int", "path": "ignored", "keyClass": None})
    assert round_trip(ints, "7") == 7


def test_a_serializer_class_wins_over_the_class_field() -> None:
    keys, values = resolve_serializers(
        {"keyClass": "tuple", "keySerializerClass": f"{__name__}.Utf8", "valueClass": ""}
    )
    assert isinstance(keys, Utf8)
    assert keys.serialize(("a",)) == b"('a',)"
    assert type(values) is MsgpackSerializer


def test_the_validated_config_of_the_built_in_providers_is_accepted() -> None:
    config = StateProviderConfig.parse({"valueClass": "builtins.tuple"})
    _, values = resolve_serializers(config)
    assert round_trip(values, (1, "x")) == (1, "x")


def test_names_are_looked_up_in_the_extlib_folders_of_the_conf(tmp_path: Path) -> None:
    (tmp_path / "resolve_extlib_probe.py").write_text(
        "class Upper:\n"
        "    def serialize(self, obj):\n"
        "        return str(obj).upper().encode()\n"
        "    def deserialize(self, data):\n"
        "        return data.decode()\n",
        encoding="utf-8",
    )
    conf = {"topology.state.extlib.dir": str(tmp_path)}
    _, values = resolve_serializers({"valueSerializerClass": "resolve_extlib_probe.Upper"}, conf)
    assert values.serialize("storm") == b"STORM"


P = "topology.state.provider.config: "


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"valueClass": 5},
            P + "field 'valueClass' must be a dotted class name (a string), got int",
        ),
        (
            {"keySerializerClass": ["x"]},
            P + "field 'keySerializerClass' must be a dotted class name (a string), got list",
        ),
        (
            {"valueSerializerClass": f"{__name__}.NOT_A_CLASS"},
            P + f"valueSerializerClass '{__name__}.NOT_A_CLASS' is not a class",
        ),
        (
            {"keySerializerClass": f"{__name__}.NeedsArgs"},
            P + f"keySerializerClass '{__name__}.NeedsArgs' must be constructible with no "
            "arguments: NeedsArgs.__init__() missing 1 required positional argument: 'encoding'",
        ),
        (
            {"valueSerializerClass": f"{__name__}.Point"},
            P + f"valueSerializerClass '{__name__}.Point' must be constructible with no "
            "arguments: Point.__init__() missing 2 required positional arguments: 'x' and 'y'",
        ),
        (
            {"valueSerializerClass": "collections.OrderedDict"},
            P + "valueSerializerClass 'collections.OrderedDict' must have serialize(obj) -> "
            "bytes and deserialize(data) -> obj",
        ),
        (
            {"keyClass": f"{__name__}.NOT_A_CLASS"},
            P + f"keyClass '{__name__}.NOT_A_CLASS' is {NOT_A_CLASS!r}, not a class",
        ),
        ("keyClass=str", P + "expected a mapping of the provider config's fields, got str"),
    ],
)
def test_bad_fields_are_config_errors_naming_the_field(fields: Any, message: str) -> None:
    with pytest.raises(ProviderConfigError) as info:
        resolve_serializers(fields)
    assert str(info.value) == message


def test_a_name_that_does_not_resolve_names_the_field() -> None:
    with pytest.raises(ProviderNotFoundError, match="^valueClass 'nowhere.Thing': module"):
        resolve_serializers({"valueClass": "nowhere.Thing"})
