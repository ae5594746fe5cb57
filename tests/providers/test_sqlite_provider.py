"""The extlib SQLite provider: durability, several processes, its config, its guarantees."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from providers import (
    FENCE_EPOCH_KEY,
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    LeaseHeldError,
    LeaseHolder,
    ProviderConfigError,
    StateBackendError,
    StateBackendRefusedError,
    StateFactory,
    get_provider,
    load_module,
)

ROOT = Path(__file__).resolve().parents[2]
EXTLIB = ROOT / "extlib"
PROVIDER = "sqlite_state.SqliteKeyValueStateProvider"

sqlite_state = load_module("sqlite_state")


def conf_for(config: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {STATE_PROVIDER_KEY: PROVIDER}
    if config is not None:
        conf[STATE_PROVIDER_CONFIG_KEY] = config
    return conf


def path_conf(path: Path, **extra: Any) -> dict[str, Any]:
    return conf_for(json.dumps({"path": str(path), **extra}))


def k(key: Any) -> bytes:
    return msgpack.packb(key, use_bin_type=True)


@pytest.fixture(autouse=True)
def _close() -> Iterator[None]:
    yield
    sqlite_state.close_connections()


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXTLIB)])}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_exact_rows_after_prepare_commit_rollback(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    state = StateFactory.get_state("topo/count-0", path_conf(db))
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    state.commit(1)
    state.delete("b")
    state.put("c", 3)
    state.prepare_commit(2)
    assert rows(db, "SELECT ns, key, value FROM committed ORDER BY key") == [
        ("topo/count-0", k("a"), k(1)),
        ("topo/count-0", k("b"), k(2)),
    ]
    assert rows(db, "SELECT key, value FROM prepared ORDER BY key") == [
        (k("b"), None),
        (k("c"), k(3)),
    ]
    assert rows(db, "SELECT ns, committed, prepared FROM txids") == [("topo/count-0", 1, 2)]
    state.rollback()
    assert rows(db, "SELECT * FROM prepared") == []
    assert rows(db, "SELECT ns, committed, prepared FROM txids") == [("topo/count-0", 1, None)]
    state.delete("a")
    state.commit()
    assert rows(db, "SELECT key FROM committed") == [(k("b"),)]


def test_rollback_before_any_commit_leaves_no_txid_row(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    state = StateFactory.get_state("topo/count-0", path_conf(db))
    state.put("a", 1)
    state.prepare_commit(0)
    state.rollback()
    assert rows(db, "SELECT * FROM txids") == []
    assert rows(db, "SELECT * FROM prepared") == []


def test_durable_across_provider_instances(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    state = StateFactory.get_state("topo/count-0", path_conf(db))
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("b", 2)
    state.prepare_commit(2)
    sqlite_state.close_connections()
    again = StateFactory.get_state("topo/count-0", path_conf(db))
    assert (again.committed_txid, again.prepared_txid) == (1, 2)
    assert dict(again) == {"a": 1, "b": 2}


def test_durable_across_processes(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    writer = f"""
        import json, os
        from providers import StateFactory
        conf = {{"topology.state.provider": "{PROVIDER}",
                 "topology.state.provider.config": json.dumps({{"path": {str(db)!r}}})}}
        s = StateFactory.get_state("topo/count-0", conf)
        s.put("a", 1)
        s.prepare_commit(1)
        s.commit(1)
        s.put("b", 2)
        s.prepare_commit(2)
        os._exit(0)  # die without closing anything, between prepare and commit
    """
    done = run_python(writer, tmp_path)
    assert done.returncode == 0, done.stderr
    restarted = StateFactory.get_state("topo/count-0", path_conf(db))
    assert (restarted.committed_txid, restarted.prepared_txid) == (1, 2)
    assert dict(restarted) == {"a": 1, "b": 2}
    restarted.rollback()
    assert dict(StateFactory.get_state("topo/count-0", path_conf(db))) == {"a": 1}


def test_several_processes_write_one_file(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    worker = f"""
        import json, sys
        from providers import StateFactory
        conf = {{"topology.state.provider": "{PROVIDER}",
                 "topology.state.provider.config": json.dumps({{"path": {str(db)!r}}})}}
        task = sys.argv[1] if len(sys.argv) > 1 else "0"
        s = StateFactory.get_state("topo/count-" + task, conf)
        for txid in range(30):
            s.put("n", txid)
            s.put(f"k{{txid}}", txid)
            s.prepare_commit(txid)
            s.commit(txid)
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXTLIB)])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(worker), str(task)],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for task in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    for task in range(4):
        state = StateFactory.get_state(f"topo/count-{task}", path_conf(db))
        assert state.committed_txid == 29
        assert state.get("n") == 29
        assert len(state) == 31
    assert rows(db, "PRAGMA journal_mode") == [("wal",)]


