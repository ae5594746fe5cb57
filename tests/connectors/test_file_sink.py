"""``FileSink`` in real directories: its formats, its manifest, and what a crash at each step of
a publish leaves (a part half written, parts renamed but not committed, two publishers of one
commit racing, a stale driver, a manifest file that is not the sink's).

The contract every sink keeps is in ``test_sink_contract``; this file is what is the files' own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from providers import StateBackendError
from statefulbolts.connectors.files import (
    SINK_FORMAT_KEY,
    SINK_PATH_KEY,
    FileSink,
    read_committed_parts,
    read_committed_records,
)
from statefulbolts.connectors.sinks import (
    Lane,
    SinkConfigError,
    SinkFencedError,
    SinkMarkerError,
    SinkPublishError,
    SinkStageError,
    StagedBatch,
)
from statefulbolts.testing import make_tuple

CONF: dict[str, Any] = {"topology.name": "file-sink"}
LANE = Lane("file-sink", "publish", 0, 1)


def _sink(path: Path, **kwargs: Any) -> FileSink:
    sink = FileSink(path, **kwargs)
    sink.open(CONF, None)
    return sink


def _batch(sink: FileSink, txid: int, *rows: tuple[Any, ...]) -> StagedBatch:
    return StagedBatch(txid, [sink.stage(make_tuple(list(r), fields=["word", "n"])) for r in rows])


def _files(path: Path) -> list[str]:
    """Every file under ``path``, relative, sorted."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


