"""Where a per-tuple counting bolt's time goes: one count task, its ``execute`` a step at a time.

    python bench/count_steps.py --rounds 5 --json     # 500,000 words, median of 5 rounds

One task of a word count's counter (a ``StatefulBolt``, in-memory state) runs one PREPARE job
(``run_stages``, no Spark, no pickling of its output: its ``(word, count)`` pairs go on to a
chained sink, which runs after it, as in one Spark task) over ``--words`` Zipf words from one
split task, ten words to a root as the spout's sentences give them. The sink takes the pairs
as the word count bench's do: a tuple at a time, or in one batch for the ``batch`` step.
The bolt's ``execute`` grows a step at a time:

====== =====================================================================================
step   ``execute`` does
====== =====================================================================================
ack    ``collector.ack(tuple)``: the row loop, the ``Tuple``, the ack and its settling
value  + ``word = tuple.get_value(0)``
state  + ``state.put(word, state.get(word, 0) + 1)``
emit   + ``collector.emit([word, count], anchors=tuple)``: the word count
batch  the ``execute_batch`` form (``get_many``, ``put_many``, ``emit_columns``)
====== =====================================================================================

Each round runs every step once, in an order that alternates from round to round, and takes
the task's CPU seconds (``time.process_time``); the table gives each step's median and, per
word, what the step adds to the one before. ``--reference`` runs the per-tuple steps through the
runtime's reference loop too (``<step>_ref``); ``--python`` runs them on the Python twins of the
compiled parts (``<step>_py``: the row loop, the state's ``get`` and ``put``, the emit; see
``bench/_native.py``), as an install without a C compiler does. The counts are checked after
every run.

Only CPU time is measured, so the figures hold on a busy machine better than wall time; they
still move with the load (caches, frequency): compare steps within one run.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import cloudpickle  # noqa: E402

from bench._native import python_only  # noqa: E402
from checkpoint import Action, CheckpointTaskProgram  # noqa: E402
from examples.zipf import zipf_sentences  # noqa: E402
from providers import InMemoryKeyValueStateProvider, KeyValueState, StateFactory  # noqa: E402
from statefulbolts import (  # noqa: E402
    BasicBolt,
    Fields,
    Spout,
    StatefulBolt,
    TopologyBuilder,
)
from statefulbolts.runtime._plan import ExecutionPlan  # noqa: E402
from statefulbolts.runtime._program import TaskJob  # noqa: E402
from statefulbolts.runtime._records import TupleBatch  # noqa: E402
from statefulbolts.runtime._rows import REFERENCE_KEY  # noqa: E402
from statefulbolts.runtime._task import run_stages  # noqa: E402
from statefulbolts.topology import CHECKPOINT_STREAM_ID  # noqa: E402

STEPS = ("ack", "value", "state", "emit", "batch")


class Sentences(Spout):
    """Never runs: the job is given its input directly."""

    def next_tuple(self) -> None:
        """Nothing."""

    def declare_output_fields(self, declarer: Any) -> None:
        """``sentence``."""
        declarer.declare(Fields("sentence"))


class Split(BasicBolt):
    """The count's source (its tuples are given to the job directly; this never runs)."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002, D102
        raise NotImplementedError

    def declare_output_fields(self, declarer: Any) -> None:
        """``word``."""
        declarer.declare(Fields("word"))


class _Count(StatefulBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.counts = state

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))


class AckOnly(_Count):
    """Step ``ack``."""

    def execute(self, tuple: Any) -> None:  # noqa: A002, D102
        self.collector.ack(tuple)


class Value(_Count):
    """Step ``value``."""

    def execute(self, tuple: Any) -> None:  # noqa: A002, D102
        tuple.get_value(0)
        self.collector.ack(tuple)


class State(_Count):
    """Step ``state``."""

    def execute(self, tuple: Any) -> None:  # noqa: A002, D102
        word = tuple.get_value(0)
        self.counts.put(word, self.counts.get(word, 0) + 1)
        self.collector.ack(tuple)


class Emit(_Count):
    """Step ``emit``: the per-tuple word count of ``bench/wordcount.py --api tuple``."""

    def execute(self, tuple: Any) -> None:  # noqa: A002, D102
        word = tuple.get_value(0)
        count = self.counts.get(word, 0) + 1
        self.counts.put(word, count)
        self.collector.emit([word, count], anchors=tuple)
        self.collector.ack(tuple)


class Batch(_Count):
    """Step ``batch``: ``bench/wordcount.py``'s ``EmittingWordCount.execute_batch``."""

    def execute(self, tuple: Any) -> None:  # noqa: A002, D102
        raise NotImplementedError

    def execute_batch(self, batch: Any, collector: Any) -> None:  # noqa: D102
        column = batch.column(0)
        state = self.counts
        distinct = list(dict.fromkeys(column))
        counts = dict(zip(distinct, state.get_many(distinct, 0), strict=True))
        after: list[int] = []
        append = after.append
        for word in column:
            count = counts[word] + 1
            counts[word] = count
            append(count)
        state.put_many(counts.items())
        collector.emit_columns([column, after])


