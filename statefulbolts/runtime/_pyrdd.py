"""The last stage of a job as one Python RDD, built and collected with few calls into the JVM.

PySpark's ``mapPartitionsWithIndex(...).collect()`` makes some twenty py4j round trips for a
job's last stage, each a socket exchange with the JVM and some of them a class lookup there:
the broadcast threshold, the class of the Python function, the environment and the include
list copied into new Java collections, the ``PythonRDD``, its ``JavaRDD`` and back, the call
site set and cleared, the class of ``PythonRDD`` again for the collect. Per job that is 5-7 ms
of a one-stage job's 30-35 (``docs/benchmarks.md``), and JVM and driver CPU on a machine that
has little. ``LastStage`` makes the same JVM objects with what does not change between jobs
kept: the classes, the threshold, the Java copies of the environment and of the include list
(made again when PySpark's change). A job then costs one call for its function, one for its
``PythonRDD``, one for that RDD's ``JavaRDD`` and one to run it, besides reading the result.
It runs through ``PythonRDD.runJob``, as ``SparkContext.runJob`` does, not ``collectAndServe``:
Spark's closure cleaner reads the class file of the function a job applies at every job, and
``collectAndServe``'s is defined in ``RDD``, a large class (2 ms of a job, mostly JVM CPU).

A command above the broadcast threshold, or one that pickled a broadcast variable, takes
PySpark's own path (``mapPartitionsWithIndex`` and ``collect``), which broadcasts what it must.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["LastStage", "chain"]

StageFunction = Callable[[int, Iterable[Any]], Iterable[Any]]


def chain(functions: Sequence[StageFunction]) -> StageFunction:
    """The stage functions run one after the other in each partition, as Spark pipelines them."""
    if len(functions) == 1:
        return functions[0]
    first, rest = functions[0], functions[1:]

    def piped(split: int, items: Iterable[Any]) -> Iterable[Any]:
        out = first(split, items)
        for fn in rest:
            out = fn(split, out)
        return out

    return piped


class LastStage:
    """Runs ``function`` over a PySpark RDD's partitions as one Spark job; its results, in order.

    One per SparkContext user (an engine); safe to call from several threads.
    """

    def __init__(self, sc: Any, threshold: int | None = None) -> None:
        from pyspark.serializers import CloudPickleSerializer

        jvm = sc._jvm
        self._sc = sc
        self._function_class = jvm.SimplePythonFunction
        self._rdd_class = jvm.PythonRDD
        # Each looked up once, not once a job (``runJob``: see the module docstring).
        self._run_job = jvm.PythonRDD.runJob
        self._java_sc = sc._jsc.sc()
        self._partitions: dict[int, Any] = {}  # n -> the Java list 0 .. n-1
        self._threshold = (
            int(jvm.PythonUtils.getBroadcastThreshold(sc._jsc)) if threshold is None else threshold
        )
        self._pickler = CloudPickleSerializer()
        self._lock = threading.Lock()
        # PySpark's environment and include list, and the Java copies made of them.
        self._env: tuple[dict[str, str], Any] | None = None
        self._includes: tuple[list[str], Any] | None = None
        self._no_broadcasts: Any = None  # an empty Java list
        self.shortcuts = 0  # jobs that took this path (for tests and benches)

    def build(self, source: Any, partitions: int, function: StageFunction) -> Any:
        """``source.mapPartitionsWithIndex(function)``, made in the JVM now, for ``collect``.

        ``source`` is a PySpark RDD of ``partitions`` partitions that is not pipelined
        (``parallelize``'s, ``partitionBy``'s): ``function`` gets the index of each partition
        and its items. The function is pickled here, so the driver's share of a job is done
        before ``collect``.
        """
        sc = self._sc
        out = sc.serializer
        command = self._pickler.dumps((function, None, source._jrdd_deserializer, out))
        broadcasts = sc._pickled_broadcast_vars
        if len(command) > self._threshold or next(iter(broadcasts), None) is not None:
            broadcasts.clear()  # pickled again, and broadcast, by PySpark's path
            rdd = source.mapPartitionsWithIndex(function)
            rdd.id()  # builds its Java RDD: pickles the function
            return rdd
        env, includes, none = self._java_env()
        wrapped = self._function_class(
            bytearray(command),
            env,
            includes,
            sc.pythonExec,
            sc.pythonVer,
            none,
            sc._javaAccumulator,
        )
        rdd = self._rdd_class(_scala_rdd(source), wrapped, False, False)
        return _Built(rdd.asJavaRDD(), self._partition_list(partitions))

    def collect(self, built: Any) -> list[Any]:
        """Run ``build``'s RDD as one Spark job; every partition's results, in order."""
        if not isinstance(built, _Built):
            return built.collect()
        from pyspark.rdd import _load_from_socket

        sock_info = self._run_job(self._java_sc, built.rdd, built.partitions)
        self.shortcuts += 1
        loaded = _load_from_socket(sock_info, self._sc.serializer)
        if not hasattr(loaded, "__enter__"):  # pyspark 3.5: the stream itself
            return list(loaded)
        with loaded as stream:  # pyspark 4: closes the socket
            return list(stream)

    def _partition_list(self, n: int) -> Any:
        """The Java list ``0 .. n-1``: every partition of a job over ``n``, made once per ``n``."""
        from py4j.java_collections import ListConverter

        with self._lock:
            java = self._partitions.get(n)
            if java is None:
                client = self._sc._gateway._gateway_client
                java = self._partitions[n] = ListConverter().convert(list(range(n)), client)
            return java

    def _java_env(self) -> tuple[Any, Any, Any]:
        """Java copies of PySpark's environment and include list, and an empty Java list.

        The copies are made again when PySpark's lists moved; the empty list stands for the
        broadcast variables of a command that has none.
        """
        from py4j.java_collections import ListConverter, MapConverter

        sc = self._sc
        env, includes = dict(sc.environment), list(sc._python_includes)
        with self._lock:
            client = sc._gateway._gateway_client
            if self._env is None or self._env[0] != env:
                self._env = (env, MapConverter().convert(env, client))
            if self._includes is None or self._includes[0] != includes:
                self._includes = (includes, ListConverter().convert(includes, client))
            if self._no_broadcasts is None:
                self._no_broadcasts = ListConverter().convert([], client)
            return self._env[1], self._includes[1], self._no_broadcasts


class _Built:
    """What ``LastStage.build`` made: a ``PythonRDD``'s ``JavaRDD`` and its partitions (Java)."""

    __slots__ = ("partitions", "rdd")

    def __init__(self, rdd: Any, partitions: Any) -> None:
        self.rdd, self.partitions = rdd, partitions


def _scala_rdd(source: Any) -> Any:
    """The Scala RDD under a PySpark RDD, asked for once per RDD object."""
    java = getattr(source, "_sb_scala_rdd", None)
    if java is None:
        java = source._jrdd.rdd()
        source._sb_scala_rdd = java
    return java
