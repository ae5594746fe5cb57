"""Partitioned spouts read on the executors: exact counts through failures and restarts.

The word count of ``partitioned_topologies`` over a directory of files (``DirectorySpout``,
each file a partition, a byte offset its position) on the inline engine. The verdict is the
committed state of ``count`` against a ``Counter`` over the files, and the positions the driver
holds against the files' sizes: a transaction read twice, or lost, shows in both.

``topology.max.spout.pending`` is small, so a run is many transactions. A driver death is
simulated in process, as ``test_windowed_runner`` does: a listener raises ``SystemExit`` at
the kill point, which ends the driver loop there; a new driver then opens the same SQLite
store (durable, not the driver's own memory). ``STATEFULBOLTS_PARTITIONED_SEEDS`` (``"0-19"``,
or ``"4"``; default ``"0-3"``) gives the seeds the kill test loops over: a seed picks the kill
point and the transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
from partitioned_topologies import (
    FAST,
    POINTS,
    DriverDies,
    corpus,
    dies,
    end_positions,
    expected_counts,
    finish,
    seeds,
    start_driver,
    word_count,
    write_lines,
)

from providers import STATE_PROVIDER_CONFIG_KEY, STATE_PROVIDER_KEY, load_module
from statefulbolts import DirectorySpout, LocalCluster
from statefulbolts.errors import TopologyError
from statefulbolts.listeners import NoFaults
from statefulbolts.tuples import Tuple


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A config on a SQLite store of the test's own, closed after it."""
    yield {
        **FAST,
        STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(tmp_path / "state.db")}),
    }
    load_module("sqlite_state").close_connections()


class _RaisesOnce(NoFaults):
    """``count`` task 0 raises once, before its ``at``-th tuple of PREPARE(``txid``)."""

    def __init__(self, txid: int, at: int) -> None:
        self.txid, self.at, self.fired = txid, at, False

    def tuple_target(
        self, execute: Callable[[Tuple], None], component: str, task: int, txid: int, attempt: int
    ) -> Callable[[Tuple], None]:
        if component != "count" or task != 0 or txid != self.txid or self.fired:
            return execute
        seen = [0]

        def target(tuple_: Tuple) -> None:
            seen[0] += 1
            if seen[0] == self.at and not self.fired:
                self.fired = True
                msg = f"count fails before its tuple {self.at} of PREPARE({txid})"
                raise RuntimeError(msg)
            execute(tuple_)

        return target


def test_the_word_count_over_a_directory_is_exact_and_picks_up_new_lines_and_files(
    tmp_path: Path,
) -> None:
    folder = corpus(tmp_path / "in")
    actions: list[tuple[str, int, bool]] = []

    def grow(info: Any) -> None:
        # After the first commit: a new file, and more lines on one already read from.
        actions.append((str(info.action), info.txid, info.ok))
        if str(info.action) == "COMMIT" and not (folder / "late.txt").exists():
            write_lines(folder / "part-1.txt", 7, 5, mode="a")
            write_lines(folder / "late.txt", 8, 9)

    runner = start_driver(
        topo.new_key("part-wc"), dict(FAST), word_count(folder), on_transaction=grow
    )
    counts, positions = finish(runner, "files")
    assert (folder / "late.txt").exists()
    assert counts == expected_counts(folder)
    assert positions == end_positions(folder)
    # 74 lines, at most 4 per spout task (2) per transaction: many transactions, all fine.
    prepares = [ok for action, _, ok in actions if action == "PREPARE"]
    assert len(prepares) >= 74 // 8 and all(prepares)


