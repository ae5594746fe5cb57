"""``providers.resolve_serializers``: Storm's four fields to key and value serializers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from providers import (
    MsgpackSerializer,
    ProviderConfigError,
    ProviderNotFoundError,
    resolve_serializers,
)
from providers._config import StateProviderConfig


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
    assert type(keys) is MsgpackSerializer and type(values) is MsgpackSerializer
    assert round_trip(values, (1, 2)) == [1, 2]
    assert round_trip(keys, "k") == "k"


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
