"""The fast loop's contract: a test that starts Spark or Redis is marked, and one that is not fails.

``scripts/test --fast`` runs ``-m "not spark and not redis and not slow"`` with
``tests/no_servers`` standing in for ``spark-submit`` and ``redis-server`` (see
``tests/conftest.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NO_SERVERS = ROOT / "tests" / "no_servers"


def _collected(*args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {line.partition("::")[2] for line in result.stdout.splitlines() if "::" in line}


def test_users_of_the_spark_fixture_are_marked_spark_without_a_mark_of_their_own() -> None:
    assert _collected("-m", "spark", "tests/test_spark_session.py") == {
        # the spark fixture, marked by tests/conftest.py
        "test_the_shared_local_session_got_loopback_and_the_jvm_options",
        "test_the_shared_local_session_talks_to_its_workers_over_unix_sockets",
        "test_local_workers_run_under_the_quiet_daemon",
        # a subprocess that starts Spark: its own mark
        "test_runs_end_without_worker_tracebacks",
    }


def test_a_redis_parameter_is_marked_redis_and_its_siblings_are_not() -> None:
    fast = _collected("-m", "not spark and not redis", "tests/test_deadletter_cli.py")
    assert any(name.endswith("[sqlite]") for name in fast)
    assert not any(name.endswith("[redis]") for name in fast)
    with_redis = _collected("-m", "redis", "tests/test_deadletter_cli.py")
    assert with_redis and all(name.endswith("[redis]") for name in with_redis)


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
