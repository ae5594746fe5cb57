"""The fast loop's contract: a test that starts Spark or Redis is marked, and one that is not fails.

``scripts/test --fast`` runs ``-m "not spark and not redis and not slow"`` with
``tests/no_servers`` standing in for ``spark-submit`` and ``redis-server`` (see
``tests/conftest.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NO_SERVERS = ROOT / "tests" / "no_servers"


def test_the_fast_selection_leaves_out_fixture_users_and_redis_parameters() -> None:
    files = ["tests/engine/test_spark_session.py", "tests/deadletter/test_deadletter_cli.py"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q"]
        + ["-m", "not spark and not redis and not slow", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    fast = [line.partition("::") for line in result.stdout.splitlines() if "::" in line]
    # Left out: the users of the spark fixture (marked by tests/conftest.py, no mark of their
    # own) and the subprocess that starts Spark (its own mark).
    assert {name for path, _, name in fast if path == files[0]} == {
        "test_local_jvm_runs_c1_only_unless_the_user_chose_options",
        "test_loopback_settings_keep_what_the_user_set",
        "test_python_workers_use_unix_sockets_unless_the_user_chose",
        "test_local_masters_retry_tasks_like_a_cluster",
        "test_a_worker_freezes_what_outlives_its_tasks_once",
    }
    # A store fixture's redis parameter is left out, its sqlite sibling kept.
    cases = [name for path, _, name in fast if path == files[1]]
    assert any(name.endswith("[sqlite]") for name in cases)
    assert not any(name.endswith("[redis]") for name in cases)


def test_the_stand_ins_fail_naming_the_mark_to_add() -> None:
    stand_ins = {"spark-submit": "@pytest.mark.spark", "redis-server": "@pytest.mark.redis"}
    for tool, mark in stand_ins.items():
        result = subprocess.run(
            [str(NO_SERVERS / "bin" / tool), "--port", "6379"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 1
        assert "scripts/test --fast" in result.stderr and mark in result.stderr
