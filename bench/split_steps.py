"""One split task's CPU a word: the examples' per-tuple split against its ``execute_batch`` form.

    python bench/split_steps.py --rounds 5 --python --json   # 500,000 words, median of 5 rounds

One task of the word count's split runs one PREPARE job (``run_stages``, no Spark) over
``--sentences`` Zipf sentences of ten words, its words fields-grouped into two count tasks (as
in ``bench/wordcount.py``); what it emits is sealed (pickled) as a job's output is, and left
there. The steps:

=========== ==================================================================================
step        the split
=========== ==================================================================================
tuple       ``examples/wordcount.py``'s ``SplitSentence``: ``collector.emit([word])`` a word
batch       ``bench/wordcount.py``'s ``BatchSplit``: one ``emit_columns`` a batch
tuple_py    ``--python``: ``tuple`` on the Python twins of the compiled parts (the row loop,
            the emit; ``bench/_native.py``), as an install without a C compiler runs it
=========== ==================================================================================

Each round runs every step once, in an order that alternates from round to round, and takes
the task's CPU seconds (``time.process_time``); every run's words are counted against the
input. As with ``bench/count_steps.py``, compare steps within one run.
"""

from __future__ import annotations

import argparse
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
from bench.count_steps import Sentences  # noqa: E402
from bench.wordcount import BatchSplit  # noqa: E402
from checkpoint import Action, CheckpointTaskProgram  # noqa: E402
from examples.wordcount import SplitSentence, WordCount  # noqa: E402
from examples.zipf import zipf_sentences  # noqa: E402
from statefulbolts import Fields, TopologyBuilder  # noqa: E402
from statefulbolts.runtime._plan import ExecutionPlan  # noqa: E402
from statefulbolts.runtime._program import TaskJob  # noqa: E402
from statefulbolts.runtime._records import TupleBatch  # noqa: E402
from statefulbolts.runtime._task import run_stages  # noqa: E402
from statefulbolts.topology import CHECKPOINT_STREAM_ID  # noqa: E402

STEPS = ("tuple", "batch")


def topology(step: str) -> Any:
    """sentences -> split (one task) -> count (two tasks, fields grouping); only split runs."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences())
    split = BatchSplit() if step == "batch" else SplitSentence()
    builder.set_bolt("split", split, 1).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def run(step: str, sentences: list[str], roots: list[int], words: int, name: str) -> float:
    """One PREPARE job of the split's task over ``sentences``; its CPU seconds."""
    top = topology(step)
    plan = ExecutionPlan(top)
    split, spout = plan.index["split"], plan.index["sentences"]
    checkpoints = next(c for c in plan.sources[split] if c != spout)
    job = TaskJob(
        plan, plan.layout([split]), CheckpointTaskProgram(Action.PREPARE, 0), name, {}, 0, 0
    )
    records = [
        TupleBatch(split, 0, spout, 0, plan.stream_index[spout]["default"], sentences, roots, None),
        TupleBatch(
            split,
            0,
            checkpoints,
            0,
            plan.stream_index[checkpoints][CHECKPOINT_STREAM_ID],
            [[0, "PREPARE"]],
            [0],
            None,
        ),
    ]
    blob = cloudpickle.dumps(top)
    gc.collect()
    started = time.process_time()
    out = run_stages(job, blob, (0,), 0, [(0, records)], in_worker=False)
    seconds = time.process_time() - started
    data = plan.stream_index[split]["default"]
    emitted = sum(
        len(r.column())
        for _, recs in out
        for r in recs
        if isinstance(r, TupleBatch) and r.stream == data and r.src == split
    )
    if emitted != words:
        msg = f"{step}: {emitted} words emitted, expected {words}"
        raise AssertionError(msg)
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Run the rounds; print the table (and the raw figures with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=50_000)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--python", action="store_true", help="also without the compiled parts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sentences = zipf_sentences(args.sentences, args.vocab)
    words = sum(len(s.split()) for s in sentences)
    roots = [i * 2654435761 % (1 << 62) + 1 for i in range(len(sentences))]
    names = [*STEPS, *(["tuple_py"] if args.python else [])]
    times: dict[str, list[float]] = {n: [] for n in names}
    loads = []
    for r in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for n in names if r % 2 == 0 else names[::-1]:
            label = f"split-{os.getpid()}-{r}-{n}"
            if n == "tuple_py":
                with python_only():
                    times[n].append(run("tuple", sentences, roots, words, label))
            else:
                times[n].append(run(n, sentences, roots, words, label))
    medians = {n: statistics.median(v) for n, v in times.items()}
    print(f"{words:,} words, {args.rounds} rounds, load {min(loads):.1f}-{max(loads):.1f}")
    for n in names:
        per, ratio = medians[n] / words * 1e6, medians[n] / medians["batch"]
        print(f"{n:9s} {medians[n]:.3f} s  {per:.3f} us/word  {ratio:.2f}x batch")
    if args.json:
        print(json.dumps({"words": words, "loads": loads, "seconds": times}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
