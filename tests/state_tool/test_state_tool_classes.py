"""``state get`` / ``dump`` with a ``keyClass`` / ``valueClass`` that does not fit what is stored.

The values are written with one provider config and read on the command line with another: the
error is one line, exit status 2, naming the namespace, the key, the class configured, what is
stored, and the fix (the config that wrote it, or ``--raw``); ``--raw`` then shows the values as
stored. On a real SQLite file (``extlib/sqlite_state.py``) and a real redis-server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from providers import STATE_PROVIDER_CONFIG_KEY, STATE_PROVIDER_KEY, KeyValueState, StateFactory
from statefulbolts.cli import main
from statefulbolts.errors import StateToolError
from statefulbolts.state import get_value, read_state


@dataclass
class Point:
    """A value class the writer used."""

    x: int
    y: int


class JsonText:
    """A value serializer that writes JSON text, not msgpack."""

    def serialize(self, obj: Any) -> bytes:
        return json.dumps(obj).encode()

    def deserialize(self, data: bytes) -> Any:
        return json.loads(data)


def _conf(kind: str, where: Any, **fields: Any) -> dict[str, Any]:
    if kind == "sqlite":
        return {
            STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(where), **fields}),
        }
    pool = {"host": "127.0.0.1", "port": where}
    return {
        STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool, **fields}),
    }


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """``(kind, where)``: a SQLite file's path or a flushed redis-server's port."""
    if request.param == "sqlite":
        yield "sqlite", tmp_path / "state.db"
    else:
        yield "redis", request.getfixturevalue("redis_db").port
    from providers import load_module

    sqlite_state = load_module("sqlite_state")

    from providers.redis import reset_clients

    reset_clients()
    sqlite_state.close_connections()


def _write(conf: dict[str, Any], namespace: str, items: dict[Any, Any]) -> None:
    state = StateFactory.get_state(namespace, conf)
    assert isinstance(state, KeyValueState)
    for key, value in items.items():
        state.put(key, value)
    state.prepare_commit(1)
    state.commit(1)


def cli(capsys: Any, tmp_path: Path, conf: dict[str, Any], *args: str) -> tuple[int, str, str]:
    path = tmp_path / "conf.json"
    path.write_text(json.dumps(conf))
    scope = ["--conf", str(path), "--topology", "wc", "--component", "count"]
    code = main(["state", args[0], *scope, *args[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_value_class_that_does_not_fit_is_one_clear_line(
    store: tuple[str, Any], tmp_path: Path, capsys: Any
) -> None:
    kind, where = store
    writer = _conf(kind, where, valueClass=f"{__name__}.Point")
    _write(writer, "wc/count-0", {"storm": Point(1, 2)})
    reader = _conf(kind, where, valueClass="builtins.int")

    code, out, err = cli(capsys, tmp_path, reader, "get", "storm")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(
        "error: namespace 'wc/count-0', key 'storm': the stored value does not fit valueClass "
        "'builtins.int' of topology.state.provider.config (TypeError: "
    )
    assert err.endswith(
        "); it holds {'x': 1, 'y': 2} (dict). Read it with the provider config that wrote it, "
        "or as stored with --raw\n"
    )
    code, out, err_dump = cli(capsys, tmp_path, reader, "dump")
    assert (code, out, err_dump) == (2, "", err)
    with pytest.raises(StateToolError) as error:
        read_state(reader, "count", topology="wc")
    assert f"error: {error.value}\n" == err

    # The fixes: the config that wrote it, or --raw (as stored: plain msgpack).
    assert cli(capsys, tmp_path, writer, "get", "storm")[:2] == (0, '{"x": 1, "y": 2}\n')
    assert cli(capsys, tmp_path, reader, "get", "storm", "--raw")[:2] == (0, '{"x": 1, "y": 2}\n')
    assert cli(capsys, tmp_path, reader, "dump", "--raw")[:2] == (
        0,
        '{"task": 0, "key": "storm", "value": {"x": 1, "y": 2}}\n',
    )
    assert get_value(reader, "count", "storm", topology="wc", raw=True) == {"x": 1, "y": 2}


def test_a_key_class_that_does_not_fit_names_the_stored_key(
    store: tuple[str, Any], tmp_path: Path, capsys: Any
) -> None:
    kind, where = store
    writer = _conf(kind, where, keyClass="builtins.tuple")
    _write(writer, "wc/count-0", {("storm", 2026): 7})
    reader = _conf(kind, where, keyClass="builtins.int")

    code, out, err = cli(capsys, tmp_path, reader, "dump", "--format", "csv")
    assert (code, out) == (2, "")
    assert err.startswith(
        "error: namespace 'wc/count-0': the stored key does not fit keyClass 'builtins.int' of "
        "topology.state.provider.config ("
    )
    assert err.endswith(
        "); it holds ['storm', 2026] (list). Read it with the provider config that wrote it, "
        "or as stored with --raw\n"
    )
    assert err.count("\n") == 1
    assert cli(capsys, tmp_path, reader, "dump", "--raw")[:2] == (
        0,
        '{"task": 0, "key": ["storm", 2026], "value": 7}\n',
    )
    assert read_state(writer, "count", topology="wc") == {("storm", 2026): 7}


def test_values_another_serializer_wrote_name_the_bytes_and_not_raw(
    store: tuple[str, Any], tmp_path: Path, capsys: Any
) -> None:
    kind, where = store
    writer = _conf(kind, where, valueSerializerClass=f"{__name__}.JsonText")
    _write(writer, "wc/count-0", {"storm": [1, 2]})
    reader = _conf(kind, where)

    code, out, err = cli(capsys, tmp_path, reader, "get", "storm")
    assert (code, out) == (2, "")
    assert err.startswith(
        "error: namespace 'wc/count-0', key 'storm': the stored value does not fit plain msgpack ("
    )
    assert err.endswith(
        "); it holds bytes that are not msgpack. Read it with the provider config (serializer "
        "classes) that wrote it\n"
    )
    code, out, err = cli(capsys, tmp_path, reader, "dump")
    assert (code, out) == (2, "")
    assert err.endswith(
        "); it holds 6 bytes that are not msgpack (b'[1, 2]'). Read it with the provider config "
        "(serializer classes) that wrote it\n"
    )
    assert cli(capsys, tmp_path, writer, "get", "storm")[:2] == (0, "[1, 2]\n")
