"""The offline state tool (``statefulbolts.state``) on real stores, without Spark.

Stores: the in-memory provider (this process is the "driver"), a real redis-server, a real
SQLite file. Each test leaves state as a stopped topology would: a word count whose checkpoint
spout saved COMMITTING(4), its tasks committed at 3 with txid 4 prepared (updates and a
deletion), and a transactional id's coordinator and committer maps. Then it reads, dumps,
exports and imports, and checks the stores byte for byte.
"""

from __future__ import annotations

import json
import sqlite3
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from checkpoint.status import checkpoint_status
from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    StateFactory,
    StateProvider,
    get_provider,
)
from statefulbolts.cli import main
from statefulbolts.errors import (
    StateFileError,
    StateNotFoundError,
    StateOverwriteError,
    StateToolError,
)
from statefulbolts.state import (
    export_state,
    get_value,
    import_state,
    iter_state,
    read_info,
    read_state,
)
from statefulbolts.transactional import transactional_status

TOPO = "wc"
TX_ID = "words"
COMMITTED_0 = {"storm": 3, "spark": 5, "ünï": [1, "x"], 'a,"b"': {"n": 1.5}}
COMMITTED_1 = {"flink": 2, "beam": 7}


class Store:
    """One provider under test: its config, and a snapshot of everything it holds."""

    def __init__(
        self, kind: str, conf: dict[str, Any], redis: Any = None, path: Path | None = None
    ):
        self.kind, self.conf, self.redis, self.path = kind, conf, redis, path

    def snapshot(self) -> Any:
        """Everything stored, as comparable data (Redis: every key's DUMP; SQLite: every row)."""
        if self.kind == "redis":
            client = self.redis.client()
            return {key: client.dump(key) for key in sorted(client.keys("*"))}
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as db:
                tables = ("committed", "prepared", "txids", "rollbacks")
                return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall()) for t in tables}
        provider = InMemoryKeyValueStateProvider()
        names = provider.namespaces(self.conf)
        return {n: provider.export_image(n) for n in names if n.startswith((TOPO, "$tr", "x"))}

    def namespaces(self, prefix: str) -> list[str]:
        return get_provider(self.conf).namespaces(self.conf, prefix) or []


def _sqlite(path: Path) -> dict[str, Any]:
    return {
        STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(path)}),
    }


def _redis(port: int, db: int = 0) -> dict[str, Any]:
    pool = {"host": "127.0.0.1", "port": port, "database": db}
    return {
        STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
    }


@pytest.fixture
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Store]]:
    """Stores by name: ``memory``, ``sqlite`` and ``sqlite2``, ``redis`` and ``redis2`` (db 1)."""
    InMemoryKeyValueStateProvider.drop()
    made: dict[str, Store] = {
        "memory": Store("memory", {}),
        "sqlite": Store("sqlite", _sqlite(tmp_path / "a.db"), path=tmp_path / "a.db"),
        "sqlite2": Store("sqlite", _sqlite(tmp_path / "b.db"), path=tmp_path / "b.db"),
    }
    if getattr(request, "param", None) != "no-redis":
        server = request.getfixturevalue("redis_db")
        made["redis"] = Store("redis", _redis(server.port, 0), redis=server)
        made["redis2"] = Store("redis", _redis(server.port, 1), redis=server)
    yield made
    InMemoryKeyValueStateProvider.drop()
    from providers import load_module

    sqlite_state = load_module("sqlite_state")

    from providers.redis import reset_clients

    reset_clients()
    sqlite_state.close_connections()


def _kv(conf: dict[str, Any], namespace: str, system: bool = False) -> KeyValueState:
    state = (StateFactory.get_system_state if system else StateFactory.get_state)(namespace, conf)
    assert isinstance(state, KeyValueState)
    return state


