"""Image shipping on real Spark: jobs carry descriptors, workers keep their images, and a failed
job's writes never reach a later transaction (``statefulbolts/runtime/_images.py``)."""

from __future__ import annotations

import json
import os
import pickle
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
import tx_topologies as tx

from examples.wordcount import SentenceSpout, SplitSentence, WordCount, expected_counts
from providers import InMemoryKeyValueStateProvider
from statefulbolts import (
    Fields,
    MemoryTransactionalSpout,
    TopologyBuilder,
    TransactionalTopologyBuilder,
)
from statefulbolts.runtime import _spark_engine
from statefulbolts.runtime._held_images import loads
from statefulbolts.runtime._images import INLINE_BYTES, ShippedImage
from statefulbolts.runtime._local_files import LocalFile
from statefulbolts.runtime._spark_engine import SparkEngine as Engine

pytestmark = pytest.mark.spark

TIMEOUT = 240
SENTENCES = 600


class LoggedCount(WordCount):
    """The word count's bolt; each task logs how its worker installed images so far."""

    def __init__(self, path: str) -> None:
        self.path = path

    def init_state(self, state: Any) -> None:
        super().init_state(state)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"pid": os.getpid(), **loads()}) + "\n")


def _wordcount(path: str) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(SENTENCES), 1)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", LoggedCount(path), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def _seed(name: str, keys: int) -> int:
    """Commit ``keys`` filler keys over the two count tasks; the bytes of the larger image."""
    provider = InMemoryKeyValueStateProvider()
    entries = {f"seed-{i}": i for i in range(keys)}
    names = topo.seed_keyed_state({}, name, 2, entries)
    return max(len(provider.export_image(namespace)) for namespace in names)


class _Sizer(pickle.Pickler):
    """Pickles what a job carries with a broadcast as its id only, as PySpark does."""

    def persistent_id(self, obj: Any) -> Any:
        from pyspark.core.broadcast import Broadcast

        return 0 if isinstance(obj, Broadcast) else None


def _size(images: Any) -> int:
    out = BytesIO()
    _Sizer(out).dump(dict(images))
    return len(out.getvalue())


