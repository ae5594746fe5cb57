"""The engine: runs a protocol's jobs of component tasks, on Spark or in this process.

The engine knows no protocol. A protocol (``checkpoint``, ``statefulbolts.transactional``)
describes each job as a ``JobSpec`` with its own ``TaskProgram`` and hands it to an ``Engine``
(``open_engine``: a ``SparkEngine`` or an ``InlineEngine``); its driver loop is a
``TopologyRunner``. This face is everything a protocol may use: the protocols import nothing
else of the engine, and the engine imports no protocol.

The only package that imports pyspark, and only when a Spark engine starts.
"""

from statefulbolts.config import TopologyConfig
from statefulbolts.runtime._engine import Engine, JobLabels, JobSpec, job_labels, topology_tag
from statefulbolts.runtime._engines import ENGINES, open_engine
from statefulbolts.runtime._images import ImageShipper, ShippedImage
from statefulbolts.runtime._inline import InlineEngine, task_copy
from statefulbolts.runtime._late import LateInputs
from statefulbolts.runtime._plan import ExecutionPlan, JobLayout, Router
from statefulbolts.runtime._program import TaskExecutor, TaskInfo, TaskJob, TaskProgram
from statefulbolts.runtime._records import JobResult, TupleBatch, id_column
from statefulbolts.runtime._runner import (
    BackendFigures,
    HeldLease,
    Observation,
    Progress,
    TopologyRunner,
)
from statefulbolts.runtime._spark import (
    DEFAULT_SPARK_LOG_LEVEL,
    SPARK_LOG_ENV,
    SPARK_LOG_LEVELS,
    application_session,
    build_session,
    is_local,
    task_attempt,
    under_spark_submit,
)
from statefulbolts.runtime._spark_engine import SparkEngine
from statefulbolts.runtime._state_keys import NamespacesOf, StateKeyCounter
from statefulbolts.runtime._stats import (
    StateKeys,
    StateWrite,
    Stats,
    TaskCounters,
    TransactionInfo,
    format_traceback,
    worker_traceback,
)
from statefulbolts.runtime._task_errors import (
    TaskError,
    describe_job_failure,
    encode_task_error,
    shown_values,
)

__all__ = [
    "BackendFigures",
    "DEFAULT_SPARK_LOG_LEVEL",
    "ENGINES",
    "Engine",
    "ExecutionPlan",
    "HeldLease",
    "ImageShipper",
    "InlineEngine",
    "JobLabels",
    "JobLayout",
    "JobResult",
    "JobSpec",
    "LateInputs",
    "NamespacesOf",
    "Observation",
    "Progress",
    "Router",
    "SPARK_LOG_ENV",
    "SPARK_LOG_LEVELS",
    "ShippedImage",
    "SparkEngine",
    "StateKeyCounter",
    "StateKeys",
    "StateWrite",
    "Stats",
    "TaskCounters",
    "TaskError",
    "TaskExecutor",
    "TaskInfo",
    "TaskJob",
    "TaskProgram",
    "TopologyConfig",
    "TopologyRunner",
    "TransactionInfo",
    "TupleBatch",
    "application_session",
    "build_session",
    "describe_job_failure",
    "encode_task_error",
    "format_traceback",
    "id_column",
    "is_local",
    "job_labels",
    "open_engine",
    "shown_values",
    "task_attempt",
    "task_copy",
    "topology_tag",
    "under_spark_submit",
    "worker_traceback",
]