def leave_topology(conf: dict[str, Any], topology: str = TOPO) -> None:
    """A word count stopped in COMMITTING(4): tasks committed 3, txid 4 prepared everywhere."""
    for task, committed in enumerate((COMMITTED_0, COMMITTED_1)):
        state = _kv(conf, f"{topology}/count-{task}")
        for key, value in committed.items():
            state.put(key, value)
        state.prepare_commit(3)
        state.commit(3)
    first = _kv(conf, f"{topology}/count-0")
    first.put("storm", 4)  # an update
    first.delete("spark")  # a deletion: a tombstone in the prepared delta
    first.put("new", 1)
    first.prepare_commit(4)
    second = _kv(conf, f"{topology}/count-1")
    second.put("beam", 8)
    second.prepare_commit(4)
    spout = _kv(conf, f"{topology}/$checkpointspout-0", system=True)
    spout.put("__state", [4, "COMMITTING"])
    spout.put("__txn", {"txid": 4, "spouts": [["sentences", 0, [17, 18]]]})
    spout.commit()


def leave_transactional(conf: dict[str, Any]) -> None:
    """A transactional id: coordinator at txid 3, a partition's metas, a committer's map."""
    root = f"$transactional/{TX_ID}"
    coordinator = _kv(conf, f"{root}/coordinator", system=True)
    coordinator.put("currtx", 3)
    coordinator.put("meta/3", [4])  # RotatingTransactionalState's layout: <prefix><txid> -> [meta]
    coordinator.commit()
    partition = _kv(conf, f"{root}/partition-0", system=True)
    partition.put("2", [[0, 3]])
    partition.put("3", [[3, 3]])
    partition.commit()
    for task, words in enumerate((("cat", 8), ("dog", 7))):
        counts = _kv(conf, f"{root}/count-{task}/default", system=True)
        counts.put((words[0],), [2, words[1]])
        counts.put("$record", [2, [words[0]]])
        counts.commit()


def image(conf: dict[str, Any], namespace: str) -> tuple[Any, ...]:
    """A namespace's stored image, raw: txids, committed bytes, prepared bytes."""
    state = _kv(conf, namespace, system=True)
    return (*state.stored_txids(), dict(state.scan_committed()), dict(state.scan_prepared()))


def images(store: Store, prefix: str) -> dict[str, tuple[Any, ...]]:
    return {n: image(store.conf, n) for n in store.namespaces(prefix)}


def cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(["state", *[str(a) for a in args]])
    out, err = capsys.readouterr()
    return code, out, err