@pytest.mark.parametrize("seed", seeds())
def test_a_driver_killed_at_each_point_restarts_exactly(
    seed: int, sqlite: dict[str, Any], tmp_path: Path
) -> None:
    # 60 lines, 8 a transaction: PREPAREs 1-8. The seed picks the point and the txid.
    point, txid = POINTS[seed % 4], 1 + (seed // 4) % 5
    folder = corpus(tmp_path / "in", seed=seed)
    name = topo.new_key("part-kill")
    first = start_driver(name, sqlite, word_count(folder), faults=DriverDies(point, txid))
    dies(first)
    counts, positions = finish(start_driver(name, sqlite, word_count(folder)), "files")
    assert counts == expected_counts(folder)
    assert positions == end_positions(folder)


def test_a_task_failure_rolls_back_and_the_replay_reads_the_same_lines(tmp_path: Path) -> None:
    folder = corpus(tmp_path / "in")
    failed: list[int] = []

    def record(info: Any) -> None:
        if str(info.action) == "PREPARE" and not info.ok:
            failed.append(info.txid)

    runner = start_driver(
        topo.new_key("part-fault"),
        dict(FAST),
        word_count(folder),
        faults=_RaisesOnce(txid=2, at=3),
        on_transaction=record,
    )
    counts, positions = finish(runner, "files")
    assert failed == [2]
    assert counts == expected_counts(folder)
    assert positions == end_positions(folder)


def test_the_spout_parallelism_changes_across_restarts_and_counts_stay_exact(
    sqlite: dict[str, Any], tmp_path: Path
) -> None:
    # 1 task, killed after COMMITTED(2); 3 tasks, killed after COMMITTED(4); then 2 tasks, with
    # a file added while no driver ran. Positions are per file: each run takes them over.
    folder = corpus(tmp_path / "in", files=4, lines=15)
    name = topo.new_key("part-rescale")
    one = start_driver(name, sqlite, word_count(folder, spouts=1), DriverDies(POINTS[3], 2))
    dies(one)
    three = start_driver(name, sqlite, word_count(folder, spouts=3), DriverDies(POINTS[3], 4))
    dies(three)
    write_lines(folder / "part-9.txt", 9, 11)
    counts, positions = finish(start_driver(name, sqlite, word_count(folder, spouts=2)), "files")
    assert counts == expected_counts(folder)
    assert positions == end_positions(folder)


def test_a_partitioned_spout_needs_a_stateful_bolt_to_save_its_positions(tmp_path: Path) -> None:
    from partitioned_topologies import Split

    from statefulbolts import DirectorySpout, TopologyBuilder

    builder = TopologyBuilder()
    builder.set_spout("files", DirectorySpout(str(tmp_path)))
    builder.set_bolt("split", Split()).shuffle_grouping("files")
    with (
        pytest.raises(TopologyError, match=r"partitioned spouts \['files'\].*no stateful bolt"),
        LocalCluster(engine="inline") as cluster,
    ):
        cluster.submit_topology(topo.new_key("part-plain"), dict(FAST), builder.create_topology())


def test_a_reader_reads_no_line_past_the_end_the_driver_listed(tmp_path: Path) -> None:
    task: Any = None  # a reader outside a job: no task context
    # The driver lists 2 whole lines and half a third; then the third is finished and a fourth
    # appended. A reader given the listed end (any attempt of the task) stops after line 2.
    (tmp_path / "a.txt").write_bytes(b"one\ntwo\nthr")
    spout = DirectorySpout(str(tmp_path))
    ends = spout.ends({}, ["a.txt", "gone.txt"])
    assert ends == {"a.txt": 11, "gone.txt": 0}
    with (tmp_path / "a.txt").open("ab") as f:
        f.write(b"ee\nfour\n")
    bounded = spout.open_reader({}, task, "a.txt", None, end=ends["a.txt"])
    assert bounded.read(10) == ([["one"], ["two"]], 8, "default")
    assert spout.open_reader({}, task, "a.txt", 8, end=8).read(10).records == []
    # The next transaction's listing takes in what was appended.
    rest = spout.open_reader({}, task, "a.txt", 8, end=spout.ends({}, ["a.txt"])["a.txt"])
    assert rest.read(10) == ([["three"], ["four"]], 19, "default")
    with pytest.raises(TopologyError, match=r"end of 'a.txt' is -1, expected a byte offset"):
        spout.open_reader({}, task, "a.txt", 0, end=-1)


def test_a_partitioned_spouts_tuples_are_counted_and_acked_when_their_transaction_commits(
    tmp_path: Path,
) -> None:
    """Each PREPARE's line shows the lines its spout tasks read, acked; so do the counters."""
    folder = corpus(tmp_path / "in")  # 3 files of 20 lines
    infos: list[Any] = []
    runner = start_driver(
        topo.new_key("part-acked"), dict(FAST), word_count(folder), on_transaction=infos.append
    )
    try:
        runner.await_idle(60)
        files = runner.metrics()["components"]["files"]
    finally:
        runner.kill()
    prepares = [info for info in infos if str(info.action) == "PREPARE"]
    assert all(info.ok and info.acked == info.tuples for info in prepares)
    assert sum(info.tuples for info in prepares) == 60
    assert (files["emitted"], files["acked"], files["failed"]) == (60, 60, 0)


def test_the_lines_of_a_failed_prepare_are_acked_once_by_the_replay_that_commits(
    tmp_path: Path,
) -> None:
    folder = corpus(tmp_path / "in")
    infos: list[Any] = []
    runner = start_driver(
        topo.new_key("part-acked-fault"),
        dict(FAST),
        word_count(folder),
        faults=_RaisesOnce(txid=2, at=3),
        on_transaction=infos.append,
    )
    try:
        runner.await_idle(60)
        files = runner.metrics()["components"]["files"]
    finally:
        runner.kill()
    prepares = [info for info in infos if str(info.action) == "PREPARE" and info.tuples]
    assert sum(info.acked for info in prepares if info.ok) == 60
    assert files["acked"] == 60