def test_opening_a_file_another_process_is_still_setting_up_waits_for_it(tmp_path: Path) -> None:
    """A file still in rollback mode, write-locked by another connection: the open waits.

    SQLite refuses the switch to WAL at once in that case ("database is locked", without the
    busy timeout's wait): what a process meets when it opens a new file a moment after another
    one began setting it up. The open retries until the lock goes, within ``timeout``.
    """
    db = tmp_path / "state.sqlite3"
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE other (x)")
    released = threading.Timer(0.3, holder.execute, ("COMMIT",))
    released.start()
    try:
        state = StateFactory.get_state("topo/count-0", path_conf(db, timeout=10_000))
        state.put("a", 1)
        state.prepare_commit(1)
        state.commit(1)
    finally:
        released.join()
        holder.close()
    assert rows(db, "PRAGMA journal_mode") == [("wal",)]
    assert dict(StateFactory.get_state("topo/count-0", path_conf(db))) == {"a": 1}


def test_a_file_locked_past_the_timeout_fails_its_open_naming_the_file(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE other (x)")
    try:
        with pytest.raises(StateBackendError, match="database is locked") as info:
            StateFactory.get_state("topo/count-0", path_conf(db, timeout=200))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert str(db) in str(info.value) and "opening" in str(info.value)


def test_commit_is_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "state.sqlite3"
    state = StateFactory.get_state("topo/count-0", path_conf(db))
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("a", 2)
    state.put("b", 2)
    state.prepare_commit(2)
    before = (
        rows(db, "SELECT * FROM committed"),
        rows(db, "SELECT * FROM prepared"),
        rows(db, "SELECT * FROM txids"),
    )

    def crash(*args: Any) -> None:
        raise RuntimeError("crash after the data was written, before the txid")

    monkeypatch.setattr(sqlite_state.SqliteKeyValueState, "_set_txids", crash)
    with pytest.raises(RuntimeError, match="crash"):
        state.commit(2)
    after = (
        rows(db, "SELECT * FROM committed"),
        rows(db, "SELECT * FROM prepared"),
        rows(db, "SELECT * FROM txids"),
    )
    assert after == before
    monkeypatch.undo()
    state.commit(2)
    assert dict(StateFactory.get_state("topo/count-0", path_conf(db))) == {"a": 2, "b": 2}


def test_path_config_nested_and_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nested = tmp_path / "deep" / "er" / "state.db"
    state = StateFactory.get_state("topo/x-0", path_conf(nested))
    state.put("a", 1)
    state.commit()
    assert nested.is_file()
    monkeypatch.chdir(tmp_path)
    rel = StateFactory.get_state("topo/x-0", conf_for({"path": "rel/state.db"}))
    rel.put("b", 1)
    rel.commit()
    assert (tmp_path / "rel" / "state.db").is_file()
    assert rel.get("a") is None
    default = StateFactory.get_state("topo/x-0", conf_for(None))
    default.put("c", 1)
    default.commit()
    assert (tmp_path / "statefulbolts-state.sqlite3").is_file()
    assert rows(tmp_path / "statefulbolts-state.sqlite3", "SELECT key FROM committed") == [
        (k("c"),)
    ]


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"pathh": "x"}, "unknown field 'pathh'"),
        ({"path": 3}, "'path'"),
        ({"timeout": -1}, "'timeout'"),
        ({"valueClass": 5}, "'valueClass'"),
        ("[1]", "JSON object"),
        ("{nope", "not valid JSON"),
    ],
)
def test_bad_config(config: Any, fragment: str, tmp_path: Path) -> None:
    raw = config if isinstance(config, str) else json.dumps(config)
    with pytest.raises(ProviderConfigError, match="topology.state.provider.config") as info:
        StateFactory.get_state("topo/x-0", conf_for(raw))
    assert fragment in str(info.value)