def conf_file(tmp_path: Path, store: Store, name: str = "conf.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(store.conf))
    return path


# ---------------------------------------------------------------- moving between providers
@pytest.mark.redis
@pytest.mark.parametrize(
    ("source", "target"), [("memory", "sqlite"), ("sqlite", "redis"), ("redis", "memory")]
)
def test_export_import_moves_a_topology_exactly(
    stores: dict[str, Store], tmp_path: Path, source: str, target: str
) -> None:
    src, dst = stores[source], stores[target]
    leave_topology(src.conf)
    leave_topology(src.conf, "xwc")  # another topology: not part of the move
    before = images(src, f"{TOPO}/")
    path = tmp_path / "wc.sbstate"

    info = export_state(src.conf, path, topology=TOPO)
    if source == "memory":
        InMemoryKeyValueStateProvider.drop()  # memory to memory would prove nothing
    result = import_state(dst.conf, path, topology=TOPO)

    assert dst.namespaces(f"{TOPO}/") == [f"{TOPO}/$checkpointspout-0", "wc/count-0", "wc/count-1"]
    assert images(dst, f"{TOPO}/") == before
    assert dst.namespaces("xwc/") == []
    assert [
        (n.name, n.committed_txid, n.prepared_txid, n.committed, n.prepared)
        for n in info.namespaces
    ] == [
        ("wc/$checkpointspout-0", -1, None, 2, 0),
        ("wc/count-0", 3, 4, 4, 3),
        ("wc/count-1", 3, 4, 2, 1),
    ]
    assert (info.entries, result.info.sha256, result.replaced) == (12, info.sha256, [])
    # What a restart will do from the target: roll txid 4 forward, as from the source.
    status = checkpoint_status(dst.conf, TOPO)
    assert (str(status.checkpoint), status.on_restart) == (
        "COMMITTING(4)",
        ["COMMIT(4)", "INITSTATE(4)"],
    )
    assert [(t.namespace, t.committed_txid, t.prepared_txid) for t in status.tasks] == [
        ("wc/count-0", 3, 4),
        ("wc/count-1", 3, 4),
    ]
    # And the values read back through the target's states are the source's.
    assert read_state(dst.conf, "count", topology=TOPO) == {**COMMITTED_0, **COMMITTED_1}


@pytest.mark.parametrize("stores", ["no-redis"], indirect=True)
def test_tuples_and_sets_move_with_their_types(stores: dict[str, Store], tmp_path: Path) -> None:
    """The export file holds the stored bytes: a value's tuples and sets arrive as they left."""
    src, dst = stores["sqlite"], stores["sqlite2"]
    values = {"pair": (1, "a"), "seen": {"x", "y"}, "frozen": frozenset({(1, 2)}), "l": [()]}
    state = _kv(src.conf, f"{TOPO}/count-0")
    for key, value in values.items():
        state.put(key, value)
    state.prepare_commit(1)
    state.commit(1)
    path = tmp_path / "odd.sbstate"
    export_state(src.conf, path, topology=TOPO)
    import_state(dst.conf, path, topology=TOPO)
    moved = read_state(dst.conf, "count", topology=TOPO)
    assert moved == values
    assert [type(moved[k]) for k in ("pair", "seen", "frozen")] == [tuple, set, frozenset]
    assert type(next(iter(moved["frozen"]))) is tuple and type(moved["l"][0]) is tuple


@pytest.mark.redis
def test_a_transactional_id_moves_with_its_coordinator_partitions_and_maps(
    stores: dict[str, Store], tmp_path: Path
) -> None:
    src, dst = stores["sqlite"], stores["redis"]
    leave_transactional(src.conf)
    leave_topology(src.conf)  # a checkpointed topology beside it stays behind
    path = tmp_path / "words.sbstate"
    export_state(src.conf, path, transactional_id=TX_ID)
    import_state(dst.conf, path, transactional_id=TX_ID)

    prefix = f"$transactional/{TX_ID}/"
    assert dst.namespaces(prefix) == [
        f"{prefix}coordinator",
        f"{prefix}count-0/default",
        f"{prefix}count-1/default",
        f"{prefix}partition-0",
    ]
    assert images(dst, prefix) == images(src, prefix)
    assert dst.namespaces(f"{TOPO}/") == []
    assert transactional_status(dst.conf, TX_ID).as_dict() | {"provider": None} == (
        transactional_status(src.conf, TX_ID).as_dict() | {"provider": None}
    )
    assert read_state(dst.conf, "count", transactional_id=TX_ID) == {"cat": 8, "dog": 7}
    raw = iter_state(dst.conf, "count", transactional_id=TX_ID, raw=True)
    assert sorted(raw, key=repr) == sorted(
        [
            (["cat"], [2, 8]),
            ("$record", [2, ["cat"]]),
            (["dog"], [2, 7]),
            ("$record", [2, ["dog"]]),
        ],
        key=repr,
    )
    assert get_value(dst.conf, "count", "dog", transactional_id=TX_ID) == 7


# ---------------------------------------------------------------- reading
@pytest.mark.parametrize("stores", ["no-redis"], indirect=True)
def test_read_state_committed_and_as_of_the_prepared_delta(stores: dict[str, Store]) -> None:
    conf = stores["memory"].conf
    leave_topology(conf)
    committed = {**COMMITTED_0, **COMMITTED_1}
    assert read_state(conf, "count", topology=TOPO) == committed
    prepared = {**committed, "storm": 4, "new": 1, "beam": 8}
    del prepared["spark"]
    assert read_state(conf, "count", topology=TOPO, prepared=True) == prepared
    assert sorted(iter_state(conf, "count", topology=TOPO), key=repr) == sorted(
        committed.items(), key=repr
    )
    assert get_value(conf, "count", "storm", topology=TOPO) == 3
    assert get_value(conf, "count", "storm", topology=TOPO, prepared=True) == 4
    assert get_value(conf, "count", "spark", "gone", topology=TOPO, prepared=True) == "gone"
    assert get_value(conf, "count", "nope", topology=TOPO) is None
    # The checkpoint spout's record is the framework's, not a component's.
    with pytest.raises(StateNotFoundError, match=r"it holds: count-0, count-1 \('\$checkpoint"):
        read_state(conf, "$checkpointspout", topology=TOPO)
    with pytest.raises(StateNotFoundError, match=r"no state of component 'split'.*count-0"):
        read_state(conf, "split", topology=TOPO)
    with pytest.raises(StateToolError, match="exactly one of topology and transactional_id"):
        read_state(conf, "count")


@pytest.mark.parametrize("stores", ["no-redis"], indirect=True)
def test_a_key_in_two_tasks_cannot_be_one_dict_entry(stores: dict[str, Store]) -> None:
    conf = stores["sqlite"].conf
    for task in (0, 1):
        state = _kv(conf, f"{TOPO}/tally-{task}")
        state.put("seen", 10 + task)
        state.commit()
    with pytest.raises(
        StateToolError, match="key 'seen' of component 'tally' is held by tasks 0 and 1"
    ):
        read_state(conf, "tally", topology=TOPO)
    assert sorted(iter_state(conf, "tally", topology=TOPO)) == [("seen", 10), ("seen", 11)]


@pytest.mark.redis
@pytest.mark.parametrize("kind", ["memory", "redis", "sqlite"])
def test_reading_and_exporting_change_nothing(
    stores: dict[str, Store], tmp_path: Path, capsys: Any, kind: str
) -> None:
    store = stores[kind]
    leave_topology(store.conf)
    leave_transactional(store.conf)
    before = store.snapshot()
    txids_before = {n: _kv(store.conf, n, True).stored_txids() for n in store.namespaces("")}

    read_state(store.conf, "count", topology=TOPO)
    read_state(store.conf, "count", topology=TOPO, prepared=True)
    get_value(store.conf, "count", "storm", topology=TOPO)
    get_value(store.conf, "count", "storm", topology=TOPO, prepared=True)
    read_state(store.conf, "count", transactional_id=TX_ID)
    export_state(store.conf, tmp_path / "a.sbstate", topology=TOPO)
    export_state(store.conf, tmp_path / "b.sbstate", transactional_id=TX_ID)
    if kind != "memory":  # the command line refuses the in-memory provider
        conf = conf_file(tmp_path, store)
        for extra in ([], ["--prepared"], ["--format", "csv"]):
            assert (
                cli(
                    capsys,
                    "dump",
                    "--conf",
                    conf,
                    "--topology",
                    TOPO,
                    "--component",
                    "count",
                    *extra,
                )[0]
                == 0
            )
        assert (
            cli(capsys, "get", "--conf", conf, "--topology", TOPO, "--component", "count", "storm")[
                0
            ]
            == 0
        )
        assert (
            cli(capsys, "export", "--conf", conf, "--id", TX_ID, "--output", tmp_path / "c")[0] == 0
        )

    assert store.snapshot() == before
    assert {
        n: _kv(store.conf, n, True).stored_txids() for n in store.namespaces("")
    } == txids_before


# ---------------------------------------------------------------- the command line
@pytest.mark.redis
def test_dump_jsonl_and_csv_exact(stores: dict[str, Store], tmp_path: Path, capsys: Any) -> None:
    store = stores["redis"]
    leave_topology(store.conf)
    conf = conf_file(tmp_path, store)
    base = ["dump", "--conf", conf, "--topology", TOPO, "--component", "count"]

    code, out, err = cli(capsys, *base)
    assert (code, err) == (0, "")
    rows = [json.loads(line) for line in out.splitlines()]
    want = [{"task": 0, "key": k, "value": v} for k, v in COMMITTED_0.items()]
    want += [{"task": 1, "key": k, "value": v} for k, v in COMMITTED_1.items()]
    assert sorted(rows, key=repr) == sorted(want, key=repr)
    assert "ünï" in out  # UTF-8, not \\u escapes

    code, out, _ = cli(capsys, *base, "--format", "csv", "--prepared")
    lines = out.splitlines()
    assert (code, lines[0]) == (0, "task,key,value")
    assert sorted(lines[1:]) == sorted(
        [
            "0,storm,4",
            "0,new,1",
            '0,ünï,"[1, ""x""]"',
            '0,"a,""b""","{""n"": 1.5}"',
            "1,flink,2",
            "1,beam,8",
        ]
    )

    target = tmp_path / "dump.jsonl"
    assert cli(capsys, *base, "--output", target) == (0, "", "")
    assert sorted(target.read_text(encoding="utf-8").splitlines()) == sorted(
        json.dumps(row, ensure_ascii=False) for row in rows
    )

    # A value JSON cannot hold: the error names the namespace and the key.
    blob = _kv(store.conf, f"{TOPO}/count-1")
    blob.put("blob", b"\x00\x01")
    blob.prepare_commit(4)
    for fmt in ("jsonl", "csv"):
        code, _, err = cli(capsys, *base, "--format", fmt, "--prepared")
        assert code == 2, fmt
        assert err == (
            "error: namespace 'wc/count-1', key 'blob': a bytes cannot be written as JSON "
            "(Object of type bytes is not JSON serializable)\n"
        )


@pytest.mark.parametrize("stores", ["no-redis"], indirect=True)
def test_get_and_its_exit_statuses(stores: dict[str, Store], tmp_path: Path, capsys: Any) -> None:
    store = stores["sqlite"]
    leave_topology(store.conf)
    numbers = _kv(store.conf, f"{TOPO}/buckets-0")
    numbers.put(3, "three")
    numbers.commit()
    conf = conf_file(tmp_path, store)
    base = ["get", "--conf", conf, "--topology", TOPO, "--component"]

    assert cli(capsys, *base, "count", "storm") == (0, "3\n", "")
    assert cli(capsys, *base, "count", "storm", "--prepared") == (0, "4\n", "")
    assert cli(capsys, *base, "count", "ünï") == (0, '[1, "x"]\n', "")
    assert cli(capsys, *base, "buckets", "--json-key", "3") == (0, '"three"\n', "")
    assert cli(capsys, *base, "count", "spark", "--prepared") == (
        1,
        "",
        "error: key 'spark' is not in component 'count' of topology 'wc'\n",
    )
    code, out, err = cli(capsys, *base, "split", "x")
    assert (code, out) == (1, "")
    assert err == (
        "error: no state of component 'split' in topology 'wc' in "
        "sqlite_state.SqliteKeyValueStateProvider; under 'wc/' it holds: buckets-0, count-0, "
        "count-1\n"
    )
    code, _, err = cli(capsys, *base, "buckets", "--json-key", "{3")
    assert code == 2 and err.startswith("error: --json-key: KEY '{3' is not JSON")
    code, _, err = cli(
        capsys, "export", "--conf", conf, "--topology", "nothing", "--output", tmp_path / "x"
    )
    assert (code, err) == (
        1,
        "error: nothing of topology 'nothing' is stored in "
        "sqlite_state.SqliteKeyValueStateProvider\n",
    )
    assert not (tmp_path / "x").exists()


def test_the_command_line_refuses_the_in_memory_provider(tmp_path: Path, capsys: Any) -> None:
    conf = tmp_path / "memory.json"
    conf.write_text("{}")
    scope = ["--conf", conf, "--topology", TOPO]
    for args in (
        ["dump", *scope, "--component", "count"],
        ["get", *scope, "--component", "count", "storm"],
        ["export", *scope, "--output", tmp_path / "x"],
        ["import", "--conf", conf, "--topology", TOPO, tmp_path / "x"],
    ):
        code, out, err = cli(capsys, *args)
        assert (code, out) == (2, ""), args
        assert err.startswith(
            "error: providers.memory.InMemoryKeyValueStateProvider keeps a topology's state in "
            "the memory of the driver process that ran it, and this command runs in a new process"
        ), args
        assert "call statefulbolts.state (read_state, export_state, import_state)" in err


@pytest.mark.parametrize("stores", ["no-redis"], indirect=True)
def test_export_import_verify_on_the_command_line(
    stores: dict[str, Store], tmp_path: Path, capsys: Any
) -> None:
    src, dst = stores["sqlite"], stores["sqlite2"]
    leave_topology(src.conf)
    src_conf, dst_conf = conf_file(tmp_path, src, "a.json"), conf_file(tmp_path, dst, "b.json")
    path = tmp_path / "wc.sbstate"

    code, out, err = cli(capsys, "export", "--conf", src_conf, "--topology", TOPO, "--output", path)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        f"exported topology 'wc' from sqlite_state.SqliteKeyValueStateProvider "
        f"(sqlite {src.path}) to {path}"
    )
    assert lines[1].startswith("  3 namespaces, 12 entries (8 committed, 4 prepared), ")
    assert lines[2:] == [
        "  wc/$checkpointspout-0: committed txid -1, 2 committed",
        "  wc/count-0: committed txid 3, prepared txid 4 (3 prepared), 4 committed",
        "  wc/count-1: committed txid 3, prepared txid 4 (1 prepared), 2 committed",
        "  checkpoint: COMMITTING(4); on restart: COMMIT(4), INITSTATE(4)",
    ]
    code, out, _ = cli(capsys, "verify", path, "--json")
    verified = json.loads(out)
    assert code == 0 and verified["header"]["name"] == TOPO and verified["entries"] == 12
    assert verified["header"]["provider"] == "sqlite_state.SqliteKeyValueStateProvider"

    code, out, err = cli(capsys, "import", "--conf", dst_conf, "--topology", TOPO, path, "--json")
    assert (code, err) == (0, "")
    done = json.loads(out)
    assert done["resume"] == {
        "checkpoint": "COMMITTING(4)",
        "on_restart": ["COMMIT(4)", "INITSTATE(4)"],
    }
    assert (done["replaced"], done["emptied"], done["location"]) == ([], [], f"sqlite {dst.path}")
    assert images(dst, f"{TOPO}/") == images(src, f"{TOPO}/")

    # Again: the target holds the topology now, so it refuses, exit 2, and writes nothing.
    code, out, err = cli(capsys, "import", "--conf", dst_conf, "--topology", TOPO, path)
    assert (code, out) == (2, "")
    assert err == (
        "error: sqlite_state.SqliteKeyValueStateProvider already holds state of topology 'wc' "
        "in 3 namespace(s): wc/$checkpointspout-0, wc/count-0, wc/count-1; nothing was "
        "imported. Import into an empty target, or overwrite it with the file's state "
        "(--overwrite)\n"
    )
    code, out, _ = cli(
        capsys, "import", "--conf", dst_conf, "--topology", TOPO, path, "--overwrite"
    )
    assert code == 0 and "  replaced: 3 namespaces, emptied: 0" in out.splitlines()