def _run(cluster: Any, monkeypatch: Any, tmp_path: Path, keys: int) -> dict[str, Any]:
    name = topo.new_key("imgship")
    whole = _seed(name, keys)
    path = str(tmp_path / f"loads-{keys}.jsonl")
    shipped: list[Any] = []
    submit = Engine.submit

    def recording(engine: Engine, spec: Any) -> Any:
        if engine.name == name and spec.images is not None:
            shipped.append(dict(spec.images))
        return submit(engine, spec)

    monkeypatch.setattr(Engine, "submit", recording)
    conf = {"topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 40}
    handle = cluster.submit_topology(name, conf, _wordcount(path))
    handle.await_idle(TIMEOUT)
    counts = handle.read_state("count")
    snapshots = handle.runner.images.snapshots
    handle.kill()
    monkeypatch.setattr(Engine, "submit", submit)
    InMemoryKeyValueStateProvider.drop(f"{name}/")
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return {
        "whole": whole,
        "shipped": shipped,
        "counts": counts,
        "snapshots": snapshots,
        "lines": lines,
    }


def _snapshot_loads(lines: list[dict[str, Any]]) -> int:
    """Snapshots the workers loaded in the run, at most (the first task of each may have)."""
    per_pid: dict[int, list[int]] = {}
    for line in lines:
        per_pid.setdefault(line["pid"], []).append(line.get("snapshot", 0))
    return sum(seen[-1] - seen[0] + 1 for seen in per_pid.values())


def test_jobs_carry_descriptors_not_images_whatever_the_state_size(
    cluster: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    small = _run(cluster, monkeypatch, tmp_path, 1_000)
    large = _run(cluster, monkeypatch, tmp_path, 200_000)
    expected = expected_counts(SENTENCES)
    for run, keys in ((small, 1_000), (large, 200_000)):
        counts = run["counts"]
        assert {w: counts[w] for w in expected} == dict(expected)
        assert len(counts) == keys + len(expected)
        assert all(counts[f"seed-{i}"] == i for i in range(0, keys, 997))
        jobs = run["shipped"]
        assert len(jobs) >= 10  # INITSTATE, then PREPARE and COMMIT per transaction
        assert all(isinstance(i, ShippedImage) for job in jobs for i in job.values())
    assert large["whole"] > 1_500_000  # what each job carried per task before
    small_sizes = [_size(job) for job in small["shipped"]]
    large_sizes = [_size(job) for job in large["shipped"]]
    # A job's images weigh what its deltas' list does, not what the state does: the deltas that
    # travel inline (up to INLINE_BYTES a namespace, two namespaces here) and the descriptors.
    assert max(large_sizes) < 2 * INLINE_BYTES + 16_000, large_sizes
    assert max(large_sizes) < max(small_sizes) + 8_000, (small_sizes, large_sizes)
    # The large state was snapshotted once per namespace: its deltas never outgrew it.
    assert large["snapshots"] == 2
    # And the workers read a snapshot about once each, not once per task.
    lines = large["lines"]
    assert len(lines) >= 10
    pids = {line["pid"] for line in lines}
    assert _snapshot_loads(lines) <= 2 * len(pids), lines


class PaddedCount(WordCount):
    """The word count's bolt with a 10 KB pad beside each word: every task's log is large."""

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts.put(f"pad-{tuple.get_value(0)}", "x" * 10_000)
        super().execute(tuple)


def test_on_a_local_master_large_images_and_logs_go_as_files(
    cluster: Any, monkeypatch: Any
) -> None:
    """No Spark broadcast and no large log in a task's result: the driver and its workers share
    the machine's files. Every file is read back, and none is left once the topology ends."""
    name = topo.new_key("imgfiles")
    _seed(name, 100_000)  # a snapshot of some 1.5 MB a task
    shipped: list[Any] = []
    spilled: list[LocalFile] = []
    submit, take = Engine.submit, _spark_engine.take_spilled

    def recording(engine: Engine, spec: Any) -> Any:
        if engine.name == name and spec.images is not None:
            shipped.append(dict(spec.images))
        return submit(engine, spec)

    def taking(reports: list[Any]) -> None:
        spilled.extend(c for r in reports for _, c in r.changes if isinstance(c, LocalFile))
        take(reports)

    monkeypatch.setattr(Engine, "submit", recording)
    monkeypatch.setattr(_spark_engine, "take_spilled", taking)
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(SENTENCES), 1)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", PaddedCount(), 2).fields_grouping("split", Fields("word"))
    conf = {"topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 40}
    handle = cluster.submit_topology(name, conf, builder.create_topology())
    handle.await_idle(TIMEOUT)
    counts = handle.read_state("count")
    handle.kill()
    InMemoryKeyValueStateProvider.drop(f"{name}/")
    expected = expected_counts(SENTENCES)
    assert {w: counts[w] for w in expected} == dict(expected)
    assert all(counts[f"pad-{w}"] == "x" * 10_000 for w in expected)
    assert all(counts[f"seed-{i}"] == i for i in range(0, 100_000, 997))
    # The snapshots and the deltas past the inline budget went as files...
    refs = [
        ref
        for job in shipped
        for image in job.values()
        for ref in (image.snapshot, *(d.changes for d in image.deltas))
        if not isinstance(ref, bytes)
    ]
    assert refs and all(isinstance(ref, LocalFile) for ref in refs), refs
    # ... and so did the tasks' large logs, each read back and deleted by the driver.
    assert spilled
    assert not [f.path for f in spilled if os.path.exists(f.path)]
    # Nothing of the run is left in PySpark's folder once it ended.
    prefixes = {os.path.basename(f.path).rsplit("-", 2)[0] for f in [*refs, *spilled]}
    folder = Path(spilled[0].path).parent
    assert not [p for p in folder.iterdir() if any(p.name.startswith(x) for x in prefixes)]


FAILING = (3, 4, 5, 6, 7)


def test_a_failed_batchs_writes_stay_out_of_its_replay(cluster: Any, tmp_path: Path) -> None:
    """A committer writes its map, then fails the batch: its worker's copy holds writes the
    driver never gets. The replay, wherever it runs, must start from the driver's image: a
    worker trusting its copy would find the txid already stamped there and skip it for good.
    (Which worker runs the replay is Spark's choice, so five txids fail once each.)"""
    sentences = [" ".join(f"w{(p * 7 + i) % 5}" for i in range(8)) for p in range(4)]
    data = tx.words_data(sentences)
    log = tx.Log(tmp_path)
    spout = MemoryTransactionalSpout(data, ["word"], 1)  # 4 words a batch: 8 batches
    b = TransactionalTopologyBuilder(topo.new_key("fail-commit"), "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("kept", tx.CountCommitter(log)).global_grouping("ones")
    fail = tx.FailOnce(tmp_path, txids=FAILING)
    b.set_committer_bolt("count", tx.CountCommitter(log, fail=fail)).global_grouping("ones")
    conf = {"topology.max.spout.pending": 1, "topology.state.checkpoint.interval.ms": 100}
    handle = cluster.submit_topology(topo.new_key("tx"), conf, b.build_topology())
    handle.await_idle(TIMEOUT)
    assert handle.read_state("count") == tx.total(data)
    assert handle.read_state("kept") == tx.total(data)
    failed = [(t["txid"], t["action"]) for t in handle.metrics()["transactions"] if not t["ok"]]
    assert failed == [(t, "COMMIT") for t in FAILING]
    for txid in FAILING:  # the failed attempt wrote its map, then the replay committed
        finished = tx.events(tmp_path, kind="finish", component="count", txid=txid)
        assert len({e["attempt"] for e in finished}) == 2
