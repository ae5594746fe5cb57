"""``statefulbolts deadletter list | show | replay | purge`` on real stores: Redis and SQLite.

Each test writes records as a driver does (``DeadLetterStore.put``), runs the command line, and
checks what it printed, its exit status and what the store holds afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from providers import STATE_PROVIDER_CONFIG_KEY, STATE_PROVIDER_KEY
from statefulbolts.cli import main
from statefulbolts.deadletter import (
    BatchOrigin,
    DeadLetter,
    DeadLetterStore,
    FailedTuple,
    LetterState,
    SpoutOrigin,
)

TOPO = "wc"


def _letter(message_id: Any, word: str, at: float, **more: Any) -> DeadLetter:
    # Task index 1 of 'count' (global id 9), from task index 2 of 'split' (global id 5).
    failed = FailedTuple("split", 5, "default", [word], repr([word]), 2)
    origin = SpoutOrigin("sentences", 0, message_id, "default", [f"a {word} pill"], "")
    return DeadLetter.first(
        TOPO, "topology", "count", 9, 1, failed, origin, ("builtins.ValueError",),
        f"cannot count {word!r}", "Traceback (most recent call last):\n  boom\n",
        txid=4, attempts=2, at=at, **more,
    )  # fmt: skip


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "sqlite"])
def conf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A config naming a real store: the test redis-server, or a SQLite file."""
    if request.param == "redis":
        server = request.getfixturevalue("redis_db")
        pool = {"host": "127.0.0.1", "port": server.port}
        made = {
            STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
        }
    else:
        made = {
            STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(tmp_path / "dl.db")}),
        }
    yield made
    if request.param == "redis":
        from providers.redis import reset_clients

        reset_clients()
    else:
        import sqlite_state

        sqlite_state.close_connections()