# ---------------------------------------------------------------- refusing, overwriting
@pytest.mark.redis
def test_import_refuses_a_target_holding_the_topology_unless_overwrite(
    stores: dict[str, Store], tmp_path: Path
) -> None:
    src, dst = stores["sqlite"], stores["redis"]
    leave_topology(src.conf)
    path = tmp_path / "wc.sbstate"
    export_state(src.conf, path, topology=TOPO)
    # The target holds other counts in count-0, and a task the file does not have.
    for namespace in (f"{TOPO}/count-0", f"{TOPO}/count-5"):
        state = _kv(dst.conf, namespace)
        state.put("old", 1)
        state.prepare_commit(9)
        state.commit(9)
    before = dst.snapshot()

    with pytest.raises(StateOverwriteError) as refused:
        import_state(dst.conf, path, topology=TOPO)
    assert "in 2 namespace(s): wc/count-0, wc/count-5; nothing was imported" in str(refused.value)
    assert dst.snapshot() == before

    result = import_state(dst.conf, path, topology=TOPO, overwrite=True)
    assert (result.replaced, result.emptied) == (["wc/count-0"], ["wc/count-5"])
    assert dst.namespaces(f"{TOPO}/") == [f"{TOPO}/$checkpointspout-0", "wc/count-0", "wc/count-1"]
    assert images(dst, f"{TOPO}/") == images(src, f"{TOPO}/")
    assert dst.redis.client().keys(f"{TOPO}/count-5*") == []
    assert dst.redis.client().keys("*$import*") == []


