"""The driver of ``tests/cli/test_cluster.py``: the Redis word count on a Spark standalone master.

The sentences come from a driver spout (``--source sentences``, the default), or a third each
from three kinds of source (``--source mixed``): the driver spout ``sentences`` emits the first
third; the driver first writes sentence ``i`` of the second third onto Redis stream
``<name>:in:<i % streams>`` (``--streams``), read on the executors by the
``PartitionedRedisStreamSpout`` ``streams``, and sentence ``i`` of the last third as a line of
file ``<i % streams>.txt`` in ``--files-dir``, read on the executors by the ``DirectorySpout``
``files`` (both of ``--spout-parallelism`` tasks). Either way the counts are those of
``examples.wordcount.expected_counts``.

It runs in its own process because the test session already has a ``local[2]`` SparkSession and
a process can hold only one. It prints one JSON object per line on stdout, each with ``event``
and ``t`` (``time.time()``, so the test can order lines against what it did itself):

- ``ready``: the session is up; ``executors`` registered, the effective ``driver_host`` and
  ``bind_address`` (with ``--probe``, ``views``: what the executors' Python sees before
  anything was shipped, see ``executor_probe``).
- ``tx``: one finished transaction (``TransactionInfo.as_dict()``).
- ``done``: the topology is idle; ``transactions``, ``failed_transactions``, ``components``,
  ``positions`` (the partitioned spouts' positions, by component, then partition)
  (with ``--probe``, ``views`` again; with ``--ui-port``, ``jobs``: every Spark job's
  description and group from the driver's REST API).
- ``error``: it stopped with an error (exit status 1).

By default executors import this checkout (``PYTHONPATH``) with this Python;
``--executor-python`` runs them on another Python and gives them no path at all: they get the
project only from what the driver ships.

Usage::

    python tests/cluster_driver.py --master spark://127.0.0.1:7077 --redis-port 6379 \
        --sentences 4000 --name wc-cluster
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
for _path in (str(TESTS), str(ROOT)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from executor_probe import executor_views, spark_jobs  # noqa: E402
from outage_topologies import redis_conf  # noqa: E402

from examples.corpus import sentence  # noqa: E402
from examples.wordcount import SentenceSpout, SplitSentence, WordCount, build  # noqa: E402
from statefulbolts import (  # noqa: E402
    DirectorySpout,
    Fields,
    LocalCluster,
    PartitionedRedisStreamSpout,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts._output import print_event  # noqa: E402

LOOPBACK = "127.0.0.1"


def say(event: str, **fields: Any) -> None:
    print_event({"event": event, "t": time.time(), **fields})


def spark_conf(
    executor_memory: str,
    executor_python: str | None = None,
    ui_port: int | None = None,
    java_options: str | None = None,
) -> dict[str, str]:
    """Everything on loopback; executors import this checkout with this venv's Python, or
    run ``executor_python`` with no path of ours; the driver's UI on ``ui_port`` if given;
    ``java_options`` for the driver's and the executors' JVMs."""
    conf = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.executorEnv.PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
        "spark.executorEnv.SPARK_LOCAL_IP": LOOPBACK,
        "spark.pyspark.python": sys.executable,
        "spark.task.maxFailures": "4",
        "spark.executor.memory": executor_memory,
        "spark.driver.memory": "768m",
    }
    if executor_python is not None:
        del conf["spark.executorEnv.PYTHONPATH"]
        conf["spark.pyspark.python"] = executor_python
    if ui_port is not None:
        conf.update({"spark.ui.enabled": "true", "spark.ui.port": str(ui_port)})
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
        conf["spark.executor.extraJavaOptions"] = java_options
    return conf


def stream_keys(name: str, streams: int) -> list[str]:
    """The input streams of ``--source mixed``."""
    return [f"{name}:in:{k}" for k in range(streams)]


def write_streams(port: int, keys: list[str], first: int, stop: int) -> None:
    """Sentence ``i`` (``first <= i < stop``) onto stream ``keys[i % len(keys)]``, one pipeline."""
    import redis

    client = redis.Redis(host=LOOPBACK, port=port)
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(first, stop):
            pipe.xadd(keys[i % len(keys)], {"sentence": sentence(i)})
        pipe.execute()
    finally:
        client.close()


def write_files(folder: Path, files: int, first: int, stop: int) -> None:
    """Sentence ``i`` (``first <= i < stop``) as a line of ``folder/<i % files>.txt``."""
    folder.mkdir(parents=True, exist_ok=True)
    lines: list[list[str]] = [[] for _ in range(files)]
    for i in range(first, stop):
        lines[i % files].append(sentence(i) + "\n")
    for k, chunk in enumerate(lines):
        (folder / f"{k}.txt").write_text("".join(chunk), encoding="utf-8")


def mixed_build(
    port: int, keys: list[str], folder: Path, third: int, spouts: int, parallelism: int
) -> StormTopology:
    """``examples.wordcount``'s topology, its first ``third`` sentences from the driver spout
    ``sentences``, the others read on the executors: from ``keys`` by the spout ``streams``,
    from the files of ``folder`` by the spout ``files``."""
    streams = PartitionedRedisStreamSpout(keys, redis_url=f"redis://{LOOPBACK}:{port}/0")
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(third), 1)
    builder.set_spout("streams", streams, spouts)
    builder.set_spout("files", DirectorySpout(str(folder), field="sentence"), spouts)
    split = builder.set_bolt("split", SplitSentence(), parallelism)
    for source in ("sentences", "streams", "files"):
        split.shuffle_grouping(source)
    builder.set_bolt("count", WordCount(), parallelism).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def executor_count(spark: Any) -> int:
    """Executors registered with the driver (the driver's own entry not counted)."""
    return max(0, len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--master", required=True)
    parser.add_argument("--redis-port", type=int, required=True)
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--name", default="wc-cluster")
    parser.add_argument("--pending", type=int, default=200, help="topology.max.spout.pending")
    parser.add_argument("--interval-ms", type=int, default=100)
    parser.add_argument("--executors", type=int, default=2, help="wait for this many executors")
    parser.add_argument("--executor-memory", default="512m")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--executor-python", help="executors' Python, with no path of ours")
    parser.add_argument("--probe", action="store_true", help="report what executors see")
    parser.add_argument("--ui-port", type=int, help="serve the driver's UI; report its jobs")
    parser.add_argument("--java-options", help="for the driver's and executors' JVMs")
    parser.add_argument("--commit-location", default="auto", help="topology.state.commit.location")
    parser.add_argument(
        "--source",
        choices=("sentences", "mixed"),
        default="sentences",
        help="a driver spout, or a third each from it, Redis streams and files",
    )
    parser.add_argument("--streams", type=int, default=4, help="mixed: streams, and files")
    parser.add_argument("--files-dir", help="mixed: the folder of the files (made)")
    parser.add_argument(
        "--spout-parallelism", type=int, default=2, help="mixed: the partitioned spout's tasks"
    )
    parser.add_argument("--faults", help="topology.faults, as JSON (recovery.faults)")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    if args.executor_python:
        os.environ["PYSPARK_PYTHON"] = args.executor_python  # what PySpark's workers run

    conf = redis_conf(
        args.redis_port,
        **{
            "topology.max.spout.pending": args.pending,
            "topology.state.checkpoint.interval.ms": args.interval_ms,
            "topology.message.timeout.secs": 120,
            "topology.state.commit.location": args.commit_location,
            **({"topology.faults": args.faults} if args.faults else {}),
        },
    )
    cluster = LocalCluster(
        master=args.master,
        app_name="statefulbolts-cluster-test",
        spark_conf=spark_conf(
            args.executor_memory, args.executor_python, args.ui_port, args.java_options
        ),
    )
    try:
        spark = cluster.spark
        deadline = time.monotonic() + 120
        while executor_count(spark) < args.executors and time.monotonic() < deadline:
            time.sleep(0.2)
        sc_conf = spark.sparkContext.getConf()
        say(
            "ready",
            executors=executor_count(spark),
            master=spark.sparkContext.master,
            driver_host=sc_conf.get("spark.driver.host"),
            bind_address=sc_conf.get("spark.driver.bindAddress"),
            **({"views": executor_views(spark.sparkContext)} if args.probe else {}),
        )
        if args.source == "mixed":
            keys, third = stream_keys(args.name, args.streams), args.sentences // 3
            folder = Path(args.files_dir)
            write_streams(args.redis_port, keys, third, 2 * third)
            write_files(folder, args.streams, 2 * third, args.sentences)
            topology = mixed_build(
                args.redis_port, keys, folder, third, args.spout_parallelism, args.parallelism
            )
        else:
            topology = build(args.sentences, args.parallelism)
        handle = cluster.submit_topology(
            args.name,
            conf,
            topology,
            on_transaction=lambda info: say("tx", **info.as_dict()),
        )
        handle.await_idle(args.timeout)
        metrics = handle.metrics()
        txs = metrics["transactions"]
        say(
            "done",
            transactions=len(txs),
            commits=sum(1 for t in txs if t["action"] == "COMMIT"),
            failed_transactions=sum(1 for t in txs if not t["ok"]),
            components=metrics["components"],
            positions=handle.status().get("partition_positions", {}),
            executors=executor_count(spark),
            **({"views": executor_views(spark.sparkContext)} if args.probe else {}),
            **({"jobs": spark_jobs(spark.sparkContext)} if args.ui_port else {}),
        )
        handle.kill()
        return 0
    except Exception as exc:  # noqa: BLE001 - reported to the test as one line
        say("error", error=f"{type(exc).__name__}: {exc}")
        return 1
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