# ------------------------------------------------------------------ formats
def test_json_lines_parts_hold_one_object_per_line(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    sink.publish(LANE, 2, [_batch(sink, 1, ("a", 1), ("b", 2)), _batch(sink, 2, ("ü", 3))], None)
    assert _files(tmp_path) == [
        "_manifest/file-sink.publish.0of1/00000000000000000002.json",
        "part-file-sink.publish.0of1-0000000001.jsonl",
        "part-file-sink.publish.0of1-0000000002.jsonl",
    ]
    first = (tmp_path / "part-file-sink.publish.0of1-0000000001.jsonl").read_bytes()
    assert first == b'{"word":"a","n":1}\n{"word":"b","n":2}\n'
    assert read_committed_records(tmp_path) == [
        {"word": "a", "n": 1},
        {"word": "b", "n": 2},
        {"word": "ü", "n": 3},
    ]
    entry = json.loads(
        (tmp_path / "_manifest/file-sink.publish.0of1/00000000000000000002.json").read_text()
    )
    assert entry["parts"] == [
        {"name": "part-file-sink.publish.0of1-0000000001.jsonl", "txid": 1, "records": 2,
         "bytes": len(first)},
        {"name": "part-file-sink.publish.0of1-0000000002.jsonl", "txid": 2, "records": 1,
         "bytes": len('{"word":"ü","n":3}\n'.encode())},
    ]  # fmt: skip
    assert (entry["txid"], entry["epoch"], entry["marker_before"]) == (2, None, None)


def test_csv_parts_have_a_header_and_quote_what_needs_it(tmp_path: Path) -> None:
    sink = _sink(tmp_path, format="csv", columns=["n", "word"])
    sink.publish(LANE, 1, [_batch(sink, 1, ("a,b", 1), ('say "hi"', None))], None)
    [part] = read_committed_parts(tmp_path)
    assert Path(part.path).read_bytes() == b'n,word\r\n1,"a,b"\r\n,"say ""hi"""\r\n'
    assert read_committed_records(tmp_path) == [
        {"n": "1", "word": "a,b"},
        {"n": "", "word": 'say "hi"'},
    ]


def test_parquet_parts_keep_the_column_types(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
    sink = _sink(tmp_path, format="parquet")
    sink.publish(LANE, 1, [_batch(sink, 1, ("a", 1), ("b", 2.5))], None)
    assert read_committed_records(tmp_path) == [{"word": "a", "n": 1.0}, {"word": "b", "n": 2.5}]
    [part] = read_committed_parts(tmp_path)
    assert part.path.endswith("-0000000001.parquet") and part.records == 2


def test_parquet_without_pyarrow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'statefulbolts\[parquet\]'"):
        FileSink("/nowhere", format="parquet")
    with pytest.raises(SinkConfigError, match=r"'sink\.files\.format'.*statefulbolts\[parquet\]"):
        FileSink("/nowhere").settings({SINK_FORMAT_KEY: "parquet"})


@pytest.mark.parametrize(
    ("sink", "values", "match"),
    [
        (FileSink("/x", fields=["word", "missing"]), ["a", 1], "the tuple has no field 'missing'"),
        (FileSink("/x", mapper=lambda t: ["a"]), ["a", 1], "not a mapping or None"),
        (FileSink("/x", format="csv"), ["a", [1]], "column 'n': CSV cannot hold a list"),
        (FileSink("/x"), ["a", {1, 2}], "format 'jsonl' cannot hold row"),
    ],
)
def test_a_row_the_format_cannot_hold_is_refused_at_stage(
    sink: FileSink, values: list[Any], match: str
) -> None:
    with pytest.raises(SinkStageError, match=match):
        sink.stage(make_tuple(values, fields=["word", "n"]))


def test_fields_and_a_mapper_choose_the_row(tmp_path: Path) -> None:
    only = FileSink(tmp_path, fields=["n"])
    assert only.stage(make_tuple(["a", 1], fields=["word", "n"])) == b'{"n":1}'
    mapped = FileSink(tmp_path, mapper=lambda t: None if t.values[1] == 0 else {"w": t.values[0]})
    assert mapped.stage(make_tuple(["a", 0], fields=["word", "n"])) is None
    assert mapped.stage(make_tuple(["a", 1], fields=["word", "n"])) == b'{"w":"a"}'


# ------------------------------------------------------------------ crashes inside a publish
class DiesAfterParts(FileSink):
    """Renames its parts into place, then dies before its manifest entry."""

    def _commit(self, root: str, entry: Any) -> bool:
        msg = "injected: killed after the parts, before the entry"
        raise SinkPublishError(msg)


class DiesInAPart(FileSink):
    """Dies while writing its first part, leaving the temporary file."""

    def _write_parts(self, root: str, lane: Lane, due: Any) -> Any:
        Path(root).mkdir(parents=True, exist_ok=True)
        (Path(root) / f".part-{lane.qualified()}-0000000001.jsonl.0123abcd.tmp").write_bytes(
            b'{"word":"half'
        )
        msg = "injected: killed while writing a part"
        raise SinkPublishError(msg)


def test_an_orphan_part_is_invisible_and_the_next_publish_commits_it_once(tmp_path: Path) -> None:
    batches = [_batch(_sink(tmp_path), 1, ("a", 1), ("b", 1))]
    with pytest.raises(SinkPublishError, match="before the entry"):
        _died(DiesAfterParts, tmp_path, batches)
    orphan = tmp_path / "part-file-sink.publish.0of1-0000000001.jsonl"
    assert orphan.exists()  # renamed into place, and no entry lists it
    assert read_committed_parts(tmp_path) == [] and read_committed_records(tmp_path) == []
    sink = _sink(tmp_path)
    assert sink.published(LANE) is None
    result = sink.publish(LANE, 1, batches, None)
    assert (result.published, result.records) == ((1,), 2)
    assert [Path(p.path) for p in read_committed_parts(tmp_path)] == [orphan]
    assert read_committed_records(tmp_path) == [{"word": "a", "n": 1}, {"word": "b", "n": 1}]


def _died(kind: type[FileSink], path: Path, batches: list[StagedBatch]) -> None:
    sink = kind(path)
    sink.open(CONF, None)
    sink.publish(LANE, 1, batches, None)


def test_a_part_half_written_is_never_read(tmp_path: Path) -> None:
    batches = [_batch(_sink(tmp_path), 1, ("a", 1))]
    with pytest.raises(SinkPublishError, match="while writing a part"):
        _died(DiesInAPart, tmp_path, batches)
    assert read_committed_parts(tmp_path) == []
    _sink(tmp_path).publish(LANE, 1, batches, None)
    assert read_committed_records(tmp_path) == [{"word": "a", "n": 1}]
    assert [f for f in _files(tmp_path) if f.endswith(".tmp")] == [
        ".part-file-sink.publish.0of1-0000000001.jsonl.0123abcd.tmp"  # left, and never read
    ]


def test_a_replayed_commit_writes_no_file(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    batches = [_batch(sink, 3, ("a", 1))]
    sink.publish(LANE, 3, batches, 2)
    before = {f: (tmp_path / f).stat().st_mtime_ns for f in _files(tmp_path)}
    again = sink.publish(LANE, 3, batches, 2)
    assert (again.published, again.marker_before) == ((), 3)
    assert {f: (tmp_path / f).stat().st_mtime_ns for f in _files(tmp_path)} == before


def test_of_two_publishers_racing_one_commit_the_first_entry_stays(tmp_path: Path) -> None:
    """Both read no marker, both write the parts (the same name, the same records), one entry."""

    class Late(FileSink):
        def _commit(self, root: str, entry: Any) -> bool:
            _sink(tmp_path).publish(LANE, 1, batches, 7)  # the other one gets there first
            return super()._commit(root, entry._replace(epoch=6))

    batches = [_batch(_sink(tmp_path), 1, ("a", 1))]
    late = Late(tmp_path)
    late.open(CONF, None)
    result = late.publish(LANE, 1, batches, 6)
    assert (result.published, result.marker_before) == ((), 1)
    entries = list((tmp_path / "_manifest" / LANE.qualified()).iterdir())
    assert [json.loads(e.read_text())["epoch"] for e in entries] == [7]
    assert read_committed_records(tmp_path) == [{"word": "a", "n": 1}]


def test_a_stale_driver_is_refused_and_the_entry_keeps_the_highest_epoch(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    sink.publish(LANE, 1, [_batch(sink, 1, ("a", 1))], 4)
    sink.publish(LANE, 2, [_batch(sink, 2, ("b", 1))], None)  # a tool with no lease
    with pytest.raises(SinkFencedError, match=r"epoch 3 is below the stored 4 \(manifest of"):
        sink.publish(LANE, 3, [_batch(sink, 3, ("c", 1))], 3)
    last = tmp_path / "_manifest" / LANE.qualified() / f"{2:020d}.json"
    assert json.loads(last.read_text())["epoch"] == 4
    assert [r["word"] for r in read_committed_records(tmp_path)] == ["a", "b"]


def test_a_manifest_file_that_is_not_the_sink_s_is_named(tmp_path: Path) -> None:
    lane_dir = tmp_path / "_manifest" / LANE.qualified()
    lane_dir.mkdir(parents=True)
    (lane_dir / f"{5:020d}.json").write_text('{"hello": 1}')
    with pytest.raises(SinkMarkerError, match=r"00000000000000000005\.json is not a FileSink"):
        _sink(tmp_path).published(LANE)


def test_compaction_folds_entries_and_readers_see_each_part_once(tmp_path: Path) -> None:
    sink = _sink(tmp_path, compact_every=3)
    for txid in range(1, 8):
        sink.publish(LANE, txid, [_batch(sink, txid, (f"w{txid}", txid))], None)
    names = sorted(p.name for p in (tmp_path / "_manifest" / LANE.qualified()).iterdir())
    assert names == [f"{6:020d}.compact.json", f"{7:020d}.json"]
    assert sink.published(LANE) == 7
    assert [r["n"] for r in read_committed_records(tmp_path)] == [1, 2, 3, 4, 5, 6, 7]
    # A compaction that died before deleting what it folded: the leftovers change nothing.
    (tmp_path / "_manifest" / LANE.qualified() / f"{2:020d}.json").write_bytes(
        (tmp_path / "_manifest" / LANE.qualified() / f"{6:020d}.compact.json").read_bytes()
    )
    assert [r["n"] for r in read_committed_records(tmp_path)] == [1, 2, 3, 4, 5, 6, 7]


def test_lane_markers_lists_the_component_s_lanes(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    for task, txid in ((0, 3), (1, 5)):
        lane = Lane("file-sink", "publish", task, 2)
        sink.publish(lane, txid, [_batch(sink, txid, ("a", 1))], None)
    sink.publish(Lane("file-sink", "other", 0, 1), 1, [_batch(sink, 1, ("a", 1))], None)
    assert sink.lane_markers(CONF, "file-sink", "publish") == {"0of2": 3, "1of2": 5}


# ------------------------------------------------------------------ settings and faults
def test_check_config_makes_the_directory_and_refuses_one_it_cannot_write(tmp_path: Path) -> None:
    FileSink().check_config({SINK_PATH_KEY: str(tmp_path / "new" / "out")})
    assert (tmp_path / "new" / "out" / "_manifest").is_dir()
    assert _files(tmp_path) == []  # the probes are gone
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(SinkConfigError, match=r"directory '.*a-file/out' cannot be written"):
        FileSink(tmp_path / "a-file" / "out").check_config({})
    with pytest.raises(SinkConfigError, match="no directory: give the sink a path"):
        FileSink().check_config({})
    with pytest.raises(SinkConfigError, match=r"config 'sink\.files\.format'"):
        FileSink(tmp_path).check_config({SINK_FORMAT_KEY: "xml"})


def test_a_file_system_error_while_publishing_is_an_outage(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    sink = _sink(tmp_path / "a-file" / "out")
    with pytest.raises(StateBackendError, match=r"lane 0of1 in '.*a-file/out': the file system"):
        sink.publish(LANE, 1, [_batch(sink, 1, ("a", 1))], None)


def test_writes_are_committed_at_once_in_order(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    sink.write([sink.stage(make_tuple(["a", 1], fields=["word", "n"]))])
    sink.write([sink.stage(make_tuple(["b", 2], fields=["word", "n"]))])
    assert [r["word"] for r in read_committed_records(tmp_path)] == ["a", "b"]
    assert {p.lane for p in read_committed_parts(tmp_path)} == {"_writes"}
    assert os.listdir(tmp_path / "_manifest") == ["_writes"]