@pytest.mark.redis
def test_an_interrupted_staging_is_cleaned_up_by_the_next_import(
    stores: dict[str, Store], tmp_path: Path
) -> None:
    src, dst = stores["memory"], stores["redis"]
    leave_topology(src.conf)
    path = tmp_path / "wc.sbstate"
    export_state(src.conf, path, topology=TOPO)
    client = dst.redis.client()
    # What a replace killed during its staging leaves: staged keys, the namespace untouched.
    client.hset(f"{TOPO}/count-0$import", b"junk", b"\x92\x01\xc4\x01\x00")
    client.hset(f"{TOPO}/count-0$import-txid", "staged", "1")
    assert dst.namespaces(f"{TOPO}/") == []  # a staged key is never taken for a namespace

    import_state(dst.conf, path, topology=TOPO)
    assert images(dst, f"{TOPO}/") == images(src, f"{TOPO}/")
    assert client.keys("*$import*") == []


@pytest.mark.parametrize("stores", ["no-redis"], indirect=True)
def test_bolt_states_need_the_same_serializers_on_both_sides(
    stores: dict[str, Store], tmp_path: Path
) -> None:
    src = stores["sqlite"]
    typed = {
        **src.conf,
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(src.path), "valueClass": "int"}),
    }
    leave_transactional(typed)
    state = _kv(typed, f"{TOPO}/count-0")
    state.put("storm", 3)
    state.commit()
    export_state(typed, tmp_path / "wc", topology=TOPO)
    export_state(typed, tmp_path / "tx", transactional_id=TX_ID)
    dst = stores["sqlite2"].conf
    with pytest.raises(
        StateToolError,
        match=r"serializer fields \{'valueClass': 'int'\} and the target config has none",
    ):
        import_state(dst, tmp_path / "wc", topology=TOPO)
    assert stores["sqlite2"].namespaces("") == []
    import_state(
        dst, tmp_path / "tx", transactional_id=TX_ID
    )  # framework records only: plain msgpack on both sides
    assert read_state(dst, "count", transactional_id=TX_ID) == {"cat": 8, "dog": 7}