def test_a_path_that_cannot_be_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(StateBackendRefusedError) as info:
        StateFactory.get_state("topo/x-0", path_conf(blocker / "state.db"))
    assert str(info.value).startswith(
        f"SQLite state file {str(blocker / 'state.db')!r} refused the opening: a part of the "
        "path is a file; check the config field 'path' [FileExistsError"
    )


def test_module_imports_only_providers_and_stdlib() -> None:
    tree = ast.parse((EXTLIB / "sqlite_state.py").read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
            if node.module == "providers":
                assert all(not alias.name.startswith("_") for alias in node.names)
    third_party = imported - set(sys.stdlib_module_names) - {"__future__", "providers"}
    assert third_party == set()
    assert "providers" in imported


# ------------------------------------------------------------------ outage or refusal
def test_a_locked_database_is_an_outage_and_the_prepare_goes_through_once_free(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    state = StateFactory.get_state("topo/count-0", path_conf(path, timeout=50))
    state.put("cat", 1)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StateBackendError) as info:
            state.prepare_commit(1)
        assert not isinstance(info.value, StateBackendRefusedError)
        assert str(info.value) == (
            f"SQLite state file {str(path)!r} failed during prepare of txid 1 of state "
            "'topo/count-0': OperationalError: database is locked"
        )
    finally:
        other.execute("ROLLBACK")
        other.close()
    state.prepare_commit(1)
    state.commit(1)
    assert rows(path, "SELECT committed FROM txids") == [(1,)]


def test_a_read_only_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    state = StateFactory.get_state("topo/count-0", path_conf(path))
    state.put("cat", 1)
    state._conn.execute("PRAGMA query_only = 1")  # SQLite's own read-only refusal
    with pytest.raises(StateBackendRefusedError) as info:
        state.prepare_commit(1)
    assert str(info.value).startswith(
        f"SQLite state file {str(path)!r} refused the prepare of txid 1 of state "
        "'topo/count-0': the file is read-only; make the file, its folder and its -wal / -shm "
        "files writable by this process [OperationalError: attempt to write a readonly database"
    )


def test_a_full_disk_is_refused_and_the_pending_writes_stay(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    state = StateFactory.get_state("topo/count-0", path_conf(path))
    pages = state._conn.execute("PRAGMA page_count").fetchone()[0]
    state._conn.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: full
    for i in range(2000):
        state.put(f"word-{i}", "x" * 100)
    with pytest.raises(StateBackendRefusedError, match="the disk is full; free space") as info:
        state.prepare_commit(1)
    assert "[OperationalError: database or disk is full]" in str(info.value)
    assert state.get("word-7") == "x" * 100
    assert rows(path, "SELECT COUNT(*) FROM prepared") == [(0,)]


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not a SQLite file at all, just text " * 100)
    with pytest.raises(StateBackendRefusedError) as info:
        StateFactory.get_state("topo/count-0", path_conf(path))
    assert str(info.value) == (
        f"SQLite state file {str(path)!r} refused the opening: the file is not a SQLite "
        "database; point the config field 'path' at the state file, or at a new one "
        "[DatabaseError: file is not a database]"
    )


# --- leases and fences ------------------------------------------------------------------------
HOLDER = LeaseHolder("host-a", 101, 1_780_000_000.0, process="9001", token="t")
OTHER = LeaseHolder("host-b", 202, 1_780_000_100.0)

# The schema of the version before leases, as its files hold it.
SCHEMA_BEFORE_LEASES = """
CREATE TABLE committed (
    ns TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, expiry INTEGER,
    PRIMARY KEY (ns, key)
) WITHOUT ROWID;
CREATE TABLE prepared (
    ns TEXT NOT NULL, key BLOB NOT NULL, value BLOB, PRIMARY KEY (ns, key)
) WITHOUT ROWID;
CREATE TABLE txids (ns TEXT PRIMARY KEY, committed INTEGER, prepared INTEGER);
CREATE TABLE rollbacks (ns TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE ttl_times (
    ns TEXT PRIMARY KEY, prepared_time INTEGER, prepared_expiry INTEGER, committed_time INTEGER
);
"""


def fenced_conf(db: Path, epoch: int) -> dict[str, Any]:
    return {**path_conf(db), FENCE_EPOCH_KEY: epoch}


def test_a_file_of_the_version_before_leases_gains_them_and_keeps_its_state(
    tmp_path: Path,
) -> None:
    db = tmp_path / "old.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.executescript(SCHEMA_BEFORE_LEASES)
        conn.execute("INSERT INTO committed VALUES ('topo/count-0', ?, ?, NULL)", (k("a"), k(1)))
        conn.execute("INSERT INTO txids VALUES ('topo/count-0', 4, NULL)")
    conf = path_conf(db)
    store = get_provider(conf).lease_store(conf)
    assert store is not None
    lease = store.acquire("topo/", HOLDER, 60_000)
    tables = {name for (name,) in rows(db, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"leases", "lease_holders", "fences"} <= tables
    assert rows(db, "SELECT ns, epoch FROM fences") == [("topo/count-0", lease.epoch)]
    state = StateFactory.get_state("topo/count-0", fenced_conf(db, lease.epoch))
    assert (state.committed_txid, dict(state)) == (4, {"a": 1})
    state.put("a", 2)
    state.prepare_commit(5)
    state.commit(5)
    assert dict(StateFactory.get_state("topo/count-0", conf)) == {"a": 2}


def test_exact_lease_rows_after_a_take_over(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    store = sqlite_state.SqliteLeaseStore(db, clock=lambda: 1_000.0)
    StateFactory.get_state("topo/count-0", path_conf(db)).commit()  # a namespace, unfenced
    first = store.acquire("topo/", HOLDER, 20_000)
    second = store.acquire("topo/", OTHER, 30_000, over=first.epoch)
    assert (first.epoch, second.epoch) == (1, 2)
    assert rows(db, "SELECT * FROM leases") == [
        ("topo/", 2, "host-b", 202, 1_780_000_100.0, "", "", 30_000, 1_030_000)
    ]
    assert rows(db, "SELECT * FROM lease_holders ORDER BY epoch") == [
        ("topo/", 1, "host-a", 101, 1_780_000_000.0, "9001", "t"),
        ("topo/", 2, "host-b", 202, 1_780_000_100.0, "", ""),
    ]
    assert rows(db, "SELECT * FROM fences") == [("topo/count-0", 2)]


def test_lease_time_is_the_stores_clock(tmp_path: Path) -> None:
    now = [5_000.0]
    store = sqlite_state.SqliteLeaseStore(tmp_path / "state.sqlite3", clock=lambda: now[0])
    first = store.acquire("topo/", HOLDER, 10_000)
    now[0] += 9.5  # halves and whole seconds: exact in binary floating point
    live = store.read("topo/")
    assert live is not None and (live.remaining_ms, live.live) == (500, True)
    with pytest.raises(LeaseHeldError):
        store.acquire("topo/", OTHER, 10_000)
    now[0] += 0.5
    gone = store.read("topo/")
    assert gone is not None and (gone.remaining_ms, gone.live) == (0, False)
    assert store.renew("topo/", first.epoch, 10_000).remaining_ms == 10_000
    now[0] += 60
    assert store.acquire("topo/", OTHER, 10_000).epoch == first.epoch + 1


def test_a_grant_goes_past_every_fence_of_its_scope(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    StateFactory.get_state("topo/count-0", fenced_conf(db, 7)).commit()  # rows of another file
    StateFactory.get_state("other/count-0", fenced_conf(db, 30)).commit()
    conf = path_conf(db)
    store = get_provider(conf).lease_store(conf)
    assert store is not None
    assert store.acquire("topo/", HOLDER, 60_000).epoch == 8
    assert rows(db, "SELECT ns, epoch FROM fences ORDER BY ns") == [
        ("other/count-0", 30),
        ("topo/count-0", 8),
    ]


def test_two_processes_taking_over_one_lease_one_wins(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    store = sqlite_state.SqliteLeaseStore(db)
    first = store.acquire("topo/", HOLDER, 60_000)
    contender = f"""
        import sys
        from providers import LeaseHeldError, LeaseHolder, load_module
        store = load_module("sqlite_state").SqliteLeaseStore({str(db)!r})
        holder = LeaseHolder("host-" + sys.argv[1], int(sys.argv[1]), 0.0)
        try:
            print("won", store.acquire("topo/", holder, 60_000, over={first.epoch}).epoch)
        except LeaseHeldError as exc:
            print("held", exc.lease.epoch)
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXTLIB)])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(contender), str(n)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    said = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        said.append(out.split())
    assert sorted(said) == [["held", "2"], ["held", "2"], ["won", "2"]]
    lease = store.read("topo/")
    assert lease is not None and lease.epoch == 2
