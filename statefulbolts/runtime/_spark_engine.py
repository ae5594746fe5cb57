"""The Spark engine: run a set of component tasks as one Spark job, and give back what they did.

``SparkEngine`` turns a ``JobSpec`` (see ``_engine``, the seam) into one chain of Spark stages
(``mapPartitionsWithIndex`` per stage, a ``partitionBy`` on the destination slot between two; made
in the JVM with few py4j calls by ``_pyrdd.PythonStages``), runs it on a thread of its own, and
hands back a ``JobResult``. Everything Spark-specific of running a topology lives here: the
topology's broadcast (a small topology travels inline with each job instead), shipping code to the
executors (``extlib/`` folders always, as files beside the tasks and never on their ``sys.path``; on
a non-local master also the framework and the user's modules, see ``_shipping``), job groups and
their cancellation: a job's ``JobSpec.group`` is its Spark job *tag*, so ``cancel(group)`` reaches
every job started under it whatever its action; every job of the topology also carries
``topology_tag``. A job whose protocol lets the driver run its first stages
(``JobSpec.driver_stages``) runs them here first, with the same task code (``_inline``), and Spark's
chain starts at the stage after them. A job whose input is cut late (``JobSpec.late``) is
submitted before its input exists; its first tasks fetch it from the driver (``_late``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import pickle
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from providers import DriverOwnedStateProvider, add_extlib_dirs, extlib_dirs
from statefulbolts.errors import TopologyError
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.runtime._engine import JobSpec, job_labels, tag, task_job, topology_tag
from statefulbolts.runtime._images import INLINE_BYTES, ImageShipper
from statefulbolts.runtime._inline import run_head, run_inline
from statefulbolts.runtime._late import FETCH_TIMEOUT_S, InputServer, fetch
from statefulbolts.runtime._local_files import LocalFiles, take_spilled
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._pyrdd import PythonStages
from statefulbolts.runtime._records import JobResult, JobTimings, ReportedError, TupleBatch
from statefulbolts.runtime._results import merge_results, reduce_acks
from statefulbolts.runtime._retried import failed_attempts, retried_errors
from statefulbolts.runtime._sealing import seal_inputs
from statefulbolts.runtime._shipping import build_zip, code_to_ship, folder_source, sources, zip_dir
from statefulbolts.runtime._spark import is_local, task_attempts
from statefulbolts.runtime._task import run_stages
from statefulbolts.topology import StormTopology

__all__ = ["SparkEngine"]

log = logging.getLogger(__name__)

# The zips already added, per Spark application (its id): each is added once.
_SHIPPED: dict[str, set[str]] = {}
_SHIPPED_LOCK = threading.Lock()


# The job tags each thread last set here (``_set_tags``), whichever engine set them.
_THREAD_TAGS = threading.local()


def _set_tags(sc: Any, tags: tuple[str, str]) -> None:
    """Make ``tags`` this thread's Spark job tags, unless they are already.

    Each of the three calls is a py4j round trip (0.2-0.4 ms a call on two busy cores), and a
    checkpointed topology's tags are the same for every job. Only the engines' threads run
    jobs here, and only this function sets their tags, so what it set last is what the
    thread has.
    """
    key = (id(sc), tags)  # a new context's thread starts with no tags
    if getattr(_THREAD_TAGS, "key", None) == key:
        return
    _THREAD_TAGS.key = None  # until all three calls went through
    sc.clearJobTags()
    for each in tags:
        sc.addJobTag(each)
    _THREAD_TAGS.key = key


def _sealed_bytes(fed: list[list[Any]]) -> int:
    """The sealed values' bytes in ``fed``: less than its pickle, read without pickling it."""
    return sum(
        len(r.values) for slot in fed for r in slot
        if type(r) is TupleBatch and type(r.values) is bytes
    )  # fmt: skip


def _reduce_acks(split: int, results: Any) -> Any:
    """The last stage of a job with ackers: each acker slot's results reduced."""
    return reduce_acks(results)