# ---------------------------------------------------------------- damaged files
def _frames(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, body) of every record after the 8 magic bytes."""
    frames, at = [], 8
    while at < len(data):
        length, _ = struct.unpack(">II", data[at : at + 8])
        frames.append((at, data[at + 8 : at + 8 + length]))
        at += 8 + length
    return frames


def _reframe(data: bytes, header: dict[str, Any]) -> bytes:
    """The same file with another header, its CRCs and trailer digest recomputed: well formed."""
    import hashlib

    frames = [body for _, body in _frames(data)]
    bodies = [msgpack.packb(["header", header], use_bin_type=True), *frames[1:-1]]
    out = data[:8] + b"".join(struct.pack(">II", len(b), zlib.crc32(b)) + b for b in bodies)
    trailer = msgpack.unpackb(frames[-1], raw=False)
    trailer[1]["sha256"] = hashlib.sha256(out).hexdigest()
    last = msgpack.packb(trailer, use_bin_type=True)
    return out + struct.pack(">II", len(last), zlib.crc32(last)) + last


@pytest.mark.redis
def test_a_damaged_file_is_a_clear_error_and_imports_nothing(
    stores: dict[str, Store], tmp_path: Path, capsys: Any
) -> None:
    src, dst = stores["sqlite"], stores["redis"]
    leave_topology(src.conf)
    good = tmp_path / "good.sbstate"
    export_state(src.conf, good, topology=TOPO)
    data = good.read_bytes()
    frames = _frames(data)
    tags = [msgpack.unpackb(body, raw=False)[0] for _, body in frames]
    # wc/count-0's prepared delta: the first "prepared" record (the spout's namespace has none).
    entry = tags.index("prepared")
    chunk_at, next_at = frames[entry][0], frames[entry + 1][0]
    trailer_at = frames[-1][0]

    def flipped(at: int) -> bytes:
        return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]

    header = msgpack.unpackb(frames[0][1], raw=False)[1]
    damaged = {
        "cut in the magic": (data[:5], "not a statefulbolts state file"),
        "cut in the header": (data[:20], "(record 1 at byte 8): truncated: the record needs"),
        "cut in a record": (
            data[: chunk_at + 12],
            f"at byte {chunk_at}): truncated: the record needs",
        ),
        "cut before the trailer": (
            data[:trailer_at],
            "truncated: it ends without its trailer record",
        ),
        "cut in the trailer": (data[:-3], f"at byte {trailer_at}): truncated"),
        "flipped magic": (flipped(2), "not a statefulbolts state file"),
        "flipped header": (flipped(20), "(record 1 at byte 8): corrupt: checksum mismatch"),
        "flipped entry": (
            flipped(chunk_at + 12),
            f"at byte {chunk_at}): corrupt: checksum mismatch",
        ),
        "flipped length": (flipped(chunk_at + 3), f"at byte {chunk_at}): "),
        "flipped trailer": (
            flipped(len(data) - 2),
            f"at byte {trailer_at}): corrupt: checksum mismatch",
        ),
        "a record lost": (
            data[:chunk_at] + data[next_at:],
            "corrupt: namespace 'wc/count-0' ends with ['end', 'wc/count-0', 4, 3, 0], expected "
            "['end', 'wc/count-0', 4, 0, 0]",
        ),
        "bytes after the trailer": (data + b"\x00", "corrupt: bytes follow the trailer"),
        "version 3": (
            _reframe(data, {**header, "version": 3}),
            "(record 1 at byte 8): format version 3, and this statefulbolts reads versions 1 "
            "and 2; a newer statefulbolts wrote it",
        ),
    }
    dst_conf = conf_file(tmp_path, dst)
    for what, (content, message) in damaged.items():
        path = tmp_path / "bad.sbstate"
        path.write_bytes(content)
        with pytest.raises(StateFileError) as error:
            import_state(dst.conf, path, topology=TOPO)
        assert str(error.value).startswith(f"state file {str(path)!r}"), what
        assert message in str(error.value), (what, str(error.value))
        assert dst.redis.client().keys("*") == [], what
        code, out, err = cli(capsys, "import", "--conf", dst_conf, "--topology", TOPO, path)
        assert (code, out, err) == (2, "", f"error: {error.value}\n"), what
    assert dst.redis.client().keys("*") == []
    assert read_info(good).entries == 12  # the undamaged file reads, and imports
    assert cli(capsys, "import", "--conf", dst_conf, "--topology", TOPO, good)[0] == 0
    assert images(dst, f"{TOPO}/") == images(src, f"{TOPO}/")
    code, _, err = cli(capsys, "verify", tmp_path / "missing.sbstate")
    assert code == 2 and "No such file or directory" in err


# ---------------------------------------------------------------- a provider without the image
class DictState(KeyValueState):
    """A minimal provider's state: the bolts' contract only, no stored image."""

    store: dict[str, dict[Any, Any]] = {}

    def __init__(self, namespace: str) -> None:
        self.data = self.store.setdefault(namespace, {})

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    def delete(self, key: Any) -> Any:
        return self.data.pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self.data.items()))

    def prepare_commit(self, txid: int) -> None:
        """Nothing to prepare."""

    def commit(self, txid: int | None = None) -> None:
        """Nothing to commit."""

    def rollback(self) -> None:
        """Nothing to roll back."""


class DictProvider(StateProvider):
    def new_state(self, namespace: str, conf: Any, context: Any = None) -> DictState:
        return DictState(namespace)

    def namespaces(self, conf: Any, prefix: str = "") -> list[str]:
        return sorted(n for n in DictState.store if n.startswith(prefix))


def test_a_provider_without_the_stored_image_is_named(tmp_path: Path) -> None:
    conf = {STATE_PROVIDER_KEY: f"{__name__}.DictProvider"}
    DictState("wc/count-0").put("storm", 1)
    assert not DictState("wc/count-0").supports_stored_image
    with pytest.raises(StateToolError) as error:
        export_state(conf, tmp_path / "x", topology=TOPO)
    assert str(error.value).startswith(
        f"{__name__}.DictState (provider {__name__}.DictProvider) does not expose its stored image"
    )
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()
