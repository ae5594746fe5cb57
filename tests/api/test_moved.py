"""The old import paths of moved modules still work, and warn once, naming the new path.

``statefulbolts._moved.MOVED`` lists them (issue 32: the sources went to
``statefulbolts.connectors``). Each old module gives the same objects as the new one; importing
it raises one ``DeprecationWarning`` pointed at the importing line; ``python -m`` of the old
stream tool still runs, with the warning on stderr.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from statefulbolts._moved import MOVED

# What each old path offered (its ``__all__``, or the names it resolved on request).
OLD_NAMES = {
    "statefulbolts.directory_spout": ["DirectorySpout"],
    "statefulbolts.redis_stream": [
        "DEFAULT_URL",
        "GROUP_KEY",
        "STREAM_KEY",
        "URL_KEY",
        "RedisStreamSpout",
        "entry_values",
        "load_stream",
        "main",
        "pending_count",
    ],
    "statefulbolts.redis_stream_partitioned": [
        "KEYS_KEY",
        "PATTERN_KEY",
        "PartitionedRedisStreamSpout",
    ],
    "statefulbolts.transactional._redis_streams": [
        "OpaqueRedisStreamsTransactionalSpout",
        "RedisStreamsTransactionalSpout",
        "close_connections",
        "load_streams",
    ],
}


def test_every_moved_path_is_checked() -> None:
    assert set(OLD_NAMES) == set(MOVED)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_gives_the_new_objects_and_warns(old: str, monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)  # put back as it was afterwards
    new = importlib.import_module(MOVED[old])
    with pytest.warns(DeprecationWarning, match=f"^{old} has moved to {MOVED[old]}; ") as seen:
        module = importlib.import_module(old)
    assert len(seen) == 1
    for name in OLD_NAMES[old]:
        assert getattr(module, name) is getattr(new, name), name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        module.Nope  # noqa: B018


@pytest.mark.parametrize("old", sorted(MOVED))
def test_the_warning_points_at_the_import_and_comes_once(old: str) -> None:
    code = f"import {old}\nimport {old}\n"
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("DeprecationWarning") == 1, done.stderr
    assert done.stderr.startswith(
        f"<string>:1: DeprecationWarning: {old} has moved to {MOVED[old]}; import from "
        f"{MOVED[old]} instead"
    ), done.stderr


def test_nothing_of_ours_imports_an_old_path() -> None:
    code = "import sys, statefulbolts, statefulbolts.transactional, statefulbolts.connectors\n"
    code += f"print(sorted(set({sorted(MOVED)!r}) & set(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.strip() == "[]"


def _module(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", name, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_old_stream_tool_still_runs_and_says_where_it_went(redis_db) -> None:
    old = _module(
        "statefulbolts.redis_stream", "load", "--url", redis_db.url, "--stream", "s", "-",
        stdin="one two\nthree\n",
    )
    assert old.returncode == 0, old.stderr
    assert json.loads(old.stdout) == {"stream": "s", "added": 2}
    assert "DeprecationWarning: statefulbolts.redis_stream has moved to " in old.stderr
    assert "statefulbolts.connectors.redis" in old.stderr
    assert "RuntimeWarning" not in old.stderr

    new = _module("statefulbolts.connectors.redis", "info", "--url", redis_db.url, "--stream", "s")
    assert new.returncode == 0, new.stderr
    assert new.stderr == ""
    assert json.loads(new.stdout) == {"stream": "s", "exists": True, "length": 2, "groups": []}