class SparkEngine:
    """Runs the jobs of one topology on a SparkContext, up to ``max_jobs`` at a time.

    Tasks load the topology from a broadcast, or from the job itself when it is small; with
    ``tasks_run_spouts`` False (spouts run in the driver) it is shipped without its spouts'
    objects.
    """

    in_driver = False
    late_binding = True  # a job's input may be cut when its first task asks (``_late``)

    def __init__(
        self,
        spark: Any,
        topology: StormTopology,
        name: str,
        conf: Mapping[str, Any],
        *,
        faults: FaultListener = NO_FAULTS,
        max_jobs: int = 1,
        lead: int = 0,
        tasks_run_spouts: bool = True,
        key_groups: Mapping[str, int] | None = None,
    ) -> None:
        from pyspark import cloudpickle

        self.name = name
        self.conf = conf
        self.plan = ExecutionPlan(topology, lead, key_groups)
        self.faults = faults
        self.sc = spark.sparkContext
        try:
            blob = cloudpickle.dumps(
                topology if tasks_run_spouts else topology.without_spout_objects()
            )
        except Exception as exc:
            msg = f"topology {name!r} cannot be serialized for Spark: {exc}"
            raise TopologyError(msg) from exc
        # A small topology travels inline, pickled with each job's stage functions, as a small
        # image does (``_images``): a broadcast costs py4j calls to make (a few ms of every
        # submit, before the first job can start) and to destroy, and each worker reads it
        # from a file. A large one is broadcast, read once per worker.
        self._blob: Any = blob if len(blob) <= INLINE_BYTES else self.sc.broadcast(blob)
        self._topology = blob  # for the jobs run in this process (``run_here``)
        self._released = False
        self._shippers: list[ImageShipper] = []
        self._stages = PythonStages.of(self.sc)  # shared by the engines on this context
        self.inline_feeds = 0  # jobs whose first stage made no RDD of its own (for tests)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_jobs, thread_name_prefix=f"sb-{name}-job"
        )
        # Attempts per task, for the stages run here (``_inline.run_head``) as Spark gives them.
        self._attempts = task_attempts(self.sc)
        # The file names of the extlib zips: every task looks in them (``_use_extlib``).
        self._extlib = _ship_extlib(self.sc, conf)
        # On a local master, large images and change logs go as files (``_local_files``).
        self._files = LocalFiles(self.sc._temp_dir) if is_local(self.sc.master) else None
        if not is_local(self.sc.master):
            _ship_code(self.sc, blob, conf)
        self._inputs: InputServer | None = None  # made for the first late-cut job
        self._inputs_lock = threading.Lock()

    def _input_server(self) -> InputServer:
        with self._inputs_lock:
            if self._inputs is None:
                conf = self.sc.getConf()
                host = conf.get("spark.driver.host")
                self._inputs = InputServer(host, conf.get("spark.driver.bindAddress", host))
            return self._inputs

    def _first_slots(self, fed: list[list[Any]], n: int) -> tuple[Any, bytes | None]:
        """The RDD of the first stage's ``n`` slots, and their input if it goes in the function.

        Input of at most ``INLINE_BYTES`` pickled travels in the job's function: every job
        starts from the context's RDD of empty slots, and the driver makes no RDD of its own
        (``parallelize`` writes a file and has the JVM read it: a millisecond or more of each
        small PREPARE, on its critical path). Larger input goes by ``parallelize``, once per
        partition rather than in every task's copy of the function.
        """
        pickled = None
        if any(fed):
            if _sealed_bytes(fed) <= INLINE_BYTES:  # else too large for sure: not pickled here
                pickled = pickle.dumps(fed, protocol=pickle.HIGHEST_PROTOCOL)
            if pickled is None or len(pickled) > INLINE_BYTES:
                return self.sc.parallelize([(s, fed[s]) for s in range(n)], n), None
        self.inline_feeds += 1
        return self._stages.empty_slots(n), pickled

    def image_shipper(self, provider: DriverOwnedStateProvider) -> ImageShipper:
        """A new ``ImageShipper`` of ``provider``'s images for this topology's jobs.

        Its broadcasts go when the engine closes. On a local master, whose workers share this
        machine's files, large images go as files instead of broadcasts (``LocalFiles``).
        """
        shipper = ImageShipper(self.sc, provider, files=self._files)
        self._shippers.append(shipper)
        return shipper

    def submit(self, spec: JobSpec) -> concurrent.futures.Future[JobResult]:
        """Start ``spec`` on the engine's threads; the future holds its ``JobResult``."""
        if spec.layout.depth == 0:  # nothing to run (a topology of spouts only)
            done: concurrent.futures.Future[JobResult] = concurrent.futures.Future()
            done.set_result(JobResult())
            return done
        return self._pool.submit(self.run, spec)

    def run_here(self, spec: JobSpec) -> concurrent.futures.Future[JobResult]:
        """Run ``spec``'s tasks in this process, now; the future is done (``_inline``).

        For small jobs on state this process holds; ``spec.images`` must be ``None``.
        """
        done: concurrent.futures.Future[JobResult] = concurrent.futures.Future()
        try:
            done.set_result(run_inline(self._job(spec), self._topology, spec.inputs))
        except Exception as exc:  # the job failed, as a Spark job's future would
            done.set_exception(exc)
        return done

    def run(self, spec: JobSpec) -> JobResult:
        """Run ``spec`` on the calling thread and return its ``JobResult``.

        The first ``spec.driver_stages`` stages run here, before Spark's part
        (``_inline.run_head``); Spark's job then starts at the stage after them, each of its
        partitions fed what that stage's slot would have been fed by a ``partitionBy``. A job
        whose input is cut late (``spec.late``) is submitted first: its first stage's tasks
        ask this engine's ``InputServer`` for their slot's records, and the head (or the
        sealing) runs when the first of them asks (``_late_feed``).
        """
        if spec.layout.depth == 0:
            return JobResult()
        began = time.perf_counter()
        job = self._job(spec)
        labels = job_labels(self.name, spec)
        layout, first = spec.layout, spec.driver_stages
        head = 0.0
        retried: list[ReportedError] = []
        # A late-cut job's input is cut when its first task asks (``_late_feed``): nothing here.
        late = spec.late
        fed: list[list[Any]] = []
        made: dict[str, Any] = {}  # what ``_late_feed`` measured
        if late is None:
            fed, head, retried = self._first_input(job, spec.inputs, first)
        sc, blob, extlib = self.sc, self._blob, self._extlib
        # Always set: a pool thread keeps its job group and tags from one job to the next.
        sc.setJobGroup(labels.group, labels.description, interruptOnCancel=True)
        _set_tags(sc, (labels.tag, topology_tag(self.name)))
        log.debug("running %s", labels.description)

        n = len(layout.stages[first])
        server, key = (self._input_server(), 0) if late is not None else (None, 0)
        asked: tuple[tuple[str, int], bytes, int] | None = None
        if server is not None:
            key = server.register(lambda: self._late_feed(job, spec, first, made))
            asked = (server.address, server.token, key)

        def stages(ks: list[int], feed: bytes | None = None) -> Any:
            where = asked if ks[0] == first else None

            def fn(slot: int, items: Any) -> Any:
                _use_extlib(extlib)
                if where is not None:  # the first stage's input, cut now by the driver
                    for _ in items:
                        pass
                    items = ((slot, pickle.loads(fetch(*where, slot))),)  # noqa: S301
                elif feed is not None:  # the first stage's input, in the job's function
                    # The empty slot's one item is read all the same: a Python worker that
                    # leaves input unread is not used again.
                    for _ in items:
                        pass
                    items = ((slot, pickle.loads(feed)[slot]),)  # noqa: S301 - the driver's
                return run_stages(job, blob, ks, slot, items)

            return fn

        if late is not None:
            source, feed = self._stages.empty_slots(n), None
        else:
            source, feed = self._first_slots(fed, n)
        # The stages since the last shuffle, run one after the other in each partition.
        group = [first]
        for k in range(first + 1, layout.depth):
            if layout.narrow[k - 1]:  # a narrow boundary: Spark pipelines k - 1 and k
                group.append(k)
                continue
            n = len(layout.stages[k])
            source, group = self._stages.shuffle(source, stages(group, feed), n), [k]
            feed = None
        function = stages(group, feed)
        if spec.ackers > 0:
            n = spec.ackers
            source, function = self._stages.shuffle(source, function, n), _reduce_acks
        # The job is made in the JVM here, its functions pickled: the driver's work, timed
        # apart from Spark's run of the job.
        last = self._stages.build(source, n, function)
        submitted = time.perf_counter()
        try:
            collected = self._stages.collect(last)
        except Exception:
            error = None if server is None else server.error(key)
            if error is not None:  # the driver's own error making the input (the head's)
                raise error from None
            raise
        finally:
            if server is not None:
                server.drop(key)
        ran = time.perf_counter()
        head = made.get("head", head)
        retried = made.get("retried", retried)
        result = merge_results(collected if spec.ackers > 0 else reduce_acks(collected))
        take_spilled(result.reports)
        # The tasks Spark ran (the head's retries are the head's own, in ``retried``).
        spark_ran = [r for r in result.reports if (layout.stage_of[r.comp] or 0) >= first]
        if any(report.attempt for report in spark_ran):  # Spark's retry survived a failure
            texts = failed_attempts(sc, labels.group)
            result.retried = retried_errors(self.plan, spark_ran, texts)
        result.retried = retried + result.retried  # the head's, then Spark's
        asked_at, fed_at = made.get("asked", submitted), made.get("fed", submitted)
        result.timings = JobTimings(
            submitted - began - (0.0 if late is not None else head),
            ran - submitted,
            time.perf_counter() - ran,
            head,
            first,
            asked_at - submitted,
            fed_at - asked_at - (head if late is not None else 0.0),
        )
        return result

    def _first_input(
        self, job: TaskJob, inputs: Sequence[Sequence[Any]], first: int
    ) -> tuple[list[list[Any]], float, list[ReportedError]]:
        """What each slot of Spark's first stage is fed; the head's seconds and retried errors.

        From the spouts' ``inputs``: the head's output when the driver runs stages
        ``[0, first)``, else the inputs sealed.

        A head task's error raised here fails the job as the same error from a Spark task
        would: a ``TaskFailedError`` carrying its encoded facts (``_task_errors``). A spout
        tuple that does not pickle is that spout task's error.
        """
        if first:
            ran_head = time.perf_counter()
            fed, retried = run_head(job, self._topology, inputs, first, self._attempts)
            return fed, time.perf_counter() - ran_head, retried
        sealed = seal_inputs(job.plan, job.txid, inputs)
        n = len(job.layout.stages[0])
        return [sealed[s] if s < len(sealed) else [] for s in range(n)], 0.0, []

    def _late_feed(
        self, job: TaskJob, spec: JobSpec, first: int, made: dict[str, Any]
    ) -> list[bytes]:
        """A late-cut job's input, pickled per slot of Spark's first stage (``_late``).

        Asked for by the first task: the protocol cuts now (``LateInputs.result``), and the
        head or the sealing runs here, as ``run`` runs it for an input cut at submit.
        """
        assert spec.late is not None  # noqa: S101
        made["asked"] = time.perf_counter()
        data = spec.late.result(FETCH_TIMEOUT_S)
        inputs = [
            [*data[s], *spec.inputs[s]] if s < len(data) else list(spec.inputs[s])
            for s in range(len(spec.inputs))
        ]
        fed, made["head"], made["retried"] = self._first_input(job, inputs, first)
        pickled = [pickle.dumps(slot, protocol=pickle.HIGHEST_PROTOCOL) for slot in fed]
        made["fed"] = time.perf_counter()
        return pickled

    def _job(self, spec: JobSpec) -> TaskJob:
        """What every task of ``spec`` needs."""
        job = task_job(self.name, self.conf, self.plan, spec, self.faults)
        job.spill = self._files
        return job

    def cancel(self, group: str) -> None:
        """Cancel the running jobs started under ``JobSpec.group`` ``group`` (their futures fail).

        The topology name cancels the jobs whose spec gave no group.
        """
        if self.sc._jsc is not None:
            self.sc.cancelJobsWithTag(tag(group))

    def close(self, wait: bool = True) -> None:
        """Stop taking jobs and drop the topology's broadcasts (JVM blocks, temp files)."""
        self._pool.shutdown(wait=wait)
        if self._released:
            return
        self._released = True
        if self._inputs is not None:
            self._inputs.close()
        for shipper in self._shippers:
            shipper.close()
        if self._files is not None:  # what failed attempts wrote and nobody read
            self._files.sweep()
        if self.sc._jsc is None:  # the SparkContext was stopped, and its broadcasts with it
            return
        if not isinstance(self._blob, bytes):
            self._blob.destroy()


