"""Large bytes as files between the driver and its workers on a local master
(``statefulbolts/runtime/_local_files.py``): what goes as a file, what is read back, what is
deleted."""

from __future__ import annotations

import os
from pathlib import Path

from statefulbolts.runtime._local_files import (
    SPILL_BYTES,
    LocalFile,
    LocalFiles,
    spill_changes,
    take_spilled,
)
from statefulbolts.runtime._records import TaskMetrics, TaskReport


def _report(changes: tuple[tuple[str, object], ...]) -> TaskReport:
    return TaskReport(0, 0, TaskMetrics(0, 0, 0, 0, 0.0), (), changes)  # type: ignore[arg-type]


def test_a_large_change_log_goes_as_a_file_and_comes_back_whole(tmp_path: Path) -> None:
    files = LocalFiles(str(tmp_path))
    large, small = os.urandom(SPILL_BYTES + 1), b"small log"
    sent = spill_changes([("ns/a", large), ("ns/b", small)], files)
    assert isinstance(sent[0][1], LocalFile) and sent[1][1] == small
    assert len(list(tmp_path.iterdir())) == 1
    reports = [_report(sent), _report((("ns/c", small),))]
    take_spilled(reports)
    assert reports[0].changes == (("ns/a", large), ("ns/b", small))
    assert reports[1].changes == (("ns/c", small),)
    assert list(tmp_path.iterdir()) == []  # read back once, then deleted


def test_without_a_folder_every_log_stays_in_the_result(tmp_path: Path) -> None:
    large = os.urandom(SPILL_BYTES * 2)
    assert spill_changes([("ns/a", large)], None) == (("ns/a", large),)


def test_a_runs_sweep_deletes_its_own_files_only(tmp_path: Path) -> None:
    mine, other = LocalFiles(str(tmp_path)), LocalFiles(str(tmp_path))
    left = [mine.broadcast(b"x" * 10) for _ in range(3)]
    kept = other.broadcast(b"y")
    left[0].destroy()
    left[0].destroy()  # twice: nothing to delete is no error
    mine.sweep()
    assert [p.name for p in tmp_path.iterdir()] == [Path(kept.path).name]
    assert kept.value == b"y"
