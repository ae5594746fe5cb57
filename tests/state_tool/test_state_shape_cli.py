"""``statefulbolts state shape | evolve | rescale | rename | drop`` on real stores, no Spark.

A word count's state is left in SQLite and in a real redis-server as a stopped topology leaves
it (``topologies.seed_keyed_state``: two tasks committed at txid 4, its shape recorded); each
command is run through the CLI's ``main`` and checked by its output, its exit status and what
the store holds afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import topologies as topo

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    KeyValueState,
    StateFactory,
    get_provider,
)
from statefulbolts.cli import main
from statefulbolts.keygroups import KeyGroups

WORDS = {f"word{i}": i + 1 for i in range(120)}
GROUPS = KeyGroups(128)


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[dict[str, Any], Path]]:
    if request.param == "sqlite":
        conf: dict[str, Any] = {
            STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(tmp_path / "state.db")}),
        }
    else:
        server = request.getfixturevalue("redis_db")
        pool = {"host": "127.0.0.1", "port": server.port}
        conf = {
            STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
        }
    path = tmp_path / "conf.json"
    path.write_text(json.dumps(conf), encoding="utf-8")
    topo.seed_keyed_state(conf, "wc", 2, WORDS, txid=4)
    yield conf, path
    from providers import load_module

    sqlite_state = load_module("sqlite_state")

    from providers.redis import reset_clients

    reset_clients()
    sqlite_state.close_connections()


def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = main(["state", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def tasks(conf: dict[str, Any], component: str = "count") -> dict[int, dict[str, int]]:
    found = get_provider(conf).namespaces(conf, f"wc/{component}-") or []
    out = {}
    for ns in found:
        state = StateFactory.get_state(ns, conf)
        assert isinstance(state, KeyValueState)
        assert state.stored_txids() == (4, None)
        out[int(ns.rsplit("-", 1)[1])] = dict(state)
    return out


def test_shape_shows_each_component(store: Any, capsys: Any) -> None:
    conf, path = store
    status, out, _ = cli(capsys, "shape", "--conf", str(path), "--topology", "wc")
    assert status == 0
    assert "count: parallelism 2, keyed by 1 field in 128 key groups, state version 1" in out
    status, out, _ = cli(capsys, "shape", "--conf", str(path), "--topology", "wc", "--json")
    assert json.loads(out)["components"]["count"]["parallelism"] == 2
    status, _, err = cli(capsys, "shape", "--conf", str(path), "--topology", "other")
    assert status == 1 and "no stored shape under 'other/'" in err


def test_rescale_redistributes_and_a_dry_run_changes_nothing(store: Any, capsys: Any) -> None:
    conf, path = store
    args = ["--conf", str(path), "--topology", "wc", "--component", "count", "--parallelism"]
    status, out, _ = cli(capsys, "rescale", *args, "3", "--dry-run")
    assert status == 0 and "would change" in out and "count: parallelism 2 -> 3" in out
    assert sorted(tasks(conf)) == [0, 1]
    status, out, _ = cli(capsys, "rescale", *args, "3", "--json")
    doc = json.loads(out)
    assert status == 0 and doc["moved"] == {"count": len(WORDS)}
    held = tasks(conf)
    assert sorted(held) == [0, 1, 2]
    for task, entries in held.items():
        assert all(GROUPS.owner(GROUPS.group_of(w), 3) == task for w in entries)
    assert {w: n for e in held.values() for w, n in e.items()} == WORDS
    status, _, err = cli(capsys, "rescale", *args, "200")
    assert status == 2 and "keeps its state in 128 key groups: at most 128 tasks" in err


def test_rename_moves_the_state_and_drop_deletes_it(store: Any, capsys: Any) -> None:
    conf, path = store
    scope = ["--conf", str(path), "--topology", "wc"]
    status, out, _ = cli(capsys, "rename", *scope, "--from", "count", "--to", "counter")
    assert status == 0 and "counter: renamed from 'count'" in out
    assert tasks(conf) == {}
    assert {w: n for e in tasks(conf, "counter").values() for w, n in e.items()} == WORDS
    status, _, err = cli(capsys, "rename", *scope, "--from", "count", "--to", "x")
    assert status == 1 and "no stored state of component 'count'" in err

    status, _, err = cli(capsys, "drop", *scope, "--component", "counter")
    assert status == 2 and "add --yes" in err
    status, out, _ = cli(capsys, "drop", *scope, "--component", "counter", "--yes")
    assert status == 0 and "dropped 2 namespaces" in out
    assert get_provider(conf).namespaces(conf, "wc/counter-") == []
    status, out, _ = cli(capsys, "shape", *scope, "--json")
    assert json.loads(out)["components"] == {}
    status, out, _ = cli(capsys, "drop", *scope, "--yes", "--json")
    assert status == 0 and "wc/$checkpointspout-0" in json.loads(out)["dropped"]
    assert get_provider(conf).namespaces(conf, "wc/") == []


def _forget_shape(conf: dict[str, Any]) -> None:
    from statefulbolts.state import shape_namespace

    StateFactory.get_system_state(shape_namespace("wc/"), conf).replace_stored(None, (), None, {})


def _relayout(conf: dict[str, Any], place: Any) -> None:
    """Put every word of the two tasks where ``place(word)`` says, keeping txid 4."""
    pairs = _pairs(conf)
    for task in (0, 1):
        state = StateFactory.get_system_state(f"wc/count-{task}", conf)
        mine = [(k, v) for k, v in pairs if place(state.decode_key(k)) == task]
        state.replace_stored(4, mine, None, {})


def _pairs(conf: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    pairs = []
    for task in (0, 1):
        state = StateFactory.get_system_state(f"wc/count-{task}", conf)
        pairs.extend(state.scan_committed())
    return pairs


def test_evolve_migrates_state_committed_before_key_groups(store: Any, capsys: Any) -> None:
    from statefulbolts.state import legacy_hash

    conf, path = store
    _relayout(conf, lambda w: legacy_hash((w,)) % 2)  # as fields grouping put it before
    _forget_shape(conf)
    args = ["--conf", str(path), "--topology", "wc"]
    args += ["--topology-module", "examples.wordcount:topology"]
    status, out, _ = cli(capsys, "evolve", *args, "--dry-run")
    assert status == 0, out
    assert "count: layout: hash % 2 (before key groups) -> 128 key groups" in out
    status, out, _ = cli(capsys, "evolve", *args, "--json")
    assert status == 0 and json.loads(out)["moved"] == {"count": len(WORDS)}
    held = tasks(conf)
    for task, entries in held.items():
        assert all(GROUPS.owner(GROUPS.group_of(w), 2) == task for w in entries)
    assert {w: n for e in held.values() for w, n in e.items()} == WORDS


def test_evolve_refuses_state_its_layout_cannot_place_and_writes_nothing(
    store: Any, capsys: Any
) -> None:
    conf, path = store
    _relayout(conf, lambda w: int(w[4:]) % 2)  # round robin: not keyed by anything
    _forget_shape(conf)
    before = tasks(conf)
    args = ["--conf", str(path), "--topology", "wc"]
    args += ["--topology-module", "examples.wordcount:topology"]
    status, _, err = cli(capsys, "evolve", *args)
    assert status == 2
    assert "which its fields grouping sends to task" in err
    assert "Define grouping_key(state_key) on the bolt" in err
    assert tasks(conf) == before
