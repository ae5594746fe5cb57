"""The engine seam: run a set of component tasks as one Spark job, and give back what they did.

A protocol (the checkpoint protocol's driver, the transactional protocol's) describes a job as a
``JobSpec``: which component tasks run, in which stages (``JobLayout``), the records each
first-stage task is fed, and its own ``TaskProgram`` (what a task does around its tuples). The
``Engine`` turns that into one chain of Spark stages (``mapPartitionsWithIndex`` per stage, a
``partitionBy`` on the destination slot between two), runs it on a thread of its own, and hands
back a ``JobResult``: the roots left open (XOR acks), the failed roots, every task's report
and the tuples the tasks emitted for components outside the job. Everything Spark-specific of
running a topology lives here: the topology's broadcast, shipping ``extlib/`` folders to the
executors, job groups and their cancellation.

Example (what a protocol driver does):

    engine = Engine(spark, topology, "wc", conf, max_jobs=1)
    layout = engine.plan.layout(engine.plan.bolts())
    future = engine.submit(JobSpec(layout, program, inputs, txid=3, description="PREPARE(3)"))
    result = future.result()  # a JobResult
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers import add_extlib_to_path
from statefulbolts.errors import TopologyError
from statefulbolts.runtime._plan import ExecutionPlan, JobLayout
from statefulbolts.runtime._program import TaskJob, TaskProgram
from statefulbolts.runtime._records import JobResult
from statefulbolts.runtime._results import merge_results, reduce_acks
from statefulbolts.runtime._task import run_task
from statefulbolts.topology import StormTopology

__all__ = ["Engine", "JobSpec"]

log = logging.getLogger(__name__)

# extlib folders already shipped, per SparkContext: (folder, newest mtime).
_SHIPPED_EXTLIB: dict[int, set[tuple[str, int]]] = {}
_ZIP_DIR: list[Path] = []


@dataclass(frozen=True)
class JobSpec:
    """One job, as a protocol asks for it.

    ``inputs[s]`` is the list of records for slot ``s`` of the first stage (``TupleBatch`` for
    data; a record for a task of a later stage is carried there). ``ackers`` > 0 reduces the
    acks over that many Spark partitions, 0 on the driver. ``images`` ships a driver-owned
    provider's state to the tasks under whose roots (``<state_root>/<component>-<task>``) the
    namespaces are; ``None`` when the job touches no driver-owned state. ``group`` names the
    Spark job group (for ``Engine.cancel``).
    """

    layout: JobLayout
    program: TaskProgram
    inputs: Sequence[Sequence[Any]]
    txid: int
    description: str
    ackers: int = 0
    images: Mapping[str, bytes] | None = None
    group: str | None = None
    state_root: str = ""
    # The leading values every tuple of the job shares (``ExecutionPlan.lead`` of them).
    lead: tuple[Any, ...] = ()


def _identity(key: int) -> int:
    return key


class Engine:
    """Runs the jobs of one topology on a SparkContext, up to ``max_jobs`` at a time."""

    def __init__(
        self,
        spark: Any,
        topology: StormTopology,
        name: str,
        conf: Mapping[str, Any],
        *,
        faults: Any = None,
        max_jobs: int = 1,
        lead: int = 0,
    ) -> None:
        from pyspark import cloudpickle

        self.name = name
        self.conf = conf
        self.plan = ExecutionPlan(topology, lead)
        self.faults = faults
        self.sc = spark.sparkContext
        try:
            blob = cloudpickle.dumps(topology)
        except Exception as exc:
            msg = f"topology {name!r} cannot be serialized for Spark: {exc}"
            raise TopologyError(msg) from exc
        self._blob = self.sc.broadcast(blob)
        self._released = False
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_jobs, thread_name_prefix=f"sb-{name}-job"
        )
        _ship_extlib(self.sc, conf)

    def submit(self, spec: JobSpec) -> concurrent.futures.Future[JobResult]:
        """Start ``spec`` on the engine's threads; the future holds its ``JobResult``."""
        if spec.layout.depth == 0:  # nothing to run (a topology of spouts only)
            done: concurrent.futures.Future[JobResult] = concurrent.futures.Future()
            done.set_result(JobResult())
            return done
        return self._pool.submit(self.run, spec)

    def run(self, spec: JobSpec) -> JobResult:
        """Run ``spec`` on the calling thread and return its ``JobResult``."""
        if spec.layout.depth == 0:
            return JobResult()
        job = TaskJob(
            plan=self.plan,
            layout=spec.layout,
            program=spec.program,
            topology_name=self.name,
            conf=self.conf,
            txid=spec.txid,
            ackers=spec.ackers,
            images=None if spec.images is None else dict(spec.images),
            faults=self.faults,
            state_root=spec.state_root,
            lead=spec.lead,
        )
        if len(spec.lead) != self.plan.lead:
            msg = (
                f"job {spec.description!r} gives {len(spec.lead)} leading values; its "
                f"topology's tuples have {self.plan.lead}"
            )
            raise ValueError(msg)
        sc, blob = self.sc, self._blob
        # Always set: a pool thread keeps its job group from one job to the next.
        sc.setJobGroup(spec.group or self.name, spec.description, interruptOnCancel=True)
        log.debug("running %s", spec.description)

        def stage(k: int) -> Any:
            def fn(slot: int, items: Any) -> Any:
                return run_task(job, blob, k, slot, items)

            return fn

        layout = spec.layout
        n0 = len(layout.stages[0])
        first = [list(spec.inputs[s]) if s < len(spec.inputs) else [] for s in range(n0)]
        rdd = sc.parallelize([(s, first[s]) for s in range(n0)], n0)
        rdd = rdd.mapPartitionsWithIndex(stage(0), preservesPartitioning=False)
        for k in range(1, layout.depth):
            rdd = rdd.partitionBy(len(layout.stages[k]), _identity).mapPartitionsWithIndex(stage(k))
        if spec.ackers > 0:
            parts = rdd.partitionBy(spec.ackers, _identity).mapPartitions(reduce_acks).collect()
            return merge_results(parts)
        return merge_results(reduce_acks(rdd.collect()))

    def cancel(self, group: str) -> None:
        """Cancel the running jobs of ``group`` (their futures then fail)."""
        if self.sc._jsc is not None:
            self.sc.cancelJobGroup(group)

    def close(self, wait: bool = True) -> None:
        """Stop taking jobs and drop the topology's broadcast (its JVM blocks, a temp file)."""
        self._pool.shutdown(wait=wait)
        if self._released:
            return
        self._released = True
        if self.sc._jsc is None:  # the SparkContext was stopped, and its broadcasts with it
            return
        self._blob.destroy()


def _zip_dir() -> Path:
    """One temporary directory per process for extlib zips, removed when the process exits."""
    if not _ZIP_DIR:
        path = Path(tempfile.mkdtemp(prefix="statefulbolts-extlib-"))
        atexit.register(shutil.rmtree, path, True)
        _ZIP_DIR.append(path)
    return _ZIP_DIR[0]


def _ship_extlib(sc: Any, conf: Mapping[str, Any]) -> None:
    """Send every extlib folder to the executors as a zip on their ``sys.path``.

    Each folder is zipped once per version (newest mtime) into this process's temporary
    directory, removed at exit, and added once per SparkContext.
    """
    shipped = _SHIPPED_EXTLIB.setdefault(id(sc), set())
    for folder in add_extlib_to_path(conf):
        files = [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]
        stamp = (str(folder), max((p.stat().st_mtime_ns for p in files), default=0))
        if not files or stamp in shipped:
            continue
        shipped.add(stamp)
        name = _zip_dir() / f"extlib-{abs(hash(stamp)):x}.zip"
        if not name.exists():
            with zipfile.ZipFile(name, "w") as zf:
                for path in files:
                    zf.write(path, path.relative_to(folder).as_posix())
        sc.addPyFile(str(name))
