"""A state file reaches nothing outside the scope it names; an import writes only the scope asked.

Crafted files (written with ``StateFileWriter``, so every checksum is right) try to reach another
topology's or transactional id's state: a header whose prefix is not its scope's, a namespace
outside the prefix, ``$transactional/<other>/...`` inside a topology file, path tricks in names.
Each is refused by ``verify`` and by ``import`` (even with ``--overwrite``), with a message naming
what is wrong, and the target, a real redis-server, keeps exactly the keys it had.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    KeyValueState,
    StateFactory,
)
from statefulbolts.cli import main
from statefulbolts.errors import StateFileError, StateNotFoundError, StateToolError
from statefulbolts.state import export_state, get_value, import_state, read_info, read_state
from statefulbolts.state._format import StateFileWriter

pytestmark = pytest.mark.redis


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _redis(port: int, db: int = 0, **fields: Any) -> dict[str, Any]:
    pool = {"host": "127.0.0.1", "port": port, "database": db}
    return {
        STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool, **fields}),
    }


def _kv(conf: dict[str, Any], namespace: str, system: bool = False) -> KeyValueState:
    state = (StateFactory.get_system_state if system else StateFactory.get_state)(namespace, conf)
    assert isinstance(state, KeyValueState)
    return state


@pytest.fixture
def target(redis_db: Any) -> Iterator[Any]:
    """A redis-server (db 0) holding topology ``wc1`` and transactional id ``victim``."""
    conf = _redis(redis_db.port)
    for task, word in enumerate(("storm", "spark")):
        state = _kv(conf, f"wc1/count-{task}")
        state.put(word, 3 + task)
        state.prepare_commit(7)
        state.commit(7)
    coordinator = _kv(conf, "$transactional/victim/coordinator", system=True)
    coordinator.put("currtx", 12)
    coordinator.commit()
    redis_db.conf = conf
    yield redis_db
    from providers.redis import reset_clients

    reset_clients()


def snapshot(server: Any) -> dict[bytes, bytes]:
    """Every key of every database, with its DUMP."""
    client = server.client()
    found = {}
    for db in (0, 1):
        client.execute_command("SELECT", db)
        found.update({b"%d:" % db + key: client.dump(key) for key in sorted(client.keys("*"))})
    return found


def craft(
    path: Path, scope: str, name: str, prefix: str, namespaces: list[tuple[str, dict[Any, Any]]]
) -> Path:
    """A well-formed state file with the header and namespaces given (committed maps only)."""
    out = io.BytesIO()
    writer = StateFileWriter(
        out,
        {
            "scope": scope,
            "name": name,
            "prefix": prefix,
            "provider": "providers.redis.RedisKeyValueStateProvider",
            "location": "redis 127.0.0.1:1",
            "created_at": "2026-01-01T00:00:00+00:00",
            "serializers": {},
        },
    )
    for namespace, committed in namespaces:
        entries = [(_pack(k), _pack(v)) for k, v in committed.items()]
        writer.namespace(namespace, 99, None, [], entries)
    writer.close()
    path.write_bytes(out.getvalue())
    return path


def cli(capsys: Any, *args: Any) -> tuple[int, str, str]:
    code = main(["state", *[str(a) for a in args]])
    out, err = capsys.readouterr()
    return code, out, err


STOLEN = {"storm": 1_000_000}
# (file name, header scope, name, prefix, namespaces, what the error says)
CRAFTED = [
    (
        "empty-prefix",
        "topology",
        "innocent",
        "",
        [("wc1/count-0", STOLEN)],
        "foreign: the header's prefix '' is not the one of its topology 'innocent' ('innocent/')",
    ),
    (
        "wrong-prefix",
        "topology",
        "innocent",
        "wc1/",
        [("wc1/count-0", STOLEN)],
        "foreign: the header's prefix 'wc1/' is not the one of its topology 'innocent' "
        "('innocent/')",
    ),
    (
        "outside-the-prefix",
        "topology",
        "innocent",
        "innocent/",
        [("innocent/count-0", STOLEN), ("wc1/count-0", STOLEN)],
        "foreign: namespace 'wc1/count-0' is not one of the header's topology 'innocent' "
        "(its namespaces are 'innocent/' followed by names with no empty, '.' or '..' part)",
    ),
    (
        "transactional-in-a-topology",
        "topology",
        "innocent",
        "innocent/",
        [("$transactional/victim/coordinator", {"currtx": 1})],
        "foreign: namespace '$transactional/victim/coordinator' is not one of the header's "
        "topology 'innocent'",
    ),
    (
        "another-transactional-id",
        "transactional",
        "innocent",
        "$transactional/innocent/",
        [("$transactional/victim/coordinator", {"currtx": 1})],
        "foreign: namespace '$transactional/victim/coordinator' is not one of the header's "
        "transactional id 'innocent'",
    ),
    (
        "topology-named-transactional",
        "topology",
        "$transactional",
        "$transactional/",
        [("$transactional/victim/coordinator", {"currtx": 1})],
        "foreign: the header names no scope a state can have: a topology cannot be named "
        "'$transactional'",
    ),
    (
        "dot-dot-segment",
        "topology",
        "innocent",
        "innocent/",
        [("innocent/../wc1/count-0", STOLEN)],
        "foreign: namespace 'innocent/../wc1/count-0' is not one of the header's topology",
    ),
    (
        "empty-segment",
        "topology",
        "innocent",
        "innocent/",
        [("innocent//count-0", STOLEN)],
        "foreign: namespace 'innocent//count-0' is not one of",
    ),
    (
        "dot-segment",
        "topology",
        "innocent",
        "innocent/",
        [("innocent/./count-0", STOLEN)],
        "foreign: namespace 'innocent/./count-0' is not one of",
    ),
    (
        "dot-dot-name",
        "topology",
        "..",
        "../",
        [("../wc1", STOLEN)],
        "foreign: the header names no scope a state can have: topology name must be a "
        "non-empty string without '/', not '.' or '..'; got '..'",
    ),
    (
        "name-with-a-slash",
        "topology",
        "innocent/../wc1",
        "innocent/../wc1/",
        [("innocent/../wc1/count-0", STOLEN)],
        "got 'innocent/../wc1'",
    ),
    (
        "unknown-scope",
        "everything",
        "wc1",
        "wc1/",
        [("wc1/count-0", STOLEN)],
        "a scope is a topology or a transactional id, got kind 'everything'",
    ),
]


@pytest.mark.parametrize(
    ("file", "scope", "name", "prefix", "namespaces", "message"),
    CRAFTED,
    ids=[c[0] for c in CRAFTED],
)
def test_a_crafted_file_reaching_outside_its_scope_is_refused_and_writes_nothing(
    target: Any,
    tmp_path: Path,
    capsys: Any,
    file: str,
    scope: str,
    name: str,
    prefix: str,
    namespaces: list[tuple[str, dict[Any, Any]]],
    message: str,
) -> None:
    path = craft(tmp_path / f"{file}.sbstate", scope, name, prefix, namespaces)
    conf = tmp_path / "redis.json"
    conf.write_text(json.dumps(target.conf))
    before = snapshot(target)
    assert sorted(before) == [
        b"0:$transactional/victim/coordinator",
        b"0:$transactional/victim/coordinator$txid",
        b"0:wc1/count-0",
        b"0:wc1/count-0$txid",
        b"0:wc1/count-1",
        b"0:wc1/count-1$txid",
    ]

    with pytest.raises(StateFileError) as refused:
        read_info(path)
    assert str(refused.value).startswith(f"state file {str(path)!r} (record ")
    assert message in str(refused.value)
    code, out, err = cli(capsys, "verify", path)
    assert (code, out, err) == (2, "", f"error: {refused.value}\n")

    # Whatever scope the import names, with --overwrite: refused before anything is written.
    for flag, scope_name in (("--topology", "wc1"), ("--topology", "innocent"), ("--id", "victim")):
        code, out, err = cli(
            capsys, "import", "--conf", conf, flag, scope_name, "--overwrite", path
        )
        assert (code, out) == (2, ""), (flag, scope_name)
        assert message in err, (flag, scope_name, err)
    with pytest.raises(StateFileError):
        import_state(target.conf, path, topology="wc1", overwrite=True)
    assert snapshot(target) == before
    assert read_state(target.conf, "count", topology="wc1") == {"storm": 3, "spark": 4}
    assert get_value(target.conf, "count", "storm", topology="wc1") == 3


def test_a_file_of_one_topology_is_not_imported_as_another(
    target: Any, tmp_path: Path, capsys: Any
) -> None:
    # A genuine export of topology "wc2", from another database.
    source = _redis(target.port, db=1)
    state = _kv(source, "wc2/count-0")
    state.put("storm", 1_000_000)
    state.prepare_commit(1)
    state.commit(1)
    path = tmp_path / "wc2.sbstate"
    export_state(source, path, topology="wc2")
    conf = tmp_path / "redis.json"
    conf.write_text(json.dumps(target.conf))
    before = snapshot(target)

    code, out, err = cli(capsys, "import", "--conf", conf, "--topology", "wc1", "--overwrite", path)
    assert (code, out) == (2, "")
    assert err == (
        f"error: state file {str(path)!r} holds the state of topology 'wc2', and the import "
        "names topology 'wc1'; nothing was imported. A file imports into the scope it was "
        "exported from: name topology 'wc2' (--topology wc2)\n"
    )
    code, _, err = cli(capsys, "import", "--conf", conf, "--id", "wc2", path)
    assert code == 2
    assert "holds the state of topology 'wc2', and the import names transactional id 'wc2'" in err
    with pytest.raises(StateToolError, match="holds the state of topology 'wc2'"):
        import_state(target.conf, path, transactional_id="victim", overwrite=True)
    with pytest.raises(StateToolError, match="name exactly one of topology and transactional_id"):
        import_state(target.conf, path)
    assert snapshot(target) == before

    # Named right, it imports, and only under wc2/.
    code, out, _ = cli(capsys, "import", "--conf", conf, "--topology", "wc2", path)
    assert code == 0 and out.startswith("imported topology 'wc2' into ")
    after = snapshot(target)
    assert {k: v for k, v in after.items() if k in before} == before
    assert sorted(k for k in after if k not in before) == [b"0:wc2/count-0", b"0:wc2/count-0$txid"]
    assert read_state(target.conf, "count", topology="wc2") == {"storm": 1_000_000}


@pytest.mark.parametrize(
    ("flag", "name", "message"),
    [
        ("--topology", "..", "topology name must be a non-empty string without '/'"),
        ("--topology", "wc1/count-0", "got 'wc1/count-0'"),
        ("--id", ".", "transactional id name must be a non-empty string without '/'"),
        ("--topology", "$transactional", "a topology cannot be named '$transactional'"),
    ],
)
def test_a_scope_name_with_a_path_trick_is_refused_on_the_command_line(
    target: Any, tmp_path: Path, capsys: Any, flag: str, name: str, message: str
) -> None:
    path = craft(tmp_path / "ok.sbstate", "topology", "innocent", "innocent/", [])
    conf = tmp_path / "redis.json"
    conf.write_text(json.dumps(target.conf))
    before = snapshot(target)
    for args in (
        ["import", "--conf", conf, flag, name, "--overwrite", path],
        ["export", "--conf", conf, flag, name, "--output", tmp_path / "out.sbstate"],
        ["dump", "--conf", conf, flag, name, "--component", "count"],
    ):
        code, out, err = cli(capsys, *args)
        assert (code, out) == (2, ""), args
        assert err.startswith("error: ") and message in err, (args, err)
    assert snapshot(target) == before
    assert not (tmp_path / "out.sbstate").exists()


def test_framework_records_move_with_the_topology_and_are_never_components(
    redis_db: Any, tmp_path: Path, capsys: Any
) -> None:
    # Bolt states with a valueClass; the framework's records ($...) are plain msgpack.
    typed = _redis(redis_db.port, db=0, valueClass="builtins.int")
    count = _kv(typed, "wc/count-0")
    count.put("storm", 3)
    count.prepare_commit(1)
    count.commit(1)
    for record, content in (("$shape", {"tasks": [2, 3]}), ("$deadletter", {"t-1": ["x", 1]})):
        state = _kv(typed, f"wc/{record}", system=True)
        for key, value in content.items():
            state.put(key, value)
        state.commit()
    path = tmp_path / "wc.sbstate"
    info = export_state(typed, path, topology="wc")
    assert [n.name for n in info.namespaces] == ["wc/$deadletter", "wc/$shape", "wc/count-0"]

    # Never a component: not read, not dumped, not listed.
    conf = tmp_path / "typed.json"
    conf.write_text(json.dumps(typed))
    for component in ("$shape", "$deadletter"):
        with pytest.raises(StateNotFoundError) as missing:
            read_state(typed, component, topology="wc")
        assert str(missing.value).startswith(
            f"no state of component {component!r} in topology 'wc' in "
            "providers.redis.RedisKeyValueStateProvider; under 'wc/' it holds: count-0 ("
        )
        code, out, err = cli(
            capsys, "dump", "--conf", conf, "--topology", "wc", "--component", component
        )
        assert (code, out, err) == (1, "", f"error: {missing.value}\n")
    code, _, err = cli(capsys, "get", "--conf", conf, "--topology", "wc", "--component", "x", "k")
    assert code == 1 and err.endswith("under 'wc/' it holds: count-0\n")

    # Imported with the topology, as plain msgpack, into a target with the same serializers.
    target = _redis(redis_db.port, db=1, valueClass="builtins.int")
    result = import_state(target, path, topology="wc")
    assert sorted(result.info.header["serializers"].items()) == [("valueClass", "builtins.int")]
    assert dict(_kv(target, "wc/$shape", system=True)) == {"tasks": [2, 3]}
    assert dict(_kv(target, "wc/$deadletter", system=True)) == {"t-1": ["x", 1]}
    assert read_state(target, "count", topology="wc") == {"storm": 3}
    # A file of framework records only imports whatever the target's serializers are.
    records = craft(
        tmp_path / "records.sbstate", "topology", "rec", "rec/", [("rec/$shape", {"tasks": [4]})]
    )
    plain = _redis(redis_db.port, db=1)
    import_state(plain, records, topology="rec")
    assert dict(_kv(plain, "rec/$shape", system=True)) == {"tasks": [4]}
