"""A ``spark-submit`` application: the Redis word count through ``StormSubmitter``.

For ``tests/cli/test_cluster_submit.py``::

    spark-submit --master spark://127.0.0.1:7077 [--conf ...] tests/submit_app.py \
        --redis-port 6379 --sentences 1000 --name wc-submit

Its split bolt is a class of this file, which ``spark-submit`` runs as ``__main__``: cloudpickle
carries it to the executors by value (its base class, from ``examples.wordcount``, by
reference: ``examples`` is shipped). It prints JSON lines on stdout, each with ``event`` and
``t``: ``ready`` (the master and settings ``spark-submit`` gave, and what the executors see
before anything was shipped), ``tx`` per transaction, ``done`` (what ``StormSubmitter.wait``
returned, the components' counters, what the executors see after), or ``error`` (exit 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

# The repository's examples, which an install carries only as statefulbolts.examples.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from executor_probe import executor_views  # noqa: E402
from outage_topologies import redis_conf  # noqa: E402

from examples.wordcount import SentenceSpout, SplitSentence, WordCount  # noqa: E402
from statefulbolts import Fields, StormSubmitter, TopologyBuilder  # noqa: E402
from statefulbolts._output import print_event  # noqa: E402


class AppSplit(SplitSentence):
    """The word count's split, defined in ``__main__`` (no executor has this file)."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        super().execute(tuple, collector)


def say(event: str, **fields: Any) -> None:
    print_event({"event": event, "t": time.time(), **fields})


def build(sentences: int) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(sentences), 1)
    builder.set_bolt("split", AppSplit(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis-port", type=int, required=True)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--name", default="wc-submit")
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    conf = redis_conf(args.redis_port, **{"topology.max.spout.pending": 300})
    try:
        handle = StormSubmitter.submit_topology(
            args.name,
            conf,
            build(args.sentences),
            on_transaction=lambda info: say("tx", **info.as_dict()),
        )
        spark = SparkSession.getActiveSession()
        assert spark is not None
        sc = spark.sparkContext
        say(
            "ready",
            main=__name__,
            master=sc.master,
            app_name=sc.appName,
            python=sys.executable,
            executor_python=sc.pythonExec,
            views=executor_views(sc),
        )
        outcome = StormSubmitter.wait(args.timeout, until_idle=True)
        metrics = handle.metrics()
        say(
            "done",
            outcome=outcome,
            components=metrics["components"],
            transactions=len(metrics["transactions"]),
            views=executor_views(sc),
        )
        return 0
    except Exception as exc:  # noqa: BLE001 - reported to the test as one line
        say("error", error=f"{type(exc).__name__}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
