"""A job's Python stages made in Spark's JVM with few calls, and the job run.

Every call from the driver into the JVM is a py4j round trip over a socket, some of them a class
lookup there. PySpark's ``mapPartitionsWithIndex``, ``partitionBy`` and ``collect`` make about
twenty for each stage of a job, every job: the broadcast threshold, the classes, the
environment and the include list copied into new Java collections, the ``PythonRDD`` and its
``JavaRDD``, the ``PairwiseRDD`` and the partitioner of a shuffle, the call site set and
cleared. That is 5-7 ms of a one-stage job's 30-35 (``docs/benchmarks.md``), and JVM and
driver CPU on a machine that has little. ``PythonStages`` makes the same JVM objects with what
does not change between jobs kept: the classes, the threshold, the Java copies of the
environment and of the include list (made again when PySpark's change), a partitioner per
width. A last stage then costs four calls (its function, its ``PythonRDD``, that RDD's
``JavaRDD``, the run), a shuffle seven, besides reading the result.

The job runs through ``PythonRDD.runJob``, as ``SparkContext.runJob`` does, not
``collectAndServe``: Spark's closure cleaner reads the class file of the function a job applies
at every job, and ``collectAndServe``'s is defined in ``RDD``, a large class (2 ms of a job,
mostly JVM CPU). A shuffle writes what PySpark's ``partitionBy`` writes: frames of a
partition's number and a pickled list of pairs, read by Spark's ``PairwiseRDD``.

A command above the broadcast threshold, or one that pickled a broadcast variable, takes
PySpark's own path (``mapPartitionsWithIndex``, ``partitionBy``, ``collect``), which broadcasts
what it must.

What it keeps belongs to the SparkContext, not to a topology: ``PythonStages.of`` gives every
engine on one SparkContext the same instance, so a topology submitted to a running session
pays none of the lookups again (about 14 calls, 5-6 ms), nor the ``parallelize`` of its first
RDD of empty slots (``empty_slots``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["PythonStages"]

StageFunction = Callable[[int, Iterable[Any]], Iterable[Any]]

# SparkContext -> its shared ``PythonStages`` (``PythonStages.of``), while it runs.
_SHARED: dict[Any, PythonStages] = {}
_SHARED_LOCK = threading.Lock()


class PythonStages:
    """Makes a job's stages in Spark's JVM (``shuffle``, ``build``) and runs it (``collect``).

    Safe to call from several threads; engines share one per SparkContext (``of``). With
    Spark's Python profiler on (``spark.python.profile``) every stage takes PySpark's path,
    which attaches the profiler.
    """

    @classmethod
    def of(cls, sc: Any) -> PythonStages:
        """The instance every engine on ``sc`` shares, made at the first call.

        Those of stopped contexts are dropped here: their Java objects are gone with them.
        """
        with _SHARED_LOCK:
            for stopped in [c for c in _SHARED if c._jsc is None]:
                del _SHARED[stopped]
            stages = _SHARED.get(sc)
            if stages is None:
                stages = _SHARED[sc] = cls(sc)
            return stages

    def __init__(self, sc: Any, threshold: int | None = None) -> None:
        from pyspark.serializers import BatchedSerializer, CloudPickleSerializer

        jvm = sc._jvm
        self._sc = sc
        self._function_class = jvm.SimplePythonFunction
        self._rdd_class = jvm.PythonRDD
        # Each looked up once, not once a job (``runJob``: see the module docstring).
        self._run_job = jvm.PythonRDD.runJob
        self._value_of_pair = jvm.PythonRDD.valueOfPair
        self._pairwise_class = jvm.PairwiseRDD
        self._partitioner_class = jvm.PythonPartitioner
        self._partitioners: dict[int, Any] = {}  # n -> a PythonPartitioner of n
        self._java_sc = sc._jsc.sc()
        self._partitions: dict[int, Any] = {}  # n -> the Java list 0 .. n-1
        self._slots: dict[int, Any] = {}  # n -> ``empty_slots(n)``
        self._threshold = (
            int(jvm.PythonUtils.getBroadcastThreshold(sc._jsc)) if threshold is None else threshold
        )
        self._pickler = CloudPickleSerializer()
        # What a shuffle's frames are read with on its other side, as PySpark's ``partitionBy``.
        self._shuffled_deserializer = BatchedSerializer(sc._unbatched_serializer)
        self._lock = threading.Lock()
        # PySpark's environment and include list, and the Java copies made of them.
        self._env: tuple[dict[str, str], Any] | None = None
        self._includes: tuple[list[str], Any] | None = None
        self._no_broadcasts: Any = None  # an empty Java list
        self._profiled = (
            sc.profiler_collector is not None
            and sc._conf.get("spark.python.profile", "false") == "true"
        )
        self.shortcuts = 0  # jobs run here rather than by PySpark's path (for tests)

    def empty_slots(self, n: int) -> Any:
        """``n`` first-stage slots fed nothing, as the RDD every such job starts from.

        Made once per ``n``: ``parallelize`` writes a temporary file and has the JVM read it,
        most of the driver's own work for a job whose tasks get no input (a transactional
        batch whose emitters are its first stage; 2-4 ms of each). Its items, ``(slot, [])``,
        are read only.
        """
        with self._lock:
            rdd = self._slots.get(n)
            if rdd is None:
                rdd = self._slots[n] = self._sc.parallelize([(s, []) for s in range(n)], n)
            return rdd

    def build(self, source: Any, partitions: int, function: StageFunction) -> Any:
        """``source.mapPartitionsWithIndex(function)``, made in the JVM now, for ``collect``.

        ``source`` is a PySpark RDD of ``partitions`` partitions that is not pipelined
        (``parallelize``'s, ``partitionBy``'s): ``function`` gets the index of each partition
        and its items. The function is pickled here, so the driver's share of a job is done
        before ``collect``.
        """
        wrapped = self._wrapped(function, source._jrdd_deserializer, self._sc.serializer)
        if wrapped is None:  # PySpark's path
            rdd = _pyspark_rdd(self._sc, source).mapPartitionsWithIndex(function)
            rdd.id()  # builds its Java RDD: pickles the function
            return rdd
        rdd = self._rdd_class(_scala_rdd(source), wrapped, False, False)
        return _Built(rdd.asJavaRDD(), self._partition_list(partitions))

    def shuffle(self, source: Any, function: StageFunction, partitions: int) -> Any:
        """``source.mapPartitionsWithIndex(function).partitionBy(partitions)``, made in the JVM.

        ``function`` yields ``(key, value)`` pairs; each goes to partition ``key % partitions``
        of the RDD returned, a source for ``build`` or another ``shuffle``. As PySpark's
        ``partitionBy`` does, the pairs are pickled in the Python worker and sent in frames
        of the partition's number (``pack_long``) and a pickled list of pairs, which Spark's
        ``PairwiseRDD`` reads; seven calls instead of PySpark's twenty.
        """
        from pyspark.serializers import NoOpSerializer, pack_long

        dumps = self._sc._unbatched_serializer.dumps

        def keyed(split: int, items: Iterable[Any]) -> Iterator[bytes]:
            for key, value in function(split, items):
                yield pack_long(key % partitions)
                yield dumps([(key, value)])

        wrapped = self._wrapped(keyed, source._jrdd_deserializer, NoOpSerializer())
        if wrapped is None:  # PySpark's path
            mapped = _pyspark_rdd(self._sc, source).mapPartitionsWithIndex(function)
            return mapped.partitionBy(partitions, _slot)
        # Not preserving the source's partitioning: after an earlier shuffle of as many
        # partitions, Spark would take this one's pairs as partitioned already (equal
        # partitioners) and move none. PySpark's ``partitionBy`` after a stage is the same
        # (the stage's ``preservesPartitioning`` is False, and the pipelined key function's
        # True does not survive it).
        rdd = self._rdd_class(_scala_rdd(source), wrapped, False, False)
        pairs = self._pairwise_class(rdd).asJavaPairRDD()
        java = self._value_of_pair(pairs.partitionBy(self._partitioner(partitions)))
        return _Shuffled(java, self._shuffled_deserializer)

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

    def _wrapped(self, function: Callable[..., Any], deserializer: Any, serializer: Any) -> Any:
        """The Java ``SimplePythonFunction`` of ``function``; ``None`` for PySpark's path.

        ``None`` when the pickled command is above the broadcast threshold, or refers to a
        broadcast variable: PySpark's own path pickles it again and broadcasts what it must;
        and when Spark's Python profiler is on.
        """
        sc = self._sc
        if self._profiled:
            return None
        command = self._pickler.dumps((function, None, deserializer, serializer))
        broadcasts = sc._pickled_broadcast_vars
        if len(command) > self._threshold or next(iter(broadcasts), None) is not None:
            broadcasts.clear()
            return None
        env, includes, none = self._java_env()
        return self._function_class(
            bytearray(command),
            env,
            includes,
            sc.pythonExec,
            sc.pythonVer,
            none,
            sc._javaAccumulator,
        )

    def _partitioner(self, n: int) -> Any:
        """The ``PythonPartitioner`` of ``n`` partitions, made once per ``n``."""
        with self._lock:
            java = self._partitioners.get(n)
            if java is None:
                java = self._partitioners[n] = self._partitioner_class(n, id(_slot))
            return java

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
        env, includes = sc.environment, sc._python_includes
        with self._lock:
            client = sc._gateway._gateway_client
            # Compared at every job, copied only when they moved.
            if self._env is None or self._env[0] != env:
                self._env = (dict(env), MapConverter().convert(env, client))
            if self._includes is None or self._includes[0] != includes:
                self._includes = (list(includes), ListConverter().convert(includes, client))
            if self._no_broadcasts is None:
                self._no_broadcasts = ListConverter().convert([], client)
            return self._env[1], self._includes[1], self._no_broadcasts


class _Built:
    """What ``PythonStages.build`` made: a ``PythonRDD``'s ``JavaRDD`` and its partitions (Java)."""

    __slots__ = ("partitions", "rdd")

    def __init__(self, rdd: Any, partitions: Any) -> None:
        self.rdd, self.partitions = rdd, partitions


class _Shuffled:
    """What ``PythonStages.shuffle`` made: a shuffled ``JavaRDD`` and how its frames are read."""

    __slots__ = ("_jrdd", "_jrdd_deserializer", "_sb_scala_rdd")

    def __init__(self, java: Any, deserializer: Any) -> None:
        self._jrdd, self._jrdd_deserializer = java, deserializer
        self._sb_scala_rdd: Any = None


def _slot(key: int) -> int:
    """The partition function of a shuffle: the key is the destination slot."""
    return key


def _pyspark_rdd(sc: Any, source: Any) -> Any:
    """``source`` as a PySpark RDD, for PySpark's path."""
    if isinstance(source, _Shuffled):
        from pyspark.rdd import RDD

        return RDD(source._jrdd, sc, source._jrdd_deserializer)
    return source


def _scala_rdd(source: Any) -> Any:
    """The Scala RDD under a PySpark RDD, asked for once per RDD object."""
    java = getattr(source, "_sb_scala_rdd", None)
    if java is None:
        java = source._jrdd.rdd()
        source._sb_scala_rdd = java
    return java