class Sink(BasicBolt):
    """Chained to the count: takes its pairs a tuple at a time and does nothing else."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002, D102
        """Nothing."""

    def declare_output_fields(self, declarer: Any) -> None:  # noqa: D102
        """Nothing."""


class BatchSink(Sink):
    """The sink of the ``batch`` step: takes the pairs in one batch."""

    def execute_batch(self, batch: Any, collector: Any) -> None:  # noqa: D102
        """Nothing."""


BOLTS = {"ack": AckOnly, "value": Value, "state": State, "emit": Emit, "batch": Batch}


def topology(step: str) -> Any:
    """sentences -> split -> count (``BOLTS[step]``) -> sink, one task each, the sink chained."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences())
    builder.set_bolt("split", Split(), 1).shuffle_grouping("sentences")
    builder.set_bolt("count", BOLTS[step](), 1).fields_grouping("split", Fields("word"))
    sink = BatchSink() if step == "batch" else Sink()
    builder.set_bolt("sink", sink, 1).local_or_shuffle_grouping("count")
    return builder.create_topology()


def run(step: str, words: list[str], roots: list[int], reference: bool, name: str) -> float:
    """One PREPARE job of the count's task over ``words``; its CPU seconds. Checks the counts."""
    top = topology(step)
    plan = ExecutionPlan(top)
    count, src = plan.index["count"], plan.index["split"]
    layout = plan.layout([count, plan.index["sink"]], chain=True)
    conf = {REFERENCE_KEY: True} if reference else {}
    job = TaskJob(plan, layout, CheckpointTaskProgram(Action.PREPARE, 0), name, conf, 0, 0)
    data = plan.stream_index[src]["default"]
    cp = plan.stream_index[src][CHECKPOINT_STREAM_ID]
    records = [
        TupleBatch(count, 0, src, 0, data, list(words), roots, None),
        TupleBatch(count, 0, src, 0, cp, [[0, "PREPARE"]], [0], None),
    ]
    blob = cloudpickle.dumps(top)
    gc.collect()
    started = time.process_time()
    out = run_stages(job, blob, (0, 1), 0, [(0, records)], in_worker=False)
    seconds = time.process_time() - started
    assert out
    if step in ("state", "emit", "batch"):
        state = StateFactory.get_state(f"{name}/count-0", {})
        assert isinstance(state, KeyValueState)
        state.commit(0)
        expected = collections.Counter(words)
        got = dict(state)
        if got != expected:
            msg = f"{step}: wrong counts ({len(got)} keys, expected {len(expected)})"
            raise AssertionError(msg)
    del out
    InMemoryKeyValueStateProvider.drop(name)
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Run the rounds; print the table (and the raw figures with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--words", type=int, default=500_000)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--reference", action="store_true", help="also the reference loop")
    parser.add_argument("--python", action="store_true", help="also without the compiled parts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    words = " ".join(zipf_sentences(-(-args.words // 10), args.vocab)).split()[: args.words]
    roots = [(i // 10) * 2654435761 % (1 << 62) + 1 for i in range(len(words))]
    steps = args.steps.split(",")
    variants = [v for v, on in (("_ref", args.reference), ("_py", args.python)) if on]
    names = steps + [f"{s}{v}" for v in variants for s in steps if s != "batch"]
    times: dict[str, list[float]] = {n: [] for n in names}
    loads = []
    for r in range(args.rounds):
        loads.append(os.getloadavg()[0])
        order = names if r % 2 == 0 else names[::-1]
        for n in order:
            step, _, variant = n.partition("_")
            label = f"steps-{os.getpid()}-{r}-{n}"
            if variant == "py":
                with python_only():
                    times[n].append(run(step, words, roots, False, label))
            else:
                times[n].append(run(step, words, roots, variant == "ref", label))
    medians = {n: statistics.median(v) for n, v in times.items()}
    print(f"{len(words):,} words, {args.rounds} rounds, load {min(loads):.1f}-{max(loads):.1f}")
    before = 0.0
    for n in names:
        if n.partition("_")[0] == steps[0]:
            before = 0.0  # each variant's first step adds to nothing
        added = (
            ""
            if n.startswith("batch")
            else f"  + {(medians[n] - before) / len(words) * 1e6:.3f} us"
        )
        per = medians[n] / len(words) * 1e6
        print(f"{n:10s} {medians[n]:.3f} s  {per:.3f} us/word{added}")
        if not n.startswith("batch"):
            before = medians[n]
    if args.json:
        print(json.dumps({"words": len(words), "loads": loads, "seconds": times}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