def _add_once(sc: Any, path: str, *, on_path: bool = True) -> None:
    """Add ``path`` to this Spark application unless it has it already.

    ``on_path``: ``sc.addPyFile`` (the executors put it on ``sys.path``); else ``sc.addFile``
    (a file beside the tasks, ``SparkFiles.get(name)``).
    """
    with _SHIPPED_LOCK:
        added = _SHIPPED.setdefault(str(sc.applicationId), set())
        if path in added:
            return
        if on_path:
            sc.addPyFile(path)
        else:
            sc.addFile(path)
        added.add(path)


def _ship_extlib(sc: Any, conf: Mapping[str, Any]) -> tuple[str, ...]:
    """Send every extlib folder to the executors as a zip; return the zips' file names.

    The zips are files beside the tasks (``sc.addFile``), never on the executors' ``sys.path``:
    a task looks in them only for a module that is not installed there, as the driver does
    (``providers.load_module``), so a file in extlib cannot hide an installed module on an
    executor either. Each folder is zipped once per version into this process's temporary
    directory (see ``_shipping``), and added once per Spark application.
    """
    names: list[str] = []
    for folder in extlib_dirs(conf):
        source = folder_source(str(folder), folder) if folder.is_dir() else None
        if source is not None and source.files:
            path = build_zip(source, zip_dir(), label="extlib")
            _add_once(sc, str(path), on_path=False)
            names.append(path.name)
    return tuple(names)


def _use_extlib(names: tuple[str, ...]) -> None:
    """In a task: look in the extlib zips the driver shipped, after this machine's folders.

    They sit beside the task (``SparkFiles``), never on ``sys.path``: a module is taken from
    them only when it is not installed here (``providers.load_module``).
    """
    if names:
        from pyspark import SparkFiles

        add_extlib_dirs(SparkFiles.get(name) for name in names)


def _ship_code(sc: Any, blob: bytes, conf: Mapping[str, Any]) -> None:
    """Send the framework and the topology's own modules to executors of a non-local master."""
    shipped = []
    for source in sources(code_to_ship(blob, conf)):
        _add_once(sc, str(build_zip(source, zip_dir())))
        shipped.append(source.name)
    log.info("shipped to the executors: %s", ", ".join(shipped))