def _cli(capsys: Any, conf: dict[str, Any], tmp_path: Path, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "conf.json"
    path.write_text(json.dumps(conf), encoding="utf-8")
    code = main(["deadletter", args[0], "--conf", str(path), *args[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def _two(conf: dict[str, Any]) -> tuple[DeadLetterStore, DeadLetter, DeadLetter]:
    store = DeadLetterStore(conf, topology=TOPO)
    first, second = _letter("1-0", "poison", 1_700_000_000.0), _letter("2-0", "venom", 1.8e9)
    store.put(first, second)
    return store, first, second


def test_list_shows_every_record_for_people_and_for_machines(
    conf: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    _, first, second = _two(conf)
    code, out, _ = _cli(capsys, conf, tmp_path, "list", "--topology", TOPO)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"dead letters of topology '{TOPO}': 2 (in {TOPO}/$deadletter)"
    assert lines[1].split() == ["id", "state", "component", "task", "tries", "last", "seen"]
    assert lines[2].split() == [first.id, "dead", "count", "1", "2", "2023-11-14", "22:13:20Z"]
    assert lines[3].strip() == "ValueError: cannot count 'poison'"
    assert lines[4].strip() == (
        "tuple ['poison'], of spout 'sentences' task 0 message '1-0', stream default: "
        "['a poison pill']"
    )
    assert lines[5].split()[0] == second.id and len(lines) == 8
    code, out, _ = _cli(capsys, conf, tmp_path, "list", "--topology", TOPO, "--json")
    doc = json.loads(out)
    assert code == 0 and (doc["scope"], doc["name"]) == ("topology", TOPO)
    assert [DeadLetter.from_value(r) for r in doc["records"]] == [first, second]


def test_an_empty_store_lists_nothing_and_exits_0(
    conf: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    code, out, _ = _cli(capsys, conf, tmp_path, "list", "--id", "words")
    assert (code, out) == (0, "dead letters of transactional id 'words': 0 "
                              "(in $transactional/words/$deadletter)\n")  # fmt: skip


def test_show_prints_one_record_with_its_traceback(
    conf: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    _, first, _ = _two(conf)
    code, out, _ = _cli(capsys, conf, tmp_path, "show", "--topology", TOPO, first.id)
    assert code == 0
    assert f"dead letter {first.id} of topology 'wc'" in out
    # Task indexes, as the docs speak of tasks; Storm's global ids stay in the --json record.
    assert "  component:  'count', task 1\n" in out
    assert "  tuple:      ['poison'] from 'split' task 2, stream default" in out
    assert "  error:      builtins.ValueError: cannot count 'poison'" in out
    assert "  txid:       4; failed transactions: 2" in out
    assert out.rstrip().endswith("    Traceback (most recent call last):\n      boom")
    code, out, _ = _cli(capsys, conf, tmp_path, "show", "--topology", TOPO, "--json", first.id)
    assert DeadLetter.from_value(json.loads(out)) == first
    code, out, err = _cli(capsys, conf, tmp_path, "show", "--topology", TOPO, "nosuch")
    assert (code, out) == (1, "")
    assert err == "error: no dead letter 'nosuch' in topology 'wc'\n"


def test_replay_marks_records_and_moves_the_change_counter(
    conf: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    store, first, second = _two(conf)
    code, out, _ = _cli(capsys, conf, tmp_path, "replay", "--topology", TOPO, first.id)
    assert code == 0 and out.startswith("asked for replay: 1 dead letter(s) of topology 'wc'\n")
    assert "topology.deadletter.replay.poll.secs" in out
    assert [r.state for r in store.records()] == [LetterState.REPLAY, LetterState.DEAD]
    assert store.changes() == 1
    code, out, _ = _cli(capsys, conf, tmp_path, "replay", "--topology", TOPO, "--all", "--json")
    assert json.loads(out) == {"replay": [first.id, second.id], "not_replayable": []}
    assert [r.state for r in store.records()] == [LetterState.REPLAY, LetterState.REPLAY]
    assert store.changes() == 2


def test_a_missing_id_changes_nothing_and_no_selection_is_bad_input(
    conf: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    store, first, _ = _two(conf)
    code, _, err = _cli(capsys, conf, tmp_path, "purge", "--topology", TOPO, first.id, "nosuch")
    assert code == 1 and "no dead letter 'nosuch' in topology 'wc'; nothing was changed" in err
    code, _, err = _cli(capsys, conf, tmp_path, "replay", "--topology", TOPO, first.id, "nosuch")
    assert code == 1 and store.count() == 2 and store.changes() == 0
    code, _, err = _cli(capsys, conf, tmp_path, "replay", "--topology", TOPO)
    assert code == 2 and "name the records to act on (their ids), or --all" in err
    code, _, err = _cli(capsys, conf, tmp_path, "purge", "--topology", TOPO, "--all", first.id)
    assert code == 2 and store.count() == 2


def test_purge_deletes_the_records_named_then_all(
    conf: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    store, first, second = _two(conf)
    code, out, _ = _cli(capsys, conf, tmp_path, "purge", "--topology", TOPO, second.id)
    assert (code, out) == (0, f"purged 1 dead letter(s) of topology 'wc'\n  {second.id}\n")
    assert [r.id for r in store.records()] == [first.id] and store.changes() == 1
    code, out, _ = _cli(capsys, conf, tmp_path, "purge", "--topology", TOPO, "--all", "--json")
    assert (code, json.loads(out)) == (0, {"purged": [first.id]})
    assert store.records() == []


def test_a_transactional_record_by_its_id(
    conf: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    failed = FailedTuple("split", 2, "default", ["poison"], "['poison']")
    origin = BatchOrigin(3, "partition", 1, 1, "default", ["the poison pill"])
    letter = DeadLetter.first(
        "words", "transactional", "partial", 4, 0, failed, origin, ("builtins.ValueError",),
        "cannot count 'poison'", None, txid=3, attempts=2, at=1.7e9,
    )  # fmt: skip
    DeadLetterStore(conf, transactional_id="words").put(letter)
    code, out, _ = _cli(capsys, conf, tmp_path, "list", "--id", "words")
    assert code == 0 and "of txid 3, partition 1, tuple 1: ['the poison pill']" in out
    assert DeadLetterStore(conf, topology="words").records() == []


def test_the_in_memory_provider_is_refused(tmp_path: Path, capsys: Any) -> None:
    code, _, err = _cli(capsys, {}, tmp_path, "list", "--topology", TOPO)
    assert code == 2
    assert "keeps dead letters in the memory of the driver process" in err
    assert "Use a durable provider (Redis, SQLite)" in err
